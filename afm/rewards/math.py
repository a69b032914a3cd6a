"""Math answers checked with Math-Verify in worker processes, with timeouts that work from any thread.

Math-Verify's own timeouts use ``signal.alarm``, which only works in the main thread, and a sympy hang can block
the caller for minutes. So verification runs in a small pool of persistent worker processes
(:mod:`afm.rewards._math_worker`): each request gets a SIGALRM deadline inside the worker (the worker's main
thread) and a hard deadline in the caller; a worker that misses the hard deadline is killed and replaced on the
next call. Callers may be any thread or an asyncio task (through ``asyncio.to_thread``).

**Everything that reads the policy's answer runs under that deadline**: afm's own reading
(:mod:`afm.rewards.math_forms`) runs in the worker too, before Math-Verify. In the caller only two linear-time
steps remain: the caps below and the string short-cut. An answer longer than :data:`MAX_ANSWER_CHARS` or with
brackets nested deeper than :data:`MAX_NESTING` is not read at all: it scores 0 with ``method``
``answer_too_large`` (``path`` ``too_large``). An answer that runs out of the deadline scores 0 with ``method``
``grader_timeout`` (``error`` says which deadline).

The prediction is the body of the last ``<answer>``. Answers without ``\\boxed{}`` or ``$`` are wrapped in
``\\boxed{}`` before parsing (Math-Verify only extracts a bare ``[0,1)`` or ``\\{1,2\\}`` in math mode). Escaped
dollars (``\\$18.90``) are currency, not math mode, and are dropped. A gold is also read boxed as written (the
original scorer's only form, so afm never scores a real gold below it); a gold of several ``$...$`` pieces
(``$221,$8$``) is read only boxed, as one answer. An inequality in one variable (``3 < x \\le 4``) also counts as
its interval (``(3,4]``), on either side. A gold answer equal to the prediction as a string (after removing ``$``,
``\\boxed{}`` and spaces) short-cuts the worker.

Otherwise, in the worker, both answers are first read by :mod:`afm.rewards.math_forms`: number forms Math-Verify
misreads (``58\\,500``, ``45°``, ``\\mathrm{i}``, ``0.\\overline{4}``, ``3.2e-4``) are rewritten, upper-case symbols
are renamed so that Math-Verify's lower-casing cannot merge ``R`` and ``r``, and a different base subscript or a
different unit settles the pair as wrong without Math-Verify (``path`` ``forms``, ``rule`` says which).

Env: ``AFM_MATH_TIMEOUT`` (seconds per verification, default 10), ``AFM_MATH_WORKERS`` (pool size, default
``min(4, cpu_count)``).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from afm.rewards.errors import RewardConfigError
from afm.rewards.ground_truth import GroundTruth
from afm.trajectory import last_answer

_BOXED = re.compile(r"^\\boxed\{(.*)\}$", re.DOTALL)
_BRACKETS = re.compile(r"[()\[\]{}]")

MAX_ANSWER_CHARS = 10_000
"""The longest math answer (the body of the last ``<answer>``) that is read; a longer one scores 0 as
``answer_too_large``. Contest answers are a few dozen characters, a whole boxed derivation a few thousand."""

MAX_NESTING = 100
"""The deepest nesting of ``()``, ``[]`` and ``{}`` in a math answer that is read (``\\frac{\\frac{1}{2}}{3}`` is 2);
deeper ones score 0 as ``answer_too_large``. Honest answers stay below 20; Math-Verify's parser recurses per level."""


@dataclass(frozen=True)
class MathVerdict:
    """Outcome of one verification; ``path`` is ``exact`` (string short-cut), ``forms`` (settled by
    :func:`afm.rewards.math_forms.decide`, ``rule`` says how) or ``verify`` (Math-Verify)."""

    correct: bool
    parsed: str = ""
    error: str = ""
    timed_out: bool = False
    path: str = "verify"  # also ``too_large``: over a cap, not read
    rule: str = ""
    infra: bool = False  # no worker could be started: the grader failed, not the answer


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``()``, ``[]`` and ``{}`` in ``text`` (a closer without an opener is skipped)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        if m.group(0) in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def answer_too_large(pred: str) -> str:
    """Why ``pred`` is over a cap (:data:`MAX_ANSWER_CHARS`, :data:`MAX_NESTING`), or ``""``; linear time."""
    if len(pred) > MAX_ANSWER_CHARS:
        return f"answer_too_large: {len(pred):,} characters; a math answer is read up to {MAX_ANSWER_CHARS:,}"
    if sum(pred.count(c) for c in "([{") > MAX_NESTING:  # cheap test first: few brackets cannot nest deep
        depth = nesting_depth(pred)
        if depth > MAX_NESTING:
            return f"answer_too_large: brackets nested {depth:,} deep; a math answer is read up to {MAX_NESTING}"
    return ""


def _canonical(text: str) -> str:
    text = text.strip().strip("$").strip()
    m = _BOXED.match(text)
    if m:
        text = m.group(1)
    return "".join(text.split())


def default_timeout() -> float:
    """Seconds per verification from ``AFM_MATH_TIMEOUT`` (default 10)."""
    return float(os.environ.get("AFM_MATH_TIMEOUT", "10"))


class _Worker:
    """One worker process and its line-based pipe protocol."""

    def __init__(self, startup_timeout: float = 120.0) -> None:
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError("math scoring needs math-verify: pip install 'afm[eval]'")
        self.proc = subprocess.Popen([sys.executable, "-m", "afm.rewards._math_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        self._buf = b""
        try:
            self._read_line(time.monotonic() + startup_timeout)
        except BaseException:
            self.kill()
            raise

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read_line(self, deadline: float) -> dict[str, Any]:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError(f"math-verify worker exited with code {self.proc.wait()}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def request(self, payload: dict[str, Any], deadline: float) -> dict[str, Any]:
        data = memoryview((json.dumps(payload) + "\n").encode())
        fd = self.proc.stdin.fileno()
        while data:
            data = data[os.write(fd, data):]
        return self._read_line(deadline)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class MathVerifier:
    """A pool of Math-Verify worker processes, safe to share between threads.

    Args:
        workers: pool size (``AFM_MATH_WORKERS`` or ``min(4, cpu_count)``); workers start on first use.
        timeout: seconds per verification (``AFM_MATH_TIMEOUT`` or 10), enforced inside the worker.
        grace: extra seconds before the caller gives up on a worker and kills it.
    """

    def __init__(self, workers: int | None = None, timeout: float | None = None, grace: float = 2.0) -> None:
        env_workers = os.environ.get("AFM_MATH_WORKERS")
        self.size = workers or (int(env_workers) if env_workers else min(4, os.cpu_count() or 1))
        if self.size < 1:
            raise RewardConfigError(f"MathVerifier needs at least one worker, got {self.size}")
        self.timeout = timeout if timeout is not None else default_timeout()
        self.grace = grace
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._count = 0
        self._pid = os.getpid()

    def _acquire(self) -> _Worker:
        with self._cond:
            if self._pid != os.getpid():  # forked: the parent's workers and pipes are not ours
                self._idle, self._count, self._pid = [], 0, os.getpid()
            while True:
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive:
                        return worker
                    worker.kill()
                    self._count -= 1
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return _Worker()
        except BaseException:
            self._release(None)
            raise

    def _release(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is not None and worker.alive:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()

    def verify(self, golds: Sequence[str], pred: str, timeout: float | None = None) -> MathVerdict:
        """Whether ``pred`` equals any of ``golds`` (LaTeX or plain); never raises for bad math input.

        Only the caps and the string short-cut run here (both linear); afm's reading and Math-Verify run in a
        worker under the deadline (see the module docstring).
        """
        too_large = answer_too_large(pred)
        if too_large:
            return MathVerdict(False, error=too_large, path="too_large")
        canon = _canonical(pred)
        if canon and any(canon == _canonical(g) for g in golds):
            return MathVerdict(True, pred.strip(), path="exact")
        limit = self.timeout if timeout is None else float(timeout)
        try:
            worker = self._acquire()
        except (TimeoutError, EOFError, OSError) as exc:
            return MathVerdict(False, error=f"math-verify worker did not start: {exc or type(exc).__name__}",
                               infra=True)
        try:
            reply = worker.request({"golds": [str(g) for g in golds], "pred": pred, "timeout": limit},
                                   time.monotonic() + limit + self.grace)
        except TimeoutError:
            worker.kill()
            return MathVerdict(False, error=f"math-verify gave no answer within {limit + self.grace:g}s; "
                                            "worker killed", timed_out=True)
        except (EOFError, OSError, ValueError) as exc:
            worker.kill()
            return MathVerdict(False, error=f"math-verify worker failed: {exc}")
        finally:
            self._release(worker)
        return MathVerdict(bool(reply["correct"]), reply.get("parsed", ""), reply.get("error", ""),
                           bool(reply.get("timed_out")), reply.get("path", "verify"), reply.get("rule", ""))

    def worker_pids(self) -> list[int]:
        """PIDs of the idle workers (for monitoring and tests)."""
        with self._cond:
            return [w.proc.pid for w in self._idle if w.alive]

    def close(self) -> None:
        """Stop the idle workers (busy ones stop when their caller releases them to a closed pool)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        if self._pid == os.getpid():
            for worker in idle:
                worker.kill()


_default: MathVerifier | None = None
_default_lock = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process-wide verifier used by the registry's math scorer."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifier()
            atexit.register(_default.close)
        return _default


def math_equal(gold: str | Sequence[str], pred: str, timeout: float | None = None) -> bool:
    """Convenience: is ``pred`` mathematically equal to ``gold`` (or to one of several golds)?"""
    golds = [gold] if isinstance(gold, str) else list(gold)
    return default_verifier().verify(golds, pred, timeout).correct


def score(solution_str: str, gt: GroundTruth, *, data_source: str, extra_info: dict[str, Any],
          math_timeout: float | None = None, **_: Any) -> dict[str, Any]:
    """Registry scorer: Math-Verify of the last ``<answer>`` against the gold answers.

    ``method`` is ``math_verify``, or ``answer_too_large`` (over a cap, not read) or ``grader_timeout`` (the
    deadline ran out), both with acc 0.
    """
    pred = last_answer(solution_str)
    if not pred:
        return {"acc": 0.0, "pred": "", "method": "no_answer"}
    verdict = default_verifier().verify(gt.targets, pred, math_timeout)
    method = "answer_too_large" if verdict.path == "too_large" else (
        "grader_timeout" if verdict.timed_out else "math_verify")
    return {"acc": float(verdict.correct), "pred": pred, "method": method, "error": verdict.error,
            "infra_error": verdict.infra,
            "details": {"parsed": verdict.parsed, "path": verdict.path, "timed_out": verdict.timed_out,
                        **({"rule": verdict.rule} if verdict.rule else {})}}
