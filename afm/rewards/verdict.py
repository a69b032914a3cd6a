"""Read a correct/incorrect verdict out of an LLM judge's reply, however it was wrapped.

Handled: a JSON object (possibly inside ```` ``` ```` fences, with prose around it, with single quotes, or broken
like the original's skeleton with a missing quote); ``<think>`` blocks before the answer; plain one-word replies
(correct/incorrect, yes/no, true/false, right/wrong); a last line such as ``Judgement: incorrect``. Negative
words are always tested before positive ones, so "incorrect" or "not correct" can never read as "correct". A reply
with no verdict, or with contradicting verdict words, gives ``None`` (the judge retries).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_VERDICT_KEYS = ("judgement", "judgment", "verdict", "is_correct", "correct", "correctness", "result", "decision",
                 "label", "grade", "equivalent", "answer")
_RATIONALE_KEYS = ("rationale", "reasoning", "reason", "explanation", "analysis")
_NEG_OBJ = r"(?:correct|equivalent|match\w*|same|equal|right)"
_NEGATIVE = re.compile(rf"\b(incorrect|wrong|false|no|inequivalent|unequal|mismatch\w*|"
                       rf"not\s+(?:\w+\s+)?{_NEG_OBJ}|(?:is|does|are|do)n'?t\s+(?:\w+\s+)?{_NEG_OBJ})\b",
                       re.IGNORECASE)
_POSITIVE = re.compile(r"\b(correct|right|true|yes|equivalent|match(?:es)?)\b", re.IGNORECASE)
_KEY_VALUE = re.compile(r"[\"']?(?:judge?ment|verdict|correctness|is_correct)[\"']?\s*[:=]\s*[\"']?\s*"
                        r"(not\s+correct|[A-Za-z]+)", re.IGNORECASE)
_LABEL_LINE = re.compile(r"^\W*(?:final\s+)?(?:judge?ment|verdict|answer|decision|result)\W*\s*[:=-]\s*(.+)$",
                         re.IGNORECASE | re.MULTILINE)


def word_verdict(text: str) -> bool | None:
    """Polarity of a short verdict phrase: False when any negative word occurs, True for a positive one, else None."""
    if _NEGATIVE.search(text):
        return False
    if _POSITIVE.search(text):
        return True
    return None


def _value_verdict(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return word_verdict(value)
    return None


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level ``{...}`` in ``text`` that decodes as JSON or as a Python dict literal, in order."""
    found = []
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos >= 0:
        obj, end = None, pos + 1
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            close = _matching_brace(text, pos)
            if close is not None:
                try:
                    obj = ast.literal_eval(text[pos : close + 1])  # {'judgement': 'correct'}
                    end = close + 1
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    obj = None
        if isinstance(obj, dict):
            found.append(obj)
        else:
            end = pos + 1
        pos = text.find("{", end)
    return found


def _matching_brace(text: str, start: int) -> int | None:
    depth = 0
    for i in range(start, min(len(text), start + 20_000)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """``(verdict, rationale)`` from a judge reply; verdict is None when the reply holds no clear verdict.

    >>> parse_verdict('```json\\n{"rationale": "same city", "judgement": "correct"}\\n```')
    (True, 'same city')
    >>> parse_verdict("Incorrect.")[0]
    False
    """
    text = _THINK.sub("", text or "").strip()
    if not text:
        return None, ""
    for obj in reversed(_json_objects(text)):
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        rationale = next((str(lowered[k]) for k in _RATIONALE_KEYS if k in lowered), "")
        for key in _VERDICT_KEYS:
            if key in lowered:
                verdict = _value_verdict(lowered[key])
                if verdict is not None:
                    return verdict, rationale
    matches = _KEY_VALUE.findall(text)
    if matches:
        verdict = word_verdict(matches[-1])
        if verdict is not None:
            return verdict, text
    labels = _LABEL_LINE.findall(text)
    if labels:
        verdict = word_verdict(labels[-1])
        if verdict is not None:
            return verdict, text
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # A short reply, or a short last line, that is only a verdict ("Correct.", "**No**").
    for candidate in (text, lines[-1] if lines else ""):
        words = re.findall(r"[A-Za-z]+", candidate)
        if 0 < len(words) <= 3:
            verdict = word_verdict(candidate)
            if verdict is not None:
                return verdict, text
    # "does not match" holds a positive word: only count positives outside negative phrases.
    negative, positive = bool(_NEGATIVE.search(text)), bool(_POSITIVE.search(_NEGATIVE.sub(" ", text)))
    if negative != positive and len(text) < 400:
        return positive, text
    return None, text
