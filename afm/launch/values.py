"""How launch knobs read: numbers, booleans and lists as users type them in bash, and the error that names a knob
whose value cannot work. Shared by the SFT/DPO settings (:mod:`afm.launch.sft`) and the RL ones
(:mod:`afm.launch.rl`, :mod:`afm.rl.knobs`). Standard library only: the launchers run it with whatever interpreter the script found."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")
_INT = re.compile(r"^-?[0-9]+$")
_UINT = re.compile(r"^[0-9]+$")


class KnobError(ValueError):
    """A knob whose value cannot work; the message names it and says what it takes."""


def is_number(value: str) -> bool:
    """A plain decimal number such as 1e-6, 0.1 or .5 (no sign)."""
    return bool(_NUMBER.match(value))


def is_int(value: str) -> bool:
    """A whole number, possibly negative."""
    return bool(_INT.match(value))


def is_uint(value: str) -> bool:
    """A whole number >= 0."""
    return bool(_UINT.match(value))


def is_posint(value: str) -> bool:
    """A whole number > 0."""
    return is_uint(value) and int(value) > 0


def parse_bool(name: str, value: str) -> bool:
    """True/False from the spellings people type (1/0, yes/no, on/off, any case); KnobError naming ``name``."""
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise KnobError(f"{name} must be true or false (got '{value}')")


def as_bool(name: str, value: str) -> str:
    """``true``/``false`` (the words verl's Hydra overrides take) from the spellings people type."""
    return "true" if parse_bool(name, value) else "false"


def split_list(value: str) -> list[str]:
    """A comma-separated value split as bash's ``IFS=, read -a`` does: one trailing empty item is dropped."""
    if not value:
        return []
    items = value.split(",")
    return items[:-1] if items[-1] == "" else items
