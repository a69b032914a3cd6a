"""``afm data ...``: the data pipeline's command line (each subcommand has its own ``-h``).

    afm data distill   run the multi-agent teacher on questions -> run log (JSONL, resumable)
    afm data convert   teacher runs -> CoA SFT records (alpaca / sharegpt) + dataset_info.json
    afm data filter    the paper's SFT filters (complexity, quality, reflection, upsampling, dedup) with a report
    afm data dpo       correct vs incorrect trajectories of a question -> LLaMA-Factory ranking pairs
    afm data select    RL difficulty selection from sampled pass rates -> RL parquet
    afm data rl        question/answer files -> verl RL parquet
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "distill": ("afm.data.distill", "run the multi-agent teacher on questions (resumable run log)"),
    "convert": ("afm.data.convert", "teacher runs -> CoA SFT records (alpaca / sharegpt)"),
    "filter": ("afm.data.filters", "the paper's SFT filters with a per-filter report"),
    "dpo": ("afm.data.dpo_pairs", "correct/incorrect trajectories -> DPO ranking pairs"),
    "select": ("afm.data.difficulty", "RL difficulty selection from pass rates -> RL parquet"),
    "rl": ("afm.data.rl_parquet", "question/answer files -> verl RL parquet"),
}


def usage() -> str:
    lines = ["usage: afm data COMMAND [-h] ...", "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``afm data COMMAND`` to ``<module>.main(argv)``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    entry = COMMANDS.get(argv[0])
    if entry is None:
        print(f"afm data: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
