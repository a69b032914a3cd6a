"""``afm view PATH... [--out FILE.html]``: write the trajectory viewer page of eval runs, inference output, SFT
sets and verl dumps (see :mod:`afm.view`)."""

from __future__ import annotations

import argparse
import sys

from afm.view import write_view


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm view", description="Write one self-contained HTML page (offline, any "
                                "browser) to read eval runs, afm infer output, SFT sets and verl's RL dumps.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="eval run folders, afm infer .jsonl, SFT sets (folder with dataset_info.json or .json), "
                        "mask-report .json, verl dump folders, or a folder holding any of them (runs/quickstart)")
    p.add_argument("--out", default="view.html", help="the page to write (default: %(default)s)")
    p.add_argument("--title", default=None, help="the page's title (default: the sources' names)")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer folder for the token view of sources that name none (afm infer output)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), default=None,
                   help="labels of the two runs the compare view opens with (default: the last two scored runs)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm view``: 0 when the page is written, 2 for a path it cannot read."""
    args = build_parser().parse_args(argv)
    try:
        info = write_view(args.paths, args.out, title=args.title, tokenizer=args.tokenizer,
                          compare=tuple(args.compare) if args.compare else None)
    except (FileNotFoundError, ValueError) as exc:
        print(f"afm view: {exc}", file=sys.stderr)
        return 2
    for note in info.notes:
        print(f"afm view: note: {note}", file=sys.stderr)
    counts = ", ".join(f"{label} {n}" for label, n in info.samples.items())
    print(f"view: {info.path} ({info.bytes / 1e6:.1f} MB; samples: {counts}; {info.trajectories} with details)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
