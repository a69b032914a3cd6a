"""afm.common.exit_signals: a termination signal stops the run even when Python drops its SystemExit."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

from afm.common import exit_signals


@pytest.fixture(autouse=True)
def _no_pending(monkeypatch):
    monkeypatch.setattr(exit_signals, "_PENDING", [])


def test_a_signal_swallowed_in_a_finalizer_is_raised_again_by_check(monkeypatch):
    """Python runs a signal handler at whatever the main thread executes, a ``__del__`` included, and drops an
    exception raised there ("Exception ignored in ..."): the quickstart once ran to the end after a SIGTERM."""
    exit_signals.check()  # nothing pending: no-op

    class Finalized:
        def __del__(self):
            exit_signals.exit_on_signal(signal.SIGTERM, None)  # the handler, run inside a finalizer

    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    Finalized()
    gc.collect()
    assert [type(d.exc_value) for d in dropped] == [SystemExit]  # Python dropped the exit
    with pytest.raises(SystemExit) as exc:
        exit_signals.check()
    assert exc.value.code == 128 + signal.SIGTERM


def test_a_tool_that_was_interrupted_stops_the_caller_with_its_status():
    for code in (None, 0, 1, 2, 129):
        exit_signals.stop_if_interrupted(code)  # finished, failed, or not SIGINT/SIGTERM: the caller decides
    exit_signals.check()
    with pytest.raises(SystemExit) as exc:
        exit_signals.stop_if_interrupted(143)
    assert exc.value.code == 143
    with pytest.raises(SystemExit):
        exit_signals.check()  # and it stays pending for the next stage


def test_install_routes_the_signal_to_the_handler():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        exit_signals.install()
        assert signal.getsignal(signal.SIGTERM) is exit_signals.exit_on_signal
    finally:
        signal.signal(signal.SIGTERM, previous)
