"""The reward entry point: ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **options)``.

Usable as verl's custom reward function (sync or async: ``reward.custom_reward_function.{path,name}`` with name
``compute_score`` or ``compute_score_async``; verl's ``reward_kwargs`` arrive as ``options``) and by the evaluator.

Steps: look the data source up in the registry, normalise the ground truth once, run the scorer, check the CoA
format, combine (``format_mode``), add the DAPO overlong penalty. Every result has the same keys
(:data:`RESULT_KEYS`), whatever the data source or outcome, because verl stacks each key across the batch:

- ``score`` (float, the reward), ``acc`` (0.0/1.0: the answer alone), ``format_ok`` (0.0/1.0),
  ``overlong_penalty`` (≤ 0), ``infra_error`` (1.0 when the grader's infrastructure failed: the sandbox
  (``sandbox_error``) or a configured judge that gave no verdict) — numbers, averaged into metrics;
- ``pred`` (the extracted answer; verl uses it for maj@k), ``method`` (``em``, ``math_verify``, ``judge``,
  ``em_f1_fallback``, ``no_answer``, or the code scorer's), ``error`` (why a scorer degraded; ``""`` when none),
  ``format_problems`` (comma-separated problem codes), ``data_source`` (the registered name), ``details`` (a JSON
  object as a string: scorer specifics such as F1, votes, parsed forms).

Options: ``format_mode`` (``score_only``|``multiply``|``penalty``, default ``score_only``), ``format_penalty``
(0.5), ``format_tags`` (allowed tag names, list or comma string; default all registered), ``format_allow_text``
(False); ``qa_mode`` (``train``|``eval``); ``math_timeout``; ``judge`` (a :class:`~afm.rewards.judge.Judge`) or
``judge_<field>`` overrides of :class:`~afm.rewards.judge.JudgeConfig`; ``question``; overlong options of
:func:`afm.rewards.length.penalty_from_options`. Unknown options are ignored (verl adds its own).

**compute_score never raises on a policy's text.** The policy writes ``solution_str``; whatever a scorer (or the
format check) raises while reading it is a wrong answer, not a crashed training step: acc 0, score 0 (plus the
overlong penalty as usual), ``method`` ``grader_error``, ``error`` naming the exception (type and message, cut to
500 characters), ``infra_error`` 0 (a policy's text is not infrastructure). Only these propagate, wherever they are
raised (they take precedence over ``grader_error``):

- :class:`~afm.rewards.errors.RewardConfigError` (a ValueError): the caller's or the data's mistake -- an unknown
  data source, a malformed ground truth, an unknown option value (``format_mode``, ``format_tags``, ``qa_mode``,
  ``judge_<field>``, overlong options, ``infra_fail_limit``) -- raised before any scoring where it can be, and let
  through from a scorer too, naming the data source;
- :class:`InfrastructureError`: the streak of infrastructure failures below;
- ImportError: a scorer's dependency is not installed (math-verify), which no answer can fix.

A judge that fails falls back to EM/F1 and a math timeout scores 0, each with ``error`` set; neither raises.

**Every grader answers within its deadline.** Math runs in worker processes under a hard deadline
(:mod:`afm.rewards.math`; out of time: ``method`` ``grader_timeout``), the judge and the sandbox have their own
timeouts, and what runs in this process (the trajectory scan, the format check, QA normalisation) is linear in the
text. Before any of it, caps keep the work bounded: a trajectory longer than :data:`MAX_SOLUTION_CHARS` is neither
scored nor format-checked, and an answer (the last ``<answer>`` body) longer than its kind's cap in
:data:`ANSWER_CAPS` is not scored; both give acc 0 with ``method`` ``answer_too_large`` and ``error`` saying which
cap. Math answers are also capped in nesting depth (:data:`afm.rewards.math.MAX_NESTING`).

**Infrastructure failures are not wrong answers.** A result with ``infra_error`` 1.0 still has ``score`` 0 (or the
judge's EM/F1 fallback), but it says nothing about the answer. The evaluator stores such samples as failed and
retries them on resume (:mod:`afm.eval.run`). In RL (verl), where a dead sandbox or judge would silently turn whole
GRPO groups into zero-reward groups, the reward function fails loudly instead: after ``infra_fail_limit``
infrastructure failures in a row in one process (option, or ``$AFM_INFRA_FAIL_LIMIT``; default
:data:`DEFAULT_INFRA_FAIL_LIMIT`; 0 disables) it raises :class:`InfrastructureError`, which stops the training
step. Isolated failures below the limit keep score 0 and show up as the ``infra_error`` metric; any result that is
not an infrastructure failure resets the count.

**Tool infrastructure failures.** When ``extra_info`` says the rollout's tool calls failed for infrastructure reasons
(``tool_infra_errors`` with a non-zero count, or ``infra_error`` true: what :mod:`afm.rl.agent_loop` records and
afm's reward managers pass on, :mod:`afm.rl.reward_manager`), the answer is not graded (no judge call, no sandbox
run): the result is an infrastructure failure (``infra_error`` 1.0, ``method`` ``tool_infra``, ``error`` naming the
tools), counted in the streak above. In RL the sample's ``response_mask`` is all 0 and GRPO leaves it out of its
group, so its score 0 trains nothing (see :mod:`afm.rl.agent_loop`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from afm.rewards import math as math_scorer
from afm.rewards import qa as qa_scorer
from afm.rewards.errors import RewardConfigError
from afm.rewards.format import FORMAT_MODES, apply_format, format_problems
from afm.rewards.ground_truth import GroundTruth, normalize_ground_truth
from afm.rewards.length import penalty_from_options
from afm.rewards.registry import ScorerSpec, get_scorer
from afm.trajectory import DEFAULT_REGISTRY, last_answer

RESULT_KEYS = ("score", "acc", "pred", "method", "error", "format_ok", "format_problems", "overlong_penalty",
               "infra_error", "data_source", "details")

MAX_SOLUTION_CHARS = 1_000_000
"""The longest trajectory (``solution_str``) that is scored and format-checked; a longer one scores 0 as
``answer_too_large`` with the format problem ``too_large``. Honest responses are bounded by ``max_resp_len``
tokens (32k tokens are about 130k characters). Measured: the format check and the answer scan of a megabyte take
under 0.1 s for ordinary text and about 3 s for the worst shape found (a megabyte of tiny stray tags)."""

CODE_ANSWER_CHARS = 200_000
"""The longest code answer that is extracted and run; whole programs of contest solutions are a few KB."""

ANSWER_CAPS: dict[str, int] = {"qa": qa_scorer.MAX_ANSWER_CHARS, "judge": qa_scorer.MAX_ANSWER_CHARS,
                               "math": math_scorer.MAX_ANSWER_CHARS, "code": CODE_ANSWER_CHARS}
"""Per ground-truth kind, the longest answer (the last ``<answer>`` body) a scorer of that kind is given, in
characters; a longer one scores 0 as ``answer_too_large``. It applies to every scorer of the kind (registered ones
too), before the scorer runs."""

ERROR_CHARS = 500  # of a grader_error's message
DEFAULT_INFRA_FAIL_LIMIT = 8
INFRA_LIMIT_ENV = "AFM_INFRA_FAIL_LIMIT"


class InfrastructureError(RuntimeError):
    """Too many infrastructure failures in a row (dead sandbox or judge): scores would be meaningless."""


# What a scorer may let out of compute_score (module docstring): never the policy's fault.
_PROPAGATE = (RewardConfigError, InfrastructureError, ImportError)


class _InfraStreak:
    """Infrastructure failures in a row, shared by every caller in this process (verl scores from threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.last_error = ""

    def record(self, failed: bool, error: str, limit: int, data_source: str) -> None:
        with self._lock:
            if not failed:
                self.count = 0
                return
            self.count += 1
            self.last_error = error
            count = self.count
        if limit > 0 and count >= limit:
            raise InfrastructureError(
                f"{count} infrastructure failures in a row (last: {data_source}: {error or 'no detail'}); a tool "
                f"server, the sandbox or the judge is down, so rewards would all be 0. Fix it and resume, or raise infra_fail_limit "
                f"(INFRA_FAIL_LIMIT of experiments/*.sh, or ${INFRA_LIMIT_ENV}; 0 disables this check).")


_streak = _InfraStreak()


def infra_fail_limit(options: Mapping[str, Any]) -> int:
    """The consecutive-failure limit: option ``infra_fail_limit``, else ``$AFM_INFRA_FAIL_LIMIT``, else 8."""
    value = options.get("infra_fail_limit", os.environ.get(INFRA_LIMIT_ENV, DEFAULT_INFRA_FAIL_LIMIT))
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise RewardConfigError(f"infra_fail_limit must be an integer >= 0, got {value!r}") from None
    if limit < 0:
        raise RewardConfigError(f"infra_fail_limit must be an integer >= 0, got {value!r}")
    return limit


PRED_LIMIT = 4000  # characters of ``pred`` kept in the result (whole programs can be long)


def tool_infra_failure(extra_info: Mapping[str, Any]) -> str:
    """Why the rollout's tools failed for infrastructure reasons, read from ``extra_info``; ``""`` if they did not."""
    counts = extra_info.get("tool_infra_errors")
    if isinstance(counts, Mapping):
        failed = {str(k): v for k, v in counts.items() if v}
        if failed:
            return "tool infrastructure failure: " + ", ".join(f"{k} x{v}" for k, v in sorted(failed.items()))
    flag = extra_info.get("infra_error")
    if flag is not None and not isinstance(flag, str) and bool(flag):
        return "tool infrastructure failure"
    return ""


def _tool_infra_result(reason: str) -> dict[str, Any]:
    # not graded: the trajectory says nothing about the answer the policy would give with working tools
    return {"acc": 0.0, "score": 0.0, "pred": "", "method": "tool_infra", "error": reason, "infra_error": True}


def _grader_error(exc: BaseException, where: str) -> dict[str, Any]:
    """The result of a grader that raised on the policy's text: a wrong answer, not infrastructure."""
    return {"acc": 0.0, "score": 0.0, "pred": "", "method": "grader_error",
            "error": f"{type(exc).__name__}: {exc}"[:ERROR_CHARS], "infra_error": False, "details": {"grader": where}}


def _too_large(what: str, chars: int, cap: int, pred: str = "") -> dict[str, Any]:
    return {"acc": 0.0, "score": 0.0, "pred": pred, "method": "answer_too_large",
            "error": f"answer_too_large: the {what} has {chars:,} characters; the cap is {cap:,}",
            "details": {"chars": chars, "cap": cap}}


def size_check(solution_str: str, kind: str) -> dict[str, Any] | None:
    """The ``answer_too_large`` result when the trajectory or its answer is over a cap, else None (linear time)."""
    if len(solution_str) > MAX_SOLUTION_CHARS:
        return _too_large("trajectory", len(solution_str), MAX_SOLUTION_CHARS)
    cap = ANSWER_CAPS.get(kind)
    answer = last_answer(solution_str) if cap is not None else None
    if answer is not None and len(answer) > cap:
        return _too_large(f"{kind} answer", len(answer), cap, answer)
    return None


def _before_scoring(solution_str: str, spec: ScorerSpec, info: Mapping[str, Any]) -> dict[str, Any] | None:
    """A result decided without the scorer (tool infrastructure failed, over a cap), else None."""
    reason = tool_infra_failure(info)
    if reason:
        return _tool_infra_result(reason)
    return size_check(solution_str, spec.kind)


def _prepare(data_source: str, solution_str: str, ground_truth: Any,
             extra_info: Mapping[str, Any] | None) -> tuple[ScorerSpec, GroundTruth, dict[str, Any]]:
    if not isinstance(data_source, str) or not data_source:
        raise RewardConfigError(f"data_source must be a non-empty string, got {data_source!r}")
    spec = get_scorer(data_source)
    if not isinstance(solution_str, str):
        raise RewardConfigError(f"{data_source}: solution_str must be a str, got {type(solution_str).__name__}")
    if extra_info is not None and not isinstance(extra_info, Mapping):
        raise RewardConfigError(f"{data_source}: extra_info must be a dict or None, got {type(extra_info).__name__}")
    gt = normalize_ground_truth(ground_truth, data_source, spec.kind)
    return spec, gt, dict(extra_info or {})


def _tags(value: Any) -> list[str] | None:
    if value is None:
        return None
    tags = [t.strip() for t in value.split(",") if t.strip()] if isinstance(value, str) else [str(t) for t in value]
    unknown = sorted(t for t in tags if t not in DEFAULT_REGISTRY)
    if unknown:  # checked here: the format check itself runs on the policy's text, where raising is a grader_error
        raise RewardConfigError(f"format_tags names unregistered tags {unknown}; known: "
                                f"{', '.join(DEFAULT_REGISTRY.names())}")
    return tags


class _Post(NamedTuple):
    """What happens after the scorer, read and checked from the options before any scoring is spent.

    A NamedTuple, not a dataclass: verl may exec this file outside ``sys.modules``, where @dataclass fails.
    """

    format_mode: str
    format_penalty: float
    format_tags: list[str] | None
    format_allow_text: bool
    overlong_penalty: float
    overlong_note: str
    infra_fail_limit: int


def _post_options(options: Mapping[str, Any], extra_info: Mapping[str, Any], data_source: str) -> _Post:
    mode = options.get("format_mode", "score_only")
    if mode not in FORMAT_MODES:
        raise RewardConfigError(f"{data_source}: format_mode must be one of {FORMAT_MODES}, got {mode!r}")
    try:
        penalty, note = penalty_from_options(options, extra_info)
        limit = infra_fail_limit(options)
        format_penalty = float(options.get("format_penalty", 0.5))
        tags = _tags(options.get("format_tags"))
    except (TypeError, ValueError) as exc:
        raise RewardConfigError(f"{data_source}: {exc}") from None
    return _Post(mode, format_penalty, tags, bool(options.get("format_allow_text", False)), penalty, note, limit)


def _format_check(solution_str: str, post: _Post) -> tuple[list[str], BaseException | None]:
    """The format problem codes of the trajectory, or the exception the check raised on it."""
    if len(solution_str) > MAX_SOLUTION_CHARS:
        return ["too_large"], None
    try:
        problems = format_problems(solution_str, post.format_tags, allow_text_outside_tags=post.format_allow_text)
    except _PROPAGATE:
        raise
    except Exception as exc:  # on the policy's text: a grader error (module docstring), not a crash
        return ["grader_error"], exc
    return [p.code for p in problems], None


def _finish(raw: Any, spec: ScorerSpec, solution_str: str, post: _Post) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or "acc" not in raw:
        raise RewardConfigError(f"scorer for {spec.name!r} returned {type(raw).__name__} without 'acc'; "
                                "scorers return a dict with at least 'acc'")
    codes, failure = _format_check(solution_str, post)
    if failure is not None:
        raw = _grader_error(failure, "format")
    acc = float(raw["acc"])
    base = float(raw.get("score", acc))
    format_ok = not codes
    score = apply_format(base, format_ok, post.format_mode, post.format_penalty)
    details = dict(raw.get("details") or {})
    if post.overlong_note:
        details["overlong_note"] = post.overlong_note
    infra = bool(raw.get("infra_error"))
    _streak.record(infra, str(raw.get("error") or ""), post.infra_fail_limit, spec.name)
    pred = str(raw.get("pred") or "")
    if len(pred) > PRED_LIMIT:
        details["pred_chars"] = len(pred)
        pred = pred[:PRED_LIMIT]
    return {
        "score": score + post.overlong_penalty,
        "acc": acc,
        "pred": pred,
        "method": str(raw.get("method") or spec.kind),
        "error": str(raw.get("error") or ""),
        "format_ok": float(format_ok),
        "format_problems": ",".join(dict.fromkeys(codes)),
        "overlong_penalty": post.overlong_penalty,
        "infra_error": float(infra),
        "data_source": spec.name,
        "details": json.dumps(details, ensure_ascii=False, default=str, sort_keys=True),
    }


def _run_blocking(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _score_sync(spec: ScorerSpec, solution_str: str, gt: GroundTruth, info: dict[str, Any],
                options: Mapping[str, Any]) -> Any:
    early = _before_scoring(solution_str, spec, info)
    if early is not None:
        return early
    raw = spec.resolve()(solution_str, gt, data_source=spec.name, extra_info=info, **options)
    return _run_blocking(raw) if asyncio.iscoroutine(raw) else raw


async def _score_async(spec: ScorerSpec, solution_str: str, gt: GroundTruth, info: dict[str, Any],
                       options: Mapping[str, Any]) -> Any:
    early = _before_scoring(solution_str, spec, info)
    if early is not None:
        return early
    kwargs = {**options, "data_source": spec.name, "extra_info": info}
    afn = spec.resolve_async()
    if afn is not None:
        return await afn(solution_str, gt, **kwargs)
    return await asyncio.to_thread(spec.resolve(), solution_str, gt, **kwargs)


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  **options: Any) -> dict[str, Any]:
    """Score one response (verl's custom reward signature); see the module docstring for keys and options.

    Raises only RewardConfigError, InfrastructureError or ImportError, never on the policy's text.
    """
    spec, gt, info = _prepare(data_source, solution_str, ground_truth, extra_info)
    post = _post_options(options, info, spec.name)
    try:
        raw = _score_sync(spec, solution_str, gt, info, options)
    except _PROPAGATE:
        raise
    except Exception as exc:  # on the policy's text: a wrong answer with the error named (module docstring)
        raw = _grader_error(exc, "scorer")
    return _finish(raw, spec, solution_str, post)


async def compute_score_async(data_source: str, solution_str: str, ground_truth: Any,
                              extra_info: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """Async form of :func:`compute_score`: judges are awaited, blocking scorers run in a worker thread."""
    spec, gt, info = _prepare(data_source, solution_str, ground_truth, extra_info)
    post = _post_options(options, info, spec.name)
    try:
        raw = await _score_async(spec, solution_str, gt, info, options)
    except _PROPAGATE:
        raise
    except Exception as exc:  # as in compute_score; cancellation (a BaseException) still propagates
        raw = _grader_error(exc, "scorer")
    return _finish(raw, spec, solution_str, post)
