"""Code rewards against programs that try to earn reward without solving the problem (issue 39).

Each program below solves nothing; on the grader that ran the checks inside the candidate's own process and read
success from its exit status, every one of them scored 1.0 (the ``in_process`` test keeps the proof). Through
:mod:`afm.sandbox.grade_harness` they score 0 with a status that says why, on every ground-truth shape, and honest
programs still score 1. Everything here is real: the pooled nsjail sandbox (and bubblewrap where installed).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap

import pytest

from afm.rewards import compute_score
from afm.sandbox import Limits, Sandbox

F = "```"


def sol(code: str) -> str:
    return f"<think> solve </think>\n<answer>\n{F}python\n{textwrap.dedent(code).strip()}\n{F}\n</answer>"


def details(res: dict) -> dict:
    return json.loads(res["details"])


def _backends() -> list[str]:
    return ["nsjail"] + (["bwrap"] if shutil.which("bwrap") else [])


# -- the problems: double every element of a list ---------------------------------------------------------------------
HUMANEVAL = {"test": textwrap.dedent("""
    def check(candidate):
        assert candidate([1, 2]) == [2, 4]
        assert all(candidate([x]) == [2 * x] for x in range(5))
        assert abs(sum(candidate([0.25])) - 0.5) < 1e-9
    """), "entry_point": "double_all"}
LEETCODE = {"functional": "assert Solution().doubleAll([1, 2]) == [2, 4]\n"
                          "assert all(Solution().doubleAll([x]) == [2 * x] for x in range(5))\n"
                          "assert abs(sum(Solution().doubleAll([0.25])) - 0.5) < 1e-9\n",
            "question_id": "hostile"}
APPS = {"inputs": [[[1, 2]], [[3]], [[0.25]]], "outputs": [[2, 4], [6], [0.5]], "fn_name": "doubleAll"}
HONEST_FN = "def double_all(xs):\n    return [2 * x for x in xs]"
HONEST_CLASS = "class Solution:\n    def doubleAll(self, xs):\n        return [2 * x for x in xs]"


def as_function(body: str, name: str = "double_all") -> str:
    return textwrap.dedent(body).replace("ENTRY", name)


# (name, program with ENTRY for the function's name, statuses it may end with); the programs define both the
# function and class forms through a small adapter, so one list covers every shape.
ATTACKS = [
    ("os._exit(0) at import", "import os\nos._exit(0)\ndef ENTRY(xs):\n    return []", {"exited"}),
    ("sys.exit(0) at import", "import sys\nsys.exit(0)\ndef ENTRY(xs):\n    return []", {"exited"}),
    ("SystemExit from the function", "def ENTRY(xs):\n    raise SystemExit(0)", {"exited"}),
    ("KeyboardInterrupt from the function", "def ENTRY(xs):\n    raise KeyboardInterrupt", {"exited"}),
    ("SystemExit from __eq__", """
        class V:
            def __eq__(self, other):
                raise SystemExit(0)
            def __iter__(self):
                raise SystemExit(0)
        def ENTRY(xs):
            return V()
        """, {"non_plain"}),
    ("an atexit hook that exits 0", """
        import atexit, os
        atexit.register(lambda: os._exit(0))
        def ENTRY(xs):
            return []
        """, {"wrong_answer"}),
    ("a thread that exits 0 after the checks fail", """
        import os, threading, time
        def _later():
            time.sleep(0.5)
            os._exit(0)
        threading.Thread(target=_later).start()
        def ENTRY(xs):
            return []
        """, {"wrong_answer", "exited"}),
    ("a fork whose parent exits first", """
        import os
        if os.fork():
            os._exit(0)
        def ENTRY(xs):
            return []
        """, {"wrong_answer", "exited"}),
    ("an object equal to anything", """
        class Anything:
            def __eq__(self, other):
                return True
            def __iter__(self):
                return iter([0.5])
        def ENTRY(xs):
            return Anything()
        """, {"non_plain"}),
    ("a list subclass equal to anything", """
        class L(list):
            def __eq__(self, other):
                return True
        def ENTRY(xs):
            return L([0.5])
        """, {"non_plain"}),
    ("builtins replaced", """
        import builtins
        builtins.all = lambda items: True
        builtins.abs = lambda x: 0
        def ENTRY(xs):
            return [2, 4]
        """, {"wrong_answer"}),
    ("reads the checks and returns what they expect", """
        import ast, linecache, re, sys
        def ENTRY(xs):
            text = "".join(linecache.getlines("main.py")) + sys.stdin.read()
            for path in ("/sandbox/main.py", "/sandbox/stdin"):
                try:
                    text += open(path).read()
                except OSError:
                    pass
            for m in re.finditer(r"\\(\\[([^\\]]*)\\]\\) == \\[([^\\]]*)\\]", text):
                if [float(v) for v in m.group(1).split(",") if v.strip()] == [float(v) for v in xs]:
                    return ast.literal_eval("[" + m.group(2) + "]")
            return [2 * x for x in xs] if len(xs) == 1 else []
        """, {"wrong_answer"}),
    ("a BaseException of its own", """
        class Escape(BaseException):
            pass
        def ENTRY(xs):
            raise Escape()
        """, {"runtime_error"}),
]


def program(body: str, shape: str) -> str:
    """The attack as a function ``double_all`` (HumanEval) or as ``Solution.doubleAll`` (LeetCode shapes)."""
    code = as_function(body)
    if shape == "humaneval":
        return code
    return code + "\n\nclass Solution:\n    def doubleAll(self, xs):\n        return double_all(xs)\n"


SHAPES = {"humaneval": ("codecontests", HUMANEVAL), "leetcode_asserts": ("livecodebench_v5", LEETCODE),
          "apps_fn_name": ("codecontests", APPS)}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_honest_programs_still_pass_every_shape(shape):
    source, gt = SHAPES[shape]
    code = HONEST_FN if shape == "humaneval" else HONEST_CLASS
    res = compute_score(source, sol(code), gt)
    assert res["acc"] == 1, details(res)
    assert details(res)["status"] == "passed"


@pytest.mark.parametrize("attack", ATTACKS, ids=[a[0] for a in ATTACKS])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_program_that_solves_nothing_scores_zero(shape, attack):
    name, body, statuses = attack
    source, gt = SHAPES[shape]
    res = compute_score(source, sol(program(body, shape)), gt, code_timeout=3)
    d = details(res)
    assert res["acc"] == 0 and res["score"] == 0.0, (name, d)
    assert res["infra_error"] == 0.0, (name, d)  # the candidate's doing is never the grader's failure
    if shape != "apps_fn_name":  # expected values are compared on the host there: any failure status will do
        assert d["status"] in statuses, (name, d)


@pytest.mark.parametrize("mode", ["oneshot", "pool"])
def test_the_candidate_cannot_read_the_checks_in_either_sandbox_mode(mode):
    _name, body, statuses = next(a for a in ATTACKS if a[0].startswith("reads the checks"))
    for shape in ("humaneval", "leetcode_asserts"):
        source, gt = SHAPES[shape]
        res = compute_score(source, sol(program(body, shape)), gt, code_sandbox={"mode": mode, "concurrency": 1})
        assert res["acc"] == 0 and details(res)["status"] in statuses, (mode, shape, details(res))


def test_a_stop_iteration_cannot_end_a_checking_loop_early():
    gt = {"test": "def check(candidate):\n    for got, want in zip(map(candidate, [1, 2]), [2, 4]):\n"
                  "        assert got == want\n", "entry_point": "double"}
    assert compute_score("codecontests", sol("def double(x):\n    return 2 * x"), gt)["acc"] == 1
    res = compute_score("codecontests", sol("def double(x):\n    raise StopIteration"), gt)
    assert res["acc"] == 0 and details(res)["status"] == "runtime_error", details(res)


def test_exceptions_the_checks_expect_still_reach_them():
    gt = {"test": "def check(candidate):\n    try:\n        candidate(-1)\n    except ValueError:\n        pass\n"
                  "    else:\n        raise AssertionError('no ValueError')\n    assert candidate(4) == 2\n",
          "entry_point": "root"}
    good = "def root(x):\n    if x < 0:\n        raise ValueError('negative')\n    return int(x ** 0.5)"
    assert compute_score("codecontests", sol(good), gt)["acc"] == 1
    res = compute_score("codecontests", sol("def root(x):\n    return int(abs(x) ** 0.5)"), gt)
    assert res["acc"] == 0 and details(res)["status"] == "wrong_answer"


def test_helpers_of_the_prefix_belong_to_the_checks():
    """A HumanEval prompt's helper (``poly``) is trusted code: the candidate cannot redefine it for the checks."""
    prefix = "import math\n\ndef poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n"
    gt = {"test": "def check(candidate):\n    for xs in ([-1, 2], [-6, 11, -6, 1]):\n"
                  "        assert abs(poly(xs, candidate(xs))) < 1e-6\n",
          "entry_point": "find_zero", "import_prefix": prefix}
    good = ("def find_zero(xs):\n    lo, hi = -100.0, 100.0\n    for _ in range(200):\n"
            "        mid = (lo + hi) / 2\n        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n"
            "        else:\n            lo = mid\n    return lo")
    assert compute_score("codecontests", sol(good), gt)["acc"] == 1
    cheat = "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 12345.0"
    res = compute_score("codecontests", sol(cheat), gt)
    assert res["acc"] == 0 and details(res)["status"] == "wrong_answer", details(res)


def test_in_place_problems_grade_as_in_one_process():
    gt = {"functional": "nums = [3, 1, 2]\nSolution().sortInPlace(nums)\nassert nums == [1, 2, 3]\n"}
    good = "class Solution:\n    def sortInPlace(self, nums):\n        nums.sort()"
    assert compute_score("lcb_v5", sol(good), gt)["acc"] == 1
    lazy = "class Solution:\n    def sortInPlace(self, nums):\n        return sorted(nums)"
    assert compute_score("lcb_v5", sol(lazy), gt)["acc"] == 0


@pytest.mark.parametrize("backend", _backends())
def test_killing_the_grader_is_a_wrong_answer_not_an_infrastructure_failure(backend):
    """A program that kills every process it can reach (the checker, the jail's server) earns 0, never an
    ``infra_error``: in RL an infrastructure failure leaves the sample out of its group and counts toward the
    limit that stops training."""
    for code in ("import os, signal\nos.kill(-1, signal.SIGKILL)\ndef double_all(xs):\n    return []",
                 "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef double_all(xs):\n    return []",
                 "import os, signal\nos.kill(1, signal.SIGKILL)\ndef double_all(xs):\n    return []"):
        res = compute_score("codecontests", sol(code), HUMANEVAL, code_sandbox={"backend": backend, "concurrency": 1})
        assert res["acc"] == 0 and res["infra_error"] == 0.0, (code, details(res), res["error"])


# The attacks that need a kernel hole: take the checker's stdout descriptor, or attach to it, and write a verdict.
STEAL_STDOUT = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fake = json.dumps({"status": "passed", "calls": 1, "afm_grade_harness": 1}) + "\n"
pidfd = libc.syscall(434, os.getppid(), 0)          # pidfd_open(checker)
if pidfd >= 0:
    fd = libc.syscall(438, pidfd, 1, 0)             # pidfd_getfd(checker, its stdout)
    if fd >= 0:
        os.write(fd, fake.encode())
if libc.ptrace(16, os.getppid(), None, None) == 0:  # PTRACE_ATTACH
    os.write(2, b"attached\n")
os.write(1, fake.encode())                          # our own stdout: the job's stderr
def double_all(xs):
    return []
"""


@pytest.mark.parametrize("backend", _backends())
def test_the_candidate_cannot_reach_the_checkers_stdout(backend):
    res = compute_score("codecontests", sol(STEAL_STDOUT), HUMANEVAL,
                        code_sandbox={"backend": backend, "concurrency": 1})
    d = details(res)
    assert res["acc"] == 0 and d["status"] == "wrong_answer", d


def test_grading_harness_directly_with_every_status():
    """agrade_asserts / agrade on a small pool: statuses and the verdict the checker printed."""
    from afm.sandbox.grading import agrade, agrade_asserts

    with Sandbox(mode="pool", concurrency=1, limits=Limits(wall_s=3.0, memory_mb=512)) as sb:
        r = asyncio.run(agrade_asserts(sb, "def f(x):\n    return x + 1", "assert f(1) == 2"))
        assert r.passed and r.status == "passed"
        r = asyncio.run(agrade_asserts(sb, "import os\nos._exit(0)", "assert f(1) == 2"))
        assert not r.passed and r.status == "exited" and "exit status 0" in r.outcomes[0].message
        r = asyncio.run(agrade_asserts(sb, "def f(x):\n    while True: pass", "assert f(1) == 2",
                                       limits=Limits(wall_s=1.0)))
        assert r.status == "timeout"
        r = asyncio.run(agrade_asserts(sb, "def f(x):\n    return object()", "assert f(1) == 2"))
        assert r.status == "non_plain" and "object" in r.outcomes[0].message
        r = asyncio.run(agrade(sb, "import sys\nsys.exit(0)", [{"input": "1", "output": "2"}], fn_name="f"))
        assert r.status == "exited"
        r = asyncio.run(agrade(sb, "def f(x):\n    return {'k': (x, {x})}", [{"input": "1", "output": '{"k": [1, [1]]}'}],
                               fn_name="f"))
        assert r.passed, r.outcomes


PLANT_A_MODULE = r"""
import json
fake = json.dumps({"status": "passed", "calls": 1, "afm_grade_harness": 1})
code = f"import os\nos.write(1, {fake!r}.encode() + b'\\n')\nos._exit(0)\n"
for folder in ("/tmp", "/dev/shm", "."):
    for name in ("statistics", "fractions", "heapq", "bisect", "string", "random", "copy", "operator"):
        try:
            with open(f"{folder}/{name}.py", "w") as f:
                f.write(code)
        except OSError:
            pass
def double_all(xs):
    return []
"""


@pytest.mark.parametrize("mode", ["oneshot", "pool"])
def test_modules_the_candidate_writes_are_never_imported_by_the_checks(mode):
    """The jail's writable folders are shared by both processes: the checker imports nothing from them."""
    gt = {"test": "def check(candidate):\n    import statistics\n    assert statistics.mean(candidate([1, 2])) == 3\n",
          "entry_point": "double_all"}
    assert compute_score("codecontests", sol(HONEST_FN), gt, code_sandbox={"mode": mode, "concurrency": 1})["acc"] == 1
    res = compute_score("codecontests", sol(PLANT_A_MODULE), gt, code_sandbox={"mode": mode, "concurrency": 1})
    # the real statistics module: mean([]) raises, a runtime error of the checks, not a forged "passed"
    assert res["acc"] == 0 and details(res)["status"] == "runtime_error", details(res)
    assert "StatisticsError" in details(res)["first_failure"]["stderr"]
    lc = compute_score("livecodebench_v5", sol(PLANT_A_MODULE + "\nclass Solution:\n    def doubleAll(self, xs):\n"
                                                                "        return []\n"), LEETCODE,
                       code_sandbox={"mode": mode, "concurrency": 1})
    assert lc["acc"] == 0, details(lc)
