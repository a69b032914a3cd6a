"""The LLaMA-Factory releases the overlay supports, and the upstream symbols it touches.

:data:`UPSTREAM` is the list of every LLaMA-Factory name that ``afm.sft`` wraps, replaces, subclasses or calls;
tests/test_sft_compat.py resolves each one (and the parameters afm passes by name) in the installed release, and
checks that ``afm/sft`` uses no LLaMA-Factory name missing from the list. An upstream rename therefore fails one
named test instead of silently disabling observation masking.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from dataclasses import dataclass
from typing import Any, Literal

from packaging.version import Version

SUPPORTED = ">=0.9.2,<0.10"
_MIN, _MAX = Version("0.9.2"), Version("0.10")


class UnsupportedLlamaFactory(RuntimeError):
    """The installed LLaMA-Factory is missing or outside :data:`SUPPORTED`."""


Use = Literal["wrapped", "replaced", "subclassed", "called"]


@dataclass(frozen=True)
class UpstreamSymbol:
    """One LLaMA-Factory name the overlay relies on: ``module`` + ``attr`` (dotted for class members)."""

    module: str
    attr: str
    use: Use
    why: str
    params: tuple[str, ...] = ()  # parameters afm passes by name or reads from a call
    optional: bool = False  # absent in some supported releases; the overlay then skips it

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.attr}"


_SUP = "llamafactory.data.processor.supervised"
_PAIR = "llamafactory.data.processor.pairwise"
_PARSER = "llamafactory.hparams.parser"
_ENCODE_PARAMS = ("prompt", "response", "system", "tools", "images", "videos", "audios")
_LOADER_PARAMS = ("dataset", "data_args", "training_args", "stage", "template", "tokenizer", "processor", "is_eval")

UPSTREAM: tuple[UpstreamSymbol, ...] = (
    UpstreamSymbol("llamafactory.hparams.data_args", "DataArguments", "subclassed",
                   "AfmDataArguments adds the ignore_observation* fields"),
    UpstreamSymbol(_PARSER, "_TRAIN_ARGS", "replaced", "DataArguments -> AfmDataArguments in the parser list"),
    UpstreamSymbol(_PARSER, "_INFER_ARGS", "replaced", "DataArguments -> AfmDataArguments in the parser list"),
    UpstreamSymbol(_PARSER, "_EVAL_ARGS", "replaced", "DataArguments -> AfmDataArguments in the parser list"),
    UpstreamSymbol(_PARSER, "_TRAIN_MCA_ARGS", "replaced", "DataArguments -> AfmDataArguments in the parser list",
                   optional=True),
    UpstreamSymbol(_PARSER, "_parse_train_args", "wrapped", "refuses stages that would ignore the flag",
                   ("args",)),
    UpstreamSymbol(_SUP, "SupervisedDatasetProcessor._encode_data_example", "wrapped",
                   "labels masked on observation spans", _ENCODE_PARAMS),
    UpstreamSymbol(_SUP, "SupervisedDatasetProcessor.preprocess_dataset", "wrapped",
                   "broken samples dropped before rows are built", ("examples",)),
    UpstreamSymbol(_SUP, "PackedSupervisedDatasetProcessor.preprocess_dataset", "wrapped",
                   "broken samples dropped before rows are packed", ("examples",)),
    UpstreamSymbol(_PAIR, "PairwiseDatasetProcessor._encode_data_example", "wrapped",
                   "chosen and rejected labels masked", _ENCODE_PARAMS),
    UpstreamSymbol(_PAIR, "PairwiseDatasetProcessor.preprocess_dataset", "wrapped",
                   "broken pairs dropped before rows are built", ("examples",)),
    UpstreamSymbol("llamafactory.data.loader", "_get_preprocessed_dataset", "wrapped",
                   "prints and saves the mask report of each split", _LOADER_PARAMS),
    UpstreamSymbol("llamafactory.train.tuner", "run_sft", "wrapped",
                   "carries sort_micro_batches to the SFT trainer", ("model_args", "data_args", "training_args",
                                                                      "finetuning_args")),
    UpstreamSymbol("llamafactory.train.sft.trainer", "CustomSeq2SeqTrainer._get_train_sampler", "wrapped",
                   "sort_micro_batches: the length-sorted step sampler"),
    UpstreamSymbol("llamafactory.train.sft.trainer", "CustomSeq2SeqTrainer.compute_loss", "wrapped",
                   "trained_logits_only: logits and loss only at trained positions; share_prefix: the rows' common prefix run once",
                   ("model", "inputs")),
    UpstreamSymbol("llamafactory.launcher", "__file__", "replaced",
                   "torchrun workers re-execute afm.sft.launcher (with the overlay)"),
    UpstreamSymbol("llamafactory.launcher", "launch", "called", "afm-sft hands the command to LLaMA-Factory (unless FORCE_TORCHRUN and NPROC_PER_NODE fix the torchrun start: afm.sft.torchrun)"),
    UpstreamSymbol("llamafactory.train.tuner", "run_exp", "called", "what afm.sft.launcher runs on every rank"),
    UpstreamSymbol("llamafactory.hparams", "get_train_args", "called", "afm-sft mask-report parses the config"),
    UpstreamSymbol("llamafactory.model", "load_tokenizer", "called", "afm-sft mask-report loads the tokenizer"),
    UpstreamSymbol("llamafactory.data", "get_template_and_fix_tokenizer", "called",
                   "afm-sft mask-report builds the template"),
    UpstreamSymbol("llamafactory.data", "get_dataset", "called", "afm-sft mask-report runs the dataset pipeline"),
)


def resolve(symbol: UpstreamSymbol) -> Any:
    """The installed object behind ``symbol``; AttributeError/ImportError naming it when upstream moved it."""
    obj: Any = importlib.import_module(symbol.module)
    for part in symbol.attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"LLaMA-Factory has no {symbol.qualname} (afm.sft {symbol.use} it: {symbol.why})")
        obj = getattr(obj, part)
    if symbol.params:
        missing = [p for p in symbol.params if p not in inspect.signature(obj).parameters]
        if missing:
            raise AttributeError(f"{symbol.qualname} lost parameters {missing} that afm.sft passes ({symbol.why})")
    return obj


def check_llamafactory_version(version: str) -> str | None:
    """Return a message when ``version`` is outside the supported range, else None."""
    v = Version(version)
    if v < _MIN or v >= _MAX:
        return (
            f"llamafactory {version} is not supported by afm.sft (needs {SUPPORTED}): "
            "0.9.0/0.9.1 use a different processor layout. pip install 'llamafactory>=0.9.2,<0.10'"
        )
    return None


def require_supported() -> str:
    """The installed LLaMA-Factory version; raises :class:`UnsupportedLlamaFactory` with the fix when it cannot
    carry the overlay."""
    try:
        version = importlib.metadata.version("llamafactory")
    except importlib.metadata.PackageNotFoundError:
        raise UnsupportedLlamaFactory(
            f"llamafactory is not installed; afm.sft needs {SUPPORTED}: pip install 'afm[sft]'") from None
    problem = check_llamafactory_version(version)
    if problem is not None:
        raise UnsupportedLlamaFactory(problem)
    return version
