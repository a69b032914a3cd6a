"""Termination signals that unwind a long job like Ctrl-C, and stay pending until they have.

``afm quickstart`` turns SIGTERM (kill, timeout, a job scheduler) into ``SystemExit(128 + signal)`` so its ``with``
blocks stop the demo servers and the runs it started. Python runs a signal handler at whatever bytecode the main
thread is executing, and that can be a finalizer (an event loop's ``__del__`` called by the garbage collector),
where Python prints "Exception ignored in ..." and drops the exception: the signal was lost and the run went on to
the end. :func:`exit_on_signal` therefore also records the signal, and :func:`check` (called between stages) raises
it again. :func:`stop_if_interrupted` does the same for an in-process tool (``afm data distill``, ``afm eval
run``) that caught the signal itself and returned 128 + its number.
"""

from __future__ import annotations

import signal
from typing import Any

_PENDING: list[int] = []


def exit_on_signal(signum: int, _frame: Any) -> None:
    """Signal handler: record the signal and raise ``SystemExit(128 + signum)``."""
    _PENDING.append(signum)
    raise SystemExit(128 + signum)


def install(*signals: signal.Signals) -> None:
    """Make each signal (default: SIGTERM) unwind the process through :func:`exit_on_signal`."""
    for sig in signals or (signal.SIGTERM,):
        signal.signal(sig, exit_on_signal)


def check() -> None:
    """Raise ``SystemExit(128 + signal)`` when a signal arrived and its exit was swallowed on the way."""
    if _PENDING:
        raise SystemExit(128 + _PENDING[0])


def stop_if_interrupted(code: int | None) -> None:
    """A tool's exit status of 128 + SIGINT or SIGTERM (it was interrupted): stop here with the same status."""
    if code is not None and code - 128 in (signal.SIGINT, signal.SIGTERM):
        _PENDING.append(code - 128)
        raise SystemExit(code)
