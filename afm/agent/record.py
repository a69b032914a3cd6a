"""The trajectory record: every token the model saw, which of them it sampled, and what the tools did.

Invariant: ``prompt_ids + concat(segment.ids)`` is exactly the context of the model at its last turn (plus the
last turn's sampled ids). Segments of kind ``model`` were sampled (``mask = 1``, trained on); segments of kind
``observation`` were inserted by the environment (``mask = 0``). Nothing is ever re-tokenised from text, unless a
backend could not return token ids, in which case ``ids_source`` says ``retokenized``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FinishReason = Literal["answer", "eos", "max_turns", "max_tokens", "timeout", "error"]
SegmentKind = Literal["model", "observation"]


@dataclass
class Segment:
    """A run of tokens: sampled by the model (``mask=1``) or inserted by the environment (``mask=0``)."""

    kind: SegmentKind
    ids: list[int]
    text: str
    # Per-token log-probabilities the backend reported for sampled ids (``model`` segments only; None when the
    # backend returned none). Same length as ``ids``.
    logprobs: list[float] | None = None

    @property
    def mask(self) -> int:
        return 1 if self.kind == "model" else 0


@dataclass
class ToolCallRecord:
    """One tool call: what was asked, how it went, how big the observation was.

    ``infra``: the call still failed for infrastructure reasons after the engine's retries (``meta["infra_retries"]``
    counts them), so its observation says nothing about the model (see :class:`afm.tools.base.ToolResult`).
    """

    turn: int
    name: str
    argument: str
    status: str  # ok | error | timeout | duplicate | invalid
    latency_s: float = 0.0
    observation_chars: int = 0
    observation_tokens: int = 0
    truncated: bool = False
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    infra: bool = False


@dataclass
class Trajectory:
    """A whole CoA rollout; serialisable to one JSON line (:meth:`to_dict` / :meth:`from_dict`)."""

    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    error: str | None = None
    turns: int = 0
    wall_s: float = 0.0
    ids_source: str = "sampled"  # sampled | retokenized
    prompt_text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    # ---- views -----------------------------------------------------------------------------------------------
    def response_ids(self) -> list[int]:
        return [i for s in self.segments for i in s.ids]

    def response_mask(self) -> list[int]:
        return [s.mask for s in self.segments for _ in s.ids]

    def context_ids(self) -> list[int]:
        """Prompt plus response: what a next turn would be conditioned on."""
        return self.prompt_ids + self.response_ids()

    def response_text(self) -> str:
        return "".join(s.text for s in self.segments)

    def final_answer(self) -> str | None:
        """Body of the last ``<answer>`` in the response, or None."""
        from afm.trajectory import last_answer

        return last_answer(self.response_text())

    @property
    def n_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def n_model_tokens(self) -> int:
        return sum(len(s.ids) for s in self.segments if s.kind == "model")

    @property
    def n_observation_tokens(self) -> int:
        return sum(len(s.ids) for s in self.segments if s.kind == "observation")

    @property
    def n_response_tokens(self) -> int:
        return self.n_model_tokens + self.n_observation_tokens

    @property
    def infra_failures(self) -> int:
        """Tool calls that failed for infrastructure reasons after retries: the trajectory is no evidence about the
        model when this is not 0 (evaluation stores it as failed, RL does not grade it)."""
        return sum(1 for c in self.tool_calls if c.infra)

    def tool_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.tool_calls:
            counts[c.name] = counts.get(c.name, 0) + 1
        return counts

    # ---- serialisation ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["answer"] = self.final_answer()
        d["response"] = self.response_text()
        d["counts"] = {"prompt_tokens": self.n_prompt_tokens, "model_tokens": self.n_model_tokens,
                       "observation_tokens": self.n_observation_tokens, "tool_calls": len(self.tool_calls),
                       "turns": self.turns, "infra_failures": self.infra_failures}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(
            prompt_ids=list(d["prompt_ids"]),
            segments=[Segment(s["kind"], list(s["ids"]), s["text"],
                              list(s["logprobs"]) if s.get("logprobs") is not None else None)
                      for s in d.get("segments", [])],
            tool_calls=[ToolCallRecord(**c) for c in d.get("tool_calls", [])],
            finish_reason=d.get("finish_reason"),
            error=d.get("error"),
            turns=d.get("turns", 0),
            wall_s=d.get("wall_s", 0.0),
            ids_source=d.get("ids_source", "sampled"),
            prompt_text=d.get("prompt_text", ""),
            meta=dict(d.get("meta", {})),
        )
