"""Knob names as users type them: the original project's spellings (aliases) and misspelt knobs.

Both launches apply them (afm/launch/sft.py, afm/launch/rl.py), so an SFT and an RL script answer an old or misspelt
name alike. Standard library only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from typing import TextIO

from afm.launch.values import KnobError

_SEVERAL = re.compile(r"\S\s+\S")
_KNOB_LIKE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def apply_aliases(env: MutableMapping[str, str], aliases: Mapping[str, str], out: TextIO | None = None) -> None:
    """Give each knob the value of its original name (``aliases``: original name -> knob, in the order to note).

    When the original name is set and the knob is not, the knob takes its value (one note says aliases are
    accepted, then one line per name); when both are set, the knob wins and a warning says so. The grid-search
    array forms of the original's scripts, ``("1e-5")`` or ``(1e-5)``, read as the one value; several values are a
    :class:`KnobError` (one launch trains one configuration)."""
    out = out or sys.stderr
    noted = False
    for old, new in aliases.items():
        if old not in env:
            continue
        value = env[old]
        value = value.removeprefix("(").removesuffix(")").replace('"', "").replace("'", "")
        if _SEVERAL.search(value):
            raise KnobError(f"{old} holds several values ({value}): one launch trains one configuration; set {new} "
                            "to one of them")
        if new in env:
            if env[new] != value:
                print(f"[afm] warning: {old} (the original's name) is ignored: {new}={env[new]} is also set", file=out,
                      flush=True)
            continue
        if not noted:
            print("[afm] note: the original project's variable names are accepted as aliases of afm's knobs",
                  file=out, flush=True)
            noted = True
        print(f"[afm]   {old} -> {new}={value}", file=out, flush=True)
        env[new] = value


def misspelt(names: Iterable[str], known: Iterable[str]) -> list[str]:
    """One warning per name in ``names`` that is no knob but an edit or two away from one in ``known`` (a misspelt
    knob is silently ignored otherwise): names of 9 or more characters may be 2 edits away, shorter ones 1; names
    and knobs under 5 characters are left alone."""
    known = list(known)
    candidates = [k for k in known if len(k) >= 5]
    warnings = []
    for name in sorted(set(names) - set(known)):
        if len(name) < 5 or not _KNOB_LIKE.match(name):
            continue
        best, best_distance = "", 99
        for knob in candidates:
            if abs(len(name) - len(knob)) > 2:
                continue
            distance = _edits(name, knob)
            if distance < best_distance:
                best, best_distance = knob, distance
        if best and best_distance <= (2 if len(name) >= 9 else 1):
            warnings.append(f"{name} is set but is not a knob of this script; did you mean {best}?")
    return warnings


def _edits(a: str, b: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, char_b in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (char_a != char_b))
    return row[len(b)]
