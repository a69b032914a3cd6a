"""Teacher configuration: one OpenAI-compatible endpoint per role over a shared default, budgets, controller knobs.

YAML shape (see ``configs/data/teacher.yaml``)::

    default: {base_url, model, api_key_env, temperature, max_tokens, timeout_s, retries, extra_body}
    roles:                      # any default key, plus ``system`` / ``user`` prompt templates
      planner: {temperature: 0.3}
      verifier: {model: a-stronger-model}
    budgets: {max_steps, max_tool_calls, max_total_tokens, max_replans, max_answer_attempts, max_format_retries,
              run_timeout_s}
    controller: {prompt_key, tools, reflect_every, accept_score, history_chars, ...}
    tools_config: [configs/tools/code_executor.yaml]

Strings may use ``${VAR}`` / ``${VAR:-default}``; they are expanded from the environment when the file is loaded,
so shell knobs (``TEACHER_MODEL`` ...) reach the config without editing it. An empty role value (``model: ""``)
means "inherit from default".
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from afm.common.chat_client import ENDPOINT_ALIASES, ChatEndpoint, holds_endpoint

BASE_ROLES = ("planner", "reflector", "verifier", "answerer")
TOOL_AGENT_SUFFIX = "_agent"
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# A role's YAML key for each endpoint setting -> the ChatEndpoint field it sets. Not api_key: a key never goes in a
# config file (api_key_env names its variable).
_ENDPOINT_KEYS: dict[str, str] = {f.name: f.name for f in fields(ChatEndpoint) if f.name != "api_key"}
_ENDPOINT_KEYS |= ENDPOINT_ALIASES


def tool_agent_role(tool: str) -> str:
    """The role name of the agent that writes arguments for ``tool`` (``web_search`` -> ``web_search_agent``)."""
    return f"{tool}{TOOL_AGENT_SUFFIX}"


def default_endpoint() -> ChatEndpoint:
    """A role's endpoint when the config names none (``configs/data/teacher.yaml`` reads ``TEACHER_*``)."""
    return ChatEndpoint("http://127.0.0.1:8000/v1", "teacher", timeout_s=180.0, retries=4, max_connections=512)


@holds_endpoint
@dataclass(frozen=True)
class RoleConfig:
    """Endpoint and sampling settings of one role (``system``/``user``: optional prompt template overrides).

    The YAML keys of the endpoint are flat (``base_url``, ``model``, ``timeout_s``, ``retries``; ``max_retries`` is
    the older name). Its key is never stored: ``api_key_env`` names the variable read at call time.
    """

    endpoint: ChatEndpoint = field(default_factory=default_endpoint)
    api_key_env: str | None = "TEACHER_API_KEY"
    temperature: float = 0.7
    max_tokens: int = 2048
    extra_body: dict[str, Any] = field(default_factory=dict)
    system: str | None = None
    user: str | None = None

    @property
    def api_key(self) -> str | None:
        """The key read from ``api_key_env`` at call time (never stored in records)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class Budgets:
    """Limits that end a run (``failed``) before it can loop or spend without bound."""

    max_steps: int = 80  # role calls of all kinds
    max_tool_calls: int = 20
    max_total_tokens: int = 600_000  # prompt + completion tokens over all role calls
    max_replans: int = 4
    max_answer_attempts: int = 3  # suggested answers sent to the verifier
    max_format_retries: int = 2  # corrective re-asks after an off-protocol reply
    run_timeout_s: float = 3600.0


@dataclass(frozen=True)
class ControllerConfig:
    """How the controller coordinates the roles."""

    prompt_key: str = "auto"  # the student prompt whose protocol runs follow; auto = by task and tools
    tools: tuple[str, ...] = ()  # default tools of a run when the task does not name any (empty = the prompt's)
    reflect_every: int = 2  # ask the reflector after every N tool calls (always when the protocol requires it)
    accept_score: int = 3  # a double check scoring at least this accepts the suggested answer
    history_chars: int = 24_000  # tail of the work so far shown to each role
    max_observation_chars: int = 30_000  # same cap as the rollout engine's AgentConfig
    tool_timeout_s: float = 120.0
    dedupe: bool = True  # repeated identical searches/crawls get the engine's "already done" note
    answer_think: str = "The double check scored {score}, so I give the final answer."
    # Write a space after the opening tag of one-line tool calls and answers ("<wiki_search> Mira Vell"). With a
    # tokenizer whose words carry their leading space (Qwen's), the entity is then the same tokens in the call as in
    # the question and the observations; a student trained from scratch (the miniature recipe) can learn to copy
    # it, where ">Mira" vs " Mira" would be a different token pair to learn for every name. Tools and scorers strip.
    space_after_tag: bool = False


@dataclass(frozen=True)
class TeacherConfig:
    """Everything the teacher needs; :meth:`role` merges a role's overrides over ``default``."""

    default: RoleConfig = field(default_factory=RoleConfig)
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=Budgets)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    tools_config: tuple[str, ...] = ()

    def role(self, name: str) -> RoleConfig:
        """Settings of role ``name`` (tool agents fall back to a shared ``tool_agent`` entry, then default)."""
        merged = self.default
        for key in ("tool_agent", name) if name.endswith(TOOL_AGENT_SUFFIX) else (name,):
            over = {k: v for k, v in (self.roles.get(key) or {}).items() if v not in (None, "")}
            if over:
                merged = replace(merged, **over)
        return merged


def expand_env(value: Any) -> Any:
    """``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML tree, from ``os.environ``."""
    if isinstance(value, str):
        return _ENV_RE.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, Mapping):
        return {k: expand_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v) for v in value]
    return value


def _coerce(cls: type, data: Mapping[str, Any], where: str) -> Any:
    known = [f.name for f in fields(cls) if f.name != "endpoint"]
    defaults = cls()
    # RoleConfig's endpoint is written flat in YAML: its fields (and their older names) are keys of the role.
    flat = _ENDPOINT_KEYS if len(known) < len(fields(cls)) else {}
    unknown = sorted(set(data) - set(known) - set(flat))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {', '.join([*known, *flat])}")
    out: dict[str, Any] = {}
    for k, v in data.items():
        if v in (None, ""):
            continue  # empty = keep the default (an unset ${VAR:-})
        ref = getattr(defaults.endpoint, flat[k]) if k in flat else getattr(defaults, k)
        try:
            if isinstance(ref, bool):
                v = v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(ref, int):
                v = int(v)
            elif isinstance(ref, float):
                v = float(v)
            elif isinstance(ref, tuple):
                v = tuple(str(x) for x in ([v] if isinstance(v, str) else v))
        except (TypeError, ValueError):
            raise ValueError(f"{where}.{k}: expected {type(ref).__name__}, got {v!r}") from None
        out[k] = v
    try:
        return cls(**out)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _role_overrides(name: str, data: Any) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValueError(f"roles.{name}: expected a mapping, got {data!r}")
    given = [k for k, v in data.items() if v not in (None, "")]
    role = _coerce(RoleConfig, {k: data[k] for k in given}, f"roles.{name}")
    return {k: getattr(role.endpoint, _ENDPOINT_KEYS[k]) if k in _ENDPOINT_KEYS else getattr(role, k) for k in given}


def set_dotted(data: dict[str, Any], assignment: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML) to a nested dict; the ``--set`` flag."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--set expects key.path=value, got {assignment!r}")
    parts = key.strip().split(".")
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ValueError(f"--set {assignment!r}: {p!r} is not a mapping")
    leaf = parts[-1]
    if leaf in _ENDPOINT_KEYS:  # --set default.max_retries=0 replaces the file's `retries:` (the same setting)
        for other in [k for k in node if k != leaf and _ENDPOINT_KEYS.get(k) == _ENDPOINT_KEYS[leaf]]:
            del node[other]
    node[leaf] = yaml.safe_load(raw) if raw.strip() else ""


def teacher_config_from_dict(data: Mapping[str, Any] | None) -> TeacherConfig:
    """Build a :class:`TeacherConfig` from parsed YAML (already env-expanded)."""
    data = dict(data or {})
    unknown = sorted(set(data) - {"default", "roles", "budgets", "controller", "tools_config"})
    if unknown:
        raise ValueError(f"teacher config: unknown sections {unknown}; allowed: default, roles, budgets, "
                         "controller, tools_config")
    roles_raw = data.get("roles") or {}
    if not isinstance(roles_raw, Mapping):
        raise ValueError("teacher config: roles must be a mapping of role name -> settings")
    tc = data.get("tools_config") or ()
    return TeacherConfig(
        default=_coerce(RoleConfig, data.get("default") or {}, "default"),
        roles={str(k): _role_overrides(str(k), v) for k, v in roles_raw.items()},
        budgets=_coerce(Budgets, data.get("budgets") or {}, "budgets"),
        controller=_coerce(ControllerConfig, data.get("controller") or {}, "controller"),
        tools_config=tuple([tc] if isinstance(tc, str) else tc),
    )


def load_teacher_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TeacherConfig:
    """Read the YAML at ``path`` (None = built-in defaults), expand ``${VAR}``, apply ``--set`` overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"teacher config {p} does not exist")
        loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{p}: expected a mapping at the top level")
        data = expand_env(loaded or {})
    for assignment in overrides or []:
        set_dotted(data, assignment)
    return teacher_config_from_dict(data)
