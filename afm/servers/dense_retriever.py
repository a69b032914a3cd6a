"""Dense retrieval for the wiki server: e5-style embeddings (transformers) + an exact FAISS inner-product index.

Embeddings follow e5: ``"query: "`` / ``"passage: "`` prefixes, mean pooling over the attention mask, L2
normalisation, so inner product = cosine similarity (``faiss.IndexFlatIP``). Any encoder loadable with
``AutoModel`` works (a local folder or a hub id such as ``intfloat/e5-base-v2`` when online).

Two ways to get an index:
- build one (:func:`ensure_dense_index`): the corpus is encoded in chunks, so memory stays bounded; the folder
  holds ``faiss.index``, the corpus line ranges and a manifest (corpus identity, model identity) and is rebuilt
  when either changes;
- reuse a prebuilt FAISS file whose vector ``i`` is corpus record ``i`` (e.g. Search-R1's ``e5_Flat.index`` with
  ``wiki-18.jsonl``): pass ``faiss_index``; only the corpus line ranges are computed and stored.

Needs the ``dense`` extra (faiss-cpu) and torch/transformers.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from afm.servers.corpus import CorpusReader, CorpusScan, corpus_identity, same_corpus
from afm.servers.index_store import index_lock, publish, read_manifest, staging_dir, write_manifest

log = logging.getLogger(__name__)

FORMAT = "afm-dense/1"
FORMAT_EXTERNAL = "afm-dense-external/1"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "


def model_identity(model: str) -> dict[str, Any]:
    """What names an encoder for staleness checks: its path or id, plus a hash of its config and weight sizes."""
    path = Path(model)
    if not path.is_dir():
        return {"model": model}
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(str(f.stat().st_size).encode())
            if f.name == "config.json":
                h.update(f.read_bytes())
    return {"model": str(path.resolve()), "fingerprint": h.hexdigest()}


class E5Encoder:
    """Mean-pooled, normalised sentence embeddings from a transformers encoder; thread-safe (one call at a time)."""

    def __init__(self, model: str, device: str | None = None, max_length: int = 256, batch_size: int = 64) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model, dtype=dtype).to(self.device).eval()
        self.max_length = max_length
        self.batch_size = batch_size
        self.name = model
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """``(len(texts), dim)`` float32 unit vectors of ``prefix + text``."""
        import torch

        out = []
        with self._lock, torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                batch = [prefix + t for t in texts[i:i + self.batch_size]]
                enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                     return_tensors="pt").to(self.device)
                hidden = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
                pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
                out.append(pooled.cpu().numpy())
        return np.concatenate(out).astype(np.float32) if out else np.zeros((0, self.dim), np.float32)


class DenseIndex:
    """A FAISS index over a corpus; query with :meth:`search_many`."""

    def __init__(self, index: Any, encoder: E5Encoder, corpus: CorpusReader, manifest: dict[str, Any]) -> None:
        self.index = index
        self.encoder = encoder
        self.corpus = corpus
        self.manifest = manifest

    def __len__(self) -> int:
        return len(self.corpus)

    def search_many(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Top ``k`` ``(doc_index, score)`` per query, best first."""
        if not queries:
            return []
        vectors = self.encoder.encode(list(queries), QUERY_PREFIX)
        scores, ids = self.index.search(vectors, min(k, len(self.corpus)))
        return [[(int(i), float(s)) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
                for row_ids, row_scores in zip(ids, scores, strict=True)]

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search_many([query], k)[0]

    def document(self, i: int) -> dict[str, Any]:
        return self.corpus.get(i)

    def close(self) -> None:
        self.corpus.close()


def _build(corpus: Path, index_dir: Path, encoder: E5Encoder, chunk: int) -> dict[str, Any]:
    import faiss

    t0 = time.perf_counter()
    identity = corpus_identity(corpus)
    index = faiss.IndexFlatIP(encoder.dim)
    scan = CorpusScan(corpus)
    ranges: list[tuple[int, int]] = []
    texts: list[str] = []
    for start, end, _rec, text in scan:
        ranges.append((start, end))
        texts.append(text)
        if len(texts) >= chunk:
            index.add(encoder.encode(texts, PASSAGE_PREFIX))
            texts = []
    if texts:
        index.add(encoder.encode(texts, PASSAGE_PREFIX))
    if not ranges:
        raise ValueError(f"{corpus}: no indexable records ({scan.report.reasons})")
    staged = staging_dir(index_dir)
    faiss.write_index(index, str(staged / "faiss.index"))
    np.save(staged / "ranges.npy", np.asarray(ranges, dtype=np.int64).reshape(-1, 2))
    manifest = {"format": FORMAT, "corpus": identity, "encoder": model_identity(encoder.name),
                "dim": encoder.dim, "n_docs": len(ranges), "n_skipped": scan.report.n_skipped,
                "skipped_reasons": scan.report.reasons, "max_length": encoder.max_length,
                "prefixes": [QUERY_PREFIX, PASSAGE_PREFIX], "pooling": "mean", "built_at": time.time(),
                "build_s": round(time.perf_counter() - t0, 3)}
    write_manifest(staged, manifest)
    publish(staged, index_dir)
    log.info("built dense index of %s: %d docs in %.1fs", corpus, len(ranges), manifest["build_s"])
    return manifest


def _ranges_only(corpus: Path, index_dir: Path, faiss_path: Path) -> dict[str, Any]:
    scan = CorpusScan(corpus)
    ranges = [(start, end) for start, end, _rec, _text in scan]
    staged = staging_dir(index_dir)
    np.save(staged / "ranges.npy", np.asarray(ranges, dtype=np.int64).reshape(-1, 2))
    manifest = {"format": FORMAT_EXTERNAL, "corpus": corpus_identity(corpus), "n_docs": len(ranges),
                "faiss_index": {"path": str(faiss_path.resolve()), "size": faiss_path.stat().st_size},
                "n_skipped": scan.report.n_skipped, "built_at": time.time()}
    write_manifest(staged, manifest)
    publish(staged, index_dir)
    return manifest


def ensure_dense_index(corpus: str | Path, index_dir: str | Path, encoder: E5Encoder, *,
                       faiss_index: str | Path | None = None, force: bool = False,
                       chunk: int = 4096) -> DenseIndex:
    """Load the dense index of ``corpus``; build it (or, with ``faiss_index``, its line ranges) when stale."""
    import faiss

    corpus, index_dir = Path(corpus), Path(index_dir)
    if not corpus.is_file():
        raise FileNotFoundError(f"corpus not found: {corpus}")
    external = Path(faiss_index) if faiss_index else None
    if external is not None and not external.is_file():
        raise FileNotFoundError(f"FAISS index not found: {external}")
    with index_lock(index_dir):
        m = read_manifest(index_dir)
        if external is None:
            fresh = (m is not None and m.get("format") == FORMAT and same_corpus(m["corpus"], corpus)
                     and m.get("encoder") == model_identity(encoder.name) and m.get("dim") == encoder.dim)
            if force or not fresh:
                m = _build(corpus, index_dir, encoder, chunk)
        else:
            fresh = (m is not None and m.get("format") == FORMAT_EXTERNAL and same_corpus(m["corpus"], corpus)
                     and m["faiss_index"]["path"] == str(external.resolve()))
            if force or not fresh:
                m = _ranges_only(corpus, index_dir, external)
    index = faiss.read_index(str(external or index_dir / "faiss.index"))
    ranges = np.load(index_dir / "ranges.npy", mmap_mode="r")
    if index.ntotal != len(ranges):
        raise ValueError(f"the FAISS index holds {index.ntotal} vectors but the corpus has {len(ranges)} records; "
                         "vector i must be corpus record i")
    if index.d != encoder.dim:
        raise ValueError(f"the FAISS index has dimension {index.d} but the encoder {encoder.name} gives {encoder.dim}")
    return DenseIndex(index, encoder, CorpusReader(corpus, ranges), m)
