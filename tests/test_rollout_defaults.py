"""The rollout limits are written once, as AgentConfig's fields: ``afm infer`` (and ``afm eval run``) take their
argparse defaults from them, and inference/inference.sh and data/select_rl.sh pass a limit only when it is set
(except inference.sh's MAX_TURNS, 36 as the original's inference, a difference from `afm infer`'s default stated in
docs/original_mapping.md)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from afm.agent.infer import add_args
from afm.agent.loop import AgentConfig

REPO = Path(__file__).resolve().parents[1]
# afm infer flag -> AgentConfig field
LIMITS = {"max_turns": "max_turns", "max_tokens_per_turn": "max_tokens_per_turn",
          "max_response_tokens": "max_response_tokens", "max_model_len": "max_model_len",
          "tool_timeout": "tool_timeout_s", "trajectory_timeout": "trajectory_timeout_s"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_args(parser)
    return parser


def test_cli_defaults_are_the_dataclass_defaults():
    defaults = AgentConfig()
    parser = _parser()
    for dest, fieldname in LIMITS.items():
        assert parser.get_default(dest) == getattr(defaults, fieldname), dest
    assert AgentConfig.default("tool_concurrency") == {}  # a default_factory field
    with pytest.raises(AttributeError, match="no field 'max_turn'"):
        AgentConfig.default("max_turn")


def test_changing_a_dataclass_default_changes_the_cli_default(monkeypatch):
    field = {f.name: f for f in dataclasses.fields(AgentConfig)}["max_turns"]
    monkeypatch.setattr(field, "default", 7)
    assert _parser().get_default("max_turns") == 7
    assert _parser().parse_args(["--input", "q", "--output", "o", "--model", "m"]).max_turns == 7


def _dry_run(script: str, tmp_path: Path, **env: str) -> list[str]:
    base = {"INPUT": "q.jsonl", "QUESTIONS": "q.jsonl", "MODE": "web", "MODEL": "m", "TOKENIZER": "t",
            "DRY_RUN": "1", "PYTHON": "python3"}
    proc = subprocess.run(["bash", str(REPO / script)], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, **base, **env})
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if " infer " in line).split()


@pytest.mark.parametrize("script", ["inference/inference.sh", "data/select_rl.sh"])
def test_scripts_pass_only_the_limits_the_user_set(script, tmp_path):
    argv = _dry_run(script, tmp_path)
    if script == "inference/inference.sh":
        # the one limit with a default of the script's own: the original's trajectory_len (docs/original_mapping.md)
        assert argv[argv.index("--max-turns") + 1] == "36"
        argv = argv[:argv.index("--max-turns")] + argv[argv.index("--max-turns") + 2:]
    assert not [a for a in argv if a in ("--max-turns", "--max-tokens-per-turn", "--max-response-tokens",
                                         "--max-model-len")]
    argv = _dry_run(script, tmp_path, MAX_TURNS="7", MAX_MODEL_LEN="4096")
    assert argv[argv.index("--max-turns") + 1] == "7" and argv[argv.index("--max-model-len") + 1] == "4096"
    assert "--max-tokens-per-turn" not in argv and "--max-response-tokens" not in argv
