"""The format half of a built-in prompt, declared once per prompt module: its tools and tags, which function may
follow which, the functions a ``<think>`` must precede and what goes inside ``<answer>``.

Each built-in module writes its wording (``TEXT``) around a :class:`Grammar` and joins the two with
:meth:`Grammar.prompt`, so the :class:`~afm.prompts.registry.Prompt` fields are filled in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afm.prompts._text import successor_lines
from afm.prompts.registry import Prompt
from afm.trajectory import TagRegistry


@dataclass(frozen=True)
class Grammar:
    """What a trajectory in this format may contain and in which order (see :class:`Prompt` for each field)."""

    tools: tuple[str, ...]
    tags: tuple[str, ...]
    answer_format: str
    successors: tuple[tuple[str, tuple[str, ...]], ...] = ()
    think_before: tuple[str, ...] = ()
    observation_tag: str = "observation"
    registry: TagRegistry | None = None

    def order_lines(self) -> str:
        """The order rules in words, one bullet per group of functions (for the prompt's text)."""
        return successor_lines(self.successors, self.tools)

    def prompt(self, key: str, version: str, text: str, example: str, description: str, **extra: Any) -> Prompt:
        """The :class:`Prompt` of this grammar with its wording, its one example and its description; ``extra``
        takes the remaining fields (``extra_keys``, ``render_extra``)."""
        return Prompt(key=key, version=version, text=text, tools=self.tools, answer_format=self.answer_format,
                      description=description, tags=self.tags, examples=(example,), successors=self.successors,
                      think_before=self.think_before, observation_tag=self.observation_tag,
                      registry=self.registry, **extra)
