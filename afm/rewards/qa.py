"""QA answer matching: SQuAD/Search-R1 normalisation, exact match, token F1, ``|``-separated multi-answers.

Rule for multi-answer predictions (the MHQA prompt asks for answers separated by ``|``), as in the original's
``mhqa_train``/``mhqa_eval``:

- **train**: the prediction is split on ``|`` and empty parts are dropped; it is correct iff at least one part
  remains and *every* part, normalised, equals one of the normalised gold answers. (The original accepted a
  prediction with no non-empty part, vacuously; we do not.)
- **eval**: only the first ``|``-separated part counts; it is correct iff, normalised, it equals a gold answer.

The ``|`` rule belongs to the MHQA answer format (:mod:`afm.prompts.mhqa` defines it), so only the QA scorer of
MHQA sources applies it; other callers (the judge's EM/F1 fallback for web benchmarks, whose golds may contain
``|``, as HLE's ``f bc=X|V|U|T|L`` or ``\\int_{|z|=1}``) pass ``multi_answer=False`` and compare the whole
prediction. Even under the rule, a prediction that equals a gold containing ``|`` as a whole is correct. Gold answers are aliases
of one answer and are never split. F1 is reported beside EM: train, the mean over parts of
each part's best F1; eval, the first part's best F1. Normalisation uses ASCII punctuation only, exactly like the
SQuAD script, so EM figures stay comparable with published ones.

Every step is linear in the prediction (the golds are normalised once per call, not once per part). A prediction
longer than :data:`MAX_ANSWER_CHARS` is not compared: it scores 0 with ``method`` ``answer_too_large``. A bad
``qa_mode`` is the caller's mistake and raises :class:`~afm.rewards.errors.RewardConfigError`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from afm.rewards.errors import RewardConfigError
from afm.rewards.ground_truth import GroundTruth
from afm.trajectory import last_answer

QA_MODES = ("train", "eval")
MAX_ANSWER_CHARS = 10_000
"""The longest QA (or judged) answer that is compared; a longer one scores 0 as ``answer_too_large``. Short-answer
QA golds are a few words, and a judged web answer fits in a few paragraphs."""
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Iterable[str]) -> bool:
    """True iff ``prediction`` equals one of ``golds`` after :func:`normalize_answer`."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: Iterable[str]) -> float:
    """Best token-level F1 of ``prediction`` against any gold answer (normalised tokens)."""
    return _best_f1(normalize_answer(prediction).split(), [normalize_answer(g).split() for g in golds])


def _best_f1(pred_tokens: list[str], gold_tokens: list[list[str]]) -> float:
    return max((_f1(pred_tokens, tokens) for tokens in gold_tokens), default=0.0)


def split_parts(prediction: str) -> list[str]:
    """The non-empty ``|``-separated parts of a prediction, stripped."""
    return [p.strip() for p in prediction.split("|") if p.strip()]


def qa_match(prediction: str, golds: Sequence[str], mode: str = "train", *,
             multi_answer: bool = True) -> tuple[bool, float]:
    """``(em, f1)`` of ``prediction`` against ``golds``: the module's multi-answer rule for ``mode`` when
    ``multi_answer``, else the whole prediction."""
    if mode not in QA_MODES:
        raise RewardConfigError(f"qa_mode must be one of {QA_MODES}, got {mode!r}")
    piped = [g for g in golds if "|" in g]
    if not multi_answer or (piped and exact_match(prediction, piped)):
        whole = prediction.strip()
        if not whole:
            return False, 0.0
        return exact_match(whole, golds), f1_score(whole, golds)
    if mode == "eval":
        first = prediction.split("|")[0].strip()
        if not first:
            return False, 0.0
        return exact_match(first, golds), f1_score(first, golds)
    parts = split_parts(prediction)
    if not parts:
        return False, 0.0
    # normalised once: a prediction of thousands of "|" parts must not renormalise every gold per part
    normalized = [normalize_answer(g) for g in golds]
    gold_set, gold_tokens = set(normalized), [g.split() for g in normalized]
    parts = [normalize_answer(p) for p in parts]
    em = all(p in gold_set for p in parts)
    return em, sum(_best_f1(p.split(), gold_tokens) for p in parts) / len(parts)


def resolve_mode(qa_mode: str | None, extra_info: dict[str, Any]) -> str:
    """The QA mode: explicit ``qa_mode``, else eval for a test/val ``extra_info['split']``, else train."""
    if qa_mode is not None:
        if qa_mode not in QA_MODES:
            raise RewardConfigError(f"qa_mode must be one of {QA_MODES}, got {qa_mode!r}")
        return qa_mode
    split = str(extra_info.get("split", "")).lower()
    return "eval" if split in ("test", "val", "valid", "validation", "eval", "dev") else "train"


def score(solution_str: str, gt: GroundTruth, *, data_source: str, extra_info: dict[str, Any],
          qa_mode: str | None = None, **_: Any) -> dict[str, Any]:
    """Registry scorer: EM (and F1) of the last ``<answer>`` against the gold answers."""
    mode = resolve_mode(qa_mode, extra_info)
    pred = last_answer(solution_str)
    if not pred:
        return {"acc": 0.0, "pred": "", "method": "no_answer", "details": {"qa_mode": mode}}
    if len(pred) > MAX_ANSWER_CHARS:
        return {"acc": 0.0, "pred": pred, "method": "answer_too_large", "details": {"qa_mode": mode},
                "error": f"answer_too_large: {len(pred):,} characters; a QA answer is compared up to "
                         f"{MAX_ANSWER_CHARS:,}"}
    em, f1 = qa_match(pred, gt.targets, mode)
    return {"acc": float(em), "pred": pred, "method": "em",
            "details": {"qa_mode": mode, "em": float(em), "f1": round(f1, 6)}}
