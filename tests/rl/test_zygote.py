"""The worker zygote (afm/rl/local/zygote.py) and its client, without Ray: the client is run as Ray runs a
``py_executable`` (``<python> -I -S zygote_client.py <script> <args>``) on a small worker script that reports what
it sees. A fork must be the process a fresh interpreter would have been (arguments, environment, working directory,
standard streams, its own process group, exit code, signals), and whatever the zygote cannot do starts the worker as
usual. Launches through verl with the zygote on: tests/rl/test_local_trainer.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afm.rl.local.zygote import import_time_difference

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "afm" / "rl" / "local" / "zygote_client.py"
WORKER = """
import json, os, sys, time
report = {"argv": sys.argv, "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "cwd": os.getcwd(),
          "env": os.environ.get("WORKER_VALUE"), "preloaded": "decimal" in sys.modules,
          "main": sys.modules["__main__"].__file__}
if "torch" in sys.modules:
    report["threads"] = sys.modules["torch"].get_num_threads()
print(json.dumps(report), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1:2] == ["sleep"]:
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # as vLLM's engine core
    print(json.dumps({"grandchild": child.pid}), flush=True)
    time.sleep(120)
sys.exit(int(sys.argv[2]) if sys.argv[1:2] == ["exit"] else 0)
"""


@pytest.fixture
def zygote(tmp_path):
    """A zygote preloading ``decimal`` (a module the worker script does not import itself), its address and pid."""
    address = f"afm-zygote-test-{os.getpid()}-{time.monotonic_ns()}"
    log = (tmp_path / "zygote.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "afm.rl.local.zygote", "--address", address,
                             "--preload", "decimal"], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.monotonic() + 60
    while "preloaded" not in (tmp_path / "zygote.log").read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "zygote.log").read_text()
        time.sleep(0.05)
    yield address, proc, tmp_path / "zygote.log"
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _client(tmp_path: Path, address: str, *args: str, **env: str) -> subprocess.Popen:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    full = {**os.environ, "AFM_WORKER_ZYGOTE": address, "WORKER_VALUE": "mine", **env}
    return subprocess.Popen([sys.executable, "-I", "-S", str(CLIENT), str(script), *args], env=full, cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _report(proc: subprocess.Popen) -> tuple[dict, str, int]:
    out, err = proc.communicate(timeout=120)
    return json.loads(out.splitlines()[0]), err, proc.returncode


def test_a_fork_is_the_process_the_worker_would_have_been(tmp_path, zygote):
    address, server, _ = zygote
    client = _client(tmp_path, address, "exit", "7")
    report, err, code = _report(client)
    assert report["ppid"] == server.pid and report["pid"] != client.pid  # forked from the zygote
    assert report["preloaded"]  # with what the zygote imported
    assert report["argv"] == [str(tmp_path / "worker.py"), "exit", "7"] and report["main"] == report["argv"][0]
    assert report["env"] == "mine" and report["cwd"] == str(tmp_path / "cwd")
    assert report["pgid"] == report["pid"]  # its own process group, as Ray's workers
    assert "to stderr" in err and code == 7  # its streams are the client's, its code the client's


def test_what_the_zygote_cannot_do_starts_the_worker_as_usual(tmp_path, zygote):
    address, _, _ = zygote
    # a variable read at import that differs: refused, the client becomes the worker itself (exec: the same pid)
    client = _client(tmp_path, address, HF_HOME=str(tmp_path / "other-hf-home"))
    report, err, code = _report(client)
    assert report["pid"] == client.pid and not report["preloaded"] and code == 0
    assert "HF_HOME differs" in err
    # no zygote at that address: the same, with one line saying so
    client = _client(tmp_path, "afm-zygote-nobody-listens")
    report, err, code = _report(client)
    assert report["pid"] == client.pid and code == 0 and "cannot reach it" in err
    # no address at all (the zygote off): silently as usual
    client = _client(tmp_path, "")
    report, err, code = _report(client)
    assert report["pid"] == client.pid and err.strip() == "to stderr"


def test_signals_reach_the_worker_and_the_worker_dies_with_its_client(tmp_path, zygote):
    address, _, _ = zygote
    client = _client(tmp_path, address, "sleep")
    report = json.loads(client.stdout.readline())
    grandchild = json.loads(client.stdout.readline())["grandchild"]
    client.send_signal(signal.SIGTERM)  # passed on: the worker ends by it, the client with 128 + 15
    assert client.wait(timeout=60) == 128 + signal.SIGTERM
    # what the worker started, too: it is not the client's descendant, where a cleanup by process tree looks
    assert _gone(report["pid"]) and _gone(grandchild)
    client = _client(tmp_path, address, "sleep")
    report = json.loads(client.stdout.readline())
    grandchild = json.loads(client.stdout.readline())["grandchild"]
    client.kill()  # SIGKILL cannot be passed on: the worker watches its client and takes its group down
    client.wait(timeout=60)
    assert _gone(report["pid"]) and _gone(grandchild)


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            return True
        if state == "Z":  # exited, not yet reaped by the zygote's loop
            return True
        time.sleep(0.05)
    return False


def test_torch_threads_follow_the_workers_omp_num_threads(tmp_path):
    """libgomp read OMP_NUM_THREADS when the zygote imported torch; a worker with another value gets its own."""
    address = f"afm-zygote-test-threads-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    server = subprocess.Popen([sys.executable, "-m", "afm.rl.local.zygote", "--address", address, "--preload",
                               "torch"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "preloaded torch" in server.stdout.readline()
        for threads in ("1", "2"):
            client = _client(tmp_path, address, OMP_NUM_THREADS=threads)
            report, _, code = _report(client)
            assert report["ppid"] == server.pid and report["threads"] == int(threads) and code == 0
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_only_variables_read_at_import_refuse_a_fork():
    mine = {"HF_HOME": "/a", "OMP_NUM_THREADS": "2", "PATH": "/bin", "RAY_NODE_ID": "x"}
    assert import_time_difference(mine, dict(mine)) is None
    # Ray's own variables, PATH, thread counts and verl's runtime-env values are the worker's to differ in
    assert import_time_difference(mine, {**mine, "RAY_NODE_ID": "y", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin",
                                         "TOKENIZERS_PARALLELISM": "true"}) is None
    assert import_time_difference(mine, {**mine, "HF_HOME": "/b"}) == "HF_HOME"
    assert import_time_difference(mine, {**mine, "OMP_WAIT_POLICY": "PASSIVE"}) == "OMP_WAIT_POLICY"
    assert import_time_difference(mine, {**mine, "PYTHONHASHSEED": "1"}) == "PYTHONHASHSEED"
    assert import_time_difference({**mine, "LD_PRELOAD": "x.so"}, mine) == "LD_PRELOAD"
    # a variable the zygote's own imports set (torch's inductor cache folder): the worker may lack it (its imports
    # would set the same) or have that value (passed on by a process that imported the same first), not another
    after = {**mine, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}
    assert import_time_difference(mine, dict(mine), after) is None
    assert import_time_difference(mine, dict(after), after) is None
    assert import_time_difference(mine, {**mine, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}, after) \
        == "TORCHINDUCTOR_CACHE_DIR"


def test_the_zygote_never_imports_ray_or_verl(tmp_path):
    """Ray and verl read the worker's own variables at import: a preload that brings them in stops the zygote."""
    proc = subprocess.run([sys.executable, "-m", "afm.rl.local.zygote", "--address", f"afm-zygote-ray-{os.getpid()}",
                           "--preload", "ray"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "imported ray" in proc.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_another_user_gets_no_fork(zygote):
    """The abstract socket is open to every local user, and a fork runs what the request names as the zygote's user:
    a request from another user id is refused before it is read."""
    address, _, _ = zygote
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child of this test as user nobody (an interpreter under /root could not start as nobody)
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect("\0" + address)
                os.write(write, s.makefile().readline().encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        assert json.loads(f.read()) == {"refused": "a request from user id 65534, not 0"}
