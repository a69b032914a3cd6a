"""One writer per run folder: an exclusive lock that ``afm eval run``, ``afm infer`` and ``afm data distill`` hold
on their output for the whole run.

Two runs appending to one results file both skip the keys already there when they start, then write the rest twice
(issue 39). So a writer first takes :class:`RunLock` on its output: a lock file in the run folder
(:data:`FOLDER_LOCK`) or beside the output file (``<output>.lock``). The mutual exclusion is ``fcntl.flock`` on that
file, held by an open descriptor: the kernel drops it when the process ends in any way (SIGKILL and crashes
included), so a lock file left behind by a dead run is stale, and the next run simply takes it over: resuming after
a kill needs no ``--force``. What the file holds (the owner's pid, host, start time and command line) only makes the
message of a refused second writer: :class:`RunLocked`, whose text is one line naming the running one. Readers
(``afm eval report``) take no lock. Released (:meth:`RunLock.release`, or leaving the ``with`` block) on a normal
return and on an exception, KeyboardInterrupt and SystemExit included; the lock file is then removed, with the
folders the lock had to create when they are still empty (a run that stopped on a user's mistake leaves nothing).
Signals: the commands catch SIGINT/SIGTERM while their tasks run and return 130/143 (``afm.agent.runner``), and
``afm quickstart`` turns SIGTERM into SystemExit (``afm.common.exit_signals``), so both unwind through the ``with``
block; a signal that kills the process outright (SIGKILL, SIGTERM while a model loads) leaves a stale lock file.
The descriptor is not inherited by subprocesses (``os.open`` makes it close-on-exec).

NFS: Linux clients emulate ``flock`` with NFS byte-range locks, so the lock holds between hosts when the server
supports locking; mounted with ``nolock`` (or ``local_lock=flock``) it is local to each host and two hosts could
both take it. A lock file naming another host whose lock is free is therefore taken over with a warning (that run
ended, or this filesystem does not share locks); a filesystem that refuses ``flock`` altogether falls back to the
file's pid and host, with a warning too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

FOLDER_LOCK = "writer.lock"  # the lock file of a run folder (afm eval run --run-dir)
_COMMAND_CHARS = 400  # a command line in the one-line message is cut here
_OWNER_WAIT_S = 1.0  # how long a refused writer waits for the owner's details (written just after its flock)
_ATTEMPTS = 50  # a finishing writer may remove the lock file between our open and our flock: open it again


@dataclass(frozen=True)
class Owner:
    """Who holds (or last held) a lock: what the lock file says."""

    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def this_process(cls, command: str) -> Owner:
        """This process, started now, running ``command``."""
        return cls(os.getpid(), socket.gethostname(), datetime.now().astimezone().isoformat(timespec="seconds"),
                   command)

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a lock file's text names, or None (empty: the owner is still writing it; or not ours)."""
        try:
            data = json.loads(text)
            return cls(int(data["pid"]), str(data["host"]), str(data["started"]), str(data["command"]))
        except (ValueError, TypeError, KeyError):
            return None

    def is_here(self) -> bool:
        """Whether the owner ran on this host."""
        return self.host == socket.gethostname()

    def describe(self) -> str:
        """``pid 1234 on host H since T (command)``."""
        command = self.command if len(self.command) <= _COMMAND_CHARS else self.command[:_COMMAND_CHARS] + "..."
        who = f"pid {self.pid}" + (" (this process)" if self.pid == os.getpid() and self.is_here() else "")
        return f"{who} on host {self.host} since {self.started} ({command})"


class RunLocked(RuntimeError):
    """Another writer holds the lock of ``target``; ``str()`` is the one line a CLI prints after its name."""

    def __init__(self, target: Path, owner: Owner | None, flag: str) -> None:
        self.target, self.owner, self.flag = target, owner, flag
        who = owner.describe() if owner else "another process (it has not recorded its pid yet)"
        super().__init__(f"{target} is being written by {who}; wait for it or use another {flag}")


def lock_file(target: str | os.PathLike[str], folder: bool) -> Path:
    """The lock file of an output: ``target/writer.lock`` for a run folder, ``<target>.lock`` beside a file."""
    target = Path(target)
    return target / FOLDER_LOCK if folder else target.with_name(target.name + ".lock")


def read_owner(path: str | os.PathLike[str]) -> Owner | None:
    """The owner a lock file names (None when it is missing, empty or unreadable); taking no lock."""
    try:
        return Owner.parse(Path(path).read_text(encoding="utf-8"))
    except OSError:
        return None


def command_line(prog: str, argv: Sequence[str] | None) -> str:
    """``prog`` and its arguments (``argv``, or this process's when None) as one shell-quoted line."""
    return shlex.join([*prog.split(), *(sys.argv[1:] if argv is None else argv)])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class RunLock:
    """The exclusive writer's lock of one output (a run folder, or one file when ``folder`` is false).

    ``command`` is what a refused writer's message shows (``afm eval run --run-dir ...``), ``flag`` the option it
    suggests changing, ``prog`` the name its warnings on stderr start with. Not re-entrant: a second
    :meth:`acquire` of one output in one process, while the first is held, raises :class:`RunLocked` too.
    """

    def __init__(self, target: str | os.PathLike[str], *, folder: bool, command: str, flag: str,
                 prog: str = "afm") -> None:
        self.target = Path(target)
        self.path = lock_file(self.target, folder)
        self.command, self.flag, self.prog = command, flag, prog
        self._fd: int | None = None
        self._created: list[Path] = []

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock or raise :class:`RunLocked` at once (never waits for the owner); OSError when the lock
        file cannot be created (no permission, read-only filesystem)."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this RunLock")
        self._created = []
        for _ in range(_ATTEMPTS):
            self._created += [f for f in self._make_parents() if f not in self._created]
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # a finishing writer removed the empty folder it had made: make it again
                continue
            try:
                locked = self._flock(fd)
                if locked and not self._same_file(fd):
                    os.close(fd)  # its owner removed it on release after our open: lock the file now at the path
                    continue
                self._take(fd, locked)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return self
        raise OSError(errno.EAGAIN, f"could not take the lock {self.path}: it keeps being removed")

    def release(self) -> None:
        """Give the lock up and remove the lock file (and the folders it created, when empty); idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # unlinked while still locked: a writer that opened this file meanwhile sees it gone and opens anew
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked child holding a copy of fd must not keep it
            os.close(fd)
        for folder in reversed(self._created):
            try:
                folder.rmdir()  # only when empty: the run wrote nothing there
            except OSError:
                break

    def warn(self, message: str) -> None:
        """One warning line on stderr."""
        print(f"{self.prog}: warning: {message}", file=sys.stderr, flush=True)

    def __enter__(self) -> RunLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def _make_parents(self) -> list[Path]:
        """Create the lock file's folder and its missing parents; returns those created, outermost first."""
        missing = []
        folder = self.path.parent
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        created = []
        for folder in reversed(missing):
            try:
                folder.mkdir()
                created.append(folder)
            except FileExistsError:  # another writer made it at the same moment: not ours to remove
                pass
        return created

    def _flock(self, fd: int) -> bool:
        """``flock`` the file; raise RunLocked when another holds it; False when the filesystem has no flock."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            raise RunLocked(self.target, self._owner_of(fd), self.flag) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            return False

    def _owner_of(self, fd: int) -> Owner | None:
        """What a locked file says about its owner, waiting a moment for an owner that has just taken it."""
        deadline = time.monotonic() + _OWNER_WAIT_S
        while True:
            owner = Owner.parse(os.pread(fd, 65536, 0).decode("utf-8", errors="replace"))
            if owner is not None or time.monotonic() >= deadline:
                return owner
            time.sleep(0.02)

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def _take(self, fd: int, locked: bool) -> None:
        """Write our details into the file (``locked``: under flock), saying what the previous owner leaves us."""
        previous = Owner.parse(os.pread(fd, 65536, 0).decode("utf-8", errors="replace"))
        if not locked:
            if previous is not None and previous.is_here() and _pid_alive(previous.pid):
                raise RunLocked(self.target, previous, self.flag)
            self.warn(f"{self.path}: this filesystem refuses file locks (flock), so only the pid and host in the "
                      "lock file keep a second writer out, and only on this host")
        if previous is not None and not previous.is_here():
            self.warn(f"{self.path} names {previous.describe()}, and no lock is held on it: that run ended, or "
                      "this filesystem does not share locks between hosts (NFS mounted with nolock or "
                      "local_lock); taking it over: make sure that run is not still writing")
        mine = Owner.this_process(self.command)
        data = (json.dumps(asdict(mine)) + "\n").encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def take_or_say(lock: RunLock) -> int | None:
    """Acquire a CLI's ``lock``: None when taken; else, after one line on stderr, the exit status (2 when another
    writer holds it, 1 when the lock file cannot be created)."""
    try:
        lock.acquire()
    except RunLocked as exc:
        print(f"{lock.prog}: {exc}", file=sys.stderr, flush=True)
        return 2
    except OSError as exc:
        print(f"{lock.prog}: stopped: cannot create the lock file {lock.path}: {exc}", file=sys.stderr, flush=True)
        return 1
    return None
