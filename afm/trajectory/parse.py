"""Parse, render and validate Chain-of-Agents text.

A trajectory is a sequence of tag blocks (``<name>body</name>``) and free text between them (normally only
whitespace). Only registered tags are recognised; anything else (``<div>``, ``a < b``) is plain text. Inside a
block the parser looks only for that block's closing tag, so bodies are never split by tag-like text; a nested
opening tag inside a non-opaque block is reported by :func:`validate`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

from afm.trajectory.tags import DEFAULT_REGISTRY, TagKind, TagRegistry

OBSERVATION_PREFIX = "\n\n<observation>\n"
OBSERVATION_SUFFIX = "\n</observation>\n\n"


@dataclass(frozen=True)
class Segment:
    """A piece of a trajectory with its character span ``[start, end)``.

    ``tag`` is None for free text. For a tag block, ``body_start``/``body_end`` delimit the body and ``closed``
    says whether the closing tag was found (an unclosed block runs to the end of the text).
    """

    start: int
    end: int
    tag: str | None = None
    body_start: int = 0
    body_end: int = 0
    closed: bool = True
    text: str = field(default="", repr=False)

    @property
    def body(self) -> str:
        """The block's body (free text: the text itself)."""
        if self.tag is None:
            return self.text
        return self.text[self.body_start - self.start : self.body_end - self.start]


@dataclass(frozen=True)
class ToolCall:
    """A tool tag block: the tool's name, its raw argument (the body) and where it is."""

    name: str
    argument: str
    start: int
    end: int
    closed: bool


@dataclass(frozen=True)
class Problem:
    """A format problem found by :func:`validate`. ``code`` is stable and machine-readable."""

    code: str
    message: str
    position: int = -1
    tag: str | None = None

    def __str__(self) -> str:
        where = f" at char {self.position}" if self.position >= 0 else ""
        return f"{self.code}{where}: {self.message}"


@lru_cache(maxsize=32)
def _tag_regex(names: tuple[str, ...]) -> re.Pattern:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"<(/?)({alternatives})>")


def _scan(text: str, registry: TagRegistry, segments_wanted: bool = True) -> tuple[list[Segment], list[Problem]]:
    names = tuple(registry.names())
    rx = _tag_regex(names)
    opaque = frozenset(t.name for t in registry if t.opaque)
    segments: list[Segment] = []
    problems: list[Problem] = []
    add = segments.append if segments_wanted else (lambda _seg: None)
    pos = 0
    n = len(text)
    while pos < n:
        m = rx.search(text, pos)
        if m is None:
            add(Segment(pos, n, text=text[pos:n]))
            break
        if m.start() > pos:
            add(Segment(pos, m.start(), text=text[pos : m.start()]))
        closing, name = m.group(1) == "/", m.group(2)
        if closing:
            problems.append(Problem("stray_closing_tag", f"</{name}> has no matching <{name}>", m.start(), name))
            add(Segment(m.start(), m.end(), text=text[m.start() : m.end()]))
            pos = m.end()
            continue
        close = f"</{name}>"
        body_start = m.end()
        end_idx = text.find(close, body_start)
        if end_idx < 0:
            add(Segment(m.start(), n, name, body_start, n, closed=False, text=text[m.start() :]))
            problems.append(Problem("unclosed_tag", f"<{name}> is never closed", m.start(), name))
            break
        end = end_idx + len(close)
        add(Segment(m.start(), end, name, body_start, end_idx, text=text[m.start() : end]))
        if name not in opaque:
            inner = rx.search(text, body_start, end_idx)
            if inner is not None:
                problems.append(
                    Problem("nested_tag", f"<{name}> contains {inner.group(0)}; tags must not nest", inner.start(), name)
                )
        pos = end
    return segments, problems


def parse(text: str, registry: TagRegistry | None = None) -> list[Segment]:
    """Split ``text`` into free-text and tag segments whose spans tile the text exactly."""
    return _scan(text, registry or DEFAULT_REGISTRY)[0]


def blocks(text: str, registry: TagRegistry | None = None) -> list[Segment]:
    """Only the tag blocks of ``text``, in order."""
    return [s for s in parse(text, registry) if s.tag is not None]


def format_observation(content: str, tag: str = "observation") -> str:
    """The exact string the environment appends after a tool call."""
    return f"\n\n<{tag}>\n{content}\n</{tag}>\n\n"


def render(items: Iterable[tuple[str, str] | Segment], registry: TagRegistry | None = None) -> str:
    """Render ``(tag, body)`` pairs (or parsed segments) as CoA text.

    Observations get the environment's padding (:func:`format_observation`); other blocks are separated by a
    newline. ``parse(render(items))`` returns the same tags and bodies.
    """
    reg = registry or DEFAULT_REGISTRY
    out: list[str] = []
    for item in items:
        if isinstance(item, Segment):
            if item.tag is None:
                continue
            name, body = item.tag, item.body
            if reg.get(name).kind == TagKind.OBSERVATION:  # drop the framing newlines format_observation adds
                body = body.removeprefix("\n").removesuffix("\n")
        else:
            name, body = item
        tag = reg.get(name)
        if tag.kind == TagKind.OBSERVATION:
            out.append(format_observation(body, name))
        else:
            if out and not out[-1].endswith("\n"):
                out.append("\n")
            out.append(f"<{name}>{body}</{name}>")
    return "".join(out)


def tool_calls(text: str, registry: TagRegistry | None = None) -> list[ToolCall]:
    """Every tool-call block in ``text``, in order (an unclosed one at the end is included, ``closed=False``)."""
    reg = registry or DEFAULT_REGISTRY
    tools = set(reg.names(TagKind.TOOL))
    return [
        ToolCall(s.tag, s.body, s.start, s.end, s.closed) for s in parse(text, reg) if s.tag in tools
    ]


def last_tool_call(text: str, registry: TagRegistry | None = None) -> ToolCall | None:
    """The last closed tool call when nothing but whitespace follows it, else None (what the agent loop runs).

    A call that ends the text counts even when an earlier block was left open (``<plan>… </made_up>`` then
    ``<wiki_search>q</wiki_search>``): the strict scan runs the open block over the call, but the model stopped on the
    call's closing tag, and the original's XML tool parser reads it as a call too."""
    reg = registry or DEFAULT_REGISTRY
    calls = tool_calls(text, reg)
    if calls and calls[-1].closed and not text[calls[-1].end :].strip():
        return calls[-1]
    tail = text.rstrip()
    for name in reg.names(TagKind.TOOL):
        close = f"</{name}>"
        if tail.endswith(close):
            body_end = len(tail) - len(close)
            start = tail.rfind(f"<{name}>", 0, body_end)
            if start < 0:
                return None
            return ToolCall(name, tail[start + len(name) + 2 : body_end], start, len(tail), True)
    return None


def last_answer(text: str, registry: TagRegistry | None = None) -> str | None:
    """Body of the last closed ``<answer>`` block (stripped), or None when there is none.

    When the model left a block open (``<plan>… </made_up>``), the strict scan runs it to the end of the text; the
    last ``<answer>…</answer>`` inside that tail still counts, as the original's rewards read it (the last match)."""
    segments = parse(text, registry)
    tail = segments[-1] if segments else None
    if tail is not None and tail.tag is not None and not tail.closed:
        body = tail.body
        end = body.rfind("</answer>")
        start = body.rfind("<answer>", 0, end) if end >= 0 else -1
        if start >= 0:
            return body[start + len("<answer>") : end].strip()
    answers = [s for s in segments if s.tag == "answer" and s.closed]
    return answers[-1].body.strip() if answers else None


def validate(
    text: str,
    allowed_tags: Sequence[str] | None = None,
    *,
    registry: TagRegistry | None = None,
    require_answer: bool = True,
    allow_text_outside_tags: bool = False,
) -> list[Problem]:
    """Format problems of a CoA trajectory (empty list = valid).

    Checks: stray closing tags, unclosed and nested tags, empty blocks, tags outside ``allowed_tags`` (when
    given), non-whitespace text outside blocks (unless allowed), tool calls not followed by an observation (except a
    trailing one), observations not preceded by a tool call, and — when ``require_answer`` — that the last block is
    a single closed ``<answer>``.
    """
    reg = registry or DEFAULT_REGISTRY
    segments, problems = _scan(text, reg)
    problems = list(problems)
    allowed = set(allowed_tags) if allowed_tags is not None else None
    if allowed is not None:
        unknown = sorted(t for t in allowed if t not in reg)
        if unknown:
            raise KeyError(f"allowed_tags names unregistered tags {unknown}; known: {', '.join(reg.names())}")
    tag_blocks = [s for s in segments if s.tag is not None]
    for s in segments:
        if s.tag is None:
            if not allow_text_outside_tags and s.text.strip() and not s.text.startswith("</"):
                problems.append(Problem("text_outside_tags", f"free text outside any tag: {s.text.strip()[:40]!r}", s.start))
            continue
        if allowed is not None and s.tag not in allowed:
            problems.append(Problem("disallowed_tag", f"<{s.tag}> is not allowed here (allowed: {', '.join(sorted(allowed))})", s.start))
        if s.closed and not s.body.strip():
            problems.append(Problem("empty_tag", f"<{s.tag}> has an empty body", s.start))
    for prev, cur in pairwise(tag_blocks):
        prev_kind, cur_kind = reg.get(prev.tag).kind, reg.get(cur.tag).kind
        if prev_kind == TagKind.TOOL and cur_kind != TagKind.OBSERVATION:
            problems.append(Problem("missing_observation", f"<{prev.tag}> call is not followed by an observation", cur.start))
        if cur_kind == TagKind.OBSERVATION and prev_kind != TagKind.TOOL:
            problems.append(Problem("orphan_observation", f"observation follows <{prev.tag}>, not a tool call", cur.start))
    if tag_blocks and reg.get(tag_blocks[0].tag).kind == TagKind.OBSERVATION:
        problems.append(Problem("orphan_observation", "the trajectory starts with an observation", tag_blocks[0].start))
    if require_answer:
        answers = [s for s in tag_blocks if s.tag == "answer"]
        if not answers:
            problems.append(Problem("missing_answer", "no <answer> block"))
        else:
            if len(answers) > 1:
                problems.append(Problem("multiple_answers", f"{len(answers)} <answer> blocks; expected one", answers[1].start))
            if tag_blocks[-1].tag != "answer":
                problems.append(Problem("last_tag_not_answer", f"the last block is <{tag_blocks[-1].tag}>, not <answer>", tag_blocks[-1].start))
    problems.sort(key=lambda p: p.position)
    return problems


def pairing_problems(text: str, registry: TagRegistry | None = None) -> list[Problem]:
    """Only the structural problems (stray, unclosed, nested tags) that make spans ambiguous."""
    return _scan(text, registry or DEFAULT_REGISTRY, segments_wanted=False)[1]
