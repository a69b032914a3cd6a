"""afm tools in verl's tool yaml: one file serves verl's ``tool_agent`` loop and our ``afm_agent`` loop.

A tools yaml (``configs/verl/tools/*.yaml``, given to verl as ``actor_rollout_ref.rollout.multi_turn.tool_config_path``)
is verl's format::

    tools:
      - class_name: afm.rl.tools.AfmVerlTool      # verl imports this class in every agent-loop worker
        config:
          type: native                            # verl's only tool type
          afm_tool: web_search                    # the afm tool (tag) name: afm.tools.registry.TOOL_CLASSES key
          afm_class: null                         # optional "module:Class" replacing the registered class
          call_timeout: 120                       # optional: seconds per call when verl's tool_agent calls it
          num_results: 10                         # ...every other key is the afm tool's own config
        tool_schema: {type: function, function: {name: web_search, description: ..., parameters: ...}}

* verl (``initialize_tools_from_config``) builds one :class:`AfmVerlTool` per entry, once per worker process.
  Values may use OmegaConf interpolation (``${oc.env:VAR,default}``); both loaders resolve it.
* ``afm_agent`` reuses the afm tools inside those instances (:func:`afm_tools_from_verl`), so each tool (HTTP
  client, sandbox pool) exists once per worker and is shared by all trajectories; it is never closed per
  trajectory. :func:`load_afm_tools` reads the same yaml without verl's classes (cached per process by
  :func:`shared_afm_tools`).

Per-sample settings follow verl: ``extra_info.tools_kwargs[<tool>] = {create_kwargs: {...}, execute_kwargs: {...},
...}``. What a tool sees as :attr:`afm.tools.ToolContext.kwargs` is :func:`context_kwargs` of that entry:
``create_kwargs`` and ``execute_kwargs`` merged over the entry's other plain keys, minus ``ground_truth`` (tools must
never see the answer; the original data put it there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from uuid import uuid4

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from afm.agent.loop import AgentConfig, ToolRunner
from afm.tools.base import Tool, ToolContext, ToolResult
from afm.tools.registry import VERL_ADAPTER_KEYS, build_tool

logger = logging.getLogger(__name__)

ADAPTER_KEYS = VERL_ADAPTER_KEYS  # config keys of the adapter, not of the tool
LIFECYCLE_KEYS = ("create_kwargs", "execute_kwargs", "calc_reward_kwargs", "release_kwargs")
PRIVATE_KEYS = ("ground_truth",)  # never shown to a tool
DEFAULT_CALL_TIMEOUT_S = 120.0

# Function schemas used when an entry has no ``tool_schema`` (the yaml files spell theirs out).
DEFAULT_SCHEMAS: dict[str, dict[str, Any]] = {
    "web_search": {"description": "Search the web; returns titles, links and snippets of the top results.",
                   "param": "query", "param_description": "One search query."},
    "crawl_page": {"description": "Read web pages and return their content (summarised for the current goal).",
                   "param": "urls", "param_description": "One or more full URLs separated by |."},
    "wiki_search": {"description": "Retrieve Wikipedia passages relevant to a query.",
                    "param": "query", "param_description": "One query (several queries: one per line)."},
    "code": {"description": "Run a Python program in a sandbox and return its output.",
             "param": "code", "param_description": "A ```py fenced program, optionally a ```sh block with its stdin."},
}
LIST_SEPARATORS = {"crawl_page": "|"}  # how a list argument becomes the tag body; default: one item per line


def _plain(value: Any) -> Any:
    """OmegaConf containers (hydra passes them through) as plain Python, interpolations resolved."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def default_schema(name: str) -> OpenAIFunctionToolSchema:
    """A one-argument function schema for an afm tool (a generic one for tools not in ``DEFAULT_SCHEMAS``)."""
    spec = DEFAULT_SCHEMAS.get(name, {"description": f"The afm {name} tool.", "param": "query",
                                      "param_description": f"The body of the <{name}> call."})
    return OpenAIFunctionToolSchema.model_validate({
        "type": "function",
        "function": {"name": name, "description": spec["description"],
                     "parameters": {"type": "object", "required": [spec["param"]],
                                    "properties": {spec["param"]: {"type": "string",
                                                                   "description": spec["param_description"]}}}}})


def split_config(config: Mapping[str, Any], schema_name: str | None = None) -> tuple[str, str | None, dict[str, Any]]:
    """``(tag name, class override, afm tool config)`` of one yaml entry's ``config``.

    The tag is ``afm_tool`` (else the schema's function name); when both are given they must agree, because the
    model calls the tool by the schema name in verl's loop and by the tag in ours.
    """
    cfg = dict(_plain(config) or {})
    name = cfg.get("afm_tool") or schema_name
    if not name:
        raise ValueError(f"tool entry has neither config.afm_tool nor tool_schema.function.name: {cfg!r}")
    if schema_name and schema_name != name:
        raise ValueError(f"config.afm_tool is {name!r} but tool_schema.function.name is {schema_name!r}; "
                         "they must be the same name")
    tool_type = cfg.get("type", "native")
    if tool_type != "native":
        raise ValueError(f"tool {name!r}: config.type must be 'native' (verl 0.9 supports no other), got {tool_type!r}")
    return str(name), cfg.get("afm_class") or None, {k: v for k, v in cfg.items() if k not in ADAPTER_KEYS}


def context_kwargs(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a tool sees as ``ToolContext.kwargs`` for one ``tools_kwargs[<tool>]`` entry (see module docstring)."""
    entry = dict(_plain(entry) or {})
    out = {k: v for k, v in entry.items() if k not in LIFECYCLE_KEYS}
    for key in ("create_kwargs", "execute_kwargs"):
        out.update(dict(_plain(entry.get(key)) or {}))
    for key in PRIVATE_KEYS:
        out.pop(key, None)
    return out


def body_from_parameters(name: str, parameters: Mapping[str, Any], schema: OpenAIFunctionToolSchema) -> str:
    """The tag body for a JSON function call: the schema's first required (else first) parameter.

    A list value is joined (``|`` for crawl_page, newlines otherwise); a call with one argument under another
    name is accepted. Raises ``ValueError`` with a message for the model when no usable argument is there.
    """
    params = schema.function.parameters
    key = (params.required or list(params.properties) or ["query"])[0]
    if key in parameters:
        value = parameters[key]
    elif len(parameters) == 1:
        value = next(iter(parameters.values()))
    else:
        raise ValueError(f"The {name} call needs the argument {key!r}; got {sorted(parameters) or 'none'}.")
    if isinstance(value, (list, tuple)):
        value = LIST_SEPARATORS.get(name, "\n").join(str(v) for v in value)
    return "" if value is None else str(value)


def _entries(source: str | Path | Mapping[str, Any] | list[Any]) -> list[dict[str, Any]]:
    if isinstance(source, (str, Path)):
        data = OmegaConf.to_container(OmegaConf.load(str(source)), resolve=True)
    else:
        data = _plain(source)
    entries = data.get("tools", []) if isinstance(data, Mapping) else data
    return [dict(e) for e in entries or []]


def load_afm_tools(source: str | Path | Mapping[str, Any] | list[Any]) -> dict[str, Tool]:
    """Build the afm tools of a verl tools yaml (a path, or its parsed content), in file order, by tag name."""
    tools: dict[str, Tool] = {}
    for entry in _entries(source):
        schema_name = ((entry.get("tool_schema") or {}).get("function") or {}).get("name")
        class_name = entry.get("class_name") or ""
        cfg = entry.get("config") or {}
        if "afm_tool" not in cfg and not class_name.endswith(".AfmVerlTool"):
            raise ValueError(f"tool {schema_name or class_name!r} is not an afm tool: use class_name "
                             "afm.rl.tools.AfmVerlTool with config.afm_tool (afm_agent runs afm tools only)")
        name, cls, tool_cfg = split_config(cfg, schema_name)
        if name in tools:
            raise ValueError(f"tool {name!r} is declared twice")
        tools[name] = build_tool(name, tool_cfg, cls)
    return tools


_SHARED: dict[str, dict[str, Tool]] = {}


def shared_afm_tools(path: str | Path) -> dict[str, Tool]:
    """:func:`load_afm_tools` once per process and path; every caller gets the same tool objects."""
    key = str(Path(path).expanduser().resolve())
    if key not in _SHARED:
        _SHARED[key] = load_afm_tools(key)
    return _SHARED[key]


def afm_tools_from_verl(verl_tools: Iterable[Any]) -> dict[str, Tool]:
    """The afm tools inside verl's tool list (the worker's, built once); other verl tools are skipped."""
    return {t.name: t.afm_tool for t in verl_tools if isinstance(t, AfmVerlTool)}


class BoundTool(Tool):
    """One trajectory's view of a shared tool: its per-sample ``ToolContext.kwargs`` and an optional semaphore
    shared by all trajectories in the process. Closing it closes nothing (the shared tool outlives it)."""

    def __init__(self, inner: Tool, kwargs: Mapping[str, Any] | None = None,
                 semaphore: asyncio.Semaphore | None = None) -> None:
        super().__init__(inner.config)
        self.name = inner.name  # type: ignore[misc]
        self.inner = inner
        self.kwargs = dict(kwargs or {})
        self.semaphore = semaphore

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        ctx = ToolContext(question=ctx.question, text=ctx.text, kwargs=self.kwargs)
        if self.semaphore is None:
            return await self.inner.call(body, ctx)
        async with self.semaphore:
            return await self.inner.call(body, ctx)


class AfmVerlTool(BaseTool):
    """A verl ``BaseTool`` running one afm tool, for verl's own loops (``tool_agent``) and as the carrier that
    lets ``afm_agent`` reuse the worker's tools.

    ``execute`` turns the JSON arguments into the tag body (:func:`body_from_parameters`), runs the afm tool with
    the same guards as the afm loop (timeout ``call_timeout``, exceptions and empty bodies become observations) and
    returns ``(ToolResponse(text), 0.0, metrics)``; metrics hold ``status``, ``latency_s``, ``error`` and the tool's
    own ``meta``. No step reward: afm rewards are computed on the finished trajectory.
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None) -> None:
        # BaseTool.__init__ only sets these three attributes, and prints the schema to stdout in every worker.
        schema_name = tool_schema.function.name if tool_schema is not None else None
        name, cls, tool_cfg = split_config(config, schema_name)
        self.config = dict(_plain(config) or {})
        self.tool_schema = tool_schema if tool_schema is not None else default_schema(name)
        self.name = name
        self.afm_tool: Tool = build_tool(name, tool_cfg, cls)
        timeout = float(self.config.get("call_timeout") or DEFAULT_CALL_TIMEOUT_S)
        self._runner = ToolRunner({name: self.afm_tool}, AgentConfig(tools=(name,), tool_timeout_s=timeout))
        self._instances: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start an instance; ``create_kwargs`` (verl passes ``tools_kwargs[name].create_kwargs``) become the
        instance's ``ToolContext.kwargs``."""
        instance_id = instance_id or uuid4().hex
        create_kwargs = _plain(kwargs.pop("create_kwargs", None)) or {}
        self._instances[instance_id] = {"kwargs": context_kwargs({**kwargs, "create_kwargs": create_kwargs}),
                                        "seen": set()}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
                      ) -> tuple[ToolResponse, float, dict[str, Any]]:
        state = self._instances.get(instance_id) or {"kwargs": {}, "seen": set()}
        try:
            body = body_from_parameters(self.name, _plain(parameters) or {}, self.tool_schema)
        except ValueError as exc:
            return ToolResponse(text=str(exc)), 0.0, {"status": "invalid", "latency_s": 0.0, "error": str(exc)}
        question, text = _agent_context(kwargs.get("agent_data"))
        ctx = ToolContext(question=question, text=text, kwargs=state["kwargs"])
        observation, rec = await self._runner.call(self.name, body.strip(), ctx, state["seen"], None)
        metrics = {"status": rec.status, "latency_s": rec.latency_s, "error": rec.error, **rec.meta}
        return ToolResponse(text=observation), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


def _agent_context(agent_data: Any) -> tuple[str, str]:
    """``(question, assistant text so far)`` from verl's ``AgentData`` messages, when the loop passes them."""
    messages = getattr(agent_data, "messages", None) or []
    users = [m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    question = next((u for u in users if isinstance(u, str)), "")
    text = "\n".join(m.get("content") for m in messages
                     if isinstance(m, Mapping) and m.get("role") == "assistant" and isinstance(m.get("content"), str))
    return question, text
