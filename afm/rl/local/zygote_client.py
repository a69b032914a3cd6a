"""The ``py_executable`` of Ray's workers when a worker zygote runs (afm/rl/local/zygote.py): asks the zygote for a
fork that runs this worker, then stands in for it (Ray watches the process it started): it passes SIGTERM, SIGINT
and SIGHUP on to the worker's process group, and exits with the worker's code. Anything the zygote cannot do (no zygote, an environment it was not
imported with, interpreter flags) starts the worker as Ray would have, with this interpreter.

Run as ``python -I -S zygote_client.py <worker argv>`` (no site, no user paths: ~10 ms), so the standard library
only; the zygote's address is ``$AFM_WORKER_ZYGOTE``.
"""

import json
import os
import select
import signal
import socket
import sys

ADDRESS_VARIABLE = "AFM_WORKER_ZYGOTE"


def start_here(argv, reason=None):
    """Run the worker in this process, as Ray would have: exec the interpreter without -I -S."""
    if reason:
        print(f"[afm] worker zygote: {reason}; this worker imports its modules itself", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, *argv])


def wait_gone(pid):
    """Until ``pid`` exits (the zygote that would report it is gone)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    select.select([fd], [], [])


def main(argv):
    address = os.environ.get(ADDRESS_VARIABLE, "")
    if not address or not argv or argv[0].startswith("-"):
        start_here(argv)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect("\0" + address)
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
                           "client_pid": os.getpid()}).encode()
        socket.send_fds(conn, [len(body).to_bytes(4, "big")], [0, 1, 2])
        conn.sendall(body)
        replies = conn.makefile("r")
        first = json.loads(replies.readline() or "{}")
    except (OSError, ValueError) as e:
        start_here(argv, f"cannot reach it ({e})")
    if "pid" not in first:
        start_here(argv, first.get("refused", "no answer"))
    pid = first["pid"]
    # to the worker's process group (it leads one): what it started (vLLM's engine core) is not this process's
    # descendant, so a cleanup that signals every descendant of Ray's processes reaches it only through here
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.killpg(pid, number))
    line = replies.readline()  # the worker's exit (a signal handled meanwhile does not cut it short: PEP 475)
    if not line:  # the zygote ended first: wait for the worker itself
        wait_gone(pid)
        return 0
    return json.loads(line).get("exit", 1)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(code if code >= 0 else 128 - code)
