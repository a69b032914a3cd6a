"""``afm view``: one self-contained HTML file to read trajectories in any browser, offline.

    afm view runs/eval/sft runs/eval/rl --out view.html     # two eval runs: scores, table, compare mode
    afm view runs/quickstart                                 # everything a folder holds

Inputs (any mix; :mod:`afm.view.discover`): ``afm eval run`` folders (with or without ``--keep-trajectories``),
``afm infer`` output, SFT sets from ``afm data convert`` (and ``afm-sft mask-report --json`` totals), verl's
rollout and validation dumps. Loaders (``load_*``) turn each into a :class:`~afm.view.samples.Source`;
:mod:`afm.view.page` writes the page, whose data :mod:`afm.view.pack` compresses and whose script and style are
the files under ``static/``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from afm.view.page import PageInfo, write_page


def write_view(paths: Sequence[str | os.PathLike], out: str | os.PathLike, *, title: str | None = None,
               tokenizer: str | None = None, compare: tuple[str, str] | None = None) -> PageInfo:
    """Find the sources in ``paths`` and write their page to ``out`` (see :func:`afm.view.page.write_page`).

    ``tokenizer``: a tokenizer folder for sources that name none (``afm infer`` output), so the token view can
    spell the ids. Raises FileNotFoundError / ValueError for a path that holds nothing the page can show.
    """
    from afm.view.discover import find_sources

    sources = find_sources([Path(p) for p in paths], tokenizer)
    return write_page(sources, out, title=title, compare=compare)


__all__ = ["PageInfo", "write_page", "write_view"]
