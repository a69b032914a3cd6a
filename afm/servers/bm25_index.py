"""A persisted BM25 index (bm25s) over a JSONL corpus, shared by the search server's local backend and the wiki
server.

    python -m afm.servers.bm25_index build CORPUS.jsonl INDEX_DIR [--force]
    python -m afm.servers.bm25_index query INDEX_DIR "who designed the Brassel Lighthouse" [-k 5]
    python -m afm.servers.bm25_index info INDEX_DIR

The index folder holds bm25s's sparse score matrix (``bm25/``), the byte range of every indexed corpus line
(``ranges.npy``) and ``manifest.json`` (corpus path, size, mtime, SHA-256, counts, tokenizer), written last.
Servers call :func:`ensure_index`, which loads the folder when its manifest matches the corpus and rebuilds it
otherwise, so editing the corpus and restarting is enough. Text is lower-cased, split into words of two or more
word characters, and English stopwords are dropped; there is no stemming.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from afm.servers.corpus import CorpusReader, CorpusScan, corpus_identity, same_corpus
from afm.servers.index_store import index_lock, publish, read_manifest, staging_dir, write_manifest

log = logging.getLogger(__name__)

FORMAT = "afm-bm25/1"
_WORD = re.compile(r"(?u)\b\w\w+\b")


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_STOP = _stopwords()


def tokenize(text: str) -> list[str]:
    """Lower-cased words of 2+ word characters, English stopwords removed (same for documents and queries)."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def default_index_dir(corpus: str | Path) -> Path:
    """Where an index lives when no folder is given: ``<corpus>.bm25`` next to the corpus."""
    return Path(f"{Path(corpus)}.bm25")


class BM25Index:
    """A loaded index: query with :meth:`search`, read documents with :meth:`document`."""

    def __init__(self, retriever: Any, corpus: CorpusReader, manifest: dict[str, Any]) -> None:
        self.retriever = retriever
        self.corpus = corpus
        self.manifest = manifest
        self._vocab: dict[str, int] = retriever.vocab_dict

    def __len__(self) -> int:
        return len(self.corpus)

    @classmethod
    def load(cls, index_dir: str | Path, corpus: str | Path | None = None, mmap: bool = True) -> BM25Index:
        """Load a built index; ``corpus`` overrides the corpus path recorded in the manifest."""
        import bm25s

        index_dir = Path(index_dir)
        manifest = read_manifest(index_dir)
        if manifest is None or manifest.get("format") != FORMAT:
            raise FileNotFoundError(f"{index_dir} is not a complete afm BM25 index (build it with "
                                    f"'python -m afm.servers.bm25_index build CORPUS {index_dir}')")
        retriever = bm25s.BM25.load(str(index_dir / "bm25"), mmap=mmap, show_progress=False)
        ranges = np.load(index_dir / "ranges.npy", mmap_mode="r" if mmap else None)
        reader = CorpusReader(corpus or manifest["corpus"]["path"], ranges)
        return cls(retriever, reader, manifest)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top ``k`` ``(doc_index, score)`` by BM25, best first; documents sharing no word are left out."""
        ids = [self._vocab[t] for t in tokenize(query) if t in self._vocab]
        if not ids or k <= 0:
            return []
        scores = self.retriever.get_scores_from_ids(ids)
        k = min(k, scores.shape[0])
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(i), float(scores[i])) for i in top if scores[i] > 0]

    def document(self, i: int) -> dict[str, Any]:
        """The corpus record of document ``i``."""
        return self.corpus.get(i)

    def close(self) -> None:
        self.corpus.close()


def build_index(corpus: str | Path, index_dir: str | Path) -> dict[str, Any]:
    """Index ``corpus`` into ``index_dir`` (replacing what is there); returns the manifest."""
    import bm25s

    t0 = time.perf_counter()
    corpus = Path(corpus)
    identity = corpus_identity(corpus)
    scan = CorpusScan(corpus)
    ranges: list[tuple[int, int]] = []
    tokens: list[list[str]] = []
    for start, end, _rec, text in scan:
        ranges.append((start, end))
        tokens.append(tokenize(text))
    report = scan.report
    if report.n_skipped:
        log.warning("%s: skipped %d lines (%s; first at lines %s)", corpus, report.n_skipped, report.reasons,
                    report.skipped_lines[:5])
    if not ranges or not any(tokens):
        raise ValueError(f"{corpus}: no indexable records ({report.n_records} usable, {report.n_skipped} skipped: "
                         f"{report.reasons}); each line must be a JSON object with 'contents' or 'title'/'text'")
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    staged = staging_dir(index_dir)
    retriever.save(str(staged / "bm25"), show_progress=False)
    np.save(staged / "ranges.npy", np.asarray(ranges, dtype=np.int64).reshape(-1, 2))
    manifest = {
        "format": FORMAT,
        "corpus": identity,
        "n_docs": len(ranges),
        "n_skipped": report.n_skipped,
        "skipped_reasons": report.reasons,
        "skipped_first_lines": report.skipped_lines,
        "vocab_size": len(retriever.vocab_dict),
        "tokenizer": {"pattern": _WORD.pattern, "lower": True, "stopwords": "bm25s english", "stemmer": None},
        "built_at": time.time(),
        "build_s": round(time.perf_counter() - t0, 3),
    }
    write_manifest(staged, manifest)
    publish(staged, index_dir)
    log.info("built BM25 index of %s: %d docs in %.1fs -> %s", corpus, len(ranges), manifest["build_s"], index_dir)
    return manifest


def ensure_index(corpus: str | Path, index_dir: str | Path | None = None, *, force: bool = False,
                 mmap: bool = True) -> BM25Index:
    """Load the index of ``corpus``, building or rebuilding it first when missing, stale or ``force``-d."""
    corpus = Path(corpus)
    if not corpus.is_file():
        raise FileNotFoundError(f"corpus not found: {corpus}")
    index_dir = Path(index_dir) if index_dir else default_index_dir(corpus)
    with index_lock(index_dir):
        manifest = read_manifest(index_dir)
        fresh = (not force and manifest is not None and manifest.get("format") == FORMAT
                 and same_corpus(manifest["corpus"], corpus))
        if not fresh:
            build_index(corpus, index_dir)
        elif manifest["corpus"].get("mtime_ns") != corpus.stat().st_mtime_ns:
            # Same bytes under a new mtime (a copy, a touch): remember it so the next start skips the hash.
            manifest["corpus"] = corpus_identity(corpus, manifest["corpus"]["sha256"])
            write_manifest(index_dir, manifest)
    return BM25Index.load(index_dir, corpus, mmap=mmap)


def main(argv: list[str] | None = None) -> int:
    """CLI: build / query / info."""
    p = argparse.ArgumentParser(prog="python -m afm.servers.bm25_index", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or rebuild when stale) the index of a JSONL corpus")
    b.add_argument("corpus")
    b.add_argument("index_dir", nargs="?", help="default: <corpus>.bm25")
    b.add_argument("--force", action="store_true", help="rebuild even when the index matches the corpus")
    q = sub.add_parser("query", help="print the top documents for a query")
    q.add_argument("index_dir")
    q.add_argument("query")
    q.add_argument("-k", type=int, default=5)
    i = sub.add_parser("info", help="print an index's manifest")
    i.add_argument("index_dir")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    try:
        if args.cmd == "build":
            t0 = time.perf_counter()
            index = ensure_index(args.corpus, args.index_dir, force=args.force)
            m = index.manifest
            print(f"index {args.index_dir or default_index_dir(args.corpus)}: {m['n_docs']} documents "
                  f"({m['n_skipped']} lines skipped), vocabulary {m['vocab_size']}, ready in "
                  f"{time.perf_counter() - t0:.2f}s")
        elif args.cmd == "query":
            index = BM25Index.load(args.index_dir)
            for rank, (doc, score) in enumerate(index.search(args.query, args.k), start=1):
                rec = index.document(doc)
                head = (rec.get("title") or rec.get("contents") or "").split("\n")[0]
                print(f"{rank}. [{score:.3f}] {rec.get('id', doc)}  {head[:100]}")
        else:
            manifest = read_manifest(args.index_dir)
            if manifest is None:
                print(f"{args.index_dir}: no manifest (not built, or build interrupted)", file=sys.stderr)
                return 1
            print(json.dumps(manifest, indent=2))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
