"""One place that turns a ``ground_truth`` of any accepted shape into a :class:`GroundTruth`.

The original mixed dicts (``{"target": [...]}``), JSON strings of that dict and plain strings across its reward
managers and crashed on the wrong one. Here every scorer receives the same normalised record, and malformed input
raises a :class:`~afm.rewards.errors.RewardConfigError` (a ValueError) that names the data source: the data's fault,
which :func:`afm.rewards.compute_score` lets through rather than scoring it as a wrong answer.

Accepted shapes:

- a dict with the gold answer(s) under ``target`` (or ``targets``, ``answer``, ``answers``, ``ground_truth``) and an
  optional ``question``; other keys (test cases, ``question_id``) are kept in ``data``;
- a list or tuple (or numpy array, as verl reads parquet lists) of gold answers;
- a JSON string of either of those;
- a plain string or a number: one gold answer.

A string that starts with ``{`` or ``[`` must be valid JSON, except for math sources, where ``[0,1)`` and
``\\{1,2\\}`` are answers: there a string is decoded only when it decodes to a dict or to a list of strings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from afm.rewards.errors import RewardConfigError

# How a scorer wants its ground truth checked: "qa"/"judge" need gold answers, "math" reads strings leniently,
# "code" needs no gold answer (test cases live in ``data``).
GT_KINDS = ("qa", "judge", "math", "code")
_TARGET_KEYS = ("target", "targets", "answer", "answers", "ground_truth")


@dataclass(frozen=True)
class GroundTruth:
    """A normalised ground truth: gold answers, the question when known, and every field of the original dict."""

    targets: tuple[str, ...]
    question: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (what verl's parquet loader yields) as plain Python objects."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return value


def _answers(value: Any, data_source: str, where: str) -> tuple[str, ...]:
    value = _plain(value)
    if value is None:
        return ()
    if isinstance(value, bool):
        raise RewardConfigError(f"{data_source}: {where} is a bool ({value}); expected answer strings")
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise RewardConfigError(f"{data_source}: {where} has type {type(value).__name__}; expected a string or a list of strings")
    out = []
    for item in value:
        item = _plain(item)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise RewardConfigError(f"{data_source}: {where} contains a {type(item).__name__} ({item!r:.60}); "
                             "expected strings or numbers")
        text = str(item).strip()
        if text:
            out.append(text)
    return tuple(out)


def _decode_string(text: str, data_source: str, kind: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return stripped
    try:
        decoded = json.loads(stripped)
    except json.JSONDecodeError as exc:
        if kind == "math":
            return stripped  # an interval or a set, not JSON
        raise RewardConfigError(f"{data_source}: ground_truth is a string that is not valid JSON ({exc.msg} at char "
                         f"{exc.pos}): {stripped[:80]!r}") from None
    if kind == "math" and not (isinstance(decoded, dict)
                               or (isinstance(decoded, list) and all(isinstance(x, str) for x in decoded))):
        return stripped  # "[0, 1]" is an interval, not two answers
    return decoded


def normalize_ground_truth(ground_truth: Any, data_source: str, kind: str = "qa") -> GroundTruth:
    """Normalise ``ground_truth`` for a scorer of ``kind`` (see :data:`GT_KINDS`); RewardConfigError on bad input.

    >>> normalize_ground_truth('{"target": ["Paris"], "question": "Capital of France?"}', "nq").targets
    ('Paris',)
    """
    if kind not in GT_KINDS:
        raise RewardConfigError(f"unknown ground-truth kind {kind!r}; expected one of {GT_KINDS}")
    value = _plain(ground_truth)
    if value is None:
        raise RewardConfigError(f"{data_source}: ground_truth is None; expected a dict, a list or a (JSON) string")
    if isinstance(value, bytes):
        raise RewardConfigError(f"{data_source}: ground_truth is bytes; decode it to a string first")
    if isinstance(value, str):
        value = _decode_string(value, data_source, kind)
    if isinstance(value, Mapping):
        data = {str(k): _plain(v) for k, v in value.items()}
        key = next((k for k in _TARGET_KEYS if data.get(k) is not None), None)
        targets = _answers(data[key], data_source, f"ground_truth[{key!r}]") if key else ()
        question = data.get("question")
        question = "" if question is None else str(question)
    elif isinstance(value, (list, tuple, str, int, float)) and not isinstance(value, bool):
        targets = _answers(value, data_source, "ground_truth")
        data, question = {"target": list(targets)}, ""
    else:
        raise RewardConfigError(f"{data_source}: ground_truth has type {type(value).__name__}; "
                         "expected a dict, a list or a (JSON) string")
    if kind != "code" and not targets:
        keys = sorted(data) if isinstance(value, Mapping) else []
        raise RewardConfigError(f"{data_source}: ground_truth has no gold answer (looked for {', '.join(_TARGET_KEYS)}"
                         + (f"; found keys {keys}" if keys else "") + ")")
    return GroundTruth(targets, question, data)
