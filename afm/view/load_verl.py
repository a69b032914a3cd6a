"""verl's generation dumps -> a page source: ``trainer.rollout_data_dir`` (``ROLLOUT_DATA_DIR``: every training
rollout) and ``trainer.validation_data_dir`` (``VAL_DATA_DIR``: validation generations).

verl 0.9.1 (``RayPPOTrainer._write_generations``) writes one ``<global_step>.jsonl`` per step, one line per
sample: ``input`` (the prompt decoded without special tokens), ``output`` (the response, observations included),
``gts`` (the ground truth), ``score`` (the sequence's reward), ``step``, and the per-sample keys of the reward's
extra info that it has for every line. A DAPO run of afm (``--local``, 2026-11-28) dumped ``uid`` besides in its
rollouts, and its validation lines carried ``compute_score``'s keys too (acc, pred, method, format_ok,
overlong_penalty, infra_error, ... and ``reward``; ``score`` then is the reward function's). Rollouts of one prompt at
one step form a group (the same ``input``). The dumps hold no advantages; when a rollout has none, the page shows
GRPO's, computed from the group's scores as verl computes them (score minus the group's mean, over its standard
deviation; a group of one keeps its score) and says so. Validation lines get none: nothing trains on them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from afm.trajectory import tool_calls
from afm.view.records import reward_of
from afm.view.samples import Sample, Source, answer_of, coa_parts, number, observation_mask, short

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
EPS = 1e-6  # verl's epsilon in the GRPO advantage


def step_files(path: Path) -> list[tuple[int, Path]]:
    """``(step, file)`` of a dump folder (``<step>.jsonl``) or of one dump file, in step order."""
    files = [path] if path.is_file() else list(path.iterdir())
    found = [(int(m.group(1)), f) for f in files if f.is_file() and (m := _STEP_FILE.match(f.name))]
    return sorted(found)


def is_verl_dump(path: Path) -> bool:
    """A folder of ``<step>.jsonl`` files (or one such file) whose first line has input, output and step."""
    files = step_files(path) if path.exists() else []
    if not files:
        return False
    try:
        with open(files[0][1], encoding="utf-8", errors="replace") as fh:
            rec = json.loads(fh.readline() or "null")
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and {"input", "output", "step"} <= set(rec)


def dump_kind(path: Path) -> str:
    """``validation`` for verl's validation dumps (a folder named so, as ``VAL_DATA_DIR`` defaults), else
    ``rollouts``."""
    names = [p.name.lower() for p in (path, path.parent)]
    return "validation" if any(n.startswith("val") for n in names) else "rollouts"


def prompt_question(prompt: str) -> str:
    """The question of a decoded chat prompt: after its last ``Question:``, before the assistant's turn."""
    at = prompt.rfind("Question:")
    text = prompt[at + len("Question:"):] if at >= 0 else prompt[-300:]
    text = text.rstrip()
    if text.endswith("assistant"):
        text = text[: -len("assistant")]
    return text.strip()


def grpo_advantages(scores: list[float]) -> list[float]:
    """GRPO's outcome advantage of each member of one group: (score - mean) / (std + eps), std with Bessel's
    correction; a group of one keeps its score (verl's mean 0, std 1 for singletons)."""
    if len(scores) == 1:
        return [scores[0] / (1 + EPS)]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
    return [(s - mean) / (std + EPS) for s in scores]


def _group_id(prompt: str) -> str:
    return hashlib.sha1(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _dumped_advantage(rec: dict[str, Any]) -> float | None:
    for key in ("advantage", "advantages"):
        value = rec.get(key)
        if isinstance(value, list):  # token-level: the outcome advantage is the same on every response token
            value = next((v for v in value if number(v)), value[0] if value else None)
        if number(value) is not None:
            return number(value)
    return None


def verl_sample(rec: dict[str, Any], step: int, group: int, member: int, advantage: float | None,
                computed: bool) -> Sample:
    """One dump line as a page sample (group ``group`` of its step, ``member``-th rollout of it)."""
    prompt, text = str(rec.get("input") or ""), str(rec.get("output") or "")
    reward = reward_of(rec)
    pred = rec.get("pred") if rec.get("pred") not in (None, "") else answer_of(text)
    calls = [{"name": c.name, "arg": c.argument, "status": "", "latency": None, "truncated": False, "infra": False,
              "retries": 0, "error": None, "obs_chars": None, "obs_tokens": None, "turn": i}
             for i, c in enumerate(tool_calls(text))]
    infra = bool(number(rec.get("infra_error")))
    row = {"bench": str(rec.get("data_source") or "rollout"), "qid": f"{step}/{group}", "k": member,
           "q": short(prompt_question(prompt)), "gold": short(rec.get("gts")), "pred": short(pred),
           "acc": number(rec.get("acc")), "score": number(rec.get("score")), "st": "ok",
           "fail": "infra" if infra else "", "fin": None, "meth": rec.get("method"), "turns": len(calls) + 1,
           "calls": len(calls), "tok": None, "wall": None, "ts": None, "idsrc": None, "step": step, "grp": group,
           "adv": advantage}
    extra = {k: v for k, v in rec.items() if k not in ("input", "output", "gts", "details") and k not in reward
             and isinstance(v, (int, float, str, bool)) and len(str(v)) < 200}
    detail = {"prompt": prompt, "text": text, "parts": coa_parts(text), "mask": observation_mask(text), "segs": [],
              "calls": calls, "question": prompt_question(prompt), "gold": short(rec.get("gts"), 100_000),
              "pred": pred, "reward": reward, "extra": extra,
              "advantage": {"value": advantage, "computed": computed}}
    return Sample(row=row, detail=detail)


def load_verl(path: Path, label: str, kind: str | None = None) -> Source:
    """The source of a verl dump folder (or file); ``kind`` is ``rollouts`` or ``validation`` (default: from the
    folder's name)."""
    files = step_files(path)
    source_kind = kind or dump_kind(path)

    def samples() -> Iterator[Sample]:
        for step, file in files:
            lines = list(_records(file))
            groups: dict[str, list[int]] = defaultdict(list)
            for i, rec in enumerate(lines):
                groups[_group_id(str(rec.get("input") or ""))].append(i)
            order = {gid: n for n, gid in enumerate(groups)}
            advantages: dict[int, tuple[float | None, bool]] = {i: (None, False) for i in range(len(lines))}
            for members in groups.values() if source_kind == "rollouts" else ():
                dumped = [_dumped_advantage(lines[i]) for i in members]
                if all(a is not None for a in dumped):
                    advantages.update({i: (a, False) for i, a in zip(members, dumped, strict=True)})
                    continue
                scores = [number(lines[i].get("score")) for i in members]
                if any(s is None for s in scores):
                    advantages.update({i: (None, True) for i in members})
                    continue
                advantages.update({i: (a, True) for i, a in zip(members, grpo_advantages(scores), strict=True)})
            for i, rec in enumerate(lines):
                gid = _group_id(str(rec.get("input") or ""))
                adv, computed = advantages[i]
                yield verl_sample(rec, int(rec.get("step", step)), order[gid], groups[gid].index(i), adv, computed)

    def overview(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return steps_overview(rows)

    return Source(source_kind, label, str(path), samples(), overview)


def _records(file: Path) -> Iterator[dict[str, Any]]:
    """The dump lines of one step file; a line that is not a JSON object is an error naming the file and line."""
    with open(file, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{file}: line {n}: not JSON ({exc})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{file}: line {n}: not a JSON object")
            yield rec


def steps_overview(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reward per step (a chart and a table): samples, groups, mean score and acc, groups whose rewards differ."""
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_step[r["step"]].append(r)
    table, xs, score_y, acc_y = [], [], [], []
    for step in sorted(by_step):
        rs = by_step[step]
        scores = [r["score"] for r in rs if r["score"] is not None]
        accs = [r["acc"] for r in rs if r["acc"] is not None]
        groups: dict[int, set[float]] = defaultdict(set)
        for r in rs:
            groups[r["grp"]].add(r["score"])
        mixed = sum(1 for g in groups.values() if len(g) > 1)
        mean_s = sum(scores) / len(scores) if scores else None
        mean_a = sum(accs) / len(accs) if accs else None
        xs.append(step)
        score_y.append(mean_s)
        acc_y.append(mean_a)
        table.append([step, len(rs), len(groups), _fmt(mean_s), _fmt(mean_a), f"{mixed}/{len(groups)}"])
    series = [{"name": "mean score", "y": score_y}]
    if any(a is not None for a in acc_y):
        series.append({"name": "mean acc", "y": acc_y})
    return [{"title": "Reward per step", "chart": {"x": xs, "series": series, "xlabel": "step", "ylabel": "reward"}},
            {"title": "Steps", "table": {"head": ["step", "samples", "groups", "mean score", "mean acc",
                                                  "groups with differing rewards"], "rows": table}}]


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"
