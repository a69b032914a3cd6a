"""The tokenization map's cache key (afm.sft.map_fingerprint): what changes the rows changes the key, the tokenizer's
vocabulary is hashed from its backend's JSON (not pickled), and a cache built under one key is never read under
another."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import lf_config
from transformers import AutoTokenizer

from afm.sft.map_fingerprint import map_fingerprint, tokenizer_digest
from afm.sft.report import preprocess


class _Processor:
    """A stand-in for LLaMA-Factory's DatasetProcessor: what it holds is what the key must cover."""

    def __init__(self, tokenizer, cutoff_len: int, template: str = "qwen") -> None:
        self.tokenizer, self.cutoff_len, self.template = tokenizer, cutoff_len, template

    def preprocess_dataset(self, examples):
        return examples


def test_the_key_follows_what_the_rows_depend_on(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    kwargs = {"batched": True, "batch_size": 1000, "remove_columns": ["_prompt", "_response"]}
    base = map_fingerprint("ds0", _Processor(tok, 1024).preprocess_dataset, kwargs)
    assert base is not None and base == map_fingerprint("ds0", _Processor(tok, 1024).preprocess_dataset, kwargs)
    # how the map runs is not what it returns
    assert base == map_fingerprint("ds0", _Processor(tok, 1024).preprocess_dataset,
                                   {**kwargs, "num_proc": 4, "desc": "x", "load_from_cache_file": False})
    others = {
        "another dataset": map_fingerprint("ds1", _Processor(tok, 1024).preprocess_dataset, kwargs),
        "another cutoff": map_fingerprint("ds0", _Processor(tok, 512).preprocess_dataset, kwargs),
        "another template": map_fingerprint("ds0", _Processor(tok, 1024, "llama3").preprocess_dataset, kwargs),
        "another batch": map_fingerprint("ds0", _Processor(tok, 1024).preprocess_dataset,
                                         {**kwargs, "batch_size": 10}),
    }
    grown = AutoTokenizer.from_pretrained(tiny_model)
    grown.add_tokens(["<brand_new_token>"])
    others["a grown vocabulary"] = map_fingerprint("ds0", _Processor(grown, 1024).preprocess_dataset, kwargs)
    assert len(set(others.values()) | {base}) == len(others) + 1, others


def test_the_vocabulary_enters_through_the_backend_not_a_pickle(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    digest = tokenizer_digest(tok)
    assert digest == tokenizer_digest(AutoTokenizer.from_pretrained(tiny_model))  # another load, the same key
    tok.backend_tokenizer.add_tokens(["<only_in_the_backend>"])  # a change the Python attributes do not show
    assert tokenizer_digest(tok) != digest
    # no processor with a tokenizer, or a tokenizer without a backend: datasets' own hash is kept
    assert map_fingerprint("ds0", len, {}) is None
    assert map_fingerprint("ds0", _Processor(object(), 1).preprocess_dataset, {}) is None


@pytest.mark.parametrize("tokenizer_dir", ["tiny", "qwen2.5"])
def test_a_cache_is_reused_only_under_its_own_key(tokenizer_dir, tiny_model, qwen_tokenizer_dir, demo_data,
                                                  tmp_path: Path):
    model = tiny_model if tokenizer_dir == "tiny" else qwen_tokenizer_dir
    cfg = lf_config(model, demo_data, tmp_path / "out", overwrite_cache=False)
    first = preprocess(cfg)
    again = preprocess(cfg)
    assert not first.reports["train"].from_cache and again.reports["train"].from_cache
    rows = first.dataset_module["train_dataset"]
    assert again.dataset_module["train_dataset"]["input_ids"] == rows["input_ids"]
    # a shorter cutoff: a new key, a new tokenization (a stale cache would hand back the long rows)
    short = preprocess({**cfg, "cutoff_len": 64})
    assert not short.reports["train"].from_cache
    assert max(len(r) for r in short.dataset_module["train_dataset"]["input_ids"]) <= 64
    assert max(len(r) for r in rows["input_ids"]) > 64
    # the result is named by the key: equal for the cache hit, another for the other cutoff
    assert rows._fingerprint == again.dataset_module["train_dataset"]._fingerprint != \
        short.dataset_module["train_dataset"]._fingerprint
