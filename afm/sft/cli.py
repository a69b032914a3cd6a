"""``afm-sft``: ``llamafactory-cli`` with the afm overlay applied, plus ``mask-report``.

usage:
    afm-sft train config.yaml [key=value ...] [--key value ...]
    afm-sft train --model_name_or_path M --stage sft ... --ignore_observation true --ignore_observation_token observation
    afm-sft mask-report config.yaml [key=value ...] [--show N]
    afm-sft version | env | export ... | chat ... (passed to LLaMA-Factory with the overlay applied)
"""

from __future__ import annotations

import sys
from pathlib import Path

from afm.sft.compat import UnsupportedLlamaFactory, require_supported

USAGE = __doc__.strip()
_LF_COMMANDS = {"train", "export", "chat", "api", "webchat", "webui", "env", "version", "help"}


class CliError(ValueError):
    """Bad command-line input; printed without a traceback."""


def normalize_args(args: list[str]) -> list[str]:
    """Check a config path and let ``--key value`` flags follow a yaml/json config (as ``key=value``)."""
    if not args or not args[0].endswith((".yaml", ".yml", ".json")):
        return args
    config = Path(args[0])
    if not config.is_file():
        raise CliError(f"config file not found: {args[0]}")
    out = [args[0]]
    i = 1
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            if not key:
                raise CliError(f"malformed flag {arg!r}")
            if not eq:
                if i + 1 < len(args) and not args[i + 1].startswith("--") and "=" not in args[i + 1]:
                    value = args[i + 1]
                    i += 1
                else:
                    value = "true"
            out.append(f"{key}={value}")
        elif "=" in arg:
            out.append(arg)
        else:
            raise CliError(f"unexpected argument {arg!r} after the config file: use key=value or --key value")
        i += 1
    return out


def load_args(args: list[str]) -> dict | list[str]:
    """What LLaMA-Factory's ``read_args`` would build from this argv: a dict for a config file, else the flags."""
    args = normalize_args(args)
    if not args or not args[0].endswith((".yaml", ".yml", ".json")):
        return args
    import json

    from omegaconf import OmegaConf

    path = Path(args[0]).absolute()
    base = OmegaConf.create(json.loads(path.read_text())) if path.suffix == ".json" else OmegaConf.load(path)
    return OmegaConf.to_container(OmegaConf.merge(base, OmegaConf.from_cli(args[1:])))


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
