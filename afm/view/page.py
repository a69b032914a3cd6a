"""Write the page: one self-contained HTML file (inline script and style, data inside, no request of any kind).

The page's Content-Security-Policy allows only its own script and style (by hash) and ``data:`` images: even a
bug that put trajectory text into markup could neither run a script nor reach the network. The file is written
beside its destination and renamed into place, so a reader never sees half a page.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from afm.view.overview import count_blocks, noscript_html
from afm.view.pack import ChunkWriter, block_element, columns, to_json
from afm.view.samples import KeepFirstSuccess, Source, tag_kinds, tag_table
from afm.view.tokens import vocabulary

FORMAT_VERSION = 1
_PLACEHOLDER = re.compile(r"@@([A-Z]+)@@")


@dataclass
class PageInfo:
    """What :func:`write_page` wrote: the file, its size, samples and trajectories per source, notes."""

    path: Path
    bytes: int
    samples: dict[str, int]
    trajectories: int
    notes: list[str] = field(default_factory=list)


def _static(name: str) -> str:
    return resources.files("afm.view").joinpath("static", name).read_text(encoding="utf-8")


def script_text() -> str:
    """The page's script: ``static/js/*.js`` in name order, in one strict-mode function."""
    folder = resources.files("afm.view").joinpath("static", "js")
    parts = [f"// ---- {p.name}\n" + p.read_text(encoding="utf-8")
             for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".js")]
    return "(() => {\n'use strict';\n" + "\n".join(parts) + "\n})();\n"


def _sha(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def content_policy(script: str, style: str) -> str:
    """The page's CSP: its own script and style by hash, data: images (the empty icon), nothing else."""
    return (f"default-src 'none'; script-src '{_sha(script)}'; style-src '{_sha(style)}'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def write_page(sources: Sequence[Source], out: str | os.PathLike, *, title: str | None = None,
               compare: tuple[str, str] | None = None) -> PageInfo:
    """Write the page of ``sources`` to ``out``; returns what it holds.

    ``compare``: the labels of the two runs the compare view opens with (default: the last two scored runs).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    title = title or "afm view: " + ", ".join(s.label for s in sources)
    notes: list[str] = []
    fd, chunk_tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".chunks", dir=out.parent)
    try:
        with os.fdopen(fd, "w+b") as chunks:
            rows, entries, used, writer = _pack_sources(sources, chunks)
            vocabs = _write_vocabs(sources, entries, used, chunks, notes)
            manifest = {"v": FORMAT_VERSION, "title": title, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "tags": [[n, tag_kinds()[n]] for n in tag_table()], "sources": entries,
                        "vocabs": vocabs, "chunks": writer.chunks, "rows": columns(rows),
                        "compare": list(compare) if compare else None}
            for s, entry in zip(sources, entries, strict=True):
                notes += [f"{s.label}: {n}" for n in entry["notes"]]
            blocks = [e["overview"] for e in entries]
            size = _assemble(out, title, manifest, noscript_html(title, list(sources), blocks, rows), chunks)
    finally:
        Path(chunk_tmp).unlink(missing_ok=True)
    return PageInfo(out, size, {s.label: e["n"] for s, e in zip(sources, entries, strict=True)}, writer.count, notes)


def _pack_sources(sources: Sequence[Source], chunks: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                   dict[str, set[int]], ChunkWriter]:
    """Read every source's samples once: details into chunks, rows and overviews kept."""
    writer = ChunkWriter(chunks)
    rows: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    used: dict[str, set[int]] = defaultdict(set)
    for index, source in enumerate(sources):
        keep, where, mine = KeepFirstSuccess(), {}, []
        has_ids = False
        for sample in source.samples:
            decision = "new"
            if sample.key is not None:
                decision = keep.offer(sample.key, sample.row.get("st") != "failed")
                if decision == "skip":
                    continue
            row = dict(sample.row, src=index, d=None)
            if sample.detail is not None:
                row["d"] = writer.add(sample.detail, sample.ids, sample.logprobs)
            if sample.ids:
                has_ids = True
                if source.tokenizer:
                    used[source.tokenizer].update(sample.ids)
            if decision == "replace":
                mine[where[sample.key]] = row
            else:
                if sample.key is not None:
                    where[sample.key] = len(mine)
                mine.append(row)
        overview = source.overview(mine) + count_blocks(mine)
        rows += [{k: v for k, v in r.items() if not k.startswith("_")} for r in mine]
        entries.append({"kind": source.kind, "label": source.label, "path": source.path, "n": len(mine),
                        "overview": overview, "notes": list(source.notes), "has_ids": has_ids,
                        "tokenizer": source.tokenizer, "vocab": None})
    writer.flush()
    return rows, entries, used, writer


def _write_vocabs(sources: Sequence[Source], entries: list[dict[str, Any]], used: dict[str, set[int]], chunks: Any,
                  notes: list[str]) -> list[dict[str, Any]]:
    """One vocabulary element per tokenizer that could be loaded (``afm-v<N>``); each source's entry points at its
    own (``vocab``)."""
    vocabs: list[dict[str, Any]] = []
    index: dict[str, int | None] = {}
    for path, ids in used.items():
        try:
            vocab = vocabulary(path, ids)
        except (ImportError, OSError, ValueError) as exc:
            notes.append(f"token texts unavailable ({path}: {type(exc).__name__}: {str(exc)[:200]}); the token "
                         "view shows ids")
            index[path] = None
            continue
        index[path] = len(vocabs)
        chunks.write(block_element(f"afm-v{len(vocabs)}", to_json(vocab)))
        vocabs.append({"tokenizer": path, "n": len(vocab["ids"])})
    for source, entry in zip(sources, entries, strict=True):
        entry["vocab"] = index.get(source.tokenizer) if source.tokenizer else None
    return vocabs


def _assemble(out: Path, title: str, manifest: dict[str, Any], noscript: str, chunks: Any) -> int:
    """Fill the template and write the page (head, manifest, script, then the chunks) atomically."""
    script, style = script_text(), _static("style.css")
    values = {"CSP": escape(content_policy(script, style)), "TITLE": escape(title), "CSS": style,
              "NOSCRIPT": noscript, "SCRIPT": script,
              "MANIFEST": block_element("afm-m", to_json(manifest)).decode("ascii")}
    template = _static("page.html")
    head, _, tail = template.partition("@@CHUNKS@@")
    # one pass per part: a value is never searched for placeholders again (a title may hold "@@SCRIPT@@")
    head = _PLACEHOLDER.sub(lambda m: values[m.group(1)], head)
    tail = _PLACEHOLDER.sub(lambda m: values[m.group(1)], tail)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(head.encode("utf-8", "replace"))
            chunks.seek(0)
            while block := chunks.read(1 << 22):
                fh.write(block)
            fh.write(tail.encode("utf-8", "replace"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out.stat().st_size
