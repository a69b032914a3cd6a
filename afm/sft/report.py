"""``afm-sft mask-report``: preprocess a dataset exactly as training would and print what gets trained.

It runs LLaMA-Factory's own argument parsing, tokenizer/template loading and dataset pipeline with the overlay
applied, then prints tokens total / trained / masked, drop counts per reason with an example id, and (``--show
N``) the first N samples with masked text between ``⟦`` and ``⟧``. No model weights are loaded.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from afm.sft.args import load_args
from afm.sft.masking import IGNORE_INDEX
from afm.sft.stats import MaskReport

OPEN, CLOSE = "⟦", "⟧"


def visualize(input_ids: list[int], labels: list[int], tokenizer: Any) -> str:
    """The trained part of a sample, with masked tokens inside the trained region shown between ⟦ ⟧."""
    trained = [i for i, lab in enumerate(labels) if lab != IGNORE_INDEX]
    if not trained:
        return "(nothing trained)"
    start, end = trained[0], trained[-1] + 1
    pieces, state, buf = [], None, []

    def flush() -> None:
        if buf:
            text = tokenizer.decode(buf, skip_special_tokens=False)
            pieces.append(f"{OPEN}{text}{CLOSE}" if state == "masked" else text)

    for i in range(start, end):
        s = "trained" if labels[i] != IGNORE_INDEX else "masked"
        if s != state:
            flush()
            state, buf = s, []
        buf.append(input_ids[i])
    flush()
    return "".join(pieces)


@dataclass
class Preprocessed:
    """What :func:`preprocess` produced."""

    reports: dict[str, MaskReport]
    dataset_module: dict[str, Any]
    tokenizer: Any


def preprocess(args: list[str] | dict[str, Any], force_mask: bool = True) -> Preprocessed:
    """Run LLaMA-Factory's argument parsing and dataset pipeline with the overlay; no model is loaded.

    With ``force_mask`` (the report's behaviour) masking is switched on even when the config leaves it off.
    """
    from afm.sft import overlay

    overlay.apply()
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    raw = load_args(args) if isinstance(args, list) else dict(args)
    if isinstance(raw, dict) and force_mask:
        raw.setdefault("ignore_observation", True)
    model_args, data_args, training_args, finetuning_args, _ = get_train_args(raw)
    if force_mask and not data_args.ignore_observation:
        print("[afm] ignore_observation is false in this config: reporting what masking *would* do")
        data_args.ignore_observation = True
    stage = "sft" if finetuning_args.stage == "sft" else "rm"
    tokenizer_module = load_tokenizer(model_args)
    tokenizer = tokenizer_module["tokenizer"]
    template = get_template_and_fix_tokenizer(tokenizer, data_args)
    overlay.LAST_REPORTS.clear()
    module = get_dataset(template, model_args, data_args, training_args, stage=stage, **tokenizer_module)
    return Preprocessed(dict(overlay.LAST_REPORTS), module, tokenizer)


def run_report(args: list[str], show: int = 0) -> dict[str, MaskReport]:
    """Preprocess the configured dataset(s), print the report and ``show`` visualised samples."""
    result = preprocess(args)
    module, tokenizer = result.dataset_module, result.tokenizer
    for k in range(show):
        ds = module.get("train_dataset")
        if ds is None or k >= len(ds):
            break
        row = ds[k]
        keys = [("input_ids", "labels")] if "labels" in row else [("chosen_input_ids", "chosen_labels"),
                                                                      ("rejected_input_ids", "rejected_labels")]
        for ids_key, lab_key in keys:
            print(f"--- sample {k} {lab_key} (masked text between {OPEN} {CLOSE}) ---")
            print(visualize(row[ids_key], row[lab_key], tokenizer))
    return result.reports


def main(argv: list[str]) -> int:
    """CLI wrapper: ``afm-sft mask-report CONFIG [key=value ...] [--show N] [--json PATH]``."""
    parser = argparse.ArgumentParser(prog="afm-sft mask-report", description=__doc__.splitlines()[0])
    parser.add_argument("--show", type=int, default=0, help="print the first N samples with masks visualised")
    parser.add_argument("--json", default=None, help="also write the report to this JSON file")
    ours, rest = parser.parse_known_args(argv)
    if not rest:
        parser.error("give the training config (yaml/json) or LLaMA-Factory flags")
    reports = run_report(rest, ours.show)
    if not reports:
        print("[afm] no dataset was preprocessed (tokenized_path set?)")
        return 1
    if ours.json:
        with open(ours.json, "w") as f:
            json.dump({k: v.to_dict() for k, v in reports.items()}, f, indent=2)
    return 0
