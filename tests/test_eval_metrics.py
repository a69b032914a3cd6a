"""afm.eval.metrics and afm.eval.select against hand-computed cases; the LLM selector against the stand-in."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from afm.eval.metrics import (
    Question,
    best_of_n,
    bootstrap_ci,
    efficiency,
    estimate,
    group_questions,
    load_results,
    paired_difference,
    pass_at_k,
    standard_error,
    summarize_run,
)
from afm.eval.select import (
    JudgeSelector,
    MajoritySelector,
    SelectorConfig,
    normalize_pred,
    parse_choice,
    select_majority,
)
from afm.offline.openai_standin import StandIn


def rec(bench: str, qid: str, sample: int, acc: float, pred: str | None = "x", **kw) -> dict:
    base = {"key": f"{bench}/{qid}#{sample}", "benchmark": bench, "qid": qid, "sample": sample,
            "question": f"question {qid}?", "gold": "g", "level": None, "data_source": bench, "score": acc,
            "acc": acc, "method": "judge", "pred": pred, "finish_reason": "answer", "tool_calls": 0,
            "tool_counts": {}, "model_tokens": 100, "observation_tokens": 0, "turns": 1, "wall_s": 1.0,
            "error": None}
    return {**base, **kw}


def write_run(path: Path, records: list[dict], tail: str = "", config: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    (path / "config.json").write_text(json.dumps(config or {"model": "m", "benchmarks": ["b"]}))
    return path


def questions(spec: dict[str, list[float]], preds: dict[str, list] | None = None) -> list[Question]:
    records = [rec("b", qid, i, a, (preds or {}).get(qid, ["x"] * len(accs))[i])
               for qid, accs in spec.items() for i, a in enumerate(accs)]
    return group_questions(records)["b"]


# -- pass@k ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (4, 1, 2, 0.5),          # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 2, 0.7),          # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (10, 3, 1, 0.3),         # pass@1 = c/n
    (5, 0, 3, 0.0),          # c = 0: never solved
    (5, 5, 3, 1.0),          # c = n: always solved
    (5, 3, 3, 1.0),          # k > n - c: every 3-subset holds a correct sample
    (3, 1, 3, 1.0),          # k = n with one correct sample
])
def test_pass_at_k_hand_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomials_and_is_stable_for_large_n():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    exact = 1 - math.comb(990, 500) / math.comb(1000, 500)  # Python ints: exact, no overflow
    assert pass_at_k(1000, 10, 500) == pytest.approx(exact, rel=1e-9)
    for bad in [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError, match="pass_at_k"):
            pass_at_k(*bad)


# -- avg@k, SE, bootstrap --------------------------------------------------------------------------------------
def test_avg_at_k_uses_each_questions_own_sample_count(tmp_path):
    # q1: 2 of 3 right, q2: 0 of 2, q3: 1 of 1 (a run still in progress) -> (2/3 + 0 + 1) / 3 = 5/9
    records = [rec("b", "q1", 0, 1), rec("b", "q1", 1, 0), rec("b", "q1", 2, 1), rec("b", "q2", 0, 0),
               rec("b", "q2", 1, 0), rec("b", "q3", 0, 1)]
    s = summarize_run(write_run(tmp_path / "run", records), resamples=500)["benchmarks"]["b"]
    assert (s["questions"], s["samples"], s["n_min"], s["n_max"], s["incomplete_questions"]) == (3, 6, 1, 3, 2)
    assert s["avg_at_k"]["value"] == pytest.approx(5 / 9)
    # per-question means 2/3, 0, 1: deviations 1/9, -5/9, 4/9 -> var = (42/81)/2 -> SE = sqrt(21)/9/sqrt(3)
    assert s["avg_at_k"]["se"] == pytest.approx(math.sqrt(7) / 9)
    # pass@2 only over q1 (c=2 of 3: 1.0) and q2 (0.0); pass@3 only over q1
    assert (s["pass_at_k"]["2"]["value"], s["pass_at_k"]["2"]["questions"]) == (0.5, 2)
    assert (s["pass_at_k"]["3"]["value"], s["pass_at_k"]["3"]["questions"]) == (1.0, 1)
    assert s["pass_at_k"]["1"]["value"] == pytest.approx(5 / 9)  # pass@1 is avg@k


def test_standard_error_and_bootstrap_ci_tiny_cases():
    assert standard_error([0, 1]) == pytest.approx(0.5)  # sd 0.7071 / sqrt 2
    assert standard_error([1.0]) is None
    # mean of 4 draws from {0,0,0,1}: k/4 with k ~ Bin(4, 1/4); P(k=0)=.32 > 2.5%, P(k>=3)=.05 > 2.5%, P(4)=.004
    assert bootstrap_ci([0, 0, 0, 1], resamples=2000, seed=0) == (0.0, 0.75)
    assert bootstrap_ci([0, 1], resamples=2000, seed=0) == (0.0, 1.0)  # P(both 0) = P(both 1) = 1/4
    assert bootstrap_ci([0.4, 0.4, 0.4]) == (pytest.approx(0.4), pytest.approx(0.4))
    assert bootstrap_ci([]) is None
    values = [0.1 * (i % 7) for i in range(40)]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)  # seeded: reproducible
    est = estimate(values)
    lo, hi = est.ci
    assert lo < est.value < hi
    # the percentile interval of a mean of 40 values is close to mean ± 1.96 SE
    assert hi - lo == pytest.approx(2 * 1.96 * est.se, rel=0.15)


def test_paired_difference():
    d = paired_difference([1, 1, 0, 1], [0, 1, 0, 0])
    assert (d["value"], d["a"], d["b"]) == (0.5, 0.75, 0.25)
    assert not d["excludes_zero"]  # diffs {1,0,0,1}: P(resample all 0) = 1/16 > 2.5%
    d = paired_difference([1] * 12, [0] * 10 + [1] * 2)
    assert d["ci"][0] > 0 and d["excludes_zero"]
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([1], [1, 0])


# -- maj@k and best-of-N ---------------------------------------------------------------------------------------
def test_select_majority_normalises_and_breaks_ties_by_first_seen():
    assert select_majority(["Paris.", "the paris", "Lyon"]) == 0
    assert select_majority(["B", "A", "A", "B"]) == 0  # 2-2 tie: "B" was seen first
    assert select_majority(["A", "B", "B"]) == 1
    assert select_majority([None, "", "x"]) == 2  # blanks do not vote
    assert select_majority([None, None]) == 0
    assert select_majority(["\\boxed{1/2}", "12", "1/2"]) == 0  # math answers keep their symbols
    assert normalize_pred("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert normalize_pred("$1,000$.") == "1000"
    assert normalize_pred("   ") is None


def test_maj_at_k_on_first_k_samples():
    (q,) = questions({"q": [0, 1, 1, 0]}, {"q": ["B", "A", "a.", "B"]})
    assert q.maj_at(4) == 0.0  # 2-2 tie goes to "B" (first seen) -> acc of sample 0
    assert q.maj_at(3) == 1.0  # B, A, A -> "A" wins -> acc of sample 1
    assert q.maj_at(1) == 0.0
    assert q.maj_at(5) is None  # fewer samples than k


def test_best_of_n_with_deterministic_selector(tmp_path):
    qs = questions({"q1": [0, 0, 1], "q2": [1, 0, 0], "q3": [0, 1]})
    chosen = best_of_n(qs, lambda question, cands: len(cands) - 1)  # always the last candidate
    assert [s.index for s in chosen] == [2, 2, 1]
    assert [q.bo.method for q in qs] == ["custom"] * 3
    from afm.eval.metrics import accuracy_metrics

    m = accuracy_metrics(qs, ks=[1], resamples=200)
    assert m["best_of_n"]["value"] == pytest.approx(2 / 3) and m["best_of_n"]["methods"] == {"custom": 3}
    with pytest.raises(ValueError, match="chose index 5"):
        best_of_n(qs, lambda question, cands: 5)
    # bo_n limits the candidates to the first N samples
    best_of_n(qs, MajoritySelector(), n=2)
    assert all(q.bo.method == "majority" and q.bo.index == 0 for q in qs)


# -- loading and the summary -----------------------------------------------------------------------------------
def test_load_results_tolerates_partial_line_bad_rows_and_duplicates(tmp_path):
    records = [rec("b", "q1", 0, 1), rec("b", "q1", 0, 0), rec("b", "q2", 0, 0)]  # second is a duplicate key
    run = write_run(tmp_path / "run", records, tail='["not an object"]\n{"benchmark": "b"}\n{"key": "b/q3#0", "ben')
    res = load_results(run)
    assert [r["qid"] for r in res.records] == ["q1", "q2"] and res.records[0]["acc"] == 1  # first copy kept
    assert (res.bad_lines, res.duplicates) == (3, 1)
    assert res.config["model"] == "m"
    assert load_results(run / "results.jsonl").bad_lines == 3  # the file itself works too
    with pytest.raises(FileNotFoundError, match="no results file"):
        load_results(tmp_path / "missing")


def test_summary_levels_efficiency_counts(tmp_path):
    records = [
        rec("gaia", "a", 0, 1, level="1", tool_calls=2, tool_counts={"web_search": 2}, model_tokens=100,
            observation_tokens=300, wall_s=10),
        rec("gaia", "a", 1, 0, level="1", tool_calls=4, tool_counts={"web_search": 3, "crawl_page": 1},
            model_tokens=200, observation_tokens=600, wall_s=20, finish_reason="max_turns"),
        rec("gaia", "b", 0, 0, level="2", tool_calls=0, model_tokens=50, wall_s=2, error="boom",
            finish_reason="error"),
        rec("gaia", "b", 1, 1, level="2", tool_calls=2, tool_counts={"web_search": 2}, model_tokens=150,
            observation_tokens=100, wall_s=6, method="em_f1_fallback"),
    ]
    s = summarize_run(write_run(tmp_path / "run", records), resamples=300)
    g = s["benchmarks"]["gaia"]
    assert set(g["levels"]) == {"1", "2"} and g["levels"]["1"]["avg_at_k"]["value"] == 0.5
    assert g["levels"]["2"]["questions"] == 1
    eff = g["efficiency"]
    assert (eff["solved_samples"], eff["samples"]) == (2, 4)
    assert eff["solved"]["total_tokens"] == pytest.approx((400 + 250) / 2)  # model + observation, solved only
    assert eff["solved"]["tool_calls"] == pytest.approx(2.0)
    assert eff["solved"]["wall_s"] == pytest.approx(8.0)
    assert eff["all"]["tool_calls"] == pytest.approx(2.0) and eff["all"]["wall_s"] == pytest.approx(9.5)
    assert eff["per_success"]["total_tokens"] == pytest.approx((400 + 800 + 50 + 250) / 2)
    assert g["finish_reasons"] == {"answer": 2, "max_turns": 1, "error": 1} and g["errors"] == 1
    assert g["scoring_methods"] == {"judge": 3, "em_f1_fallback": 1}
    assert g["tools"]["calls_histogram"] == {"0": 1, "2": 2, "4": 1}
    assert g["tools"]["per_tool"] == {"web_search": 7, "crawl_page": 1}
    assert "best_of_n" not in g  # no selector given
    assert s["overall"]["questions"] == 2 and s["overall"]["avg_at_k_macro"]["value"] == 0.5
    json.dumps(s, allow_nan=False)  # JSON-able, no NaN


def test_efficiency_without_solved_samples():
    e = efficiency([rec("b", "q", 0, 0)])
    assert e["solved_samples"] == 0 and e["solved"]["total_tokens"] is None and e["per_success"]["wall_s"] is None


# -- the LLM selector ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("reply", "expected"), [
    ('{"rationale": "r", "best": 2}', 1),
    ('```json\n{"best": "3"}\n```', 2),
    ('Thinking... {"choice": "Candidate 1"} done', 0),
    ("Candidate 2", 1),
    ("3", 2),
    ("<think>Candidate 1 looks off</think>The best answer is candidate 3.", 2),
    ("Candidate 1 is wrong; Candidate 2 is right.", 1),
    ('{"best": 7}', None),  # out of range
    ('{"best": true}', None),
    ("I cannot decide.", None),
])
def test_parse_choice(reply, expected):
    assert parse_choice(reply, 3) == expected


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply='{"best": 1}') as server:
        yield server


@pytest.fixture
def make_selector(llm, tmp_path):
    llm.reset()
    llm.set_default('{"best": 1}')

    def make(**overrides) -> JudgeSelector:
        cfg = {"base_url": llm.base_url, "model": "standin", "backoff": 0.01, "max_retries": 3,
               "cache": str(tmp_path / "selector.sqlite"), **overrides}
        return JudgeSelector(SelectorConfig(**cfg))

    return make


def test_judge_selector_retries_parses_and_caches(llm, make_selector):
    llm.queue({"status": 503}, {"raw": "garbage"}, "no idea", '```json\n{"rationale": "B fits", "best": 2}\n```')
    sel = make_selector()
    [s] = sel.select_batch([("Capital of France?", ["Lyon", "Paris"])])
    assert (s.index, s.method, s.cached, s.rationale) == (1, "judge", False, "B fits")
    assert sel.stats.requests == 4 and sel.stats.retries == 3
    prompt = llm.requests()[-1]["body"]["messages"][-1]["content"]
    assert "Capital of France?" in prompt and "Candidate 1: Lyon" in prompt and "Candidate 2: Paris" in prompt
    # the same question again, even from a new selector: answered from the persistent cache
    again = make_selector()
    assert again("Capital of France?", ["Lyon", "Paris"]) == 1
    assert again.stats.cache_hits == 1 and again.stats.requests == 0 and len(llm.requests()) == 4


def test_judge_selector_falls_back_to_majority(llm, make_selector):
    llm.queue(*[{"status": 500}] * 2)
    sel = make_selector(max_retries=1)
    [s] = sel.select_batch([("q", ["A", "B", "B"])])
    assert (s.index, s.method) == (1, "majority_fallback") and "HTTP 500" in s.error
    assert sel.stats.failures == 1 and len(llm.requests()) == 2
    llm.queue({"status": 400, "content": "bad request"})  # not retryable: one request only
    [s] = sel.select_batch([("q", ["A", "B", "B"])])  # failures were not cached: asked again
    assert s.method == "majority_fallback" and "not retried" in s.error and len(llm.requests()) == 3
    # no selector model configured: majority vote, labelled as such; no request at all
    plain = JudgeSelector(SelectorConfig(base_url=None, cache="off"))
    assert not plain.configured
    assert [(x.index, x.method) for x in plain.select_batch([("q", ["A", "B", "B"]), ("q", ["A", "a"])])] == \
        [(1, "majority"), (0, "trivial")]
    assert len(llm.requests()) == 3


def test_judge_selector_skips_trivial_and_limits_concurrency(llm, make_selector):
    sel = make_selector(concurrency=2, cache="off")
    assert sel.select_batch([("q", ["Paris", "paris", None])])[0].method == "trivial"
    assert llm.requests() == []
    llm.rules({"match": "", "content": '{"best": 2}', "delay": 0.15})
    items = [(f"q{i}", ["A", f"B{i}"]) for i in range(6)]

    async def inside_a_loop():  # the sync wrapper must also work where an event loop is already running
        return sel.select_batch(items)

    chosen = asyncio.run(inside_a_loop())
    assert [c.index for c in chosen] == [1] * 6
    assert sel.stats.max_in_flight == 2 and len(llm.requests()) == 6


def test_summary_with_judge_selector(llm, make_selector, tmp_path):
    llm.set_default('{"best": 2}')
    records = [rec("b", "q1", 0, 0, "A"), rec("b", "q1", 1, 1, "B"), rec("b", "q1", 2, 0, "A"),
               rec("b", "q2", 0, 1, "C"), rec("b", "q2", 1, 1, "c"), rec("b", "q3", 0, 1, "Z")]
    s = summarize_run(write_run(tmp_path / "run", records), selector=make_selector(), resamples=200)
    bo = s["benchmarks"]["b"]["best_of_n"]
    # q1: the judge picks candidate 2 (right, where the majority "A" is wrong); q2 is trivial; q3 has 1 sample
    assert bo["value"] == 1.0 and bo["questions"] == 2 and bo["methods"] == {"judge": 1, "trivial": 1}
    assert s["benchmarks"]["b"]["maj_at_n"]["value"] == pytest.approx(2 / 3)
    assert s["selector"] == "judge"
