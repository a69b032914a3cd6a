"""The one rule for matching the names users type for registered things: data sources (afm.rewards), benchmarks
(afm.eval.datasets) and prompts (afm.prompts).

Two spellings name the same thing when they agree ignoring case and everything but letters and digits, so
``LCB-v5``, ``lcb_v5`` and ``LCB v5`` are one name. Registries key their tables by :func:`canonical` and refuse two
entries with the same canonical form. A leaf module: it imports nothing from afm.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def canonical(name: str) -> str:
    """The lookup key of a name: lowercase letters and digits only (``"LCB-v5"`` -> ``"lcbv5"``)."""
    return _NOT_ALNUM.sub("", str(name).lower())


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``known`` that look like ``name`` (a likely misspelling), closest first, compared in their
    canonical forms."""
    by_key: dict[str, str] = {}
    for k in known:
        by_key.setdefault(canonical(k), k)
    return [by_key[m] for m in difflib.get_close_matches(canonical(name), list(by_key), n=n, cutoff=0.6)]
