"""How ``afm-sft`` reads its arguments: a config file followed by ``--key value`` flags, or flags alone. Shared by
the CLI (afm/sft/cli.py) and the mask report (afm/sft/report.py), which parses them as training would."""

from __future__ import annotations

from pathlib import Path


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
