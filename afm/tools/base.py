"""The tool protocol shared by the rollout engine, the verl agent loop and the data pipeline.

A tool receives the body of its tag (``<web_search>body</web_search>``) and a :class:`ToolContext` describing the
trajectory so far, and returns a :class:`ToolResult` whose ``text`` becomes the ``<observation>`` body. Tools turn
every expected failure (server down, bad argument, timeout) into an explanatory ``text`` with ``status != "ok"``;
the engine additionally guards against unexpected exceptions and hangs, so a tool never crashes a rollout.

``infra`` separates the environment's failures from the model's: True when the call failed for infrastructure
reasons (the tool server unreachable, connection refused or reset, an HTTP 5xx or unreadable answer, no answer in
time, the sandbox failing), never for a bad query, a 4xx, or a program's own error or timeout in the sandbox. The
engine retries such a call (:class:`afm.agent.loop.ToolRunner`), and a trajectory still holding one afterwards is
no evidence about the model: evaluation stores it as failed and RL does not grade it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

ToolStatus = Literal["ok", "error", "timeout"]

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_SEARCH_RE = re.compile(r"<web_search>(.*?)</web_search>", re.DOTALL)


@dataclass
class ToolContext:
    """What a tool may know about the trajectory that calls it.

    ``question`` is the task as the user asked it; ``text`` is the assistant output so far (everything generated
    and observed in this turn, ending with the tool call); ``kwargs`` are per-sample settings (verl's
    ``extra_info.tools_kwargs[<tool>]``, or the evaluator's), for example the ground truth a tool must not see
    is never put here.
    """

    question: str = ""
    text: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def last_think(self) -> str:
        """Body of the last ``<think>`` block (the crawl summariser's "clues and ideas"), or ``""``."""
        found = _THINK_RE.findall(self.text)
        return found[-1].strip() if found else ""

    def last_search_query(self) -> str:
        """Body of the last ``<web_search>`` call (the crawl summariser's goal), or ``""``."""
        found = _SEARCH_RE.findall(self.text)
        return found[-1].strip() if found else ""


@dataclass
class ToolResult:
    """The observation a tool returns; ``text`` goes between ``<observation>`` tags verbatim.

    ``infra``: the call failed for infrastructure reasons (see the module docstring), not because of its input.
    ``meta["retryable"] = False`` tells the engine that retrying cannot help (no sandbox on this machine).
    """

    text: str
    status: ToolStatus = "ok"
    latency_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    infra: bool = False


class Tool(ABC):
    """Base class of every tool. Subclasses set ``name`` (the tag name) and implement :meth:`call`.

    ``config`` holds the tool's YAML settings (timeouts, URLs, limits); unknown keys are kept in ``self.config``
    so that configs written for newer versions still load.
    """

    name: ClassVar[str]
    # Whether the engine's tool timeout passing means the infrastructure failed: True for a tool that only waits on
    # a server; False where the time may be the model's own (the code tool's program running long).
    infra_on_timeout: ClassVar[bool] = False

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config: dict[str, Any] = dict(config or {})

    @abstractmethod
    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        """Run the tool on a tag body and return the observation."""

    async def aclose(self) -> None:
        """Release connections or worker processes; the default holds none."""
        return None

    def describe(self) -> dict[str, Any]:
        """A JSON-able description (name, class, config) for run records; subclasses may hide secrets here."""
        return {"name": self.name, "class": f"{type(self).__module__}:{type(self).__qualname__}",
                "config": self.config}
