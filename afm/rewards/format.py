"""Chain-of-Agents format checks for rewards, and how a format verdict combines with the answer score.

The structural rules come from :func:`afm.trajectory.validate` (registered and allowed tags only, every tag paired
and not nested, no empty tags, tool calls followed by observations, exactly one ``<answer>`` and it is the last
block, no free text outside tags unless allowed). This module adds the code-tag rule: the body of a ``<code>``
call must hold a fenced ```` ```py ````/```` ```python ```` block, or be Python source as it stands.

Composition modes (``format_mode``): ``score_only`` reports the check and leaves the score alone; ``multiply``
scores ``answer × format`` (a bad format scores 0); ``penalty`` subtracts ``format_penalty`` when the format is bad.

The policy writes the text checked here, so every step is linear in it (the trajectory scan, one pass per tag body)
and no body can crash it: a ``<code>`` body that Python's parser refuses for any reason -- a syntax error, or a
RecursionError/MemoryError on 5 KB of nesting such as ``-----1`` -- is a ``bad_code_tag``, and a body longer than
:data:`MAX_CODE_BODY_CHARS` is one without being parsed. (:mod:`afm.rewards.score` caps the whole trajectory.) An
unknown ``format_mode`` is the caller's mistake: :class:`~afm.rewards.errors.RewardConfigError`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from afm.rewards.errors import RewardConfigError
from afm.trajectory import Problem, tool_calls, validate

FORMAT_MODES = ("score_only", "multiply", "penalty")
MAX_CODE_BODY_CHARS = 200_000
"""The longest unfenced ``<code>`` body that is parsed as Python to check the format; a longer one is a
``bad_code_tag`` (a program that long belongs in a fenced block, which is only looked for, not parsed)."""
_PY_FENCE = re.compile(r"```[ \t]*(?:py|python|python3)[ \t]*\r?\n")


def is_python(source: str) -> bool:
    """Whether Python's parser accepts ``source``; never raises (deep nesting makes the parser itself give up)."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def code_tag_problems(text: str) -> list[Problem]:
    """One ``bad_code_tag`` problem per ``<code>`` call whose body is neither a fenced Python block nor Python."""
    problems = []
    for call in tool_calls(text):
        if call.name != "code" or not call.argument.strip() or _PY_FENCE.search(call.argument):
            continue
        body = call.argument.strip()
        if len(body) > MAX_CODE_BODY_CHARS or not is_python(body):
            problems.append(Problem("bad_code_tag", "<code> holds neither a ```py block nor Python source",
                                    call.start, "code"))
    return problems


def format_problems(text: str, allowed_tags: Sequence[str] | None = None, *,
                    allow_text_outside_tags: bool = False) -> list[Problem]:
    """Every format problem of a trajectory (empty = well formed)."""
    problems = validate(text, allowed_tags, allow_text_outside_tags=allow_text_outside_tags)
    problems.extend(code_tag_problems(text))
    problems.sort(key=lambda p: p.position)
    return problems


def apply_format(score: float, format_ok: bool, mode: str = "score_only", penalty: float = 0.5) -> float:
    """Combine an answer score with the format verdict according to ``mode`` (see the module docstring)."""
    if mode not in FORMAT_MODES:
        raise RewardConfigError(f"format_mode must be one of {FORMAT_MODES}, got {mode!r}")
    if format_ok or mode == "score_only":
        return score
    return 0.0 if mode == "multiply" else score - penalty
