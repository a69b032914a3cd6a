"""Tool registry: tag name -> class, and building tools from YAML configs.

Classes are referenced by ``module:Class`` strings and imported on first use, so that importing the registry
does not import httpx or the sandbox, and so that users can register their own tools from a config file.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from afm.tools.base import Tool

TOOL_CLASSES: dict[str, str] = {
    "web_search": "afm.tools.web_search:WebSearchTool",
    "crawl_page": "afm.tools.crawl_page:CrawlPageTool",
    "wiki_search": "afm.tools.wiki_search:WikiSearchTool",
    "code": "afm.tools.code:CodeTool",
}


# Keys of afm.rl.tools.AfmVerlTool's config that belong to the adapter, not to the afm tool it wraps.
VERL_ADAPTER_KEYS = frozenset({"type", "afm_tool", "afm_class", "call_timeout"})


def register_tool(name: str, target: str | type[Tool], *, replace: bool = False) -> None:
    """Register a tool class (or its ``module:Class`` path) under a tag name.

    Registering the same target again is a no-op; another target under a taken name raises ``ValueError``
    unless ``replace=True`` (two plugins claiming one tag would otherwise silently swap the tool a run uses).
    """
    if isinstance(target, type):
        target = f"{target.__module__}:{target.__qualname__}"
    if not isinstance(target, str) or ":" not in target:
        raise ValueError(f"tool {name!r}: give a Tool subclass or a 'module:Class' path, not {target!r}")
    current = TOOL_CLASSES.get(name)
    if current is not None and current != target and not replace:
        raise ValueError(f"tool {name!r} is already registered as {current}; refusing to replace it with {target} "
                         f"(pass replace=True to do so on purpose, or register under another name)")
    TOOL_CLASSES[name] = target


def tool_class(target: str) -> type[Tool]:
    """Resolve a registered name or a ``module:Class`` path to the tool class."""
    path = TOOL_CLASSES.get(target, target)
    module_name, sep, attr = path.partition(":")
    if not sep:
        raise KeyError(f"unknown tool {target!r}; registered: {sorted(TOOL_CLASSES)} (or give 'module:Class')")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Tool)):
        raise TypeError(f"{path} is not a subclass of afm.tools.base.Tool")
    return cls


def build_tool(name: str, config: Mapping[str, Any] | None = None, class_name: str | None = None) -> Tool:
    """Instantiate one tool; ``class_name`` overrides the registered class for ``name``."""
    cls = tool_class(class_name or name)
    tool = cls(config)
    if getattr(cls, "name", None) != name:
        # A class registered under another tag (e.g. two search backends) answers to the configured name.
        tool.name = name  # type: ignore[misc]
    return tool


def load_tools_config(source: str | Path | Mapping[str, Any] | list[Any]) -> dict[str, Tool]:
    """Build tools from a YAML file or its parsed content.

    Accepted shapes: ``{tools: [{name, class_name?, config?}, ...]}`` (ours), a bare list of those, or verl's
    ``{tools: [{class_name, config, tool_schema: {function: {name}}}]}`` — with ``config.afm_tool`` naming the afm
    tool when the class is the verl adapter (``configs/verl/tools/*.yaml``).
    """
    data: Any = source
    if isinstance(source, (str, Path)):
        data = yaml.safe_load(Path(source).read_text())
    entries = data.get("tools", []) if isinstance(data, Mapping) else data
    tools: dict[str, Tool] = {}
    for entry in entries or []:
        config = dict(entry.get("config") or {})
        if "afm_tool" in config:
            # verl's shape with our adapter (configs/verl/tools/*.yaml): the afm tool is named in the config, and
            # the adapter's own keys are not the tool's.
            name, class_name = str(config["afm_tool"]), config.get("afm_class")
            config = {k: v for k, v in config.items() if k not in VERL_ADAPTER_KEYS}
        else:
            name = entry.get("name") or (entry.get("tool_schema") or {}).get("function", {}).get("name")
            class_name = entry.get("class_name")
        if not name:
            raise ValueError(f"tool entry without a name: {entry!r}")
        tools[name] = build_tool(name, config, class_name)
    return tools
