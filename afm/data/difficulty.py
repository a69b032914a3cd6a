"""``afm data select``: RL difficulty selection from a reference model's sampled pass rates -> RL parquet.

    afm infer --input qa.jsonl --output samples.jsonl --n 32 ...          # N samples per question
    afm data select --questions qa.jsonl --samples samples.jsonl --output rl.parquet --mode web \\
        [--n 32] [--threshold 0.3] [--exclude sft.json ...] [--max-questions M --seed S]

The paper's rules:

- **web** (``--mode web``): r_q = mean over the N samples of EM(answer, gold) (N = 32); questions with
  r_q > 0.3 are dropped (solved without real tool use, or answerable from memory);
- **code** (``--mode code``): a fine-tuned reference model samples each question N = 8 times; questions solved in
  all of their samples are dropped.

EM is SQuAD-normalised exact match of the sample's ``answer`` against the gold answers (``--scorer em``, the web
default); ``--scorer rewards`` grades each response with :mod:`afm.rewards` by data source (judge, Math-Verify,
sandboxed tests; the code default). A sample that did not finish with an answer counts as wrong. Questions of the
SFT set (``--exclude``: RunRecords, SFT alpaca/sharegpt json, question files or RL parquet; matched by id and/or
normalised question text) are removed so SFT and RL stay disjoint; a seeded random sample of ``--max-questions``
of the rest is written with :func:`afm.data.rl_parquet.build_rl_rows`. The report (JSON) has the pass-rate
histogram and kept/dropped counts; ``--rates`` writes one line per question.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from afm.agent.infer import read_questions
from afm.common.table_io import read_rows
from afm.data.filters import normalize_text

DEFAULT_THRESHOLD = 0.3
SCORERS = ("em", "rewards")


class FewerSamplesWarning(UserWarning):
    """Some questions have fewer samples than the N the selection rule assumes."""


@dataclass
class Sample:
    """One sampled attempt at a question, from an ``afm infer`` line (or a RunRecord)."""

    key: str
    qid: str
    answer: str | None
    response: str
    finished: bool
    gold: Any = None


@dataclass
class QuestionRate:
    """A question's pass rate over its samples and what selection decided (``decision``: kept or a reason)."""

    qid: str
    n: int = 0
    correct: int = 0
    decision: str = ""
    errors: int = 0

    @property
    def rate(self) -> float | None:
        return self.correct / self.n if self.n else None


@dataclass(frozen=True)
class ModeRule:
    """A selection mode: its defaults for the RL rows and the rule that drops a scored question."""

    n: int  # samples per question the rule assumes
    data_source: str
    prompt_key: str
    ability: str
    scorer: str
    drop_when: str  # "rate_above_threshold" (web) or "solved_every_sample" (code)

    def drop_reason(self, rate: QuestionRate, threshold: float) -> str | None:
        """Why a scored question is dropped, or None to keep it."""
        if rate.errors == rate.n:
            return "unscorable"
        if self.drop_when == "rate_above_threshold" and rate.rate > threshold:
            return "too_easy"
        if self.drop_when == "solved_every_sample" and rate.correct == rate.n:
            return "solved_every_sample"
        return None


MODE_RULES = {
    "web": ModeRule(n=32, data_source="search", prompt_key="web_agent", ability="qa", scorer="em",
                    drop_when="rate_above_threshold"),
    "code": ModeRule(n=8, data_source="livecodebench", prompt_key="code_agent", ability="code", scorer="rewards",
                     drop_when="solved_every_sample"),
}
MODES = tuple(MODE_RULES)


@dataclass
class Selection:
    """The outcome: question rows kept (in input order), every question's rate, counts for the report."""

    kept: list[dict[str, Any]]
    rates: list[QuestionRate]
    counts: Counter = field(default_factory=Counter)
    fewer_than_n: list[str] = field(default_factory=list)
    unknown_sample_ids: int = 0


# -- reading -----------------------------------------------------------------------------------------------------
def read_samples(path: str | Path) -> list[Sample]:
    """Samples of an ``afm infer`` output (or RunRecord JSONL); duplicated keys (resumed runs) count once."""
    samples: dict[str, Sample] = {}
    for n, row in enumerate(read_rows(path)):
        if "key" in row and "id" in row:
            s = Sample(str(row["key"]), str(row["id"]), row.get("answer"), str(row.get("response") or ""),
                       row.get("finish_reason") == "answer", row.get("gold"))
        elif "run_id" in row and "question_id" in row:
            s = Sample(str(row["run_id"]), str(row["question_id"]), row.get("final_answer"),
                       str(row.get("trajectory") or ""), row.get("status", "ok") == "ok", row.get("gold"))
        else:
            raise ValueError(f"{path}: record {n + 1} is neither an `afm infer` line (key, id, answer, response) "
                             f"nor a run record (run_id, question_id); fields: {sorted(row)[:10]}")
        samples.setdefault(s.key, s)
    return list(samples.values())


def _question_text(row: Mapping[str, Any]) -> str:
    """The question of an exclusion row: question/instruction field, or the first user turn of a chat."""
    text = row.get("question") or row.get("instruction")
    extra = row.get("extra_info")
    if not text and isinstance(extra, Mapping):
        text = extra.get("question")
    if not text:
        for key in ("conversations", "messages", "prompt"):
            turns = row.get(key)
            if turns is None or isinstance(turns, str):
                continue
            for turn in list(turns):
                if isinstance(turn, Mapping) and turn.get("from", turn.get("role")) in ("human", "user"):
                    text = turn.get("value", turn.get("content"))
                    break
            if text:
                break
    text = str(text or "")
    # An instruction laid out in the user style holds the system prompt first: keep what follows "Question:".
    marker = text.rfind("\n\nQuestion: ")
    return text[marker + len("\n\nQuestion: "):] if marker >= 0 else text


def exclusion_keys(paths: Iterable[str | Path]) -> tuple[set[str], set[str]]:
    """``(ids, normalised questions)`` of the rows in ``paths`` (the SFT set)."""
    ids: set[str] = set()
    questions: set[str] = set()
    for path in paths:
        for row in read_rows(path):
            for key in ("question_id", "id"):
                if row.get(key) is not None:
                    ids.add(str(row[key]))
            q = normalize_text(_question_text(row))
            if q:
                questions.add(q)
    return ids, questions


# -- scoring -----------------------------------------------------------------------------------------------------
def em_correct(sample: Sample, gold: Any) -> bool:
    """EM of the sample's answer against the gold answer(s); an unfinished sample is wrong."""
    from afm.rewards import exact_match, normalize_ground_truth

    if not sample.finished or not sample.answer:
        return False
    return exact_match(str(sample.answer), normalize_ground_truth(gold, "select", "qa").targets)


async def _rewards_correct(samples: Sequence[tuple[Sample, Any, str, str]], concurrency: int,
                           progress: bool) -> list[tuple[bool, str]]:
    from tqdm import tqdm

    from afm.rewards import compute_score_async

    sem = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(samples), desc="scoring samples", disable=not progress, unit="sample")

    async def one(sample: Sample, gold: Any, source: str, question: str) -> tuple[bool, str]:
        async with sem:
            try:
                res = await compute_score_async(source, sample.response, gold,
                                                {"question": question, "split": "train"})
                ok, err = res["acc"] >= 1.0, ""
            except (ValueError, TypeError, ImportError) as exc:
                ok, err = False, f"{type(exc).__name__}: {exc}"
        bar.update(1)
        return ok, err

    try:
        return list(await asyncio.gather(*(one(*s) for s in samples)))
    finally:
        bar.close()


# -- selection ---------------------------------------------------------------------------------------------------
def select_questions(questions: Sequence[Mapping[str, Any]], samples: Sequence[Sample], *, mode: str = "web",
                     n: int | None = None, threshold: float = DEFAULT_THRESHOLD, scorer: str | None = None,
                     a_key: str = "answer", q_key: str = "question", data_source: str | None = None,
                     exclude_ids: set[str] | None = None, exclude_questions: set[str] | None = None,
                     max_questions: int | None = None, seed: int = 0, concurrency: int = 16,
                     progress: bool = True) -> Selection:
    """Apply the difficulty rule of ``mode`` (module docstring) to ``questions`` (rows with ``_id``)."""
    if mode not in MODE_RULES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    rule = MODE_RULES[mode]
    n = n or rule.n
    scorer = scorer or rule.scorer
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be 'em' or 'rewards', got {scorer!r}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be within [0, 1], got {threshold}")
    by_id = _unique_by_id(questions)
    sel = Selection([], [])
    grouped = _group_samples(by_id, samples, sel)
    rates = {qid: QuestionRate(qid) for qid in by_id}
    todo: list[tuple[str, Sample]] = []
    for qid, row in by_id.items():
        rate = rates[qid]
        if qid in (exclude_ids or ()) or normalize_text(str(row.get(q_key, ""))) in (exclude_questions or ()):
            rate.decision = "in_sft_set"  # decided before scoring: no scorer time on excluded questions
        elif not grouped[qid]:
            rate.decision = "no_samples"
        else:
            rate.n = len(grouped[qid])
            if rate.n < n:
                sel.fewer_than_n.append(qid)
            todo.extend((qid, s) for s in grouped[qid])
    gold = {qid: row.get(a_key) for qid, row in by_id.items()}
    results = _score_em(todo, gold) if scorer == "em" else _score_rewards(
        todo, gold, by_id, q_key, data_source or rule.data_source, concurrency, progress)
    for (qid, _), (ok, err) in zip(todo, results, strict=True):
        rates[qid].correct += ok
        rates[qid].errors += err
    eligible = []
    for qid, rate in rates.items():
        if not rate.decision:
            rate.decision = rule.drop_reason(rate, threshold) or ""
            if not rate.decision:
                eligible.append(qid)
    chosen = set(eligible)
    if max_questions is not None and len(eligible) > max_questions:
        chosen = set(random.Random(seed).sample(eligible, max_questions))
    for qid in eligible:
        rates[qid].decision = "kept" if qid in chosen else "not_sampled"
    sel.rates = [rates[qid] for qid in by_id]
    sel.counts = Counter(r.decision for r in sel.rates)
    sel.kept = [{k: v for k, v in by_id[qid].items() if k != "_id"} for qid in by_id if qid in chosen]
    if sel.fewer_than_n:
        warnings.warn(f"{len(sel.fewer_than_n)} question(s) have fewer than {n} samples (e.g. "
                      f"{sel.fewer_than_n[:3]}); their pass rates use the samples there are",
                      FewerSamplesWarning, stacklevel=2)
    return sel


def _unique_by_id(questions: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    by_id = {str(q["_id"]): q for q in questions}
    if len(by_id) != len(questions):
        dup = [k for k, v in Counter(str(q["_id"]) for q in questions).items() if v > 1][:5]
        raise ValueError(f"question ids are not unique (e.g. {dup}); use --id-key with a unique field")
    return by_id


def _group_samples(by_id: Mapping[str, Any], samples: Sequence[Sample], sel: Selection) -> dict[str, list[Sample]]:
    """Samples per question id; samples of unknown questions are counted in ``sel``."""
    grouped: dict[str, list[Sample]] = {qid: [] for qid in by_id}
    for s in samples:
        if s.qid in grouped:
            grouped[s.qid].append(s)
        else:
            sel.unknown_sample_ids += 1
    return grouped


def _score_em(todo: Sequence[tuple[str, Sample]], gold: Mapping[str, Any]) -> list[tuple[bool, bool]]:
    """(correct, scoring error) per sample by exact match; a sample's own gold serves when the row has none."""
    out = []
    for qid, s in todo:
        try:
            out.append((em_correct(s, gold[qid] if gold[qid] is not None else s.gold), False))
        except ValueError:
            out.append((False, True))
    return out


def _score_rewards(todo: Sequence[tuple[str, Sample]], gold: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]],
                   q_key: str, source_default: str, concurrency: int, progress: bool) -> list[tuple[bool, bool]]:
    """(correct, scoring error) per sample with afm.rewards by the row's data source."""
    jobs = [(s, gold[qid] if gold[qid] is not None else s.gold,
             str(by_id[qid].get("data_source") or source_default), str(by_id[qid].get(q_key, "")))
            for qid, s in todo]
    return [(ok, bool(err)) for ok, err in asyncio.run(_rewards_correct(jobs, concurrency, progress))]


def histogram(rates: Sequence[QuestionRate], bins: int = 10) -> list[dict[str, Any]]:
    """Counts of questions per pass-rate bin ``[k/bins, (k+1)/bins)``, the last bin closed."""
    counts = [0] * bins
    for r in rates:
        if r.rate is not None:
            counts[min(int(r.rate * bins), bins - 1)] += 1
    return [{"bin": f"[{k / bins:.1f}, {(k + 1) / bins:.1f}{']' if k == bins - 1 else ')'}", "count": c}
            for k, c in enumerate(counts)]


def selection_report(sel: Selection, **settings: Any) -> dict[str, Any]:
    """The report JSON: settings, counts per decision, pass-rate histograms, questions with too few samples."""
    scored = [r for r in sel.rates if r.rate is not None]
    return {
        "settings": settings,
        "questions": len(sel.rates),
        "kept": sel.counts.get("kept", 0),
        "decisions": dict(sel.counts),
        "scored_questions": len(scored),
        "mean_pass_rate": sum(r.rate for r in scored) / len(scored) if scored else None,
        "pass_rate_histogram": histogram(scored),
        "solved_count_histogram": dict(sorted(Counter(f"{r.correct}/{r.n}" for r in scored).items())),
        "fewer_than_n": {"count": len(sel.fewer_than_n), "examples": sel.fewer_than_n[:10]},
        "samples_with_unknown_question_id": sel.unknown_sample_ids,
        "scoring_errors": sum(r.errors for r in sel.rates),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm data select", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--questions", required=True, help="questions with gold answers (.jsonl, .json, .parquet)")
    p.add_argument("--samples", required=True, nargs="+", help="`afm infer` output(s) on those questions")
    p.add_argument("--output", required=True, help="RL parquet to write")
    p.add_argument("--mode", choices=MODES, required=True, help="web: drop r_q > threshold; code: drop N/N solved")
    p.add_argument("--n", type=int, default=None, help="samples per question expected (web 32, code 8)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="web: highest pass rate kept (0.3)")
    p.add_argument("--scorer", choices=SCORERS, default=None,
                   help="em (web default) or afm.rewards by data source (code default)")
    p.add_argument("--exclude", nargs="*", default=[], help="SFT set(s) whose questions RL must not contain")
    p.add_argument("--exclude-by", choices=["both", "id", "question"], default="both",
                   help="match excluded questions by id, normalised text, or either (default)")
    p.add_argument("--max-questions", type=int, default=None, help="random sample of this many kept questions")
    p.add_argument("--seed", type=int, default=0, help="seed of that random sample")
    p.add_argument("--q-key", default="question")
    p.add_argument("--a-key", default="answer", help="gold answer field (code: the test cases)")
    p.add_argument("--id-key", default="id", help="question id field, as given to `afm infer`")
    p.add_argument("--data-source", default=None, help="RL data_source (web: search, code: livecodebench)")
    p.add_argument("--prompt-key", default=None, help="system prompt key (web: web_agent, code: code_agent)")
    p.add_argument("--ability", default=None, help="RL ability field (web: qa, code: code)")
    p.add_argument("--tools", default=None, help="comma-separated tools for the rows (default: the prompt's)")
    p.add_argument("--agent-name", default="afm_agent")
    p.add_argument("--split", default="train")
    p.add_argument("--report", default=None, help="selection report JSON (default: OUTPUT with .select.json)")
    p.add_argument("--rates", default=None, help="per-question pass rates JSONL")
    p.add_argument("--concurrency", type=int, default=16, help="samples scored at once (--scorer rewards)")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    """``afm data select``; returns 0, 1 when no question is kept, 2 for bad input."""
    args = build_parser().parse_args(argv)
    rule = MODE_RULES[args.mode]
    data_source = args.data_source or rule.data_source
    try:
        questions = read_questions(args.questions, args.q_key, args.id_key)
        samples = [s for path in args.samples for s in read_samples(path)]
        ids, texts = exclusion_keys(args.exclude)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FewerSamplesWarning)
            sel = select_questions(
                questions, samples, mode=args.mode, n=args.n, threshold=args.threshold, scorer=args.scorer,
                a_key=args.a_key, q_key=args.q_key, data_source=args.data_source,
                exclude_ids=ids if args.exclude_by in ("both", "id") else set(),
                exclude_questions=texts if args.exclude_by in ("both", "question") else set(),
                max_questions=args.max_questions, seed=args.seed, concurrency=args.concurrency,
                progress=not args.quiet)
        for w in caught:
            print(f"[select] warning: {w.message}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        print(f"afm data select: error: {exc}", file=sys.stderr)
        return 2
    n = args.n or rule.n
    report = selection_report(sel, mode=args.mode, n=n, threshold=args.threshold if args.mode == "web" else None,
                              scorer=args.scorer or rule.scorer, exclude=args.exclude,
                              exclude_by=args.exclude_by, max_questions=args.max_questions, seed=args.seed,
                              data_source=data_source, questions_file=args.questions, samples=args.samples)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.rates:
        with open(args.rates, "w", encoding="utf-8") as f:
            for r in sel.rates:
                f.write(json.dumps({"id": r.qid, "n": r.n, "correct": r.correct, "pass_rate": r.rate,
                                    "decision": r.decision, "errors": r.errors}) + "\n")
    if sel.kept:
        try:
            from afm.data.rl_parquet import build_rl_rows, write_rl_parquet
        except ImportError as exc:
            print(f"afm data select: error: the RL parquet builder is not available: {exc}", file=sys.stderr)
            return 2
        try:
            rows, build_report = build_rl_rows(
                sel.kept, data_source=data_source, prompt_key=args.prompt_key or rule.prompt_key,
                ability=args.ability or rule.ability, q_key=args.q_key, a_key=args.a_key, id_key=args.id_key or None,
                tools=args.tools.split(",") if args.tools else None, agent_name=args.agent_name, split=args.split)
            write_rl_parquet(rows, out)
        except (OSError, ValueError) as exc:
            print(f"afm data select: error: {exc}", file=sys.stderr)
            return 2
        report["rl_rows"] = len(rows)
        report["rl_build"] = _as_json(build_report)
    report_path = Path(args.report or str(out.with_suffix("")) + ".select.json")
    report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    c = sel.counts
    print(f"[select] {args.mode}: {len(sel.rates)} questions, mean pass rate "
          f"{report['mean_pass_rate'] if report['mean_pass_rate'] is None else round(report['mean_pass_rate'], 4)}; "
          + ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
    if not sel.kept:
        print("[select] no question kept: nothing written", file=sys.stderr)
        return 1
    print(f"[select] {report['rl_rows']} RL rows -> {out}; report {report_path}")
    return 0


def _as_json(obj: Any) -> Any:
    """The builder's report as JSON data (a dataclass, a mapping or anything with ``to_dict``)."""
    import dataclasses

    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return json.loads(json.dumps(dataclasses.asdict(obj), default=str))
    if isinstance(obj, Mapping):
        return json.loads(json.dumps(dict(obj), default=str))
    return str(obj)


if __name__ == "__main__":
    sys.exit(main())
