"""Choosing the sandbox backend and sharing sandboxes: the fallback from nsjail to bubblewrap is logged with
nsjail's failure, and the code rewards' shared sandbox follows each call's ``code_sandbox`` options."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from afm.rewards.code import shared_sandbox
from afm.sandbox.backends import BwrapBackend, make_backend


def executable(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_fallback_to_bubblewrap_warns_with_nsjails_reason(tmp_path, monkeypatch, caplog):
    # An nsjail that cannot create namespaces (as in an unprivileged container) and a bubblewrap that can; both
    # stand-in binaries, because this machine's real nsjail works (the selection is what is under test).
    nsjail = executable(tmp_path / "nsjail", "echo 'clone(CLONE_NEWUSER) failed: Operation not permitted' >&2; exit 1")
    executable(tmp_path / "bwrap", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="afm.sandbox.backends"):
        backend = make_backend("auto", nsjail_path=str(nsjail))
    assert isinstance(backend, BwrapBackend)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "using bubblewrap because nsjail cannot run here" in warnings[0] and "no seccomp filter" in warnings[0]
    assert "clone(CLONE_NEWUSER) failed: Operation not permitted" in warnings[0] and "(exit 1)" in warnings[0]
    described = backend.describe()
    assert described["seccomp"] is False
    assert "Operation not permitted" in described["nsjail_unavailable"][0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="afm.sandbox.backends"):
        make_backend("auto", nsjail_path=str(nsjail))
    assert not caplog.records  # said once per process and cause, not per sandbox
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="afm.sandbox.backends"):
        assert isinstance(make_backend("bwrap"), BwrapBackend)  # asked for by name: nothing to warn about
    assert not caplog.records


def test_code_reward_sandbox_is_keyed_by_its_config():
    slow = {"mode": "oneshot", "concurrency": 1, "limits": {"wall_s": 7.5, "memory_mb": 512}}
    fast = {"mode": "oneshot", "concurrency": 1, "limits": {"wall_s": 1.25, "memory_mb": 512}}
    a, b = shared_sandbox(slow), shared_sandbox(fast)
    try:
        assert a is not b
        assert (a.config.limits.wall_s, b.config.limits.wall_s) == (7.5, 1.25)
        assert shared_sandbox(dict(slow)) is a  # the same options share one sandbox
        # Each really runs with its own limits: 2 s of sleep passes under 7.5 s and times out under 1.25 s.
        program = "import time; time.sleep(2); print('done')"
        assert a.run(program).stdout == "done\n"
        assert b.run(program).status == "timeout"
    finally:
        a.close()
        b.close()
