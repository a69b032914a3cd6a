"""Math-Verify worker process: reads JSON requests on stdin, answers one JSON line each on stdout.

Request ``{"golds": [str], "pred": str, "timeout": float}`` (the answers as written); reply ``{"correct": bool,
"parsed": str, "error": str, "timed_out": bool, "path": "forms"|"verify", "rule": str}``. Running in its own
process gives Math-Verify a main thread, so a SIGALRM deadline can interrupt sympy; the parent kills the process
when even that does not return (a hang in C code).

Everything that reads the policy's answer runs here, under that deadline: afm's own reading
(:mod:`afm.rewards.math_forms`, which may settle the pair by base or unit) and then Math-Verify. An exception on an
odd answer (a parser's RecursionError, a sympy bug) is a wrong answer with ``error`` set; the worker keeps serving.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
from typing import Any

from afm.rewards.math_forms import decide, read_answer


class _Deadline(BaseException):
    """Raised by the alarm; a BaseException so that Math-Verify's ``except Exception`` blocks let it through."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Deadline


def _wrap(text: str) -> str:
    # A bare "\{1,2\}" or "[0,1)" is not extracted by Math-Verify unless it sits in math mode; \boxed{} also gives
    # it priority over stray numbers in the text.
    if "\\boxed" in text or "$" in text or "\\(" in text or "\\[" in text:
        return text
    return "\\boxed{" + text + "}"


def _no_currency(text: str) -> str:
    # "\\$18.90" is a dollar sign, not math mode: left in, it makes the whole answer look like LaTeX text that
    # Math-Verify cannot read (MATH500 rows 242, 459, 488 of the original's file).
    return text.replace("\\$", "")


_REL = {"\\leqslant": "<=", "\\geqslant": ">=", "\\leq": "<=", "\\geq": ">=", "\\le": "<=", "\\ge": ">=",
        "\\lt": "<", "\\gt": ">", "\u2264": "<=", "\u2265": ">=", "=<": "<=", "=>": ">="}
_CHAIN = re.compile(r"^(?P<a>[^<>=]+?)(?P<op1><=?|>=?)(?P<var>[A-Za-z])(?P<op2><=?|>=?)(?P<b>[^<>=]+)$")
_LEFT = re.compile(r"^(?P<var>[A-Za-z])(?P<op><=?|>=?)(?P<b>[^<>=]+)$")
_RIGHT = re.compile(r"^(?P<a>[^<>=]+?)(?P<op><=?|>=?)(?P<var>[A-Za-z])$")


def _strip_math(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
            text = text[len(left):-len(right)].strip()
            break
    m = re.fullmatch(r"\\boxed\{(.*)\}", text, re.DOTALL)
    return m.group(1).strip() if m else text


def inequality_interval(text: str) -> str | None:
    """The interval that an inequality in one variable describes (``3 < x \\le 4`` -> ``(3,4]``), else None.

    Contest graders accept either form for a solution set; Math-Verify reads an inequality as a relation, which
    never equals an interval.
    """
    body = _strip_math(text)
    for name in sorted(_REL, key=len, reverse=True):
        body = re.sub(re.escape(name) + (r"(?![A-Za-z])" if name[0] == "\\" else ""), _REL[name], body)
    body = "".join(body.split())
    m = _CHAIN.match(body)
    if m:
        a, b, op1, op2 = m["a"], m["b"], m["op1"], m["op2"]
        if op1[0] != op2[0]:
            return None  # "1 < x > 3" describes no interval
        if op1[0] == ">":  # "4 >= x > 3" is "3 < x <= 4"
            a, b, op1, op2 = b, a, op2.replace(">", "<"), op1.replace(">", "<")
        return ("[" if op1 == "<=" else "(") + f"{a},{b}" + ("]" if op2 == "<=" else ")")
    m = _LEFT.match(body) or _RIGHT.match(body)
    if not m:
        return None
    op = m["op"]
    bound = m.groupdict().get("b") or m.groupdict().get("a")
    var_first = "b" in m.groupdict()
    upper = (op[0] == "<") == var_first  # "x < 3" and "3 > x" bound x from above
    closed = op.endswith("=")
    if upper:
        return f"(-\\infty,{bound}" + ("]" if closed else ")")
    return ("[" if closed else "(") + f"{bound},\\infty)"


def _parses(text: str, *, gold: bool) -> list[list[Any]]:
    """Math-Verify parses of one answer; the answer matches when any of them verifies.

    The first parse of the wrapped or the raw text is the answer itself (the raw text only as a fallback: read
    raw, "8n^2+4n+1" yields its last number). Golds add the original scorer's form, always boxed, so afm never
    scores a real gold below it (OlympiadBench row 194 "$221,$8$" parses only that way). An inequality in one
    variable adds its interval.
    """
    from math_verify import parse

    text = _no_currency(text)
    out = []
    # A gold of several "$...$" pieces ("$69$,$84$", "$221,$8$") is one answer made of all of them; read as text,
    # Math-Verify keeps only the first piece, so such golds are read only in the boxed forms below.
    pieces = gold and text.count("$") > 2
    first = None if pieces else (parse(_wrap(text), parsing_timeout=None) or parse(text, parsing_timeout=None))
    if first:
        out.append(first)
    extra = []
    if gold:
        extra.append("\\boxed{" + text + "}")
        if "$" in text:
            extra.append("\\boxed{" + text.replace("$", "") + "}")
    interval = inequality_interval(text)
    if interval is not None:
        extra.append("\\boxed{" + interval + "}")
    for form in dict.fromkeys(extra):
        parsed = parse(form, parsing_timeout=None)
        if parsed:
            out.append(parsed)
    return out


def _check(golds: list[str], pred: str) -> tuple[bool, str]:
    from math_verify import verify

    preds = _parses(pred, gold=False)
    if not preds:
        return False, ""
    shown = str(preds[0][0])
    for gold in golds:
        for gold_parsed in _parses(gold, gold=True):
            if any(verify(gold_parsed, parsed, timeout_seconds=None) for parsed in preds):
                return True, shown
    return False, shown


def _judge(golds: list[str], pred: str) -> dict[str, Any]:
    """afm's reading first (math_forms): what Math-Verify misreads is rewritten, what it drops is compared; then
    Math-Verify on the golds that reading leaves open."""
    answer, readable, rules = read_answer(pred), [], []
    for gold in golds:
        gold_answer = read_answer(gold)
        settled, rule = decide(gold_answer, answer)
        if settled:
            return {"correct": True, "parsed": pred.strip(), "path": "forms", "rule": rule}
        if settled is None:
            readable.append(gold_answer.text)
        else:
            rules.append(rule)
    if not readable:
        return {"correct": False, "parsed": pred.strip(), "path": "forms", "rule": "; ".join(rules)}
    correct, parsed = _check(readable, answer.text)
    return {"correct": correct, "parsed": parsed, "path": "verify", "rule": ""}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """Read and verify one request under a SIGALRM deadline."""
    timeout = float(request.get("timeout") or 0)
    if timeout > 0:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        reply = _judge([str(g) for g in request["golds"]], str(request["pred"]))
        return {**reply, "error": "", "timed_out": False}
    except _Deadline:
        return {"correct": False, "parsed": "", "error": f"math-verify timed out after {timeout:g}s", "timed_out": True}
    except Exception as exc:  # a sympy bug on odd input: report it, keep serving
        return {"correct": False, "parsed": "", "error": f"{type(exc).__name__}: {exc}"[:500], "timed_out": False}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    # Timeouts are ours; keep Math-Verify from warning about them (or about parse failures) on every call.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the parent's terminal: the parent decides
    handle({"golds": ["\\frac{1}{2}"], "pred": "0.5", "timeout": 30})  # warm sympy up before the first real call
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = handle(json.loads(line))
        except _Deadline:  # the alarm fired between the work and clearing the timer
            reply = {"correct": False, "parsed": "", "error": "math-verify timed out", "timed_out": True}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
