"""The datasets cache key of LLaMA-Factory's tokenization map, without pickling the tokenizer's vocabulary.

``Dataset.map`` names its result (and its cache file) by a hash of the function it maps: for LLaMA-Factory's
``DatasetProcessor.preprocess_dataset`` that is the processor, tokenizer included, pickled through dill. For a
Qwen2.5 tokenizer (151k tokens and their merges) that pickle takes 1.3-3.5 s of a core per map call, and a Gemma 3
tokenizer's (262k) longer, in every SFT, DPO and mask-report run, before a single row is tokenized
(benchmarks/RESULTS.md, 2026-11-29 nineteenth session: half of a small Qwen2.5 preprocessing's time).

:func:`map_fingerprint` hashes the same inputs, except that the tokenizer's vocabulary and merges enter as the
SHA-256 of its serialized backend (``tokenizers``' own JSON, ~0.08 s for Qwen2.5), and
:func:`fast_fingerprint_map` passes it as ``new_fingerprint``. Everything else the processor holds (the template,
the data arguments with afm's overlay fingerprint, the multimodal processor) is hashed as ``datasets`` would hash
it, so a changed cutoff, template, vocabulary, overlay or LLaMA-Factory/transformers release still names a new
cache file. A tokenizer without a ``tokenizers`` backend (a slow one) keeps ``datasets``' own hash. The overlay
uses it for every dataset LLaMA-Factory tokenizes, with or without ``ignore_observation``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Iterator
from typing import Any

# Tokenizer attributes that hold the vocabulary in Python form; the backend's JSON covers them.
_VOCAB_ATTRS = ("_vocab", "_merges", "_tokenizer", "cache")
# Keyword arguments of Dataset.map that change how it runs, not what it returns.
_RUN_ONLY = ("num_proc", "desc", "load_from_cache_file", "keep_in_memory", "writer_batch_size", "new_fingerprint")


def _library_versions() -> str:
    """The releases whose code does the tokenizing (an upgrade names new cache files)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("llamafactory", "transformers", "tokenizers"):
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}==?")
    return ",".join(out)


def tokenizer_digest(tokenizer: Any) -> str | None:
    """A hash of everything that makes ``tokenizer`` tokenize as it does, or None when it has no ``tokenizers``
    backend to serialize (then the caller keeps ``datasets``' hash)."""
    from datasets.fingerprint import Hasher

    backend = getattr(tokenizer, "backend_tokenizer", None)
    to_str = getattr(backend, "to_str", None)
    if to_str is None:
        return None
    state = {k: v for k, v in vars(tokenizer).items() if k not in _VOCAB_ATTRS}
    h = Hasher()
    h.update(type(tokenizer).__module__ + "." + type(tokenizer).__qualname__)
    h.update(hashlib.sha256(to_str().encode()).hexdigest())
    h.update(state)
    return h.hexdigest()


def map_fingerprint(dataset_fingerprint: str, function: Any, map_kwargs: dict[str, Any]) -> str | None:
    """The fingerprint of ``dataset.map(function, **map_kwargs)`` for a bound ``preprocess_dataset`` of a processor
    holding a ``tokenizer``; None when ``function`` is not such a method or the tokenizer has no backend."""
    from datasets.fingerprint import Hasher

    owner = getattr(function, "__self__", None)
    tokenizer = getattr(owner, "tokenizer", None)
    if owner is None or tokenizer is None:
        return None
    digest = tokenizer_digest(tokenizer)
    if digest is None:
        return None
    h = Hasher()
    h.update("afm-map-fingerprint-1")
    h.update(_library_versions())
    h.update(dataset_fingerprint)
    func = getattr(function, "__func__", function)
    h.update(f"{type(owner).__module__}.{type(owner).__qualname__}.{getattr(func, '__qualname__', func)}")
    h.update({k: v for k, v in vars(owner).items() if k != "tokenizer"})
    h.update(digest)
    h.update({k: v for k, v in map_kwargs.items() if k not in _RUN_ONLY})
    return h.hexdigest()


@contextlib.contextmanager
def fast_fingerprint_map(dataset: Any) -> Iterator[Any]:
    """While the block runs, ``dataset.map`` names its result by :func:`map_fingerprint` (when that applies and the
    caller gave no ``new_fingerprint``); a dataset without a fingerprint (streaming) is left as it is."""
    base = getattr(dataset, "_fingerprint", None)
    original = getattr(dataset, "map", None)
    if not isinstance(base, str) or original is None or not hasattr(dataset, "__dict__"):
        yield dataset
        return

    @functools.wraps(original)
    def map_(function: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not args and kwargs.get("new_fingerprint") is None:
            fingerprint = map_fingerprint(base, function, kwargs)
            if fingerprint is not None:
                kwargs["new_fingerprint"] = fingerprint
        return original(function, *args, **kwargs)

    dataset.map = map_  # this object only, for this block
    try:
        yield dataset
    finally:
        dataset.__dict__.pop("map", None)
