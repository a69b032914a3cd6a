"""The LLaMA-Factory overlay: ``ignore_observation`` for SFT (packing included), DPO and RM.

Importing this module changes nothing; :func:`apply` installs the patches (idempotently):

1. ``DataArguments`` in LLaMA-Factory's parser lists is replaced by :class:`AfmDataArguments`, a subclass with the
   ``ignore_observation*`` fields, so they are accepted from yaml and CLI flags like any other data argument.
2. ``_encode_data_example`` and ``preprocess_dataset`` of the supervised, packed-supervised and pairwise processors
   are wrapped: each sample is checked, encoded by LLaMA-Factory's own code, its labels masked on observation
   spans (:mod:`afm.sft.masking`), and broken or truncated samples are removed before LLaMA-Factory builds (and
   packs) its rows. Counts go to :mod:`afm.sft.stats`.
3. ``parser._parse_train_args`` refuses stages that would silently ignore the flag, and
   ``loader._get_preprocessed_dataset`` prints and saves the mask report after each dataset; its tokenization map
   is named without pickling the tokenizer's vocabulary (:mod:`afm.sft.map_fingerprint`).
4. ``llamafactory.launcher.__file__`` points at :mod:`afm.sft.launcher`, so torchrun workers re-execute our
   entry point (with the patches) instead of LLaMA-Factory's.
5. ``sort_micro_batches: true`` (SFT): ``tuner.run_sft`` is wrapped to carry the flag to the trainer, whose
   ``_get_train_sampler`` then returns :class:`afm.sft.sorted_batches.LengthSortedStepSampler` (the same random
   steps, each step's rows longest first, so its micro-batches pad less; the gradient is unchanged).
   ``trained_logits_only: true`` (SFT): the trainer's ``compute_loss`` is wrapped so that the output head and the
   loss see only the positions whose next token is trained (:mod:`afm.sft.trained_logits`; the loss is unchanged).
   ``share_prefix: true`` (SFT): in the same wrapper, the prompt prefix every row of a micro-batch starts with runs
   once, its cache shared by the rows (:mod:`afm.sft.shared_prefix`; the loss is unchanged).
   ``attention_fp32: true`` (SFT, with bf16/fp16): in the same wrapper, the attention kernel gets float32 inputs
   while the matrix products around it stay in half precision (:mod:`afm.sft.float32_attention`; for CPUs).
   ``attention_chunks: N`` (SFT): each causal attention call runs in N query chunks that leave out the keys after
   them (:mod:`afm.sft.causal_chunks`; the same attention, for CPU kernels that compute the masked triangle).

Every upstream name touched here is listed in :data:`afm.sft.compat.UPSTREAM` (tested one by one), and
:func:`apply` first checks that the installed LLaMA-Factory is a supported release.

A field with ``init=False`` carries a hash of the overlay's source into the datasets map fingerprint, so a
changed overlay never reuses a cache built by an older one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import unicodedata
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llamafactory import launcher as lf_launcher
from llamafactory.data import loader as lf_loader
from llamafactory.data.processor import pairwise as lf_pairwise
from llamafactory.data.processor import supervised as lf_supervised
from llamafactory.hparams import parser as lf_parser
from llamafactory.hparams.data_args import DataArguments

from afm.sft.compat import require_supported
from afm.sft.map_fingerprint import fast_fingerprint_map
from afm.sft.masking import mask_observation_labels
from afm.sft.sorted_batches import LengthSortedStepSampler, padding_estimate
from afm.sft.stats import STATS_DIR_ENV, MaskReport, append_stats, collect_stats, example_id
from afm.sft.token_bytes import TokenBytes
from afm.trajectory.parse import pairing_problems
from afm.trajectory.tags import DEFAULT_REGISTRY, Tag, TagKind, TagRegistry

logger = logging.getLogger(__name__)

_SOURCES = ("overlay.py", "masking.py", "token_bytes.py", "stats.py")
_TRAJ_SOURCES = ("spans.py", "parse.py", "tags.py")


def _overlay_fingerprint() -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        h.update((here / name).read_bytes())
    for name in _TRAJ_SOURCES:
        h.update((here.parent / "trajectory" / name).read_bytes())
    return h.hexdigest()[:16]


OVERLAY_FINGERPRINT = _overlay_fingerprint()
CHECK_MODES = ("observation", "tags", "none")


@dataclass
class AfmDataArguments(DataArguments):
    """LLaMA-Factory's DataArguments plus observation masking."""

    ignore_observation: bool = field(
        default=False,
        metadata={"help": "Exclude <observation>...</observation> spans (and the whitespace around them) from the loss."},
    )
    ignore_observation_token: str | None = field(
        default="observation",
        metadata={"help": "Name of the tag whose spans are masked (bare name, e.g. `observation`)."},
    )
    ignore_observation_check: Literal["observation", "tags", "none"] = field(
        default="observation",
        metadata={
            "help": "Which broken samples to drop before masking: `observation` (the masked tag is unclosed or "
            "stray), `tags` (also any other CoA tag unclosed, stray or nested: strict, drops thoughts that quote a "
            "tag), `none`. Truncation inside an observation always drops."
        },
    )
    sort_micro_batches: bool = field(
        default=False,
        metadata={
            "help": "SFT: draw each optimizer step's rows at random as usual, then order them longest first, so "
            "with gradient_accumulation_steps > 1 (or several ranks) each micro-batch pads to rows of its own "
            "length. Same rows and same gradient per step, fewer padded tokens."
        },
    )
    trained_logits_only: bool = field(
        default=False,
        metadata={
            "help": "SFT: compute the output head's logits and the loss only at positions whose next token is "
            "trained (not the prompt, masked observations or padding): the same loss and gradient, less compute "
            "and logits memory (afm/sft/trained_logits.py)."
        },
    )
    share_prefix: bool = field(
        default=False,
        metadata={
            "help": "SFT: run the prompt prefix that every row of a micro-batch starts with (system turn, tool "
            "descriptions, instruction) once, its key/value cache shared by the rows: the same loss and gradient, "
            "(rows-1)/rows of the prefix's compute saved. Needs disable_gradient_checkpointing: true "
            "(afm/sft/shared_prefix.py)."
        },
    )
    attention_fp32: bool = field(
        default=False,
        metadata={
            "help": "SFT under bf16/fp16 mixed precision: run the attention kernel on float32 queries, keys and "
            "values while the matrix products around it stay in half precision. On a CPU with native bf16, "
            "PyTorch's float32 flash attention is faster than its bf16 one for narrow heads; leave it off on a "
            "GPU (afm/sft/float32_attention.py)."
        },
    )
    attention_chunks: int = field(
        default=0,
        metadata={
            "help": "SFT: split each causal attention call's queries into this many chunks, each attending only "
            "the keys up to its last query under its slice of the mask: the same attention with the masked upper "
            "triangle left out, which PyTorch's CPU flash kernel computes whenever a mask is given. 0 or 1: off. "
            "For CPUs (afm/sft/causal_chunks.py)."
        },
    )
    afm_overlay_fingerprint: str = field(default=OVERLAY_FINGERPRINT, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ignore_observation_token is None:
            self.ignore_observation_token = "observation"
        token = self.ignore_observation_token
        if not token or not all(c.isalnum() or c in "_-" for c in token) or not token[0].isalpha():
            raise ValueError(
                f"ignore_observation_token must be a bare tag name such as `observation`, got {token!r} "
                "(write --ignore_observation_token observation, not <observation>)"
            )
        if self.ignore_observation_check not in CHECK_MODES:
            raise ValueError(
                f"ignore_observation_check must be one of {', '.join(CHECK_MODES)}, got {self.ignore_observation_check!r}"
            )
        if self.ignore_observation and self.streaming:
            raise ValueError(
                "ignore_observation cannot drop broken samples from a streaming dataset; set streaming: false"
            )


# ----------------------------------------------------------------------------------------------------------
# per-sample work


class _State:
    """Per-process caches of the wrappers: token tables per tokenizer, and the encodings to replay.

    Why ``__reduce__``: datasets fingerprints a map function by pickling (dill) everything the function reaches,
    module globals included. The wrappers reach this object, so its contents would enter the fingerprint, change
    from one call to the next, and the datasets cache would never hit. Pickled as "call ``_state()``" it is a
    constant; a worker process that unpickles it gets its own caches.
    """

    def __init__(self) -> None:
        # weak keys: a table lives as long as its tokenizer (an id() key could be reused by a later tokenizer)
        self.tables: weakref.WeakKeyDictionary[Any, TokenBytes] = weakref.WeakKeyDictionary()
        # id(processor) -> {id(prompt list): masked encoding}. id() because LLaMA-Factory's processors are
        # dataclasses (unhashable). Safe: an entry exists only during the preprocess_dataset call that made it,
        # while that processor and the prompt lists it keys (held by the examples batch) are alive.
        self.replay: dict[int, dict[int, tuple]] = {}

    def __reduce__(self) -> tuple:
        return (_state, ())


_STATE = _State()


def _state() -> _State:
    return _STATE


def _table(tokenizer: Any) -> TokenBytes:
    table = _STATE.tables.get(tokenizer)
    if table is None:
        table = _STATE.tables[tokenizer] = TokenBytes(tokenizer)
    return table


def _registry(tag: str) -> TagRegistry:
    if tag in DEFAULT_REGISTRY:
        return DEFAULT_REGISTRY
    reg = DEFAULT_REGISTRY.copy()
    reg.register(Tag(tag, TagKind.OBSERVATION, "masked tag", opaque=True))
    return reg


def _nfc_merges_tag(text: str, tag: str) -> bool:
    """True when NFC (applied by Qwen-style tokenizers) would merge a tag's '>' with the next character.

    Only a combining mark right after '>' can compose with it (U+0338: '>' becomes '≯'), so only those places are
    checked; the full normalisation runs only when one is found.
    """
    if text.isascii():
        return False
    for t in (f"<{tag}>", f"</{tag}>"):
        i = text.find(t)
        while i >= 0:
            j = i + len(t)
            if j < len(text) and unicodedata.combining(text[j]):
                norm = unicodedata.normalize("NFC", text)
                return any(norm.count(u) != text.count(u) for u in (f"<{tag}>", f"</{tag}>"))
            i = text.find(t, j)
    return False


def text_problem(text: str, tag: str, mode: str) -> str | None:
    """The drop reason for a response text before encoding, or None when it is fine."""
    if mode == "observation":
        return _observation_problem(text, tag)
    if _nfc_merges_tag(text, tag):
        return "normalization_breaks_tag"
    if mode == "none":
        return None
    if mode == "tags":
        problems = pairing_problems(text, _registry(tag))
        if problems:
            p = problems[0]
            if p.tag == tag and p.code in ("unclosed_tag", "stray_closing_tag"):
                return "unclosed_observation" if p.code == "unclosed_tag" else "stray_closing_observation"
            return p.code
        return None
    return _observation_problem(text, tag)


def _observation_problem(text: str, tag: str) -> str | None:
    """text_problem for mode ``observation`` in one scan: the pairing of afm.trajectory.spans.find_observations
    (the first closing tag ends an observation) and the NFC check at every tag it passes."""
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    plain = text.isascii()  # no combining mark, nothing NFC could merge
    pos = closed = 0
    unclosed = suspect = False
    while (i := text.find(open_t, pos)) >= 0:
        k = i + len(open_t)
        suspect |= not plain and k < len(text) and unicodedata.combining(text[k]) > 0
        j = text.find(close_t, k)
        if j < 0:
            unclosed = True
            break
        closed += 1
        pos = j + len(close_t)
        suspect |= not plain and pos < len(text) and unicodedata.combining(text[pos]) > 0
    stray = text.count(close_t) > closed
    # tags the scan did not pass (inside a body, stray) get the full check, as does any suspect place
    if not plain and (suspect or stray or text.count(open_t) > closed + unclosed) and _nfc_merges_tag(text, tag):
        return "normalization_breaks_tag"
    if unclosed:
        return "unclosed_observation"
    return "stray_closing_observation" if stray else None


def _message_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content", "")) for m in messages]


def _mask_encoded(
    encoded: tuple, pairwise: bool, table: TokenBytes, tag: str, report: MaskReport,
    source: list[str] | None = None,
) -> tuple[tuple, str | None]:
    """Mask the label lists of one encoded sample: the new tuple, and a drop reason (None to keep it).

    ``source``: the sample's message texts, which tell what a run cut by ``cutoff_len`` was about to become.
    Labels come back masked even when the sample is to be dropped, so no caller can train on an observation.
    """
    label_slots = (1, 3) if pairwise else (1,)
    out = list(encoded)
    results = []
    reason = None
    for slot in label_slots:
        # the label lists are fresh from LLaMA-Factory's encoder and owned by this sample: mask them in place
        res = mask_observation_labels(encoded[slot], table, tag, source, inplace=True)
        out[slot] = res.labels
        results.append(res)
        if res.truncated:
            reason = reason or "truncated_inside_observation"
        elif res.target_tokens - res.masked_tokens <= 0:
            reason = reason or "no_trained_tokens"
    if reason is None:
        for res in results:
            report.tokens_target += res.target_tokens
            report.tokens_masked += res.masked_tokens
            report.tokens_mixed += res.mixed_tokens
            report.observations += res.observations
        report.tokens_total += sum(len(encoded[slot - 1]) for slot in label_slots)
    return tuple(out), reason


def _encode_impl(self: Any, orig_encode: Any, pairwise: bool, args: tuple, kwargs: dict) -> tuple:
    # Inside our preprocess_dataset, LLaMA-Factory asks again for encodings we already made and masked: replay them.
    replay = _STATE.replay.get(id(self))
    if replay is not None:
        prompt = kwargs["prompt"] if "prompt" in kwargs else args[0]
        hit = replay.pop(id(prompt), None)
        if hit is not None:
            return hit
    encoded = orig_encode(self, *args, **kwargs)
    if not getattr(self.data_args, "ignore_observation", False):
        return encoded
    tag = self.data_args.ignore_observation_token
    prompt = kwargs["prompt"] if "prompt" in kwargs else args[0]
    response = kwargs["response"] if "response" in kwargs else args[1]
    source = _message_texts(prompt) + _message_texts(response)
    masked, _reason = _mask_encoded(encoded, pairwise, _table(self.tokenizer), tag, MaskReport(), source)
    return masked  # outside preprocess_dataset nothing can be dropped, but nothing unmasked is returned either


def _preprocess_impl(self: Any, examples: dict[str, list[Any]], orig_preprocess: Any, orig_encode: Any,
                     pairwise: bool) -> dict[str, list[Any]]:
    """Check, encode and mask every sample; hand LLaMA-Factory only the kept ones (replaying their encodings)."""
    data_args = self.data_args
    if not getattr(data_args, "ignore_observation", False):
        return orig_preprocess(self, examples)
    tag, mode = data_args.ignore_observation_token, data_args.ignore_observation_check
    table = _table(self.tokenizer)
    report = MaskReport()
    keep: list[int] = []
    replay: dict[int, tuple] = {}
    checked: list[tuple[int, list[str]]] = []
    encoded_all: list[tuple[int, tuple, list[str]]] = []
    # Separate passes (check all, encode all, mask all): interleaved, the tokenizer's and the byte table's working
    # sets keep evicting each other from the CPU caches, which cost more than the masking itself.
    for i in range(len(examples["_prompt"])):
        prompt, response = examples["_prompt"][i], examples["_response"][i]
        report.samples_seen += 1
        bad_shape = len(prompt) % 2 != 1 or (len(response) < 2 if pairwise else len(response) != 1)
        if bad_shape:  # LLaMA-Factory drops and logs it itself; keep it so its own check runs
            report.drop("invalid_structure", example_id(prompt, response))
            keep.append(i)
            continue
        texts = _message_texts(response)
        reason = next((r for r in (text_problem(t, tag, mode) for t in texts) if r), None)
        if reason is not None:
            report.drop(reason, example_id(prompt, response))
            continue
        checked.append((i, texts))
    for i, texts in checked:
        prompt, response = examples["_prompt"][i], examples["_response"][i]
        encoded = orig_encode(
            self, prompt=prompt, response=response, system=examples["_system"][i],
            tools=examples["_tools"][i], images=examples["_images"][i] or [],
            videos=examples["_videos"][i] or [], audios=examples["_audios"][i] or [],
        )
        encoded_all.append((i, encoded, texts))
    for i, encoded, texts in encoded_all:
        prompt = examples["_prompt"][i]
        masked, reason = _mask_encoded(encoded, pairwise, table, tag, report, _message_texts(prompt) + texts)
        if reason is not None:
            report.drop(reason, example_id(prompt, examples["_response"][i]))
            continue
        replay[id(prompt)] = masked
        keep.append(i)
        report.samples_kept += 1
    keep.sort()
    subset = {k: [v[i] for i in keep] for k, v in examples.items()}
    _STATE.replay[id(self)] = replay
    try:
        out = orig_preprocess(self, subset)
    finally:
        _STATE.replay.pop(id(self), None)
    append_stats(report)
    return out


_ORIGINAL_ENCODE: dict[type, Any] = {}


def _wrap_processor(cls: type, pairwise: bool, encode_owner: type) -> None:
    """Wrap ``cls.preprocess_dataset`` (and ``_encode_data_example`` when ``cls`` defines it)."""
    if cls.__dict__.get("_afm_patched", False):
        return
    if "_encode_data_example" in cls.__dict__:
        _ORIGINAL_ENCODE[cls] = cls.__dict__["_encode_data_example"]
    orig_encode = _ORIGINAL_ENCODE[encode_owner]
    orig_preprocess = cls.__dict__["preprocess_dataset"]

    # The wrappers only call module-level functions and all mutable state lives in _STATE (see _State).
    # functools.wraps keeps upstream's signature visible (afm.sft.compat checks it after the overlay is applied).
    @functools.wraps(orig_encode)
    def _encode_data_example(self, *args: Any, **kwargs: Any):
        return _encode_impl(self, orig_encode, pairwise, args, kwargs)

    @functools.wraps(orig_preprocess)
    def preprocess_dataset(self, examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return _preprocess_impl(self, examples, orig_preprocess, orig_encode, pairwise)

    if cls is encode_owner:
        cls._encode_data_example = _encode_data_example
    cls.preprocess_dataset = preprocess_dataset
    cls._afm_patched = True


# ----------------------------------------------------------------------------------------------------------
# loader hooks


LAST_REPORTS: dict[str, MaskReport] = {}  # split -> report of the last preprocessing in this process


def _patch_loader() -> None:
    if getattr(lf_loader, "_afm_patched", False):
        return
    orig_get_preprocessed = lf_loader._get_preprocessed_dataset

    def _get_preprocessed_dataset(dataset, data_args, training_args, stage, template, tokenizer, processor=None,
                                  is_eval=False):
        if dataset is None:
            return orig_get_preprocessed(dataset, data_args, training_args, stage, template, tokenizer, processor,
                                         is_eval)
        with fast_fingerprint_map(dataset):  # the map's cache key without pickling the vocabulary
            return _preprocess_and_report(dataset, data_args, training_args, stage, template, tokenizer, processor,
                                          is_eval)

    def _preprocess_and_report(dataset, data_args, training_args, stage, template, tokenizer, processor, is_eval):
        if not getattr(data_args, "ignore_observation", False):
            return orig_get_preprocessed(dataset, data_args, training_args, stage, template, tokenizer, processor,
                                         is_eval)
        stats_dir = tempfile.mkdtemp(prefix="afm-mask-stats-")
        previous = os.environ.get(STATS_DIR_ENV)
        os.environ[STATS_DIR_ENV] = stats_dir
        try:
            result = orig_get_preprocessed(dataset, data_args, training_args, stage, template, tokenizer, processor,
                                           is_eval)
            report, lines = collect_stats(stats_dir)
        finally:
            if previous is None:
                os.environ.pop(STATS_DIR_ENV, None)
            else:
                os.environ[STATS_DIR_ENV] = previous
            shutil.rmtree(stats_dir, ignore_errors=True)
        report = _persist_with_cache(result, report, lines)
        split = "eval" if is_eval else "train"
        if report is not None:
            LAST_REPORTS[split] = report
        if getattr(training_args, "should_log", True) and report is not None:
            print(report.format(f"observation masking ({split}, tag <{data_args.ignore_observation_token}>)"), flush=True)
        if report is not None and getattr(training_args, "should_save", False) and training_args.output_dir:
            out = Path(training_args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"afm_mask_report_{split}.json").write_text(json.dumps(report.to_dict(), indent=2))
        return result

    lf_loader._get_preprocessed_dataset = _get_preprocessed_dataset
    lf_loader._afm_patched = True


def _persist_with_cache(dataset: Any, report: MaskReport, lines: int) -> MaskReport | None:
    """Keep the report beside the datasets cache file, so a cache hit can still show it."""
    cache_files = getattr(dataset, "cache_files", None) or []
    sidecar = Path(cache_files[0]["filename"] + ".afm_mask_report.json") if cache_files else None
    if lines:
        if sidecar is not None:
            sidecar.write_text(json.dumps(report.to_dict()))
        return report
    if sidecar is not None and sidecar.exists():
        cached = MaskReport.from_dict(json.loads(sidecar.read_text()))
        cached.from_cache = True
        return cached
    return None


# ----------------------------------------------------------------------------------------------------------


_STAGES_WITH_MASKING = ("sft", "dpo", "rm")


def _patch_parser() -> None:
    """Fail at argument parsing (before any model loads) when the stage would ignore the flag."""
    if getattr(lf_parser, "_afm_patched", False):
        return
    orig = lf_parser._parse_train_args

    def _parse_train_args(args=None):
        parsed = orig(args)
        data_args, finetuning_args = parsed[1], parsed[3]
        stage = getattr(finetuning_args, "stage", "sft")
        if getattr(data_args, "ignore_observation", False) and stage not in _STAGES_WITH_MASKING:
            raise ValueError(
                f"ignore_observation is implemented for stage sft, dpo and rm; stage {stage!r} would still train on "
                "observations. Remove ignore_observation or use one of those stages."
            )
        if getattr(data_args, "trained_logits_only", False) and stage != "sft":
            raise ValueError(f"trained_logits_only is implemented for stage sft only, not {stage!r}; remove it")
        if getattr(data_args, "share_prefix", False):
            if stage != "sft":
                raise ValueError(f"share_prefix is implemented for stage sft only, not {stage!r}; remove it")
            if not getattr(parsed[0], "disable_gradient_checkpointing", False):
                raise ValueError("share_prefix needs disable_gradient_checkpointing: true (a checkpointed layer runs "
                                 "its forward again in the backward pass and would extend the shared prefix's cache "
                                 "twice); set it, or remove share_prefix")
        if getattr(data_args, "attention_fp32", False):
            if stage != "sft":
                raise ValueError(f"attention_fp32 is implemented for stage sft only, not {stage!r}; remove it")
            if not (getattr(parsed[2], "bf16", False) or getattr(parsed[2], "fp16", False)):
                raise ValueError("attention_fp32 changes nothing without mixed precision (the attention already runs "
                                 "in float32): set bf16: true (on a CPU also use_cpu: true), or remove it")
            if not getattr(parsed[0], "disable_gradient_checkpointing", False):
                raise ValueError("attention_fp32 needs disable_gradient_checkpointing: true (a checkpointed layer "
                                 "recomputes its forward in the backward pass, outside the step's float32 attention, "
                                 "with other dtypes); set it, or remove attention_fp32")
        chunks = getattr(data_args, "attention_chunks", 0) or 0
        if chunks < 0:
            raise ValueError(f"attention_chunks is {chunks}: 0 (off) or a number of query chunks")
        if chunks > 1 and stage != "sft":
            raise ValueError(f"attention_chunks is implemented for stage sft only, not {stage!r}; remove it")
        if getattr(data_args, "sort_micro_batches", False):
            if stage != "sft":
                raise ValueError(f"sort_micro_batches is implemented for stage sft only, not {stage!r}; remove it")
            if getattr(finetuning_args, "disable_shuffling", False):
                raise ValueError("sort_micro_batches shuffles rows into steps; it cannot keep disable_shuffling's "
                                 "file order. Remove one of the two.")
        return parsed

    lf_parser._parse_train_args = _parse_train_args
    lf_parser._afm_patched = True


# sort_micro_batches and trained_logits_only of the run_sft call in progress in this process (each rank runs
# run_sft once)
_SORT_MICRO_BATCHES = {"on": False}
_TRAINED_LOGITS = {"on": False}
_SHARE_PREFIX = {"on": False}
_FP32_ATTENTION = {"on": False}
_ATTENTION_CHUNKS = {"n": 0}


def _patch_sorted_micro_batches() -> None:
    """``sort_micro_batches`` and ``trained_logits_only``: carry the data arguments to the SFT trainer's sampler and
    loss."""
    # imported here: the training modules are heavy, and only a training process applies the overlay
    from llamafactory.train import tuner as lf_tuner
    from llamafactory.train.sft import trainer as lf_sft_trainer

    if getattr(lf_tuner, "_afm_sort_patched", False):
        return
    orig_run_sft = lf_tuner.run_sft

    @functools.wraps(orig_run_sft)
    def run_sft(model_args, data_args, training_args, finetuning_args, *args, **kwargs):
        _SORT_MICRO_BATCHES["on"] = bool(getattr(data_args, "sort_micro_batches", False))
        _TRAINED_LOGITS["on"] = bool(getattr(data_args, "trained_logits_only", False))
        _SHARE_PREFIX["on"] = bool(getattr(data_args, "share_prefix", False))
        _FP32_ATTENTION["on"] = bool(getattr(data_args, "attention_fp32", False))
        _ATTENTION_CHUNKS["n"] = int(getattr(data_args, "attention_chunks", 0) or 0)
        try:
            return orig_run_sft(model_args, data_args, training_args, finetuning_args, *args, **kwargs)
        finally:
            _SORT_MICRO_BATCHES["on"] = _TRAINED_LOGITS["on"] = _SHARE_PREFIX["on"] = False
            _FP32_ATTENTION["on"] = False
            _ATTENTION_CHUNKS["n"] = 0

    trainer_cls = lf_sft_trainer.CustomSeq2SeqTrainer
    orig_sampler = trainer_cls._get_train_sampler

    @functools.wraps(orig_sampler)
    def _get_train_sampler(self, *args, **kwargs):
        dataset = args[0] if args else kwargs.get("train_dataset")
        dataset = self.train_dataset if dataset is None else dataset
        # a streaming dataset has no lengths to sort by (and no column_names list): LLaMA-Factory's own sampler
        if not _SORT_MICRO_BATCHES["on"] or "input_ids" not in (getattr(dataset, "column_names", None) or ()):
            return orig_sampler(self, *args, **kwargs)
        a = self.args
        lengths = [len(ids) for ids in dataset["input_ids"]]
        micro = a.per_device_train_batch_size
        step = micro * a.gradient_accumulation_steps * a.world_size
        seed = a.data_seed if a.data_seed is not None else a.seed
        if a.should_log:
            print(padding_estimate(lengths, step, micro, seed, a.world_size).format(step, micro, a.world_size),
                  flush=True)
        return LengthSortedStepSampler(lengths, step, seed, ranks=a.world_size, micro_batch=micro)

    orig_loss = trainer_cls.compute_loss

    @functools.wraps(orig_loss)
    def compute_loss(self, model, inputs, *args, **kwargs):
        attention = _FP32_ATTENTION["on"] or _ATTENTION_CHUNKS["n"] > 1
        if not ((_TRAINED_LOGITS["on"] or _SHARE_PREFIX["on"] or attention) and model.training
                and "labels" in inputs):
            return orig_loss(self, model, inputs, *args, **kwargs)
        from afm.sft.shared_prefix import shared_prefix
        from afm.sft.trained_logits import base_model, trained_positions

        prefix = _micro_batch_prefix(self, inputs) if _SHARE_PREFIX["on"] else 0
        labels = inputs["labels"][:, prefix:]  # what the model's head sees past a shared prefix
        with contextlib.ExitStack() as stack:
            stack.enter_context(shared_prefix(base_model(model), prefix))
            if attention:
                stack.enter_context(_attention_calls(self, base_model(model)))
            if _TRAINED_LOGITS["on"]:
                _check_trained_logits(self, labels)
                stack.enter_context(trained_positions(model, labels))
            return orig_loss(self, model, inputs, *args, **kwargs)

    lf_tuner.run_sft = run_sft
    trainer_cls._get_train_sampler = _get_train_sampler
    trainer_cls.compute_loss = compute_loss
    lf_tuner._afm_sort_patched = True


def _attention_calls(trainer: Any, model: Any) -> Any:
    """attention_fp32 and attention_chunks: the step's attention calls through their wrappers (the float32 cast
    outside, so a chunked call casts once); said once."""
    from afm.sft.attention_override import overridden_attention
    from afm.sft.causal_chunks import in_causal_chunks
    from afm.sft.float32_attention import in_float32

    fp32, chunks = _FP32_ATTENTION["on"], _ATTENTION_CHUNKS["n"]

    def wrap(kernel: Any) -> Any:
        kernel = in_causal_chunks(kernel, chunks) if chunks > 1 else kernel
        return in_float32(kernel) if fp32 else kernel

    if not getattr(trainer, "_afm_attention_said", False) and trainer.args.should_log:
        trainer._afm_attention_said = True
        if fp32:
            print("[afm] attention_fp32: the attention kernel runs on float32 queries, keys and values; the matrix "
                  "products around it in the trainer's mixed precision", flush=True)
        if chunks > 1:
            print(f"[afm] attention_chunks: each causal attention call runs as {chunks} query chunks over the keys "
                  "up to them (the same attention)", flush=True)
    return overridden_attention(model, wrap, "attention_fp32" if fp32 else "attention_chunks")


def _check_trained_logits(trainer: Any, labels: Any) -> None:
    """trained_logits_only: refuse a loss it cannot reproduce; say once what the first micro-batch keeps."""
    from afm.sft.trained_logits import TrainedLogitsError, unsupported_reason

    if (why := unsupported_reason(trainer)) is not None:
        raise TrainedLogitsError(f"trained_logits_only cannot reproduce this loss: {why}; set "
                                 "trained_logits_only: false")
    if not getattr(trainer, "_afm_trained_logits_said", False) and trainer.args.should_log:
        trainer._afm_trained_logits_said = True
        kept, total = int((labels[:, 1:] != -100).sum()), labels[:, 1:].numel()
        print(f"[afm] trained_logits_only: the first micro-batch takes logits at {kept} of {total} positions "
              f"({kept / max(total, 1):.0%}); the loss is the same", flush=True)


def _micro_batch_prefix(trainer: Any, inputs: dict[str, Any]) -> int:
    """share_prefix: the micro-batch's shared prefix in tokens (0: run it as usual), said once each way."""
    from afm.sft.shared_prefix import SharedPrefixError, prefix_length, unsupported_reason

    if (why := unsupported_reason(trainer)) is not None:
        raise SharedPrefixError(f"share_prefix is not supported here: {why}; set share_prefix: false")
    prefix, why = prefix_length(inputs)
    said = trainer.__dict__.setdefault("_afm_share_prefix_said", set())
    kind = "shared" if prefix else "none"
    if kind not in said and trainer.args.should_log:
        said.add(kind)
        rows, width = inputs["input_ids"].shape
        if prefix:
            print(f"[afm] share_prefix: a micro-batch's {rows} rows share their first {prefix} of {width} tokens, "
                  f"run once (the loss is the same)", flush=True)
        else:
            print(f"[afm] share_prefix: a micro-batch of {rows} rows runs as usual: {why}", flush=True)
    return prefix


def _replace_data_arguments() -> None:
    for name in ("_TRAIN_ARGS", "_INFER_ARGS", "_EVAL_ARGS", "_TRAIN_MCA_ARGS"):
        lst = getattr(lf_parser, name, None)
        if isinstance(lst, list):
            for i, cls in enumerate(lst):
                if cls is DataArguments:
                    lst[i] = AfmDataArguments


def apply() -> None:
    """Install every patch (safe to call more than once); raises
    :class:`~afm.sft.compat.UnsupportedLlamaFactory` outside the supported LLaMA-Factory releases."""
    require_supported()
    _replace_data_arguments()
    _patch_parser()
    sup = lf_supervised.SupervisedDatasetProcessor
    _wrap_processor(sup, pairwise=False, encode_owner=sup)
    # The packed processor inherits the encoder but has its own preprocess_dataset (which packs rows).
    _wrap_processor(lf_supervised.PackedSupervisedDatasetProcessor, pairwise=False, encode_owner=sup)
    pair = lf_pairwise.PairwiseDatasetProcessor
    _wrap_processor(pair, pairwise=True, encode_owner=pair)
    _patch_loader()
    _patch_sorted_micro_batches()
    # The file torchrun re-runs on every rank; named, not imported (it imports this module when run).
    lf_launcher.__file__ = str(Path(__file__).with_name("launcher.py"))
