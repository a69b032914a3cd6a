"""``afm-sft``: ``llamafactory-cli`` with the afm overlay applied, plus ``mask-report``.

usage:
    afm-sft train config.yaml [key=value ...] [--key value ...]
    afm-sft train --model_name_or_path M --stage sft ... --ignore_observation true --ignore_observation_token observation
    afm-sft mask-report config.yaml [key=value ...] [--show N]
    afm-sft version | env | export ... | chat ... (passed to LLaMA-Factory with the overlay applied)
"""

from __future__ import annotations

import os
import sys

from afm.sft.args import CliError, normalize_args
from afm.sft.compat import UnsupportedLlamaFactory, require_supported

USAGE = __doc__.strip()
_LF_COMMANDS = {"train", "export", "chat", "api", "webchat", "webui", "env", "version", "help"}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm-sft``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "mask-report":
            from afm.sft.report import main as report_main

            return report_main(rest)
        if command not in _LF_COMMANDS:
            raise CliError(f"unknown command {command!r}\n{USAGE}")
        rest = normalize_args(rest)
        require_supported()  # before the overlay imports LLaMA-Factory's modules, which may have moved
        if command == "train":
            # torchrun fixed by the environment: started here, without importing the training stack (the ranks do)
            from afm.sft.torchrun import run, torchrun_plan

            if (plan := torchrun_plan(rest, os.environ)) is not None:
                return run(plan)
        from afm.sft.overlay import apply

        apply()
        from llamafactory import launcher

        sys.argv = ["afm-sft", command, *rest]
        launcher.launch()
        return 0
    except (CliError, UnsupportedLlamaFactory) as e:
        print(f"afm-sft: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
