"""The model-backend interface shared by the OpenAI-compatible client, the in-process HF model and verl."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

GenFinish = Literal["stop", "eos", "length"]


class EngineRefused(RuntimeError):
    """The engine refused afm's request itself (an HTTP 4xx other than a rate limit): every sample would fail the
    same way, so a run stops at the first one with this message instead of recording each as failed."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generation call (per turn)."""

    max_new_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def with_(self, **changes: Any) -> SamplingParams:
        return SamplingParams(**{**asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Generation:
    """What one call produced: the sampled token ids (stop string included) and why it ended.

    ``finish``: ``stop`` (a stop string matched; ``stop_str`` says which), ``eos`` (the model's end token, which is
    part of ``ids``), ``length`` (``max_new_tokens`` reached). ``ids_source`` is ``sampled`` when the ids are the
    model's own, ``retokenized`` when the backend only returned text.
    """

    ids: list[int]
    finish: GenFinish
    text: str = ""
    stop_str: str | None = None
    ids_source: str = "sampled"
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ModelBackend(Protocol):
    """``generate(prompt_ids, sampling) -> Generation``; implementations are async and safe to call concurrently."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation: ...

    async def aclose(self) -> None: ...


def find_stop(text: str, stops: tuple[str, ...] | list[str]) -> tuple[int, str] | None:
    """Earliest position where a stop string ends in ``text``: ``(end_index, stop)``, or None."""
    best: tuple[int, str] | None = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best[0]):
            best = (i + len(s), s)
    return best
