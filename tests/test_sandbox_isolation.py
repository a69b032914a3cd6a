"""One execution never sees another's data: heap, System V / POSIX IPC, and files left behind (real jails).

Each attack runs job A (which holds a secret) and then job B on the same sandbox; with ``mode="pool"`` and one
worker, B runs in the same warm jail A ran in. B must find nothing, in both modes. These are the attacks an outside
tester used against the pool (issue 26): in RL a rollout's program could otherwise read the private test cases and
expected outputs another rollout was graded on.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid

import pytest

from afm.sandbox import Limits, Sandbox

FAST = Limits(wall_s=5.0, memory_mb=512, processes=32, output_bytes=400_000)


BACKENDS = ["nsjail", "bwrap"]
MODES = ["oneshot", "pool"]


@pytest.fixture(scope="module")
def boxes():
    """One sandbox per (backend, mode), made on first use; the pool has one worker, so job B is served by the
    very jail that served job A."""
    made: dict[tuple[str, str], Sandbox] = {}

    def get(backend: str, mode: str) -> Sandbox:
        if (backend, mode) not in made:
            if backend == "bwrap" and shutil.which("bwrap") is None:
                pytest.skip("bubblewrap is not installed on this machine (.ci/run installs it)")
            made[backend, mode] = Sandbox(backend=backend, mode=mode, concurrency=1, limits=FAST)
        return made[backend, mode]

    yield get
    for box in made.values():
        box.close()


@pytest.fixture(params=[(b, m) for b in BACKENDS for m in MODES], ids=lambda p: "-".join(p))
def box(request, boxes):
    return boxes(*request.param)


def _secret() -> str:
    return "SECRET-" + uuid.uuid4().hex


# Job B: read every readable mapping around the brk heap and around freshly allocated objects (pymalloc arenas,
# malloc'd buffers), the way the tester did without /proc: probe pages by writing them into a pipe (EFAULT on an
# unmapped page), then search what was read for the marker. The marker arrives on stdin in two halves with a
# newline between them, and is never joined, so job B's own memory cannot hold it unless it was there already.
SCAN = r"""
import ctypes, os, sys
head, rest = sys.stdin.buffer.read().split(b"\n")
libc = ctypes.CDLL(None, use_errno=True)
libc.sbrk.restype = ctypes.c_void_p
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
PAGE = 4096
r, w = os.pipe()
os.set_blocking(r, False)

def page(addr):
    n = libc.write(w, addr, PAGE)
    if n <= 0:
        return None
    return os.read(r, n)

def region(anchor, limit=64 << 20):
    base = anchor & ~(PAGE - 1)
    lo = base
    while base - lo < limit and page(lo - PAGE) is not None:
        lo -= PAGE
    hi = base
    while hi - base < limit and page(hi) is not None:
        hi += PAGE
    return lo, hi

probe_objs = [bytes(range(40)), bytearray(3000), bytearray(70000), "x" * 600, object()]
anchors = [libc.sbrk(0) - 1] + [id(o) for o in probe_objs]
seen, found = set(), 0
for a in anchors:
    lo, hi = region(a)
    if (lo, hi) in seen:
        continue
    seen.add((lo, hi))
    addr = lo
    while addr < hi:
        chunk = (page(addr) or b"") + (page(addr + PAGE) or b"")[:len(head) + len(rest)]
        at = chunk.find(head)
        while 0 <= at < PAGE:
            if chunk[at + len(head):at + len(head) + len(rest)] == rest:
                found += 1
            at = chunk.find(head, at + 1)
        addr += PAGE
print("FOUND" if found else "CLEAN", len(seen))
"""


def test_a_job_cannot_read_an_earlier_jobs_stdin_or_output_from_memory(box):
    secret = _secret()
    # A: the secret arrives on stdin (large, as private test cases do) and goes out again on stdout (3 KB, 60 KB).
    job_a = ("import sys\ns = sys.stdin.read()\nprint(s[:3000])\nprint(s * 2)\n")
    a = box.run(job_a, (secret + " ") * 2000)
    assert a.status == "ok" and secret in a.stdout
    b = box.run(SCAN, secret[:20] + "\n" + secret[20:])
    assert b.status == "ok", b.stderr
    assert b.stdout.startswith("CLEAN"), f"job B found job A's data in its memory: {b.stdout!r}"


SYSV_WRITE = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
secret = sys.stdin.buffer.read()
libc.shmat.restype = ctypes.c_void_p
shm = libc.shmget(0x5AFE, 4096, 0o1600)            # IPC_CREAT | 0600
addr = libc.shmat(shm, None, 0)
ctypes.memmove(addr, secret, len(secret))
q = libc.msgget(0x5AFF, 0o1600)
buf = ctypes.create_string_buffer(8 + len(secret))
ctypes.memmove(ctypes.addressof(buf), (1).to_bytes(8, "little"), 8)
ctypes.memmove(ctypes.addressof(buf) + 8, secret, len(secret))
sent = libc.msgsnd(q, buf, len(secret), 0)
sem = libc.semget(0x5B00, 1, 0o1600)
print(shm >= 0, q >= 0, sent == 0, sem >= 0)
"""

SYSV_READ = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
found = []
shm = libc.shmget(0x5AFE, 0, 0)
if shm >= 0:
    addr = libc.shmat(shm, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        found.append("shm:" + ctypes.string_at(addr, 64).split(b"\0")[0].decode())
q = libc.msgget(0x5AFF, 0)
if q >= 0:
    buf = ctypes.create_string_buffer(8 + 256)
    n = libc.msgrcv(q, buf, 256, 0, 0o4000)            # IPC_NOWAIT
    found.append("msg:" + (buf.raw[8:8 + n].decode() if n > 0 else ""))
if libc.semget(0x5B00, 0, 0) >= 0:
    found.append("sem")
print("FOUND " + " ".join(found) if found else "CLEAN")
"""

POSIX_MQ_WRITE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
secret = sys.stdin.buffer.read()
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
q = libc.mq_open(b"/afm-leak", os.O_CREAT | os.O_RDWR, 0o600, None)
sent = libc.mq_send(q, secret, len(secret), 0) if q >= 0 else -1
print("created" if q >= 0 else "refused", os.strerror(ctypes.get_errno()) if q < 0 else "", sent)
"""

POSIX_MQ_READ = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
q = libc.mq_open(b"/afm-leak", os.O_RDONLY | os.O_NONBLOCK)
if q < 0:
    print("CLEAN")
else:
    buf = ctypes.create_string_buffer(65536)
    n = libc.mq_receive(q, buf, 65536, None)
    print("FOUND", buf.raw[:max(n, 0)].decode())
"""


def test_system_v_ipc_objects_do_not_outlive_a_job(box):
    secret = _secret()
    a = box.run(SYSV_WRITE, secret)
    assert a.status == "ok", a.stderr
    assert a.stdout.split() == ["True", "True", "True", "True"]  # the objects really existed
    b = box.run(SYSV_READ)
    assert b.status == "ok", b.stderr
    assert b.stdout.strip() == "CLEAN", f"job B reached job A's IPC objects: {b.stdout!r}"


def test_posix_message_queues_do_not_outlive_a_job(box):
    secret = _secret()
    a = box.run(POSIX_MQ_WRITE, secret)
    assert a.status == "ok", a.stderr
    b = box.run(POSIX_MQ_READ)
    assert b.status == "ok", b.stderr
    assert b.stdout.strip() == "CLEAN", f"job B read job A's message queue: {b.stdout!r}"


HIDE = r"""
import os, sys
secret = sys.stdin.read()
for root in ("/tmp", "/dev/shm"):
    inner = os.path.join(root, "d", "inner")
    os.makedirs(inner)
    with open(os.path.join(inner, "f"), "w") as f:
        f.write(secret)
    os.chmod(inner, 0)                       # the scrub cannot list it ...
    os.chmod(os.path.join(root, "d"), 0o100)  # ... nor its parent (search only)
    # a file without any permission, and a deep chain of directories, the scrub must also remove
    with open(os.path.join(root, "plain"), "w") as f:
        f.write(secret)
    os.chmod(os.path.join(root, "plain"), 0)
    deep = os.path.join(root, "deep")
    os.makedirs(deep)
    os.chdir(deep)
    for _ in range(300):
        os.mkdir("x", 0o700)
        os.chdir("x")
    with open("f", "w") as f:
        f.write(secret)
    os.chmod(".", 0o100)
print("hidden")
"""

LOOK = r"""
import os
found = []
for root in ("/tmp", "/dev/shm"):
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o700)
            except OSError:
                pass
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                os.chmod(path, 0o600)
                with open(path) as f:
                    found.append(f.read())
            except OSError:
                pass
    try:
        os.chmod(os.path.join(root, "d"), 0o700)
        os.chmod(os.path.join(root, "d", "inner"), 0o700)
        with open(os.path.join(root, "d", "inner", "f")) as f:
            found.append(f.read())
    except OSError:
        pass
print("FOUND " + " ".join(found) if found else "CLEAN", sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")))
"""


def test_files_hidden_behind_permissions_do_not_outlive_a_job(box):
    secret = _secret()
    a = box.run(HIDE, secret)
    assert (a.status, a.stdout.strip()) == ("ok", "hidden"), a.stderr
    b = box.run(LOOK)
    assert b.status == "ok", b.stderr
    assert b.stdout.startswith("CLEAN [] []"), f"job B found job A's files: {b.stdout!r}"


STASH = r"""
import ctypes, os, sys
secret = sys.stdin.buffer.read()
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ADD_KEY = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
kept = []
for ring in (-3, -4, -5):  # session, user, user-session keyrings (nsjail's seccomp filter refuses keyctl)
    if libc.syscall(ADD_KEY, b"user", b"afm-stash%d" % -ring, secret, len(secret), ring) > 0:
        kept.append("key%d" % ring)
for root in ("/tmp", "/dev/shm"):  # extended attributes on the workspace folders themselves
    os.setxattr(root, "user.stash", secret)
    kept.append("xattr:" + root)
for d in ("/", "/dev", "/site", "/afm", "/usr", "/sandbox"):  # anywhere else a file could stay
    try:
        with open(os.path.join(d, "stash"), "wb") as f:
            f.write(secret)
        kept.append("file:" + d)
    except OSError:
        pass
print(" ".join(kept))
"""

FETCH = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEYCTL = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
found = []
buf = ctypes.create_string_buffer(4096)
for ring in (-3, -4, -5):
    key = libc.syscall(KEYCTL, 10, ring, b"user", b"afm-stash%d" % -ring, 0)   # KEYCTL_SEARCH
    if key > 0:
        n = libc.syscall(KEYCTL, 11, key, buf, 4096)                           # KEYCTL_READ
        found.append("key:" + buf.raw[:max(n, 0)].decode(errors="replace"))
for root in ("/tmp", "/dev/shm"):
    found += ["xattr:" + os.getxattr(root, n).decode() for n in os.listxattr(root)]
for d in ("/", "/dev", "/site", "/afm", "/usr", "/sandbox"):
    try:
        with open(os.path.join(d, "stash")) as f:
            found.append("file:" + f.read())
    except OSError:
        pass
print("FOUND " + " ".join(found) if found else "CLEAN")
"""


def test_keyrings_extended_attributes_and_other_folders_keep_nothing(box):
    secret = _secret()
    a = box.run(STASH, secret)
    assert a.status == "ok", a.stderr
    assert "xattr:/tmp" in a.stdout.split()  # the stash really happened
    assert not [k for k in a.stdout.split() if k.startswith("file:")]  # nothing outside the workspace is writable
    b = box.run(FETCH)
    assert b.status == "ok", b.stderr
    assert b.stdout.strip() == "CLEAN", f"job B found what job A left: {b.stdout!r}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_pool_keeps_serving_after_each_attack(boxes, backend):
    # the attacks above must not have cost the pool its ability to run ordinary programs, nor its workspace
    pool = boxes(backend, "pool")
    r = pool.run("import os\nos.chmod('/tmp', 0)\nos.chmod('/dev/shm', 0)\nprint('locked')")
    assert (r.status, r.stdout) == ("ok", "locked\n")
    r = pool.run("import numpy\nopen('/tmp/f', 'w').write('x')\nprint(int(numpy.arange(4).sum()))")
    assert (r.status, r.stdout) == ("ok", "6\n"), r.stderr


def test_a_pool_outlives_the_thread_that_started_it(boxes):
    # bubblewrap's --die-with-parent follows the starting *thread*: a pool booted by worker threads lost every
    # worker when those threads ended, and its first job failed with a sandbox_error
    pool = boxes("bwrap", "pool")
    done: list = []
    t = threading.Thread(target=lambda: done.append(pool.pool._restart(pool.pool.workers[0])))
    t.start()
    t.join()
    time.sleep(0.2)
    r = pool.run("print(1)")
    assert (r.status, r.stdout) == ("ok", "1\n"), r.stderr
