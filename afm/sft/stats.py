"""Counting what masking did: tokens trained and masked, samples dropped and why.

Preprocessing runs inside ``datasets.map`` workers, so each worker appends one JSON line per batch to a file in a
directory named by ``AFM_MASK_STATS_DIR``; the main process merges them into a :class:`MaskReport` when the map
is done. Appending per batch means a crash loses nothing already counted.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATS_DIR_ENV = "AFM_MASK_STATS_DIR"

# Stable reason codes (documented in data/README.md).
REASONS = {
    "unclosed_observation": "an <observation> is never closed",
    "stray_closing_observation": "a </observation> has no opening tag",
    "unclosed_tag": "a CoA tag (think, plan, tool, answer, ...) is never closed",
    "stray_closing_tag": "a CoA closing tag has no opening tag",
    "nested_tag": "a CoA tag is opened inside another (non-opaque) tag",
    "truncated_inside_observation": "cutoff_len cuts the response inside an observation (or its opening tag)",
    "normalization_breaks_tag": "Unicode NFC normalisation merges an observation tag's '>' with the next character",
    "no_trained_tokens": "nothing is left to train on after masking",
    "invalid_structure": "LLaMA-Factory's own check (prompt/response turn counts) rejected it",
}


def example_id(prompt: list[dict[str, Any]], response: list[dict[str, Any]]) -> str:
    """A short content hash that identifies a sample across runs, plus the start of its last user turn."""
    digest = hashlib.sha1(json.dumps([prompt, response], sort_keys=True, default=str).encode()).hexdigest()[:10]
    user = next((m.get("content", "") for m in reversed(prompt) if m.get("role") == "user"), "")
    snippet = " ".join(str(user).split())[:48]
    return f"{digest} ({snippet!r})"


@dataclass
class MaskReport:
    """Totals for one preprocessed dataset."""

    samples_seen: int = 0
    samples_kept: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    drop_examples: dict[str, str] = field(default_factory=dict)  # reason -> one example id
    tokens_total: int = 0  # input tokens of kept samples (chosen + rejected for DPO)
    tokens_target: int = 0  # label tokens before masking
    tokens_masked: int = 0  # label tokens masked as observation
    tokens_mixed: int = 0  # masked tokens that also held model-written characters
    observations: int = 0
    from_cache: bool = False

    @property
    def tokens_trained(self) -> int:
        return self.tokens_target - self.tokens_masked

    @property
    def samples_dropped(self) -> int:
        return sum(self.drops.values())

    def drop(self, reason: str, ex_id: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown drop reason {reason!r}")
        self.drops[reason] = self.drops.get(reason, 0) + 1
        self.drop_examples.setdefault(reason, ex_id)

    def merge(self, other: MaskReport) -> None:
        for name in ("samples_seen", "samples_kept", "tokens_total", "tokens_target", "tokens_masked",
                     "tokens_mixed", "observations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.drops = dict(Counter(self.drops) + Counter(other.drops))
        for reason, ex in other.drop_examples.items():
            self.drop_examples.setdefault(reason, ex)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens_trained"] = self.tokens_trained
        d["samples_dropped"] = self.samples_dropped
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MaskReport:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})

    def format(self, title: str = "observation masking") -> str:
        """Human-readable summary (what a user checks before a long run)."""
        def pct(a: int, b: int) -> str:
            return f"{100.0 * a / b:.1f}%" if b else "n/a"

        lines = [
            f"[afm] {title}{' (from datasets cache)' if self.from_cache else ''}",
            f"  samples   seen {self.samples_seen}  kept {self.samples_kept}  dropped {self.samples_dropped}",
            f"  tokens    total {self.tokens_total}  target {self.tokens_target}  "
            f"trained {self.tokens_trained} ({pct(self.tokens_trained, self.tokens_target)})  "
            f"masked {self.tokens_masked} ({pct(self.tokens_masked, self.tokens_target)})",
            f"  observations {self.observations}  boundary tokens masked with model text {self.tokens_mixed}",
        ]
        for reason, n in sorted(self.drops.items(), key=lambda kv: -kv[1]):
            lines.append(f"  dropped {n:>6}  {reason}: {REASONS[reason]}; e.g. {self.drop_examples.get(reason, '')}")
        return "\n".join(lines)


def append_stats(report: MaskReport) -> None:
    """Append one batch's counts to this process's file in ``$AFM_MASK_STATS_DIR`` (no-op when unset)."""
    directory = os.environ.get(STATS_DIR_ENV)
    if not directory:
        return
    path = Path(directory) / f"stats-{os.getpid()}.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(report.to_dict()) + "\n")


def collect_stats(directory: str | Path) -> tuple[MaskReport, int]:
    """Merge every batch line under ``directory``. Returns the report and the number of lines read."""
    total, lines = MaskReport(), 0
    for path in sorted(Path(directory).glob("stats-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                total.merge(MaskReport.from_dict(json.loads(line)))
                lines += 1
    return total, lines
