"""Observation spans: what the environment inserted into a trajectory, as character (or byte) offsets.

The rollout engine appends ``"\\n\\n<observation>\\n" + output + "\\n</observation>\\n\\n"`` after a tool call. A
span covers the observation from ``<observation>`` through ``</observation>`` (the *core*) plus the whitespace
that surrounds it (the *padding*), because the environment, not the model, wrote that whitespace.

Everything here works on ``str`` (character offsets) and on UTF-8 ``bytes`` (byte offsets) alike: the tags
and the padding whitespace are ASCII, so a byte scan finds exactly the same spans, and the SFT masker can map
them to tokens by byte offsets without decoding tokens one by one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import AnyStr

# Environment-inserted padding is ASCII whitespace (the loop writes "\n\n"; CRLF data is tolerated).


@dataclass(frozen=True)
class ObservationSpan:
    """One observation. ``start``/``end`` include the padding; ``core_start``/``core_end`` are the tags."""

    start: int
    core_start: int
    core_end: int
    end: int
    closed: bool  # False when the text ends before the closing tag (truncation or a broken sample)


_PAD_CHARS = " \t\r\n\f\v"
_PAD_BYTES = frozenset(_PAD_CHARS.encode())


def _check_tag(tag: str) -> None:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", tag):
        raise ValueError(f"invalid observation tag name {tag!r}: pass the bare name, e.g. 'observation'")


def find_observations(text: AnyStr, tag: str = "observation") -> list[ObservationSpan]:
    """All observation spans of ``text`` (str or UTF-8 bytes), in order.

    The first closing tag after an opening tag ends the observation, so an observation may contain text that looks
    like any other tag (HTML, ``<answer>``, even ``<observation>``). An opening tag without a closing tag yields a
    span that runs to the end of the text with ``closed=False``.
    """
    _check_tag(tag)
    as_bytes = isinstance(text, bytes)
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    if as_bytes:
        open_t, close_t = open_t.encode(), close_t.encode()
        is_pad = _PAD_BYTES.__contains__  # indexing bytes gives ints
    else:
        is_pad = _PAD_CHARS.__contains__
    spans: list[ObservationSpan] = []
    n, floor, pos = len(text), 0, 0
    while True:
        core_start = text.find(open_t, pos)
        if core_start < 0:
            return spans
        start = core_start
        while start > floor and is_pad(text[start - 1]):
            start -= 1
        close = text.find(close_t, core_start + len(open_t))
        if close < 0:
            spans.append(ObservationSpan(start, core_start, n, n, False))
            return spans
        core_end = end = close + len(close_t)
        while end < n and is_pad(text[end]):
            end += 1
        spans.append(ObservationSpan(start, core_start, core_end, end, True))
        floor = pos = end


def observation_spans(text: str, tag: str = "observation") -> list[tuple[int, int]]:
    """``[(start, end), ...]`` character spans of every observation, padding whitespace included."""
    return [(s.start, s.end) for s in find_observations(text, tag)]
