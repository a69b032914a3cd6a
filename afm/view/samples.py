"""What every loader hands the page writer: sources of samples, each sample a table row plus its details.

A :class:`Sample` is one row of the page's table (short fields: question, gold, prediction, scores, counts) and,
when the input kept it, one trajectory's details (texts, CoA parts, masks, tool calls, reward, token ids). Loaders
yield samples one at a time, so a run of 10,000 long trajectories is never held in memory at once: the writer
compresses each sample's details as it arrives.

Character offsets in the details are UTF-16 code units (what JavaScript strings index), not Python's code points:
an emoji before a tool call would otherwise shift every later span by one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from afm.trajectory import DEFAULT_REGISTRY, TagKind, find_observations, last_answer, parse

# Index strings are cut to this many characters; the details keep them whole.
INDEX_CHARS = 500
# Tool-call statuses as bits of a row's ``ts`` field (the table filters on them); "infra" is ToolCallRecord.infra.
TOOL_STATUS_BITS = {"ok": 1, "error": 2, "timeout": 4, "invalid": 8, "infra": 16, "duplicate": 32}
SOURCE_KINDS = ("eval", "infer", "sft", "rollouts", "validation")

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


@dataclass
class Sample:
    """One table row (``row``) and, when kept, its details (``detail``; ``ids``/``logprobs`` for the token view).

    ``key`` identifies a sample within its source for resumed runs: a later record with the same key replaces a
    failed one and is skipped after a successful one (:class:`KeepFirstSuccess`).
    """

    row: dict[str, Any]
    detail: dict[str, Any] | None = None
    ids: Sequence[int] | None = None
    logprobs: Sequence[float | None] | None = None
    key: str | None = None


@dataclass
class Source:
    """One input of the page: its samples (a generator, consumed once) and its overview.

    ``overview`` is called with the source's final rows after the samples were consumed (an eval run's scores are
    computed from the records read on the way); it returns the blocks of :mod:`afm.view.overview`. Row fields whose
    name starts with ``_`` are for it only and never reach the page. ``tokenizer`` names a local tokenizer that can
    spell the token ids, or None.
    """

    kind: str
    label: str
    path: str
    samples: Iterator[Sample]
    overview: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = field(default=lambda rows: [])
    tokenizer: str | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"unknown source kind {self.kind!r}; expected one of {', '.join(SOURCE_KINDS)}")


class KeepFirstSuccess:
    """Which record of a key counts, as :func:`afm.eval.metrics.load_results` decides: the first successful one;
    a failed one until a later record of its key (the retry) replaces it."""

    def __init__(self) -> None:
        self._ok: dict[str, bool] = {}
        self.duplicates = 0

    def offer(self, key: str, ok: bool) -> str:
        """``"new"``, ``"replace"`` (the key's earlier record failed) or ``"skip"`` (it succeeded already)."""
        before = self._ok.get(key)
        if before is None:
            self._ok[key] = ok
            return "new"
        if before:
            self.duplicates += 1
            return "skip"
        self._ok[key] = ok
        return "replace"


# -- small helpers ----------------------------------------------------------------------------------------------
def short(value: Any, limit: int = INDEX_CHARS) -> str:
    """``value`` as index text: lists joined with `` | ``, None as empty, cut to ``limit`` characters."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        value = " | ".join(str(v) for v in value)
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def number(value: Any) -> float | None:
    """A finite float, or None (booleans count as 0/1; text that is a number is read)."""
    if isinstance(value, bool):
        return float(value)
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x == x and abs(x) != float("inf") else None


def failure_kind(failure: Any) -> str:
    """``engine``/``tool``/``sandbox``/``judge`` from a failed record's ``failure`` text ("" when none)."""
    if not failure:
        return ""
    return str(failure).split(":", 1)[0].strip()[:40]


def utf16_index(text: str) -> Callable[[int], int]:
    """A function mapping a code-point offset of ``text`` to its UTF-16 offset (identity for BMP-only text)."""
    if not _ASTRAL.search(text):
        return lambda i: i
    table = [0] * (len(text) + 1)
    units = 0
    for i, ch in enumerate(text):
        table[i] = units
        units += 2 if ord(ch) > 0xFFFF else 1
    table[len(text)] = units
    return table.__getitem__


def coa_parts(text: str) -> list[int]:
    """The CoA blocks of ``text`` as a flat list ``[tag, start, end, body_start, body_end, closed, ...]``.

    ``tag`` is an index into :func:`tag_table` (-1 for free text); offsets are UTF-16 units.
    """
    names = tag_table()
    u = utf16_index(text)
    out: list[int] = []
    for seg in parse(text):
        tag = names.index(seg.tag) if seg.tag in names else -1
        body_start, body_end = (seg.body_start, seg.body_end) if seg.tag else (seg.start, seg.end)
        out += [tag, u(seg.start), u(seg.end), u(body_start), u(body_end), int(seg.closed)]
    return out


def tag_table() -> list[str]:
    """The registered tag names, in a fixed order (the page gets the same list with each tag's kind)."""
    return DEFAULT_REGISTRY.names()


def tag_kinds() -> dict[str, str]:
    """Tag name -> kind (reasoning, tool, observation, answer)."""
    return {t.name: str(t.kind) for t in DEFAULT_REGISTRY}


def observation_mask(text: str) -> list[int]:
    """Character ranges ``[start, end, ...]`` (UTF-16) the environment inserted: observations with their padding,
    the spans SFT and RL never train on (:func:`afm.trajectory.find_observations`)."""
    u = utf16_index(text)
    out: list[int] = []
    for span in find_observations(text):
        out += [u(span.start), u(span.end)]
    return out


def tool_names() -> set[str]:
    return set(DEFAULT_REGISTRY.names(TagKind.TOOL))


def answer_of(text: str) -> str:
    """The last ``<answer>`` body of a CoA text, or ""."""
    return last_answer(text) or ""
