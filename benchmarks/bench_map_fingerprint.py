#!/usr/bin/env python
"""The tokenization map's cache key: datasets' own hash (a dill pickle of the processor, vocabulary included) against
afm's (:mod:`afm.sft.map_fingerprint`: the vocabulary as the SHA-256 of the tokenizer backend's JSON).

    .venv/bin/python benchmarks/bench_map_fingerprint.py [--out benchmarks/out] [--rounds 3] [--rows 16]

For the tiny world tokenizer and Qwen2.5's 151k vocabulary (built offline from the dashscope wheel, cached in
``--out``), it prints:

1. the key alone: ``datasets.fingerprint.Hasher.hash`` of a bound ``preprocess_dataset`` of LLaMA-Factory's
   ``SupervisedDatasetProcessor`` against :func:`~afm.sft.map_fingerprint.map_fingerprint` on the same processor
   (median of ``--rounds``), and the ratio;
2. a whole ``afm.sft.report.preprocess`` (LLaMA-Factory's argument parsing, tokenizer load and tokenization of
   ``--rows`` demo rows, what every SFT, DPO and mask-report run does first) with the overlay as landed and with
   the key left to datasets, A-B-B-A, medians and the ratio; both must give the same rows.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # lf_config: the tests' small LLaMA-Factory config


def _tokenizers(out: Path) -> dict[str, Path]:
    from afm.demo_content.samples import tokenizer_corpus
    from afm.model.tiny import build_tiny_model
    from afm.offline.qwen_tokenizer import build_qwen25_tokenizer

    tiny = out / "tiny-qwen2"
    if not (tiny / "config.json").exists():
        build_tiny_model(tiny, tokenizer_corpus(0))
    return {"tiny": tiny, "qwen2.5": build_qwen25_tokenizer(out / "qwen2.5-tokenizer")}


def _processor(tokenizer_dir: Path) -> Any:
    from llamafactory.data.processor.supervised import SupervisedDatasetProcessor
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    args = DataArguments(template="qwen", cutoff_len=1024)
    template = get_template_and_fix_tokenizer(tok, args)
    return SupervisedDatasetProcessor(template=template, tokenizer=tok, processor=None, data_args=args)


def _time(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def key_alone(tokenizer_dir: Path, rounds: int) -> tuple[float, float]:
    from datasets.fingerprint import Hasher

    from afm.sft.map_fingerprint import map_fingerprint

    proc = _processor(tokenizer_dir)
    kwargs = {"batched": True, "batch_size": 1000, "remove_columns": ["_prompt", "_response"]}
    stock = [_time(lambda: Hasher.hash([proc.preprocess_dataset, kwargs])) for _ in range(rounds)]
    ours = [_time(lambda: map_fingerprint("ds", proc.preprocess_dataset, kwargs)) for _ in range(rounds)]
    return statistics.median(stock), statistics.median(ours)


@contextlib.contextmanager
def _datasets_key() -> Any:
    """The overlay with datasets' own key (what ran before afm.sft.map_fingerprint)."""
    from afm.sft import overlay

    saved = overlay.fast_fingerprint_map
    overlay.fast_fingerprint_map = lambda dataset: contextlib.nullcontext(dataset)
    try:
        yield
    finally:
        overlay.fast_fingerprint_map = saved


def whole_preprocess(tokenizer_dir: Path, data: Path, work: Path, rounds: int) -> tuple[list[float], list[float]]:
    from conftest import lf_config

    from afm.sft.report import preprocess

    times: dict[str, list[float]] = {"afm": [], "datasets": []}
    rows: dict[str, Any] = {}
    order = ["afm", "datasets", "datasets", "afm"] * rounds
    for i, variant in enumerate(order):
        cfg = lf_config(tokenizer_dir, data, work / f"{variant}-{i}")
        ctx = _datasets_key() if variant == "datasets" else contextlib.nullcontext()
        with ctx:
            t = time.perf_counter()
            res = preprocess(cfg)
            times[variant].append(time.perf_counter() - t)
        rows.setdefault(variant, res.dataset_module["train_dataset"]["input_ids"])
    if rows["afm"] != rows["datasets"]:
        raise SystemExit("the two keys gave different rows")
    return times["datasets"], times["afm"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", type=int, default=16, help="demo SFT rows to tokenize")
    args = p.parse_args(argv)
    from afm.demo_content.samples import write_demo_data
    from afm.sft import overlay

    overlay.apply()
    args.out.mkdir(parents=True, exist_ok=True)
    toks = _tokenizers(args.out)
    with tempfile.TemporaryDirectory(prefix="afm-bench-fp-") as tmp:
        data = write_demo_data(Path(tmp) / "data", n_sft=args.rows, n_dpo=2, broken=0)
        print("| tokenizer | key: datasets (s) | key: afm (s) | ratio | preprocess: datasets' key (s) | "
              "afm's key (s) | ratio |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, path in toks.items():
            stock, ours = key_alone(path, args.rounds)
            slow, fast = whole_preprocess(path, data, Path(tmp) / name, max(1, args.rounds // 2))
            ms, mf = statistics.median(slow), statistics.median(fast)
            print(f"| {name} | {stock:.3f} | {ours:.3f} | {stock / ours:.1f}x | {ms:.2f} | {mf:.2f} | "
                  f"{ms / mf:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
