"""Math-Verify worker process: reads JSON requests on stdin, answers one JSON line each on stdout.

Request ``{"golds": [str], "pred": str, "timeout": float}``; reply ``{"correct": bool, "parsed": str,
"error": str, "timed_out": bool}``. Running in its own process gives Math-Verify a main thread, so a SIGALRM deadline
can interrupt sympy; the parent kills the process when even that does not return (a hang in C code).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from typing import Any


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


def _check(golds: list[str], pred: str) -> tuple[bool, str]:
    from math_verify import parse, verify

    parsed = parse(_wrap(pred), parsing_timeout=None) or parse(pred, parsing_timeout=None)
    if not parsed:
        return False, ""
    shown = str(parsed[0])
    for gold in golds:
        gold_parsed = parse(_wrap(gold), parsing_timeout=None) or parse(gold, parsing_timeout=None)
        if gold_parsed and verify(gold_parsed, parsed, timeout_seconds=None):
            return True, shown
    return False, shown


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """Verify one request under a SIGALRM deadline."""
    timeout = float(request.get("timeout") or 0)
    if timeout > 0:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        correct, parsed = _check([str(g) for g in request["golds"]], str(request["pred"]))
        return {"correct": correct, "parsed": parsed, "error": "", "timed_out": False}
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
