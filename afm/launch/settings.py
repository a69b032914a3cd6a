"""Settings declared once: each knob a dataclass field carrying its default, its environment variable, its help and
its check (TRL's ``GRPOConfig`` model). Reading the environment, the checks, ``--help`` and the docs' knob tables
all walk these fields, so a default or a help line is written in one place. Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from afm.launch.values import is_number, is_posint, is_uint

HELP_COLUMN = 40  # where a knob's help starts in the table (the default column starts at 26)


@dataclass(frozen=True)
class Check:
    """A rule a knob's value must follow: ``test`` passes it, ``says`` what it takes, for the error message
    ``<KNOB> must be <says> (got '<value>')``."""

    test: Callable[[str], bool]
    says: str

    def error(self, name: str, value: str) -> str | None:
        """The message for ``value`` of knob ``name``, or None when it passes."""
        return None if self.test(value) else f"{name} must be {self.says.format(name=name)} (got '{value}')"


def number(example: str) -> Check:
    """A plain number, e.g. 1e-6."""
    return Check(is_number, f"a number such as {example}")


def positive_int(says: str = "a positive integer") -> Check:
    return Check(is_posint, says)


def whole(says: str) -> Check:
    """A whole number >= 0."""
    return Check(is_uint, says)


def one_of(options: tuple[str, ...], says: str = "") -> Check:
    """One of ``options``; ``says`` defaults to "a, b or c"."""
    return Check(options.__contains__, says or ", ".join(options[:-1]) + " or " + options[-1])


@dataclass(frozen=True)
class Knob:
    """What a settings field is to the user."""

    env: str  # the environment variable
    help: str | None  # lines of the help table (None: not listed); a first empty line puts the help below
    check: Check | None = None
    stage: str = ""  # the stage that reads it ("" = every stage)
    shown: str | None = None  # the table's default column when not the value itself; {} stands for the value


def knob(env: str, default: Any, help: str | None = None, *, check: Check | None = None, stage: str = "",
         shown: str | None = None) -> Any:
    """A settings field: its default and how the user sets it, checks it and reads about it."""
    return field(default=default, metadata={"knob": Knob(env, help, check, stage, shown)})


def knobs(cls: type) -> Iterator[tuple[dataclasses.Field, Knob]]:
    """The knob fields of a settings class, in declaration order (the order of the table and of the checks)."""
    for f in dataclasses.fields(cls):
        if "knob" in f.metadata:
            yield f, f.metadata["knob"]


def default_of(cls: type, env: str) -> Any:
    """The declared default of the knob read from ``env``."""
    for f, k in knobs(cls):
        if k.env == env:
            return f.default
    raise KeyError(env)


def check_fields(settings: Any, stage: str) -> str | None:
    """The error of the first knob (in declaration order) whose value breaks its check, or None."""
    for f, k in knobs(type(settings)):
        if k.check is not None and (not k.stage or k.stage == stage):
            message = k.check.error(k.env, getattr(settings, f.name))
            if message:
                return message
    return None


def table(cls: type) -> str:
    """The knob table of ``--help``: name, default (as shown), help, one knob a row, help lines aligned."""
    lines = []
    for f, k in knobs(cls):
        if k.help is None:
            continue
        shown = k.shown.format(f.default) if k.shown is not None else _shown(f.default)
        lines += help_rows(k.env, shown, k.help)
    return "\n".join(lines) + "\n"


def help_rows(env: str, shown: object, text: str) -> list[str]:
    """One knob's lines of a --help table: name, shown default, then its help in the help column."""
    row = f"  {env:<23} {shown}"
    first, *rest = text.split("\n")
    if first:
        row += " " * max(1, HELP_COLUMN - len(row)) + first
    return [row, *(" " * HELP_COLUMN + line for line in rest)]


def markdown_table(cls: type) -> str:
    """The knob table for the docs: variable, default (as shown), help."""
    rows = ["| knob | default | what it does |", "|---|---|---|"]
    for f, k in knobs(cls):
        if k.help is None:
            continue
        shown = k.shown.format(f.default) if k.shown is not None else _shown(f.default)
        text = " ".join(line.strip() for line in k.help.split("\n") if line.strip()).replace("|", "\\|")
        rows.append(f"| `{k.env}` | `{shown}` | {text} |")
    return "\n".join(rows) + "\n"


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return "true" if default else "false"
    return str(default)
