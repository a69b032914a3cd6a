"""Read a correct/incorrect verdict out of an LLM judge's reply, or refuse to.

A reply that holds no clear verdict is not a verdict: :func:`parse_verdict` returns ``None`` and the judge treats it
like a failed request (retried, never cached, an infrastructure failure when every attempt fails). Nothing is
guessed from prose: an HTTP 200 with "no healthy upstream", "The correct answer is Lyon, not Paris." or "Not sure;
it might be correct." is no verdict.

The grammar (after dropping ``<think>...</think>`` and anything before a lone ``</think>``); the first form that
occurs in the reply decides, and every verdict that form holds must be readable and agree, else ``None``:

1. **JSON object** (also inside ```` ``` ```` fences, with prose around it, or a Python dict with single quotes):
   the objects that have a verdict key (:data:`VERDICT_KEYS`, any case). Each such key must hold a bool, ``0``/``1``
   or a string that is exactly a verdict word. ``{"judgement": "partially correct"}`` is no verdict.
2. **Key and value**: ``judgement: correct``, ``**Verdict:** incorrect``, or ``"judgement": "incorrect"`` inside an
   object that does not parse (the original's prompt skeleton lacks a closing quote, and judges copy it). The
   whole value must be a verdict word; a quoted value must end its field (so an echoed skeleton
   ``"judgement": "correct" or "incorrect"`` is no verdict).
3. **Verdict line**: a line that is nothing but a verdict word (``Correct.``, ``**No**``, a reasoning paragraph
   followed by ``Incorrect``).

Verdict words (:data:`VERDICT_WORDS`; case, surrounding spaces, quotes, ``*``, ``_``, backticks and one final ``.``
or ``!`` are ignored): correct, yes, true, right, equivalent -> correct; incorrect, not correct, wrong, no, false,
not equivalent, inequivalent -> incorrect.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
VERDICT_KEYS = ("judgement", "judgment", "verdict", "is_correct", "correct", "correctness", "equivalent",
                "is_equivalent", "decision")
_RATIONALE_KEYS = ("rationale", "reasoning", "reason", "explanation", "analysis")
VERDICT_WORDS: dict[str, bool] = {
    "correct": True, "yes": True, "true": True, "right": True, "equivalent": True,
    "incorrect": False, "not correct": False, "wrong": False, "no": False, "false": False,
    "not equivalent": False, "inequivalent": False,
}
_KEY_NAMES = "|".join(k for k in VERDICT_KEYS if k != "correct" and k != "equivalent")
# A quoted value must close its field ("," "}" or the end of the line follows); an unquoted one runs to the line's end.
_KEY_VALUE = re.compile(rf"""\b(?:{_KEY_NAMES})["'*_]*\s*[:=]\s*(?:"(?P<dq>[^"\n]*)"(?=\s*(?:[,}}]|$))"""
                        rf"""|'(?P<sq>[^'\n]*)'(?=\s*(?:[,}}]|$))|(?P<bare>[^"'\n,}}][^\n,}}]*))""",
                        re.IGNORECASE | re.MULTILINE)


def verdict_word(text: str) -> bool | None:
    """The verdict a string states when it is exactly a verdict word (see the module docstring), else None."""
    word = text.strip().strip("*_`\"' \t").strip()
    if word[-1:] in (".", "!"):
        word = word[:-1].strip("*_`\"' \t")
    return VERDICT_WORDS.get(" ".join(word.split()).lower())


def _value_verdict(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return verdict_word(value)
    return None


def _agreed(verdicts: list[bool | None]) -> bool | None:
    """The one verdict all of ``verdicts`` state; None when any is unreadable or they disagree."""
    if not verdicts or any(v is None for v in verdicts) or len(set(verdicts)) != 1:
        return None
    return verdicts[0]


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


def _strip_reasoning(text: str) -> str:
    if "</think>" in text.lower():  # the template opened <think> in the prompt: only what follows is the reply
        text = text[text.lower().rindex("</think>") + len("</think>"):]
    return _THINK.sub("", text).strip()


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """``(verdict, rationale)`` from a judge reply; verdict is None when the reply holds no clear verdict.

    >>> parse_verdict('```json\\n{"rationale": "same city", "judgement": "correct"}\\n```')
    (True, 'same city')
    >>> parse_verdict("Incorrect.")[0]
    False
    >>> parse_verdict("The correct answer is Lyon, not Paris.")[0] is None
    True
    """
    text = _strip_reasoning(text or "")
    if not text:
        return None, ""
    keyed = []
    for obj in _json_objects(text):
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        if any(k in lowered for k in VERDICT_KEYS):
            keyed.append(lowered)
    if keyed:
        verdict = _agreed([_value_verdict(obj[k]) for obj in keyed for k in VERDICT_KEYS if k in obj])
        rationale = next((str(keyed[-1][k]) for k in _RATIONALE_KEYS if k in keyed[-1]), "")
        return verdict, rationale if verdict is not None else text
    pairs = [m["dq"] if m["dq"] is not None else m["sq"] if m["sq"] is not None else m["bare"]
             for m in _KEY_VALUE.finditer(text)]
    if pairs:
        return _agreed([verdict_word(v) for v in pairs]), text
    lines = [verdict_word(line) for line in text.splitlines() if line.strip()]
    return _agreed([v for v in lines if v is not None]), text
