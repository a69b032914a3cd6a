"""``afm sandbox check|run``: verify the sandbox on this machine, or run a file in it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from afm.sandbox.limits import Limits
from afm.sandbox.runtime import SandboxUnavailable
from afm.sandbox.sandbox import Sandbox

CHECKS = {
    "runs python": ("print(6 * 7)", lambda r: r.stdout == "42\n"),
    "imports numpy": ("import numpy; print(numpy.ones(3).sum())", lambda r: r.stdout == "3.0\n"),
    "no network": ("import socket\ntry:\n    socket.create_connection(('127.0.0.1', 22), 1); print('open')\n"
                   "except OSError:\n    print('blocked')", lambda r: r.stdout == "blocked\n"),
    "host files hidden": ("import os; print(os.path.exists('/root'), os.path.exists('/etc/shadow'))",
                          lambda r: r.stdout == "False False\n"),
    "unprivileged": ("import os; print(os.getuid() != 0)", lambda r: r.stdout == "True\n"),
    "wall limit": ("import time\nwhile True: time.sleep(1)", lambda r: r.status == "timeout"),
    "memory limit": ("x = bytearray(4 * 2**30)", lambda r: r.status == "memory"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="afm sandbox", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "run"):
        p = sub.add_parser(name)
        p.add_argument("--backend", default="auto", choices=["auto", "nsjail", "bwrap"])
        p.add_argument("--mode", default="oneshot", choices=["oneshot", "pool"])
        p.add_argument("--timeout", type=float, default=5.0, help="wall seconds per execution")
        p.add_argument("--memory-mb", type=int, default=1024)
        if name == "run":
            p.add_argument("file", help="Python file to run ('-' = read the program from stdin)")
            p.add_argument("--stdin", default=None, help="file whose content is the program's stdin")
    args = ap.parse_args(argv)
    limits = Limits(wall_s=args.timeout, memory_mb=args.memory_mb)
    if args.cmd == "run":  # checked before a sandbox is started
        for flag, path in (("FILE", args.file), ("--stdin", args.stdin)):
            if path and path != "-" and not Path(path).is_file():
                print(f"afm sandbox run: {flag} {path}: no such file", file=sys.stderr)
                return 2
    try:
        box = Sandbox(backend=args.backend, mode=args.mode, limits=limits, concurrency=2)
    except SandboxUnavailable as exc:
        print(f"sandbox unavailable: {exc}", file=sys.stderr)
        return 2
    with box:
        if args.cmd == "run":
            code = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
            stdin = Path(args.stdin).read_bytes() if args.stdin else b""
            res = box.run(code, stdin)
            sys.stdout.write(res.stdout)
            sys.stderr.write(res.stderr)
            print(json.dumps({k: v for k, v in res.to_dict().items() if k not in ("stdout", "stderr")}),
                  file=sys.stderr)
            return 0 if res.ok else 1
        print(json.dumps(box.describe(), indent=1))
        failed = 0
        quick = limits.with_(wall_s=2.0)
        for name, (code, ok) in CHECKS.items():
            res = box.run(code, "", quick)
            good = ok(res)
            failed += not good
            print(f"  {'ok  ' if good else 'FAIL'} {name:18s} ({res.status}, {res.wall_s * 1000:.0f} ms)")
        print("sandbox check passed" if not failed else f"sandbox check: {failed} check(s) failed")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
