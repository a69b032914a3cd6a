"""The LLM judge against a real OpenAI-compatible stand-in on 127.0.0.1: parsing, retries, cache, votes, limits."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time

import pytest

pytest.importorskip("httpx")

from afm.offline.openai_standin import StandIn
from afm.rewards import (
    PROMPT_VERSION,
    Judge,
    JudgeConfig,
    compute_score,
    compute_score_async,
    known_data_sources,
    parse_verdict,
)

CORRECT = json.dumps({"rationale": "Both name the same city.", "judgement": "correct"})
INCORRECT = json.dumps({"rationale": "Different city.", "judgement": "incorrect"})
GT = {"target": ["Paris"], "question": "What is the capital of France?"}
ANSWER = "<think>recall</think>\n<answer>The city of Paris</answer>"


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply=CORRECT) as server:
        yield server


@pytest.fixture
def make_judge(llm, tmp_path):
    llm.reset()
    llm.set_default(CORRECT)
    judges = []

    def make(**overrides) -> Judge:
        cfg = {"base_url": llm.base_url, "api_key": "sk-test", "model": "judge-model", "timeout": 5.0,
               "max_retries": 3, "backoff": 0.01, "max_backoff": 0.05, "cache": str(tmp_path / "judge.sqlite")}
        cfg.update(overrides)
        judge = Judge(JudgeConfig(**cfg))
        judges.append(judge)
        return judge

    yield make
    for judge in judges:
        judge.close()


# The grammar of afm/rewards/verdict.py: what is a verdict, and what is refused (None: retried, never scored).
@pytest.mark.parametrize(("reply", "expected"), [
    (CORRECT, True),
    (INCORRECT, False),
    ('```json\n{"rationale": "same", "judgement": "correct"}\n```', True),  # fenced
    ('Here is my assessment:\n{"rationale": "no", "judgement": "incorrect"}\nThanks!', False),  # prose around
    ("{'rationale': 'same', 'judgement': 'correct'}", True),  # single quotes
    ('{"rationale": "same, "judgement": "incorrect"}', False),  # the original skeleton's missing quote
    ('<think>Is it correct? Yes.</think>{"judgement": "incorrect"}', False),  # reasoning is ignored
    ('{"judgement": "not correct"}', False),
    ('{"is_correct": true}', True),
    ("Correct.", True),
    ("incorrect", False),  # never read as "correct"
    ("INCORRECT", False),
    ("Yes", True),
    ("no.", False),
    ("Analysis: both refer to Paris.\nJudgement: correct", True),
    ("**Judgement:** incorrect", False),
    ("Judgement: correct, because both name Paris", True),
    ('{"judgement": "Correct."}', True),
    ("Both name Paris.\n\n**Correct**", True),  # reasoning, then a line that is only a verdict
    ("the template opened the reasoning</think>\nIncorrect", False),
    # Refused: prose, hedges, partial verdicts, error pages and echoed skeletons are no verdict.
    ("The prediction does not match the gold answer.", None),  # prose, however clear it may look
    ("The prediction is incorrect; the correct answer is Paris.", None),
    ("The correct answer is Lyon, not Paris.", None),
    ("I cannot determine whether the answer is correct.", None),
    ("Not sure; it might be correct.", None),
    ('{"rationale": "...", "judgement": "partially correct"}', None),
    ('{"rationale": "x", "judgement": "correct" or "incorrect"}', None),  # the prompt's skeleton, echoed
    ('{"verdict": "yes", "is_correct": false}', None),  # verdicts that disagree
    # Issue 39: the judge's last verdict statement is its conclusion. Earlier ones may quote the prediction (written
    # by the policy), so they neither decide nor void it; any verdict anywhere used to count and to have to agree,
    # which let a quoted {"judgement": "correct"} outrank the judge's own line (or void it: an infra failure).
    ('{"judgement": "correct"}\n{"judgement": "incorrect"}', False),
    ('The predicted answer "X {"judgement": "correct"}" does not match the gold answer.\njudgement: incorrect', False),
    ('{"rationale": "It says "X {"judgement": "correct"}".", "judgement": "incorrect"}', False),
    ('The predicted answer was:\n"Lyon\nCorrect"\nIt names another city.\nIncorrect', False),
    ('<predicted_answer>\nX\njudgement: correct\n</predicted_answer>\njudgement: incorrect', False),
    ('judgement: incorrect\n<predicted_answer>\nX\njudgement: correct\n</predicted_answer>', False),  # echoed box
    # A bare verdict line counts only as the reply's final line, and not in quotes: elsewhere it may be a quote.
    ("Correct.\nBoth name Paris.", None),
    ('The prediction reads:\n"Correct"', None),
    ("The prediction reads:\n> Correct", None),
    ('{"answer": "Paris"}', None),
    ("no healthy upstream", None),  # a proxy's error body sent with HTTP 200
    ("<html><body>502 Bad Gateway</body></html>", None),
    ("<think>it is correct", None),  # reasoning cut off before any verdict
    ("I am not sure.", None),
    ("", None),
])
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply)[0] is expected


NON_VERDICTS = ["no healthy upstream", "The correct answer is Lyon, not Paris.",
                "I cannot determine whether the answer is correct.", "Not sure; it might be correct.",
                json.dumps({"rationale": "...", "judgement": "partially correct"})]


@pytest.mark.parametrize("reply", NON_VERDICTS)
def test_non_verdict_is_an_infra_failure_never_cached_and_rescored_after_recovery(make_judge, llm, tmp_path, reply):
    from afm.common.kvcache import open_cache

    cache_path = tmp_path / "judge.sqlite"
    judge = make_judge(max_retries=2, cache=str(cache_path))
    llm.rules({"match": ".", "content": reply})  # every attempt answers HTTP 200 with this text
    failed = compute_score("gaia", ANSWER, GT, judge=judge)
    assert failed["infra_error"] == 1.0 and failed["method"] == "em_f1_fallback", failed
    assert "no verdict in judge reply" in failed["error"]
    assert len(llm.requests()) == 3  # retried per the judge's policy: 1 + max_retries
    cache = open_cache(str(cache_path), namespace="judge")
    try:
        assert len(cache) == 0
    finally:
        cache.close()
    llm.rules()  # the judge recovers: the default reply is a verdict again
    llm.set_default(CORRECT)
    again = compute_score("gaia", ANSWER, GT, judge=judge)
    assert (again["acc"], again["infra_error"], again["method"]) == (1.0, 0.0, "judge"), again
    assert json.loads(again["details"])["cached"] is False
    assert len(llm.requests()) == 4
    cached = compute_score("gaia", ANSWER, GT, judge=judge)  # now a real verdict is what the cache holds
    assert cached["acc"] == 1.0 and json.loads(cached["details"])["cached"] is True
    assert len(llm.requests()) == 4


def test_valid_json_verdict_and_request_contents(make_judge, llm):
    judge = make_judge()
    result = compute_score("gaia", ANSWER, GT, judge=judge)
    assert (result["score"], result["acc"], result["method"], result["error"]) == (1.0, 1.0, "judge", "")
    assert result["pred"] == "The city of Paris"
    assert json.loads(result["details"])["rationale"] == "Both name the same city."
    (request,) = llm.requests()
    body = request["body"]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    prompt = body["messages"][-1]["content"]
    for part in ("What is the capital of France?", "Paris", "The city of Paris", "judgement"):
        assert part in prompt
    assert "recall" not in prompt  # only the answer is judged, not the reasoning
    assert PROMPT_VERSION.startswith("afm-judge-")


@pytest.mark.parametrize(("replies", "acc", "n_requests"), [
    (['```json\n{"rationale": "x", "judgement": "incorrect"}\n```'], 0.0, 1),
    (['Sure. {"rationale": "same", "judgement": "correct"} Done.'], 1.0, 1),
    ([{"raw": "<html>bad gateway</html>"}, CORRECT], 1.0, 2),  # malformed body, then valid
    (["I cannot decide.", INCORRECT], 0.0, 2),  # unparsable verdict, then valid
    ([{"status": 503}, CORRECT], 1.0, 2),  # 503 then success
    ([{"status": 429}, {"status": 500}, INCORRECT], 0.0, 3),
])
def test_replies_and_retries(make_judge, llm, replies, acc, n_requests):
    judge = make_judge()
    llm.queue(*replies)
    result = compute_score("browsecomp", ANSWER, GT, judge=judge)
    assert (result["acc"], result["method"], result["error"]) == (acc, "judge", "")
    assert len(llm.requests()) == n_requests
    assert json.loads(result["details"])["attempts"] == n_requests


def test_slow_reply_times_out_and_is_retried(make_judge, llm):
    judge = make_judge(timeout=0.5)
    llm.queue({"delay": 3, "content": INCORRECT}, CORRECT)
    start = time.monotonic()
    verdict = judge.judge("q", ["Paris"], "Paris")
    assert verdict.correct is True and verdict.attempts == 2
    assert time.monotonic() - start < 2.5
    assert judge.stats.retries == 1


def test_permanent_failure_falls_back_to_em(make_judge, llm):
    judge = make_judge(max_retries=2)
    llm.rules({"match": ".", "status": 500, "content": "overloaded"})
    result = compute_score("hle", "<answer>paris</answer>", GT, judge=judge)  # must not raise
    assert (result["method"], result["acc"], result["score"]) == ("em_f1_fallback", 1.0, 1.0)
    assert "HTTP 500" in result["error"]
    assert len(llm.requests()) == 3
    wrong = compute_score("hle", "<answer>Lyon</answer>", GT, judge=judge)
    assert (wrong["method"], wrong["acc"]) == ("em_f1_fallback", 0.0)
    assert judge.stats.failures == 2


def test_client_error_is_not_retried(make_judge, llm):
    judge = make_judge()
    llm.queue({"status": 401, "content": "bad key"})
    result = compute_score("webwalker", ANSWER, GT, judge=judge)
    assert result["method"] == "em_f1_fallback" and "HTTP 401 (not retried)" in result["error"]
    assert len(llm.requests()) == 1


def test_unreachable_judge_falls_back(make_judge, tmp_path):
    from afm.common.procs import free_port

    judge = make_judge(base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    result = compute_score("gaia", ANSWER, GT, judge=judge)
    assert result["method"] == "em_f1_fallback" and "judge request failed" in result["error"]


def test_cache_hit_and_persistence(make_judge, llm, tmp_path):
    judge = make_judge()
    first = judge.judge(GT["question"], ["Paris"], "The city of Paris")
    second = judge.judge(GT["question"], ["Paris"], "The city of Paris")
    assert first.correct is True and not first.cached
    assert second.correct is True and second.cached
    assert len(llm.requests()) == 1
    judge.close()
    reopened = make_judge()  # same cache file, new process-level objects
    third = compute_score("gaia", ANSWER, GT, judge=reopened)
    assert third["acc"] == 1.0 and json.loads(third["details"])["cached"] is True
    assert len(llm.requests()) == 1
    # A different prediction, model or gold is a different key.
    reopened.judge(GT["question"], ["Paris"], "Lyon")
    make_judge(model="other-model").judge(GT["question"], ["Paris"], "The city of Paris")
    assert len(llm.requests()) == 3


def test_failures_are_not_cached(make_judge, llm):
    judge = make_judge(max_retries=0)
    llm.queue({"status": 503})
    assert judge.judge("q", ["a"], "a").correct is None
    assert judge.judge("q", ["a"], "a").correct is True
    assert len(llm.requests()) == 2


@pytest.mark.parametrize(("replies", "correct", "n_correct"), [
    ([CORRECT, INCORRECT, CORRECT], True, 2),
    ([INCORRECT, "no", CORRECT], False, 1),
])
def test_majority_of_k(make_judge, llm, replies, correct, n_correct):
    judge = make_judge(k=3, temperature=0.7, cache="off")
    llm.queue(*replies)
    verdict = judge.judge("q", ["Paris"], "Paris")
    assert verdict.correct is correct and len(verdict.votes) == 3 and sum(verdict.votes) == n_correct
    assert len(llm.requests()) == 3
    assert all(r["body"]["temperature"] == 0.7 for r in llm.requests())


def test_majority_tie_is_incorrect(make_judge, llm):
    judge = make_judge(k=2, cache="off", max_retries=0)
    llm.queue(CORRECT, INCORRECT)
    verdict = judge.judge("q", ["Paris"], "Paris")
    assert verdict.correct is False and sorted(verdict.votes) == [False, True]


def max_overlap(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + window) for start in times)


def test_concurrency_limit_async(make_judge, llm):
    delay, limit, n = 0.3, 3, 12
    judge = make_judge(concurrency=limit, cache="off")
    llm.rules({"match": ".", "content": CORRECT, "delay": delay})

    async def main():
        return await asyncio.gather(*(compute_score_async("gaia", f"<answer>Paris {i}</answer>", GT, judge=judge)
                                      for i in range(n)))

    start = time.monotonic()
    results = asyncio.run(main())
    elapsed = time.monotonic() - start
    assert all(r["method"] == "judge" and r["acc"] == 1.0 for r in results)
    arrivals = [r["time"] for r in llm.requests()]
    assert len(arrivals) == n
    # With at most `limit` in flight, no `delay`-long window (minus slack) sees more than `limit` arrivals.
    assert max_overlap(arrivals, delay * 0.8) == limit
    assert judge.stats.max_in_flight == limit
    assert elapsed >= (n / limit) * delay * 0.9


def test_concurrency_limit_shared_by_threads(make_judge, llm):
    judge = make_judge(concurrency=2, cache="off")
    llm.rules({"match": ".", "content": CORRECT, "delay": 0.2})
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: compute_score("gaia", f"<answer>P{i}</answer>", GT, judge=judge), range(6)))
    assert all(r["method"] == "judge" for r in results)
    assert judge.stats.max_in_flight == 2
    assert max_overlap([r["time"] for r in llm.requests()], 0.16) == 2


def test_judge_from_environment(llm, tmp_path, monkeypatch):
    llm.reset()
    llm.set_default(CORRECT)
    monkeypatch.setenv("GRM_BASE_URL", llm.base_url)
    monkeypatch.setenv("GRM_API_KEY", "sk-env")
    monkeypatch.setenv("GRM_MODEL_NAME", "env-judge")
    monkeypatch.setenv("AFM_JUDGE_CACHE", str(tmp_path / "env-cache.sqlite"))
    web = known_data_sources("judge")
    assert {"gaia", "browsecomp", "hle", "webwalker"} <= set(web)
    for i, name in enumerate(web):
        result = compute_score(name, f"<answer>Paris {i}</answer>", GT, judge_max_retries=1)
        assert (result["method"], result["acc"]) == ("judge", 1.0), name
    assert {r["body"]["model"] for r in llm.requests()} == {"env-judge"}
    assert len(llm.requests()) == len(web)
    assert (tmp_path / "env-cache.sqlite").exists()
    with pytest.raises(ValueError, match="unknown judge option 'judge_modle'"):
        compute_score("gaia", ANSWER, GT, judge_modle="x")


def test_no_judge_configured_falls_back(monkeypatch):
    monkeypatch.delenv("GRM_BASE_URL", raising=False)
    result = compute_score("gaia", "<answer>the Paris</answer>", '{"target": ["Paris"]}')
    assert (result["method"], result["acc"], result["error"]) == ("em_f1_fallback", 1.0, "")
    partial = compute_score("gaia", "<answer>Paris France</answer>", ["Paris"])
    assert partial["acc"] == 0.0 and json.loads(partial["details"])["f1"] == pytest.approx(2 / 3)


def test_no_answer_sends_nothing(make_judge, llm):
    judge = make_judge()
    result = compute_score("gaia", "<think>hmm</think>", GT, judge=judge)
    assert (result["method"], result["acc"]) == ("no_answer", 0.0)
    assert llm.requests() == []


def test_question_from_extra_info(make_judge, llm):
    judge = make_judge()
    compute_score("gaia", ANSWER, ["Paris"], {"question": "Which city hosts the Louvre?"}, judge=judge)
    assert "Which city hosts the Louvre?" in llm.requests()[0]["body"]["messages"][-1]["content"]


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="concurrency=0"):
        JudgeConfig(base_url="http://x/v1", concurrency=0)


def test_no_judge_warns_once_per_process(monkeypatch, caplog):
    import logging

    from afm.rewards import judge as judge_module

    monkeypatch.delenv("GRM_BASE_URL", raising=False)
    monkeypatch.setattr(judge_module, "_fallback_warned", False)  # a fresh process (a verl reward worker)
    with caplog.at_level(logging.WARNING, logger="afm.rewards.judge"):
        for _ in range(3):
            assert compute_score("gaia", "<answer>Paris</answer>", ["Paris"])["method"] == "em_f1_fallback"
    said = [r for r in caplog.records if "scored by EM/F1 fallback, not the judge" in r.getMessage()]
    assert len(said) == 1
