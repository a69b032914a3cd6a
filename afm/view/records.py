"""afm's trajectory record (:class:`afm.agent.record.Trajectory` as a dict) -> a page sample's details.

The record holds every sampled and inserted token id per segment (``model``: mask 1, ``observation``: mask 0),
log-probabilities where the backend returned them, and one entry per tool call (status, latency, truncation,
infrastructure retries). The details keep all of it; the masks come from the segments themselves, never from
re-reading the text.
"""

from __future__ import annotations

from typing import Any

from afm.view.samples import TOOL_STATUS_BITS, coa_parts, number, utf16_index

# The reward fields a record or a verl dump may hold, in the order the page lists them.
REWARD_FIELDS = ("score", "acc", "format_ok", "overlong_penalty", "method", "infra_error", "tests_from", "pred",
                 "reward_error", "error", "format_problems", "data_source")


def tool_call_entry(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call as the page shows it (short keys: they repeat in every call of every trajectory)."""
    meta = call.get("meta") or {}
    return {"name": str(call.get("name", "")), "arg": str(call.get("argument", "")),
            "status": str(call.get("status", "")), "latency": number(call.get("latency_s")),
            "truncated": bool(call.get("truncated")), "infra": bool(call.get("infra")),
            "retries": int(meta.get("infra_retries") or 0), "error": call.get("error") or None,
            "obs_chars": call.get("observation_chars"), "obs_tokens": call.get("observation_tokens"),
            "turn": call.get("turn")}


def tool_status_bits(calls: list[dict[str, Any]]) -> int:
    bits = 0
    for c in calls:
        bits |= TOOL_STATUS_BITS.get(c["status"], 0)
        if c["infra"]:
            bits |= TOOL_STATUS_BITS["infra"]
    return bits


def trajectory_detail(traj: dict[str, Any]) -> tuple[dict[str, Any], list[int], list[float | None] | None,
                                                       dict[str, Any]]:
    """``(detail, ids, logprobs, row_fields)`` of one trajectory record.

    ``ids`` concatenates every segment's ids; ``logprobs`` (same length, None where a token has none; None when no
    segment has any) comes from the model segments. ``row_fields`` are the table's counts read from the record.
    """
    segments = traj.get("segments") or []
    text = "".join(str(s.get("text", "")) for s in segments) if segments else str(traj.get("response") or "")
    u = utf16_index(text)
    segs, mask, ids, lps, any_lp = [], [], [], [], False
    pos = 0
    for s in segments:
        seg_text = str(s.get("text", ""))
        seg_ids = [int(i) for i in s.get("ids") or []]
        start, end = u(pos), u(pos + len(seg_text))
        pos += len(seg_text)
        observation = s.get("kind") == "observation"
        segs.append([1 if observation else 0, start, end, len(seg_ids)])
        if observation:
            mask += [start, end]
        lp = s.get("logprobs")
        if lp is not None and len(lp) == len(seg_ids):
            any_lp = True
            lps += [number(x) for x in lp]
        else:
            lps += [None] * len(seg_ids)
        ids += seg_ids
    calls = [tool_call_entry(c) for c in traj.get("tool_calls") or []]
    counts = traj.get("counts") or {}
    model_tokens = sum(g[3] for g in segs if g[0] == 0)
    obs_tokens = sum(g[3] for g in segs if g[0] == 1)
    detail = {"prompt": str(traj.get("prompt_text") or ""), "text": text, "parts": coa_parts(text), "mask": mask,
              "segs": segs, "calls": calls, "finish": traj.get("finish_reason"), "error": traj.get("error"),
              "ids_source": traj.get("ids_source") or "sampled", "turns": traj.get("turns"),
              "wall": number(traj.get("wall_s")), "meta": _plain_meta(traj.get("meta") or {}),
              "tokens": {"prompt": counts.get("prompt_tokens", len(traj.get("prompt_ids") or []) or None),
                         "model": model_tokens, "observation": obs_tokens}}
    row = {"turns": traj.get("turns"), "calls": len(calls), "tok": model_tokens + obs_tokens,
           "wall": number(traj.get("wall_s")), "ts": tool_status_bits(calls), "fin": traj.get("finish_reason"),
           "idsrc": traj.get("ids_source") or "sampled"}
    return detail, ids, (lps if any_lp else None), row


def _plain_meta(meta: dict[str, Any]) -> dict[str, str]:
    """The record's meta as short strings (prompt key and version, request id, ...)."""
    return {str(k): str(v)[:200] for k, v in meta.items() if isinstance(v, (str, int, float, bool))}


def reward_of(record: dict[str, Any]) -> dict[str, Any]:
    """The reward breakdown fields present in ``record`` (an eval result or a verl dump line)."""
    out: dict[str, Any] = {}
    for key in REWARD_FIELDS:
        if key in record and record[key] not in (None, ""):
            value = record[key]
            out[key] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out
