"""The parquet of `afm data rl` through verl's own RLHFDataset (tiny tokenizer, the data config the DAPO scripts
compose): raw prompts, a unique index per row, tools_kwargs, agent_name and the ground truth arrive intact."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import numpy as np
import verl
from hydra import compose, initialize_config_dir
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from afm.data.rl_parquet import build_rl_rows, main, write_rl_parquet
from afm.prompts import build_messages, get_prompt
from afm.rewards.ground_truth import normalize_ground_truth
from afm.rewards.score import compute_score

ROOT = Path(__file__).resolve().parents[2]
VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"

QA = [
    {"id": "q1", "question": "Who wrote Frankenstein?", "answer": ["Mary Shelley", "Mary Wollstonecraft Shelley"]},
    {"id": "q1", "question": "What is the capital of Australia?", "answer": "Canberra"},  # repeated id
    {"id": "q3", "question": "Which interval is open on the right?", "answer": "[0, 1)"},
]
CODE = [{"id": "c1", "question": "Print a + b.", "stdin": True,
         "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"], "fn_name": None}}]


def data_config(task: str, train_files: str):
    env = {k: v for k, v in os.environ.items() if k not in ("TRAIN_FILES", "VAL_FILES")}
    env.update(TRAIN_FILES=train_files, VAL_FILES="")
    res = subprocess.run(["bash", str(ROOT / f"experiments/train_dapo_{task}_agent.sh"), "--dry-run"],
                         capture_output=True, text=True, env=env, timeout=60, check=True)
    overrides = shlex.split(res.stdout.split("[afm] command:\n", 1)[1].replace("\\\n", " "))[3:]
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    return cfg


def test_qa_rows_through_rlhf_dataset(tmp_path, tokenizer):
    rows, report = build_rl_rows(QA, data_source="nq", prompt_key="mhqa")
    assert report.kept == 3 and report.duplicate_ids == 1
    path = write_rl_parquet(rows, tmp_path / "mhqa.parquet")
    cfg = data_config("mhqa", str(path))
    assert cfg.data.filter_overlong_prompts is True
    ds = RLHFDataset(cfg.data.train_files, tokenizer, cfg.data)
    assert len(ds) == 3  # all prompts fit data.max_prompt_length (2048) with the chat template
    items = [ds[i] for i in range(len(ds))]
    prompt = get_prompt("mhqa")
    indices = [it["index"] for it in items]
    assert len(set(indices)) == 3 and all(isinstance(i, str) and i.startswith("nq-") for i in indices)
    for it, src in zip(items, QA, strict=True):
        assert it["raw_prompt"] == build_messages(prompt, src["question"])
        assert it["agent_name"] == "afm_agent"
        assert it["data_source"] == "nq"
        assert set(it["tools_kwargs"]) == {"wiki_search"}
        assert it["tools_kwargs"]["wiki_search"]["create_kwargs"] == {"data_source": "nq", "question_id": src["id"]}
        assert it["extra_info"]["question"] == src["question"]
        gt = it["reward_model"]["ground_truth"]
        assert isinstance(gt, str)
        expected = src["answer"] if isinstance(src["answer"], list) else [src["answer"]]
        assert list(normalize_ground_truth(gt, "nq", "qa").targets) == expected
    # the stored ground truth scores as intended through afm's reward entry
    assert compute_score("nq", "<answer>Mary Wollstonecraft Shelley</answer>", items[0]["reward_model"]["ground_truth"],
                         items[0]["extra_info"])["acc"] == 1.0
    assert compute_score("nq", "<answer>[0, 1)</answer>", items[2]["reward_model"]["ground_truth"])["acc"] == 1.0
    # verl's collate keeps the non-tensor fields per row, the way the trainer batches them
    batch = collate_fn(items)
    assert list(batch["index"]) == indices and isinstance(batch["agent_name"], np.ndarray)


def test_code_ground_truth_dict_survives_parquet(tmp_path, tokenizer):
    rows, _ = build_rl_rows(CODE, data_source="livecodebench", prompt_key="code_agent", ability="code",
                            a_key="tests", tools=["code"],
                            tools_kwargs={"code": {"execute_kwargs": {"timeout": 10}}})
    path = write_rl_parquet(rows, tmp_path / "code.parquet")
    cfg = data_config("code", str(path))
    ds = RLHFDataset(cfg.data.train_files, tokenizer, cfg.data)
    item = ds[0]
    assert json.loads(item["reward_model"]["ground_truth"]) == CODE[0]["tests"]
    assert item["extra_info"]["answer"] == ""  # tests are not duplicated into extra_info
    assert item["tools_kwargs"]["code"]["execute_kwargs"] == {"timeout": 10}
    assert item["raw_prompt"] == build_messages(get_prompt("code_agent"), CODE[0]["question"], extra={"stdin": True})
    assert item["ability"] == "code"


def test_several_files_load_together_with_unique_indices(tmp_path, tokenizer):
    """NQ and HotpotQA built in separate runs (different data sources) concatenate in one verl dataset."""
    for name in ("nq", "hotpotqa"):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps({"id": i, "question": f"{name} question {i}?", "answer": f"a{i}"}) + "\n"
                    for i in range(3)), encoding="utf-8")
        assert main(["--input", str(tmp_path / f"{name}.jsonl"), "--data-source", name, "--prompt-key", "mhqa",
                     "--output", str(tmp_path / f"{name}.parquet")]) == 0
    cfg = data_config("mhqa", f"{tmp_path / 'nq.parquet'},{tmp_path / 'hotpotqa.parquet'}")
    ds = RLHFDataset(cfg.data.train_files, tokenizer, cfg.data)
    assert len(ds) == 6
    indices = [ds[i]["index"] for i in range(6)]
    assert len(set(indices)) == 6
    assert [ds[i]["data_source"] for i in range(6)] == ["nq"] * 3 + ["hotpotqa"] * 3


def test_rows_without_agent_name_use_the_default_loop(tmp_path, tokenizer):
    rows, _ = build_rl_rows(QA[:1], data_source="nq", prompt_key="mhqa", agent_name=None)
    path = write_rl_parquet(rows, tmp_path / "x.parquet")
    cfg = data_config("mhqa", str(path))
    item = RLHFDataset(cfg.data.train_files, tokenizer, cfg.data)[0]
    assert "agent_name" not in item  # verl then fills rollout.agent.default_agent_loop (afm_agent in our scripts)
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "afm_agent"
