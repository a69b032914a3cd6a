"""The grading harness that runs inside the jail: a checker process and a candidate process (standard library only).

The sandbox mounts it read-only in every jail (``/afm/afm_grade_harness.py``) and the pool's servers import it once;
the program of a grading execution is a call of :func:`main` with the candidate's source as a string literal
(:mod:`afm.sandbox.grading`); what to check arrives on stdin. It is importable on the host
too, for its codec and its tests, but afm never runs the candidate outside a jail.

Why two processes. When checks run in the candidate's own process and success is read from that process's exit
status, a candidate wins without solving anything: it ends the process with status 0 before the checks run
(``os._exit(0)``, ``sys.exit(0)`` at import, ``SystemExit`` from a method or from ``__eq__``, an ``atexit`` hook or a
thread that rewrites the status, a fork whose parent exits first), returns an object that equals anything, replaces
a builtin or a module function the checks use, or reads the checks (its caller's frame, the program file) and
returns the expected values. Here:

1. The job process becomes the **checker**. Before anything else it makes itself non-dumpable (no process of the
   same uid may ptrace it, read its memory or take its descriptors; nsjail's seccomp filter refuses ptrace as well)
   and ignores the signals that could divert its control flow, then forks the **candidate**.
2. The candidate has no descriptor of the job's stdout (its stdout and stderr are the job's stderr) and no stdin. It
   runs the candidate's source in a fresh ``__main__`` module and then serves calls over a pair of pipes: the
   checker sends arguments, the candidate answers with return values encoded as *plain data* (None, bool, int,
   float, str, bytes, complex, and lists, tuples, sets, frozensets and dicts of those, exact types only; NumPy
   scalars and arrays become their Python values). Anything else is refused (``non_plain``).
3. Only after the fork does the checker read stdin: the checks never exist in the candidate's memory. Its
   ``sys.path`` holds no folder the jail can write (a module the candidate leaves in ``/tmp`` is never imported by
   the checks). It decodes
   each answer into fresh Python objects of its own, runs the checks with its own builtins and modules, and is the
   only writer of the job's stdout, where it prints one JSON verdict line. The host reads nothing else as a verdict;
   the candidate's exit status means nothing.

A candidate that exits, raises ``SystemExit`` or ``KeyboardInterrupt``, dies, overruns its time, or answers with a
non-plain value fails with a status that says so (``exited``, ``timeout``, ``non_plain``); an exception it raises
reaches the checks as the same builtin exception type (so ``pytest.raises``-style checks keep working), except
flow-control exceptions (``StopIteration``, ``GeneratorExit``, ...) and the candidate's own classes, which arrive as
:class:`CandidateError`: a ``StopIteration`` from the candidate must not end a check's ``for`` loop early. Whatever
the checks do with an abort (even a bare ``except:``), the verdict stays failed.

Arguments that the checks pass to the candidate travel the same way; mutable ones (list, dict, set, bytearray
excepted) are updated in place in the checker when the candidate changed them, so "modify in place" problems grade
as they would in one process.

Modes (the stdin payload's ``mode``):

- ``asserts``: ``checks`` is Python (LiveCodeBench's inline asserts, a HumanEval ``check`` function followed by
  ``check(<entry point>)``); ``prelude`` is trusted code run in the checker first (LiveCodeBench's import header, a
  HumanEval ``import_prefix`` with helpers such as ``poly`` that the checks call). Names the checks use but do not
  define (``Solution``, the entry point) are bound to proxies of the candidate's objects. Passes when the checks
  run to their end, call the candidate at least once, and nothing aborted.
- ``calls``: ``tests`` is a list of argument lists (newline-separated JSON, LiveCodeBench's functional format) for
  ``fn_name`` (a method of a fresh ``Solution()`` per test when the candidate defines ``Solution``). The checker
  returns every result as JSON; the host compares them with the expected outputs, which never enter the jail.
"""

import ast
import builtins
import contextlib
import json
import linecache
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback
import types

PROTOCOL = 1
VERDICT_KEY = "afm_grade_harness"
MAX_MESSAGE = 64 << 20  # bytes of one encoded answer: a long list of ints fits, a flood does not
MAX_DEPTH = 200  # nesting of one plain value
MESSAGE_CHARS = 2000  # of a traceback or an exception message kept in the verdict
CANDIDATE_FILE = "main.py"
CHECKS_FILE = "checks.py"
_HEADER = struct.Struct(">Q")
# Exceptions the candidate raises that reach the checks as themselves; anything else is CandidateError.
PASS_THROUGH = ("ArithmeticError", "AssertionError", "AttributeError", "EOFError", "Exception", "FloatingPointError",
                "IndexError", "KeyError", "LookupError", "MemoryError", "NameError", "NotImplementedError", "OSError",
                "OverflowError", "RecursionError", "RuntimeError", "TypeError", "UnboundLocalError",
                "UnicodeError", "ValueError", "ZeroDivisionError")
# Signals that could divert the checker's control flow if the candidate sent them (SIGKILL/SIGSTOP cannot be
# ignored; they end or freeze it, and then there is no verdict: a failure).
_IGNORED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
            "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE", "SIGXFSZ", "SIGTRAP", "SIGWINCH", "SIGIO", "SIGURG")


# Imported once by the pool's servers with this module (both processes of a grading job start with them): what
# LiveCodeBench's header imports, which the checker's prelude and the candidate both run.
WARM_MODULES = ("typing", "collections", "functools", "itertools", "heapq", "bisect", "math", "string", "re",
                "random", "copy", "operator")


def warm():
    """Import :data:`WARM_MODULES` (called by the pool server after it loaded this module)."""
    for name in WARM_MODULES:
        with contextlib.suppress(Exception):
            __import__(name)


class NotPlain(Exception):
    """A value that is not plain data (see the module docstring), or an encoding that is not one."""


class CandidateError(Exception):
    """An exception the candidate raised whose type does not pass through as itself."""


# -- the plain-data codec ------------------------------------------------------------------------------------------
def encode(value, depth=0):
    """``value`` as JSON-able tagged data: scalars as themselves, containers as ``{tag: items}``; NotPlain when
    ``value`` holds anything but plain data (subclasses included: an exact ``list`` only)."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int or kind is float:
        return value
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        tag = {list: "l", tuple: "t", set: "s", frozenset: "f"}[kind]
        return {tag: [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if getattr(kind, "__module__", None) == "numpy" and hasattr(value, "tolist"):
        return encode(value.tolist(), depth)  # NumPy scalars and arrays: their Python values
    where = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    raise NotPlain(f"a {where}{kind.__qualname__} is not plain data")


_SCALARS = (bool, int, float, str)


def decode(data, depth=0):
    """The Python value of an :func:`encode` result, built from fresh builtin objects; NotPlain when malformed."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    if data is None or type(data) in _SCALARS:
        return data
    if type(data) is not dict or len(data) != 1:
        raise NotPlain("malformed value")
    ((tag, body),) = data.items()
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(body[0], body[1])
    if type(body) is not list:
        raise NotPlain("malformed value")
    if tag == "d":
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise NotPlain("malformed dict")
            key = decode(pair[0], depth + 1)
            try:
                out[key] = decode(pair[1], depth + 1)
            except TypeError:
                raise NotPlain("unhashable dict key") from None
        return out
    items = [decode(item, depth + 1) for item in body]
    try:
        if tag == "l":
            return items
        if tag == "t":
            return tuple(items)
        if tag == "s":
            return set(items)
        if tag == "f":
            return frozenset(items)
    except TypeError:
        raise NotPlain("unhashable set member") from None
    raise NotPlain(f"unknown tag {tag!r:.20}")


def to_json(value, depth=0):
    """A decoded value as JSON for LiveCodeBench-style comparison: tuples and sets as lists, dict keys as strings."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, (tuple, list, set, frozenset)):
        return [to_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, complex):
        return [value.real, value.imag]
    return value


# -- framing -------------------------------------------------------------------------------------------------------
class _Gone(Exception):
    """The other end closed the pipe (its process ended)."""


class _Late(Exception):
    """No message before the deadline."""


class _TooLarge(Exception):
    """A message over MAX_MESSAGE."""


def _send(fd, obj):
    data = json.dumps(obj, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd, n, deadline):
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise _Late()
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise _Gone()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(fd, deadline=None):
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    if size > MAX_MESSAGE:
        raise _TooLarge(size)
    return json.loads(_read_exact(fd, size, deadline).decode("utf-8", "surrogatepass"))


def _clip(text):
    text = str(text)
    return text if len(text) <= MESSAGE_CHARS else "…" + text[-MESSAGE_CHARS:]


# -- the candidate process -----------------------------------------------------------------------------------------
def _describe(exc):
    return {"type": type(exc).__name__, "builtin": type(exc).__module__ == "builtins",
            "message": _clip("".join(traceback.format_exception_only(type(exc), exc)).strip())}


def _traceback(exc):
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CANDIDATE_FILE:
        tb = tb.tb_next  # start at the candidate's own code
    return _clip("".join(traceback.format_exception(type(exc), exc, tb)))


def _candidate(source, req, rep, signals):
    """Become the candidate: load ``source``, then answer the checker's requests until it kills us."""
    for sig, handler in signals.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the checks arrive on the job's stdin, which the checker reads after this fork
    os.close(null)
    os.dup2(2, 1)  # the job's stdout carries the checker's verdict alone
    low, high = sorted((req, rep))
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, max(high + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    linecache.cache[CANDIDATE_FILE] = (len(source), None, source.splitlines(True), CANDIDATE_FILE)
    module = types.ModuleType("__main__")
    module.__file__ = CANDIDATE_FILE
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    sys.argv = [CANDIDATE_FILE]
    try:
        exec(compile(source, CANDIDATE_FILE, "exec"), module.__dict__)
    except BaseException as exc:
        _send(rep, {"load": "raised", **_describe(exc), "traceback": _traceback(exc)})
        os._exit(0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _send(rep, {"load": "ok"})
    handles = {}
    while True:
        try:
            order = _recv(req)
        except BaseException:
            os._exit(0)
        try:
            answer = _answer(order, module.__dict__, handles)
        except BaseException as exc:
            answer = {"raised": _describe(exc), "traceback": _traceback(exc)}
        answer["seq"] = order.get("seq")
        try:
            _send(rep, answer)
        except (ValueError, TypeError, RecursionError, OverflowError) as exc:  # e.g. an int too long to print
            _send(rep, {"non_plain": f"an answer that cannot be written as data ({type(exc).__name__})",
                        "seq": order.get("seq")})
        except BaseException:
            os._exit(0)


def _target(order, names, handles):
    target = order["target"]
    if "handle" in target:
        return getattr(handles[target["handle"]], target["attr"])
    return names[target["name"]]


def _answer(order, names, handles):
    op = order.get("op")
    if op == "resolve":
        kinds, values = {}, {}
        for name in order["names"]:
            if name not in names:
                continue
            obj = names[name]
            if isinstance(obj, type):
                kinds[name] = "class"
            elif callable(obj):
                kinds[name] = "callable"
            else:
                try:
                    values[name] = encode(obj)
                    kinds[name] = "value"
                except Exception:
                    kinds[name] = "other"
        return {"kinds": kinds, "values": values}
    if op == "getattr":
        value = getattr(handles[order["handle"]], order["attr"])
        if callable(value):
            return {"callable": True}
        try:
            return {"value": encode(value)}
        except (NotPlain, RecursionError, ValueError) as exc:
            return {"non_plain": str(exc)}
    if op == "call":
        fn = _target(order, names, handles)
        args = [decode(a) for a in order["args"]]
        kwargs = {k: decode(v) for k, v in order["kwargs"].items()}
        before = [encode(a) if type(a) in (list, dict, set) else None for a in args]
        result = fn(*args, **kwargs)
        if isinstance(fn, type):
            handles[len(handles) + 1] = result
            # the class's methods, so that ``Solution().f`` costs no round trip of its own
            methods = [n for n in dir(type(result)) if not n.startswith("__")
                       and callable(getattr(type(result), n, None)) and n not in vars(result)]
            answer = {"handle": len(handles), "methods": methods}
        else:
            try:
                answer = {"value": encode(result)}
            except (NotPlain, RecursionError, ValueError) as exc:
                return {"non_plain": str(exc)}
        changed = {}
        for i, (arg, old) in enumerate(zip(args, before, strict=False)):
            if old is not None:
                try:
                    new = encode(arg)
                except (NotPlain, RecursionError, ValueError) as exc:
                    return {"non_plain": f"argument {i} after the call: {exc}"}
                if new != old:
                    changed[str(i)] = new
        if changed:
            answer["args_after"] = changed
        return answer
    raise ValueError(f"unknown request {op!r}")


# -- the checker process -------------------------------------------------------------------------------------------
class _Abort(BaseException):
    """The candidate broke the contract (exited, timed out, answered with non-plain data): the verdict is failed,
    whatever the checks do with this exception."""


class _Channel:
    """The checker's end of the pipes, and what ended the candidate when it ended."""

    def __init__(self, pid, req, rep):
        self.pid, self.req, self.rep = pid, req, rep
        self.seq = 0
        self.calls = 0
        self.abort = None  # (status, message) of the first abort
        self.deadline = None  # the deadline of the current request (set by the checker)
        self.total_deadline = None  # the end of the job's time

    def fail(self, status, message):
        if self.abort is None:
            self.abort = (status, _clip(message))
        raise _Abort(status)

    def _ended(self, when):
        how = ""
        for _ in range(100):  # it closed the pipe: give it a moment to be reaped, then make sure it is gone
            how = self.reap()
            if how:
                break
            time.sleep(0.01)
        if not how:
            self.kill()
            how = "closed its end of the pipe"
        self.fail("exited", f"the program ended its process {when} ({how}); a graded program must return its answers")

    def reap(self, wait=False):
        """A description of how the candidate ended, or "" while it runs."""
        if self.pid is None:
            return "gone"
        try:
            pid, status = os.waitpid(self.pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            return "gone"
        if pid == 0 and not wait:
            return ""
        self.pid = None
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                return f"killed by {signal.Signals(sig).name}"
            except ValueError:
                return f"killed by signal {sig}"
        return f"exit status {os.WEXITSTATUS(status)}"

    def kill(self):
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.reap(wait=True)

    def receive(self, when):
        try:
            return _recv(self.rep, self.deadline)
        except _Late:
            self.kill()
            self.fail("timeout", f"the program did not answer within its time limit {when}")
        except _Gone:
            self._ended(when)
        except _TooLarge as exc:
            self.kill()
            self.fail("non_plain", f"the program's answer {when} is {exc.args[0]} bytes (limit {MAX_MESSAGE})")
        except (ValueError, RecursionError, MemoryError) as exc:
            self.kill()
            self.fail("non_plain", f"the program's answer {when} is not readable data: {type(exc).__name__}")

    def request(self, order, when):
        self.seq += 1
        order["seq"] = self.seq
        try:
            _send(self.req, order)
        except OSError:
            self._ended(when)
        answer = self.receive(when)
        if type(answer) is not dict or answer.get("seq") != self.seq:
            self.kill()
            self.fail("non_plain", f"the program's process answered out of turn {when}")
        return answer


def _builtin_exception(info):
    name = info.get("type") if type(info) is dict else None
    if type(info) is dict and info.get("builtin") is True and name in PASS_THROUGH:
        return getattr(builtins, name)
    return None


class _Remote:
    """A callable of the candidate (a function, a class, or a method of an instance made by calling a class)."""

    def __init__(self, channel, target, label):
        self._channel, self._target, self._label = channel, target, label

    def __repr__(self):
        return f"<the program's {self._label}>"

    def __call__(self, *args, **kwargs):
        ch = self._channel
        if ch.abort is not None:
            raise _Abort(ch.abort[0])
        when = f"in a call of {self._label}"
        try:
            enc_args = [encode(a) for a in args]
            enc_kwargs = {str(k): encode(v) for k, v in kwargs.items()}
        except (NotPlain, RecursionError, ValueError) as exc:
            ch.fail("unsupported_test", f"the checks pass {self._label} an argument the harness cannot send: {exc}")
        ch.calls += 1
        answer = ch.request({"op": "call", "target": self._target, "args": enc_args, "kwargs": enc_kwargs}, when)
        if "raised" in answer:
            info = answer.get("raised")
            name = info.get("type") if type(info) is dict else "?"
            message = info.get("message", "") if type(info) is dict else ""
            if name in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
                ch.fail("exited", f"{name} raised {when}: {message}")
            exc_type = _builtin_exception(info) or CandidateError
            raise exc_type(f"raised by the program {when}: {message}\n{answer.get('traceback', '')}".strip())
        if "non_plain" in answer:
            ch.fail("non_plain", f"{when} the program returned {answer['non_plain']}")
        try:
            for index, value in (answer.get("args_after") or {}).items():
                _update(args[int(index)], decode(value))
            if "handle" in answer:
                methods = answer.get("methods")
                return _Instance(ch, answer["handle"], self._label,
                                 frozenset(m for m in methods if type(m) is str) if type(methods) is list else ())
            return decode(answer["value"])
        except (NotPlain, RecursionError, KeyError, ValueError, TypeError, IndexError) as exc:
            ch.fail("non_plain", f"{when} the program answered with data that is not a plain value: {exc}")


def _update(arg, new):
    """Apply the candidate's in-place change of a mutable argument to the checker's own object."""
    if type(arg) is not type(new):
        raise NotPlain("an argument changed its type")
    if isinstance(arg, list):
        arg[:] = new
    else:
        arg.clear()
        arg.update(new)


class _Instance:
    """An object the candidate made (``Solution()``): attribute reads and method calls go to the candidate."""

    def __init__(self, channel, handle, label, methods=()):
        self._channel, self._handle, self._label, self._methods = channel, handle, label, methods

    def __repr__(self):
        return f"<an instance of the program's {self._label}>"

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        ch = self._channel
        if ch.abort is not None:
            raise _Abort(ch.abort[0])
        if attr in self._methods:
            return _Remote(ch, {"handle": self._handle, "attr": attr}, f"{self._label}().{attr}")
        when = f"reading {self._label}().{attr}"
        answer = ch.request({"op": "getattr", "handle": self._handle, "attr": attr}, when)
        if "raised" in answer:
            exc_type = _builtin_exception(answer["raised"]) or CandidateError
            raise exc_type(f"raised by the program {when}: {answer['raised'].get('message', '')}")
        if "non_plain" in answer:
            ch.fail("non_plain", f"{when}: {answer['non_plain']}")
        if answer.get("callable"):
            return _Remote(ch, {"handle": self._handle, "attr": attr}, f"{self._label}().{attr}")
        try:
            return decode(answer.get("value"))
        except (NotPlain, RecursionError) as exc:
            ch.fail("non_plain", f"{when}: {exc}")


def _free_names(tree, known):
    """Names the checks read but never bind, and that the trusted prelude and builtins do not define."""
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return sorted(n for n in loaded - bound if n not in known and not hasattr(builtins, n))


def _bind(channel, namespace, names):
    """Bind the candidate's objects the checks need: proxies for callables, copies for plain values."""
    if not names:
        return
    answer = channel.request({"op": "resolve", "names": list(names)}, "while the checks looked up its names")
    kinds, values = answer.get("kinds") or {}, answer.get("values") or {}
    for name in names:
        kind = kinds.get(name)
        if kind in ("callable", "class"):
            namespace[name] = _Remote(channel, {"name": name}, name)
        elif kind == "value":
            try:
                namespace[name] = decode(values.get(name))
            except (NotPlain, RecursionError) as exc:
                channel.fail("non_plain", f"the program's {name} is not plain data: {exc}")


def _load(channel):
    """Wait for the candidate's source to run; a failure there is the verdict."""
    answer = channel.receive("while its source was loading")
    if answer.get("load") == "ok":
        return
    name = answer.get("type", "?")
    status = "exited" if name in ("SystemExit", "KeyboardInterrupt") else "runtime_error"
    if name == "MemoryError":
        status = "memory"
    channel.fail(status, answer.get("traceback") or answer.get("message") or name)


def _run_asserts(channel, payload):
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    prelude = str(payload.get("prelude") or "")
    if prelude.strip():
        exec(compile(prelude, "prelude.py", "exec"), namespace)
    checks = str(payload.get("checks") or "")
    entry = payload.get("entry_point")
    if entry:
        checks += f"\n\ncheck({entry})\n"
    tree = ast.parse(checks, CHECKS_FILE)
    wanted = _free_names(tree, set(namespace))
    if entry and entry not in wanted:
        wanted.append(entry)  # the prelude may define a stub of it (a HumanEval prompt): the candidate's wins
    _load(channel)
    _bind(channel, namespace, wanted)
    linecache.cache[CHECKS_FILE] = (len(checks), None, checks.splitlines(True), CHECKS_FILE)
    code = compile(tree, CHECKS_FILE, "exec")
    saved = sys.stdout
    sys.stdout = sys.stderr  # the checks' own prints are not the verdict
    try:
        exec(code, namespace)
    finally:
        sys.stdout = saved
    if channel.calls == 0:
        return {"status": "runtime_error", "message": "the checks never called the program"}
    return {"status": "passed", "calls": channel.calls}


def _run_calls(channel, payload):
    fn_name = str(payload["fn_name"])
    per_test = float(payload["per_test_s"])
    channel.deadline = min(time.monotonic() + per_test, channel.total_deadline)
    _load(channel)
    namespace = {}
    _bind(channel, namespace, ["Solution", fn_name])
    results = []
    for text in payload["tests"]:
        channel.deadline = min(time.monotonic() + per_test, channel.total_deadline)
        args = [json.loads(line) for line in str(text).split("\n") if line.strip()]
        try:
            if "Solution" in namespace and isinstance(namespace["Solution"], _Remote):
                target = getattr(namespace["Solution"](), fn_name)
            elif isinstance(namespace.get(fn_name), _Remote):
                target = namespace[fn_name]
            else:
                return {"status": "runtime_error", "results": results,
                        "message": f"the program defines neither Solution nor {fn_name}"}
            value = target(*args)
            results.append({"status": "ok", "value": to_json(value)})
        except _Abort:
            raise
        except Exception as exc:  # the candidate raised: this test fails, the next one runs
            results.append({"status": "raised", "message": _clip(str(exc))})
    return {"status": "passed" if all(r["status"] == "ok" for r in results) else "runtime_error",
            "results": results}


def _make_undumpable():
    """No process of our uid may ptrace us, read our memory or take our descriptors (PR_SET_DUMPABLE = 0)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0
    except Exception:
        return False


def _emit(verdict):
    verdict[VERDICT_KEY] = PROTOCOL
    data = (json.dumps(verdict, ensure_ascii=False, allow_nan=True) + "\n").encode("utf-8", "surrogatepass")
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def _trusted_path():
    """``sys.path`` without the folders a process of the jail can write (``/tmp``, the working folder): the
    candidate shares them, and a module it left there would otherwise run in the checker at the checks' first
    ``import``."""
    kept = []
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        if not os.access(folder, os.W_OK):
            kept.append(entry)
    return kept


def main(source, wall_s):
    """The job's entry point: fork the candidate, read the checks, run them, print the verdict, exit 0."""
    start = time.monotonic()
    program_path = list(sys.path)
    sys.path[:] = _trusted_path()
    sys.path_importer_cache.clear()
    undumpable = _make_undumpable()
    saved = {}
    for name in _IGNORED:
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                saved[sig] = signal.getsignal(sig)
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):
                pass
    sys.stdout.flush()
    sys.stderr.flush()
    to_cand_r, to_cand_w = os.pipe()
    to_check_r, to_check_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(to_cand_w)
            os.close(to_check_r)
            sys.path[:] = program_path  # the program's own imports see the jail as any program does
            _candidate(source, to_cand_r, to_check_w, saved)
        finally:
            os._exit(70)
    os.close(to_cand_r)
    os.close(to_check_w)
    channel = _Channel(pid, to_cand_w, to_check_r)
    channel.total_deadline = start + float(wall_s)
    channel.deadline = channel.total_deadline
    verdict = {"status": "runtime_error", "message": "the harness did not finish"}
    try:
        payload = json.loads(sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))
        mode = payload.get("mode")
        if mode == "asserts":
            verdict = _run_asserts(channel, payload)
        elif mode == "calls":
            verdict = _run_calls(channel, payload)
        else:
            verdict = {"status": "harness_error", "message": f"unknown mode {mode!r}"}
    except _Abort:
        pass
    except AssertionError as exc:
        verdict = {"status": "wrong_answer", "message": _clip("".join(traceback.format_exception(exc)))}
    except MemoryError as exc:
        verdict = {"status": "memory", "message": _clip("".join(traceback.format_exception(exc)))}
    except BaseException as exc:
        verdict = {"status": "runtime_error", "message": _clip("".join(traceback.format_exception(exc)))}
    if channel.abort is not None:  # whatever the checks did with it
        verdict = {"status": channel.abort[0], "message": channel.abort[1], "results": verdict.get("results", [])}
    if channel.pid is not None:  # the jail's server kills and reaps whatever is left once we exit
        with contextlib.suppress(ProcessLookupError):
            os.kill(channel.pid, signal.SIGKILL)
    verdict["undumpable"] = undumpable
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    _emit(verdict)
    os._exit(0)
