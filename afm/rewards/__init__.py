"""Rewards for RL and evaluation: one ``compute_score`` over a registry of scorers keyed by ``data_source``.

>>> from afm.rewards import compute_score
>>> r = compute_score("nq", "<think>easy</think>\\n<answer>Paris</answer>", {"target": ["Paris"]})
>>> r["score"], r["acc"], r["method"]
(1.0, 1.0, 'em')

Scorers: QA exact match (:mod:`afm.rewards.qa`), Math-Verify (:mod:`afm.rewards.math`), an LLM judge with EM/F1
fallback (:mod:`afm.rewards.judge`), code tests in the sandbox (``afm.rewards.code``, loaded on first use);
format checks (:mod:`afm.rewards.format`) and the DAPO overlong penalty (:mod:`afm.rewards.length`) apply on top.
"""

from afm.rewards.format import FORMAT_MODES, apply_format, code_tag_problems, format_problems
from afm.rewards.ground_truth import GroundTruth, normalize_ground_truth
from afm.rewards.judge import PROMPT_VERSION, Judge, JudgeConfig, Verdict, get_judge
from afm.rewards.length import overlong_penalty, penalty_from_options
from afm.rewards.math import MathVerdict, MathVerifier, default_verifier, math_equal
from afm.rewards.qa import exact_match, f1_score, normalize_answer, qa_match
from afm.rewards.registry import (
    ScorerSpec,
    describe,
    get_scorer,
    known_data_sources,
    load_registry_yaml,
    register_scorer,
    unregister_scorer,
)
from afm.rewards.score import RESULT_KEYS, InfrastructureError, compute_score, compute_score_async
from afm.rewards.verdict import parse_verdict

__all__ = [
    "FORMAT_MODES",
    "PROMPT_VERSION",
    "RESULT_KEYS",
    "GroundTruth",
    "InfrastructureError",
    "Judge",
    "JudgeConfig",
    "MathVerdict",
    "MathVerifier",
    "ScorerSpec",
    "Verdict",
    "apply_format",
    "code_tag_problems",
    "compute_score",
    "compute_score_async",
    "default_verifier",
    "describe",
    "exact_match",
    "f1_score",
    "format_problems",
    "get_judge",
    "get_scorer",
    "known_data_sources",
    "load_registry_yaml",
    "math_equal",
    "normalize_answer",
    "normalize_ground_truth",
    "overlong_penalty",
    "parse_verdict",
    "penalty_from_options",
    "qa_match",
    "register_scorer",
    "unregister_scorer",
]
