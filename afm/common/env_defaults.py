"""Defaults stated in the repository's ``environment.sh``, for code that needs one when its variable is unset.

environment.sh is the one place that states the tool servers' default ports (``WEBSEARCH_PORT``,
``CRAWL_PAGE_PORT``, ``WIKI_RAG_PORT``, ``AFM_DEMO_SITE_PORT``). The servers and the tool clients read the variable;
only when it is unset (environment.sh not sourced) do they take the value the file gives, so the number is never
written twice. A copy of afm without the file (an installed wheel) has no fallback: the variable must then be set,
and :func:`port` says so. A leaf module: it imports nothing from afm.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path

ENVIRONMENT_SH = Path(__file__).resolve().parents[2] / "environment.sh"
# `export NAME="${NAME:-value}"`, the form of every defaulted line of environment.sh; values holding `$` are not
# literal (they refer to other variables) and are not taken.
_DEFAULT_LINE = re.compile(r'^export ([A-Z_][A-Z0-9_]*)="\$\{\1:-([^"$}]*)\}"\s*$', re.MULTILINE)


@functools.cache
def _defaults(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    return dict(_DEFAULT_LINE.findall(text))


def environment_default(name: str, path: Path = ENVIRONMENT_SH) -> str | None:
    """The literal default environment.sh gives ``name``, or None (no such line, or no environment.sh)."""
    return _defaults(path).get(name)


def default_port(name: str, env: Mapping[str, str] | None = None) -> int | None:
    """:func:`port`, or None when neither the variable nor environment.sh gives one (a CLI then needs --port)."""
    env = os.environ if env is None else env
    try:
        return port(name, env)
    except ValueError:
        if (env.get(name) or "").strip():
            raise  # a set but malformed port is an error, not "no default"
        return None


def port(name: str, env: Mapping[str, str] | None = None, path: Path = ENVIRONMENT_SH) -> int:
    """The port in variable ``name``, else environment.sh's default for it; a ValueError says what to set."""
    env = os.environ if env is None else env
    raw = (env.get(name) or "").strip()
    source = name
    if not raw:
        raw, source = environment_default(name, path) or "", f"environment.sh's default for {name}"
    if not raw:
        raise ValueError(f"{name} is not set and there is no environment.sh default for it: set {name} "
                         "(source environment.sh) or pass the port explicitly")
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"{source}={raw!r}: expected a port number from 1 to 65535")
    return int(raw)
