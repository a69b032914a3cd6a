"""The verl agent loop restates no rollout limit: its keyword defaults are AgentConfig's, and agent_loops.yaml
leaves AgentConfig's fields out (or null, where null means "from verl's rollout config")."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

from afm.agent.loop import AgentConfig
from afm.rl.agent_loop import AfmAgentLoop

AGENT_LOOPS = Path(__file__).resolve().parents[2] / "configs" / "verl" / "agent_loops.yaml"


def test_keyword_defaults_are_agent_config_defaults():
    params = inspect.signature(AfmAgentLoop.__init__).parameters
    for name in ("min_turn_tokens", "tool_timeout_s", "trajectory_timeout_s", "dedupe"):
        assert params[name].default == AgentConfig.default(name), name


def test_agent_loops_yaml_restates_no_agent_config_default():
    entry = yaml.safe_load(AGENT_LOOPS.read_text())[0]
    fields = {f for f in AgentConfig.__dataclass_fields__}
    stated = {k: v for k, v in entry.items() if k in fields and v is not None and k != "tool_concurrency"}
    assert stated == {}, f"agent_loops.yaml restates AgentConfig defaults: {stated}"
