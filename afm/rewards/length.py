"""DAPO overlong reward shaping: no penalty up to ``max_len - buffer``, then linear down to ``-factor`` at ``max_len``.

This is verl's ``dapo`` reward manager rule (``overlong_buffer_cfg.{enable,len,penalty_factor}`` with
``max_resp_len``), which the original folded in as ``⌊7L/8⌋`` thresholds. Lengths are response tokens. Beyond
``max_len`` the penalty stays at ``-factor`` (a response cannot normally be longer than the limit). Inconsistent
options raise :class:`~afm.rewards.errors.RewardConfigError` (the caller's mistake, never the policy's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from afm.rewards.errors import RewardConfigError

_LENGTH_KEYS = ("response_length", "response_len", "valid_response_length", "num_response_tokens")


def overlong_penalty(length: int, max_len: int, buffer: int, factor: float = 1.0) -> float:
    """The penalty (≤ 0) for a response of ``length`` tokens.

    >>> overlong_penalty(100, max_len=1000, buffer=200), overlong_penalty(900, 1000, 200), overlong_penalty(1000, 1000, 200)
    (0.0, -0.5, -1.0)
    """
    if max_len <= 0 or buffer <= 0 or buffer > max_len:
        raise RewardConfigError(f"overlong penalty needs 0 < buffer <= max_len, got buffer={buffer}, max_len={max_len}")
    if length < 0:
        raise RewardConfigError(f"response length must be >= 0, got {length}")
    exceed = min(length, max_len) - (max_len - buffer)
    return -factor * exceed / buffer if exceed > 0 else 0.0


def penalty_from_options(options: Mapping[str, Any], extra_info: Mapping[str, Any]) -> tuple[float, str]:
    """``(penalty, note)`` from compute_score's keyword options; ``note`` says why no penalty was applied.

    Options (verl's names): ``max_resp_len`` and ``overlong_buffer_cfg={"enable", "len", "penalty_factor"}``, or the
    flat ``overlong_buffer_len`` (enables it) and ``overlong_penalty_factor``. The length comes from
    ``response_length`` in the options or in ``extra_info`` (token count of the response).
    """
    cfg = dict(options.get("overlong_buffer_cfg") or {})
    if options.get("overlong_buffer_len") is not None:
        cfg.setdefault("enable", True)
        cfg.setdefault("len", options["overlong_buffer_len"])
    if options.get("overlong_penalty_factor") is not None:
        cfg.setdefault("penalty_factor", options["overlong_penalty_factor"])
    if not cfg.get("enable"):
        return 0.0, ""
    max_len = options.get("max_resp_len", options.get("max_response_length"))
    if max_len is None or cfg.get("len") is None:
        raise RewardConfigError("overlong penalty enabled but max_resp_len or overlong_buffer_cfg.len is missing")
    length = next((src[k] for src in (options, extra_info) for k in _LENGTH_KEYS if src.get(k) is not None), None)
    if length is None:
        return 0.0, f"overlong penalty skipped: no response length (pass one of {', '.join(_LENGTH_KEYS)})"
    return overlong_penalty(int(length), int(max_len), int(cfg["len"]), float(cfg.get("penalty_factor", 1.0))), ""
