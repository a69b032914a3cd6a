"""What each path given to ``afm view`` is, and the sources it holds.

A path is an eval run folder (or its ``results.jsonl``), a verl dump folder (``<step>.jsonl`` files), an SFT set
(a folder with ``dataset_info.json``, or one dataset file), a mask report (``afm-sft mask-report --json``) or
``afm infer`` output. Any other folder is searched (three levels down) for those, so ``afm view runs/quickstart``
shows a whole quickstart; a file that is none of them is an error naming what was expected.
"""

from __future__ import annotations

import json
from pathlib import Path

from afm.view.load_eval import is_eval_run, load_eval
from afm.view.load_infer import is_infer_output, load_infer
from afm.view.load_sft import is_mask_report, is_sft_set, load_sft, mask_reports
from afm.view.load_verl import dump_kind, is_verl_dump, load_verl
from afm.view.samples import Source

KIND_ORDER = ("sft", "eval", "infer", "rollouts", "validation")
SEARCH_DEPTH = 3
EXPECTED = ("an afm eval run folder (results.jsonl), afm infer output (.jsonl), an SFT set (a folder with "
            "dataset_info.json, or its .json), an afm-sft mask-report --json file, or verl dumps (<step>.jsonl)")


def kind_of(path: Path) -> str | None:
    """``eval``, ``dump``, ``sft``, ``mask_report``, ``infer``, or None for anything else."""
    for kind, test in (("eval", is_eval_run), ("dump", is_verl_dump), ("sft", is_sft_set),
                       ("mask_report", is_mask_report), ("infer", is_infer_output)):
        if test(path):
            return kind
    return None


def _search(folder: Path, depth: int) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    try:
        children = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except OSError:
        return found
    for child in children:
        kind = kind_of(child)
        if kind is not None:
            found.append((kind, child))
        elif child.is_dir() and depth > 1:
            found += _search(child, depth - 1)
    return found


def _label(path: Path, kind: str) -> str:
    if kind == "eval":
        return (path if path.is_dir() else path.parent).name
    if kind == "dump":
        return f"{path.parent.name}/{path.name}" if path.is_dir() else path.stem
    if kind == "sft":
        return path.name if path.is_dir() else path.stem
    return path.stem


def find_sources(paths: list[str | Path], tokenizer: str | None = None) -> list[Source]:
    """The sources of ``paths``: SFT sets, eval runs, inference, RL dumps; within a kind in the order given, and
    what a searched folder holds oldest first (``runs/quickstart``: untrained, SFT, RL).

    Raises FileNotFoundError for a missing path and ValueError for a path that holds nothing the page can show.
    """
    found: list[tuple[str, Path]] = []
    given: dict[Path, int] = {}
    for position, raw in enumerate(paths):
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or folder")
        kind = kind_of(path)
        if kind is not None:
            found.append((kind, path))
            given.setdefault(path, position)
            continue
        inside = _search(path, SEARCH_DEPTH) if path.is_dir() else []
        if not inside:
            raise ValueError(f"{path}: not {EXPECTED}" + (", and no such thing inside it" if path.is_dir() else ""))
        found += inside
        for _, p in inside:
            given.setdefault(p, position)
    reports: dict[str, dict] = {}
    for kind, path in found:
        if kind == "mask_report":
            reports.update(mask_reports(json.loads(path.read_text(encoding="utf-8"))))
    ranked: list[tuple[tuple[int, int, float], Source]] = []
    for kind, path in dict.fromkeys(found):  # a path given twice is shown once
        label = _label(path, kind)
        if kind == "eval":
            made = [load_eval(path, label)]
        elif kind == "infer":
            made = [load_infer(path, label, tokenizer)]
        elif kind == "sft":
            made = load_sft(path, reports)
        elif kind == "dump":
            made = [load_verl(path, label, dump_kind(path))]
        else:
            continue
        for s in made:
            s.tokenizer = s.tokenizer or (tokenizer if s.kind in ("eval", "infer") else None)
            ranked.append(((KIND_ORDER.index(s.kind), given[path], _mtime(path)), s))
    sources = [s for _, s in sorted(ranked, key=lambda item: item[0])]
    _unique_labels(sources)
    return sources


def _mtime(path: Path) -> float:
    """When a source was last written (an eval run's results.jsonl, not its folder: a later report touches that)."""
    target = path / "results.jsonl" if (path / "results.jsonl").is_file() else path
    try:
        return target.stat().st_mtime
    except OSError:
        return 0.0


def _unique_labels(sources: list[Source]) -> None:
    seen: dict[str, int] = {}
    for s in sources:
        n = seen.get(s.label, 0)
        seen[s.label] = n + 1
        if n:
            s.label = f"{s.label} ({n + 1})"
