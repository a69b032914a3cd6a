"""The Chain-of-Agents tag vocabulary: reasoning tags, one tag per tool, observation and answer.

A registry maps tag names to :class:`Tag`. Tool tags are added with :func:`register_tag`; a duplicate name
raises. Tags marked ``opaque`` (observations and code) have bodies that may legitimately contain text that looks
like a tag (an HTML page, a Python string), so the parser only looks for their closing tag inside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class TagKind(StrEnum):
    """What a tag does in a trajectory."""

    REASONING = "reasoning"  # think, plan, reflection, suggested_answer, double_check
    TOOL = "tool"  # a tool call; the body is the tool's argument
    OBSERVATION = "observation"  # inserted by the environment, never trained on
    ANSWER = "answer"  # the final answer; ends the trajectory


_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


@dataclass(frozen=True)
class Tag:
    """One tag of the format."""

    name: str
    kind: TagKind
    description: str = ""
    opaque: bool = False

    @property
    def open(self) -> str:
        return f"<{self.name}>"

    @property
    def close(self) -> str:
        return f"</{self.name}>"


_DEFAULT_TAGS: tuple[Tag, ...] = (
    Tag("think", TagKind.REASONING, "private reasoning before every function"),
    Tag("plan", TagKind.REASONING, "decomposition of the task into steps"),
    Tag("reflection", TagKind.REASONING, "assessment of progress; may trigger re-planning"),
    Tag("suggested_answer", TagKind.REASONING, "a candidate answer to be double-checked"),
    Tag("double_check", TagKind.REASONING, "a 1-4 score of the suggested answer"),
    Tag("answer", TagKind.ANSWER, "the final answer"),
    Tag("observation", TagKind.OBSERVATION, "tool output inserted by the environment", opaque=True),
    Tag("web_search", TagKind.TOOL, "web search; body is the query"),
    Tag("crawl_page", TagKind.TOOL, "fetch and summarise pages; body is URLs separated by |"),
    Tag("wiki_search", TagKind.TOOL, "Wikipedia retrieval; body is the query"),
    Tag("code", TagKind.TOOL, "run Python; body is a fenced ```py block (+ optional ```sh stdin)", opaque=True),
    Tag("visual_inspector", TagKind.TOOL, "inspect an image; body is fenced json {file_path, question}"),
)


class TagRegistry:
    """Name -> :class:`Tag`. Registering an existing name raises unless ``exist_ok`` and it is identical."""

    def __init__(self, tags: tuple[Tag, ...] | list[Tag] = ()) -> None:
        self._tags: dict[str, Tag] = {}
        for tag in tags:
            self.register(tag)

    def register(self, tag: Tag, *, exist_ok: bool = False) -> Tag:
        """Add ``tag``; raise ValueError on an invalid or duplicate name."""
        if not _NAME_RE.match(tag.name):
            raise ValueError(f"invalid tag name {tag.name!r}: use letters, digits, '_' or '-' (e.g. 'web_search')")
        old = self._tags.get(tag.name)
        if old is not None:
            if exist_ok and old == tag:
                return old
            raise ValueError(f"tag {tag.name!r} is already registered as {old}")
        self._tags[tag.name] = tag
        return tag

    def get(self, name: str) -> Tag:
        """The tag called ``name``; KeyError lists the known names."""
        try:
            return self._tags[name]
        except KeyError:
            raise KeyError(f"unknown tag {name!r}; known tags: {', '.join(sorted(self._tags))}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tags

    def __iter__(self):
        return iter(self._tags.values())

    def names(self, kind: TagKind | None = None) -> list[str]:
        """Registered names, optionally of one kind, in registration order."""
        return [t.name for t in self._tags.values() if kind is None or t.kind == kind]

    def copy(self) -> TagRegistry:
        return TagRegistry(list(self._tags.values()))


DEFAULT_REGISTRY = TagRegistry(_DEFAULT_TAGS)


def register_tag(
    name: str, kind: TagKind | str = TagKind.TOOL, description: str = "", *, opaque: bool = False,
    registry: TagRegistry | None = None,
) -> Tag:
    """Register a new tag (by default a tool tag) in the default registry."""
    return (registry or DEFAULT_REGISTRY).register(Tag(name, TagKind(kind), description, opaque))


def tool_tags(registry: TagRegistry | None = None) -> list[str]:
    """Names of all tool tags."""
    return (registry or DEFAULT_REGISTRY).names(TagKind.TOOL)


def stop_strings(tools: list[str] | tuple[str, ...], registry: TagRegistry | None = None) -> list[str]:
    """Generation stop strings for the enabled ``tools``: their closing tags, then ``</answer>``."""
    reg = registry or DEFAULT_REGISTRY
    out = []
    for name in tools:
        tag = reg.get(name)
        if tag.kind != TagKind.TOOL:
            raise ValueError(f"{name!r} is a {tag.kind.value} tag, not a tool")
        out.append(tag.close)
    out.append("</answer>")
    return out
