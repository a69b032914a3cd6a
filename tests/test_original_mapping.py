"""docs/original_mapping.md against what afm ships: the RL tool yamls (table "Tools") and the scripts table (every
original training, inference, evaluation and server script has a row)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from mapping_table import DOC, backticked, read_table, reason_given, same, value  # noqa: E402


def _tool_configs(yaml_path: str) -> dict[str, dict]:
    tools = yaml.safe_load((REPO / yaml_path).read_text())["tools"]
    return {t["config"]["afm_tool"]: t["config"] for t in tools}


def _listed(name: str) -> set[str]:
    block = DOC.read_text().split(f"<!-- list:{name} -->", 1)[1].split("<!-- /list -->", 1)[0]
    return {word for line in block.splitlines() for word in backticked(line.split(":", 1)[0])}


def test_tool_yamls_match_the_mapping_table():
    """Each row's afm value is what the yaml sets; a different original value comes with a reason."""
    rows = read_table("tool-defaults")
    for row in rows:
        cell = row["afm"]
        assert reason_given(cell), row
        config = _tool_configs(backticked(row["yaml"])[0])[backticked(row["tool"])[0]]
        key = backticked(row["key"])[0]
        assert key in config and same(config[key], value(cell)), (row["yaml"], key, config.get(key), cell)
    assert {backticked(r["key"])[0] for r in rows} >= {"summary_type", "timeout", "max_obs_length"}


def test_every_tool_yaml_key_is_in_the_mapping():
    """A key of an RL tool yaml is a row (compared with the original) or listed as having no original value: a
    new setting cannot differ from the original without a word."""
    rows = read_table("tool-defaults")
    listed = _listed("tool-not-compared")
    for path in sorted((REPO / "configs/verl/tools").glob("*.yaml")):
        rel = path.relative_to(REPO).as_posix()
        if rel == "configs/verl/tools/afm.yaml":
            continue  # the three tools together: the same keys as web, code and mhqa
        for tool, config in _tool_configs(rel).items():
            mapped = {backticked(r["key"])[0] for r in rows
                      if backticked(r["yaml"])[0] == rel and backticked(r["tool"])[0] == tool}
            unmapped = set(config) - mapped - listed
            assert not unmapped, (rel, tool, sorted(unmapped))


def test_the_rl_web_tool_states_its_summary_mode():
    """The original's verl crawl tool always sent a summary mode (page); afm's sends one too (once), written next
    to the key with the reason, so that a server default never decides it silently."""
    crawl = _tool_configs("configs/verl/tools/web.yaml")["crawl_page"]
    assert crawl["summary_type"] in ("none", "once", "chunk", "page")
    text = (REPO / "configs/verl/tools/web.yaml").read_text()
    assert re.search(r"original's verl tool\s*\n?\s*#?\s*always sent page", text)


ORIGINAL_SCRIPTS = [  # the original's user-facing scripts, at its first commit and at its newest
    "AFM/train/web_agent/sft/sft_qwen2.5_7b.sh", "AFM/train/web_agent/sft/sft_qwen2.5_32b.sh",
    "AFM/train/code_agent/sft/sft_qwen2.5_7b.sh", "AFM/train/code_agent/sft/sft_qwen2.5_32b.sh",
    "AFM/train/mhqa_agent/sft/sft_qwen2.5_3b.sh", "AFM/train/mhqa_agent/sft/sft_qwen2.5_7b.sh",
    "AFM/train/web_agent/rl/train_dapo_web_agent.sh", "AFM/train/code_agent/rl/train_dapo_code_agent.sh",
    "AFM/train/mhqa_agent/rl/train_ppo_mhqa_agent.sh", "AFM/evaluation/web_agent/run_qwen.sh",
    "AFM/evaluation/web_agent/inference_web_agent.py", "AFM/evaluation/code_agent/eval_code_agent.sh",
    "AFM/evaluation/mhqa_agent/eval_mhqa_agent.sh", "verl/inference/inference.sh",
    "verl/experiments/train_dapo_afm.sh", "verl/evaluation/run_qwen.sh", "verl/evaluation/eval_code_agent.sh",
    "verl/evaluation/inference_mhqa.sh", "verl/evaluation/inference_web_agent.py",
    "verl/environment.sh", "verl/data/prepare_data.py", "verl/server/start_servers_v2.sh",
    "verl/server/wiki_server/launch_rag_server.sh", "AFM/tool_servers/web_server/start_servers.sh",
    "AFM/tool_servers/wiki_server/launch_rag_server.sh",
]


def test_every_original_script_has_a_row():
    """The scripts table names every original script (the first commit's too) and an afm file that exists."""
    text = DOC.read_text().split("## Scripts", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| original")]
    originals = " ".join(row.split(" | ")[0] for row in rows)
    named = _expanded(originals)
    missing = [s for s in ORIGINAL_SCRIPTS if s not in named and not (
        s.startswith("verl/evaluation/inference_mhqa") and "`verl/evaluation/inference_mhqa.sh`" in named)]
    assert not missing, missing
    for row in rows:
        for path in backticked(row.split(" | ")[1]):
            path = path.split(" ")[0]
            if "/" in path and "{" not in path:
                assert (REPO / path).exists(), (row, path)


def _expanded(cell: str) -> str:
    """`sft_scripts/{sft,dpo}_x.sh` also as its expansions."""
    out = [cell]
    for m in re.finditer(r"([\w./-]*)\{([^}]+)\}([\w./-]*)", cell):
        out += [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]
    return " ".join(out)
