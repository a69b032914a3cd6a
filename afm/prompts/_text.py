"""Text helpers shared by the built-in prompts: unwrapping source lines, order and format rules in words.

The prompts are written by the afm project (never copied from the original repository); they follow the
structure described in ``reference/upstream_afm.md`` §1.3.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from afm.prompts.registry import START

_CONTINUATION = re.compile(r"\n  (?=\S)")


def unwrap(text: str) -> str:
    """Join hard-wrapped source lines: a line that starts with exactly two spaces continues the line before.

    Lets the prompts keep ≤110-character source lines while every rule reaches the model as one line.
    """
    return _CONTINUATION.sub(" ", text.strip("\n"))


def alternatives(names: Sequence[str]) -> str:
    """``<a>``, ``<a> or <b>``, ``<a>, <b> or <c>``."""
    tags = [f"<{n}>" for n in names]
    if len(tags) <= 1:
        return "".join(tags)
    return ", ".join(tags[:-1]) + " or " + tags[-1]


def successor_lines(successors: Sequence[tuple[str, Sequence[str]]], tools: Sequence[str]) -> str:
    """One bullet per group of functions that share the same allowed successors, in first-seen order."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for src, dsts in successors:
        groups.setdefault(tuple(dsts), []).append(src)
    lines = []
    for dsts, srcs in groups.items():
        if srcs == [START]:
            where = "At the start"
        else:
            named = [s for s in srcs if s != START]
            where = f"After {alternatives(named)}"
            if all(s in tools for s in named):
                where += " (once the observation has arrived)"
            if START in srcs:
                where = "At the start, and " + where[0].lower() + where[1:]
        lines.append(f"- {where}: {alternatives(dsts)}.")
    return "\n".join(lines)


def format_rules(observation_tag: str = "observation") -> str:
    """The rules every prompt states: reserved tags, observations come from the environment, the answer."""
    return unwrap(f"""
Format rules
- The tags above are reserved. Write a tag only to open or close its own function: never inside free text,
  inside <think> or inside another function, and never one function within another.
- Write nothing outside the functions.
- You never write <{observation_tag}> yourself. After a tool call, stop: the environment runs the tool,
  appends its output as <{observation_tag}>...</{observation_tag}>, and you continue after it.
- Your final answer goes in <answer></answer>, exactly once, as the last function; nothing follows it.
""")
