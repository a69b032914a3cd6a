"""``afm quickstart --model``: a pretrained student instead of the tiny Qwen2 (issue 44).

The whole recipe runs on a 2-layer random Gemma 3 (a GGUF written here, converted by afm.model like the real one), so
every part that differs for a pretrained student is exercised for real in about a minute: its folder instead of a
built model, its own tokenizer and chat template (LLaMA-Factory's ``gemma``), the mask report on its vocabulary,
SFT with the embedding frozen, the evaluations, the report naming the student and the engine. Whether Gemma 3 270M
learns the world is measured by the quickstart itself (benchmarks/RESULTS.md), not here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from afm.quickstart.profile import DEFAULT, PRETRAINED_SETTINGS, profile_from_args


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory) -> Path:
    """A random 2-layer Gemma 3: the HF folder (its GGUF beside it, ``../tiny.gguf``)."""
    from test_model_gemma import _need_extra, _tiny_gemma3_gguf

    _need_extra()
    from afm.model.convert import convert_gguf

    root = tmp_path_factory.mktemp("tiny_gemma")
    _tiny_gemma3_gguf(root / "tiny.gguf", extra_pieces=("d", "e", "f"))
    return convert_gguf(root / "tiny.gguf", root / "hf")


def test_a_pretrained_student_takes_the_pretrained_settings():
    gemma = profile_from_args(student="gemma3-270m")
    assert gemma == replace(DEFAULT, student="gemma3-270m", **PRETRAINED_SETTINGS)
    assert gemma.sft_schedule().finetuning_type == "freeze" and gemma.sft_schedule().cutoff_len == 1024
    assert profile_from_args(student="gemma3-270m", sft_epochs=1.0).sft_epochs == 1.0  # flags win
    plain = profile_from_args(student="gemma3-270m", teacher_shortcut=False)
    assert not plain.teacher_shortcut and plain.sft_lr == PRETRAINED_SETTINGS["sft_lr"]  # not the tiny one's 2e-3
    with pytest.raises(ValueError, match=r"--full sizes the tiny student"):
        profile_from_args(True, student="gemma3-270m")


def test_template_layers_and_folder_of_a_student(tmp_path):
    from afm.quickstart.profile import SftSchedule
    from afm.quickstart.recipe import sft_config
    from afm.quickstart.student import lf_template, pretrained_dir

    for kind, template in (("gemma3_text", "gemma"), ("qwen2", "qwen"), ("llama", "llama3")):
        folder = tmp_path / kind
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": kind, "num_hidden_layers": 7}))
        assert lf_template(folder) == template and pretrained_dir(str(folder)) == folder.absolute()
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ValueError, match="model_type 'mamba'"):
        lf_template(tmp_path / "odd")
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        pretrained_dir(str(tmp_path / "nothing" / "here"))
    with pytest.raises(ValueError, match="unknown model 'gemma9'"):
        pretrained_dir("gemma9")
    cfg = sft_config(tmp_path / "qwen2", Path("d"), Path("o"), SftSchedule(1.0, 4, 5e-5, finetuning_type="freeze"),
                     template="qwen")
    assert (cfg["finetuning_type"], cfg["freeze_trainable_layers"], cfg["freeze_trainable_modules"]) == (
        "freeze", 7, "all")
    with pytest.raises(ValueError, match="'full' or 'freeze'"):
        SftSchedule(1.0, 4, 5e-5, finetuning_type="lora")


def test_the_rl_family_gets_more_train_questions(tmp_path):
    from afm.quickstart.recipe import make_world, train_questions

    profile = profile_from_args(student="gemma3-270m", train_per_family=3)
    counts = profile.train_counts("lookup")
    assert counts == {"arith": 3, "lookup": 6, "multihop": 3, "calc": 3}
    assert profile.train_counts("") == dict.fromkeys(counts, 3)  # the plain world has no RL family
    assert DEFAULT.train_counts("lookup") == dict.fromkeys(counts, DEFAULT.train_per_family)
    _, root = make_world(tmp_path, 0, {"train": 6, "rl": 1, "heldout": 1}, shortcut=True)
    rows = [json.loads(line) for line in train_questions(root, counts, tmp_path / "q.jsonl").open()]
    every = [json.loads(line) for line in (root / "world" / "train.jsonl").open()]
    # the split's first questions of each family, in the split's order
    assert rows == [r for r in every if r["family"] == "lookup" or int(r["id"].rsplit("-", 1)[1]) < 3]
    assert sum(r["family"] == "lookup" for r in rows) == 6 and len(rows) == 15
    with pytest.raises(ValueError, match=r"too few questions: \{'lookup': '6 < 7'\}"):
        train_questions(root, {**counts, "lookup": 7}, tmp_path / "q.jsonl")


def test_the_rl_selection_samples_as_dapo_does():
    import argparse

    from afm.agent.infer import add_args
    from afm.launch.rl import default
    from afm.quickstart.recipe import hf_backend, selection_sampling

    parser = argparse.ArgumentParser()
    add_args(parser)  # afm infer's own flags
    args = parser.parse_args(["--input", "q", "--output", "o", *hf_backend(Path("m")), *selection_sampling(0.7)])
    assert (args.temperature, args.top_p, args.top_k) == (0.7, float(default("TOP_P")), -1) and args.top_p == 1.0


def test_dapo_rollout_engine_says_why():
    from afm.quickstart.rl import rollout_engine

    assert rollout_engine("", {})[0] == "hf" and "tiny student" in rollout_engine("", {})[1]
    name, why = rollout_engine("gemma3-270m", {})
    assert name == "hf" and "ROLLOUT_ENGINE=vllm" in why
    assert rollout_engine("gemma3-270m", {"ROLLOUT_ENGINE": "vllm"}) == ("vllm", "ROLLOUT_ENGINE is set in the "
                                                                                 "environment")


def test_dapo_precision_is_bf16_only_for_a_pretrained_student_on_a_native_bf16_cpu():
    from afm.quickstart.rl import cpu_bf16, rl_precision

    assert rl_precision("", {}, native_bf16=True)[0] == "fp32"  # the tiny student: bf16 does not pay
    assert rl_precision("gemma3-270m", {}, native_bf16=True)[0] == "bf16"
    assert rl_precision("gemma3-270m", {}, native_bf16=False) == (
        "fp32", "this CPU has no native bfloat16 (no AVX512-BF16/AMX): float32 is faster")
    assert rl_precision("", {"CPU_PRECISION": "bf16"})[0] == "bf16"
    # the probe reads this machine's CPU (either answer is right; the quickstart reports it)
    assert rl_precision("gemma3-270m", {})[0] == ("bf16" if cpu_bf16() else "fp32")


def test_dapo_threads_are_every_core_for_a_pretrained_student_only():
    import os

    from afm.quickstart.rl import rl_threads

    assert rl_threads("", {})[0] == "1"
    assert rl_threads("gemma3-270m", {})[0] == str(len(os.sched_getaffinity(0)))
    assert rl_threads("gemma3-270m", {"OMP_NUM_THREADS": "3"}) == ("3", "OMP_NUM_THREADS is set in the environment")


def test_the_cli_refuses_full_with_a_model(capsys):
    from afm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["quickstart", "--full", "--model", "gemma3-270m"])
    assert exc.value.code == 2 and "--full sizes the tiny student" in capsys.readouterr().err


def test_the_recipe_runs_with_a_pretrained_student(tiny_gemma, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    from afm.quickstart.run import run

    # 2 train questions a family, 3 epochs: a few steps after the warm-up's first (learning rate 0)
    profile = replace(profile_from_args(student=str(tiny_gemma), train_per_family=2, heldout_per_family=1),
                      untrained_limit=1)
    summary = run(tmp_path / "qs", profile, rl=False)
    out = capsys.readouterr().out
    assert f"[0/7] the pretrained student: {tiny_gemma}" in out and "[afm] observation masking" in out
    assert summary["student"] == {"name": str(tiny_gemma), "sft_template": "gemma", "sft_finetuning": "freeze",
                                  "sft_precision": "fp32",
                                  "sft_precision_why": "the profile's sft_precision",
                                  "sft_ranks": 1,  # one process: its results were measured so
                                  "sft_ranks_why": "a pretrained student: one process (its results were measured so)",
                                  "eval_engine": "hf",
                                  "eval_engine_why": summary["student"]["eval_engine_why"]}
    assert "is a folder: llama.cpp serves a GGUF export" in summary["student"]["eval_engine_why"]
    assert list(summary["stages"]) == ["untrained", "sft"]
    assert summary["questions"] == {"arith": 1, "lookup": 1, "multihop": 1, "calc": 1}
    assert summary["models"]["untrained"] == str(tiny_gemma)
    # the RL family's train questions twice the others': the teacher ran 4 lookup questions and 2 of each other family
    asked = [json.loads(line)["family"] for line in (tmp_path / "qs" / "distill" / "questions.jsonl").open()]
    assert {f: asked.count(f) for f in set(asked)} == {"arith": 2, "lookup": 4, "multihop": 2, "calc": 2}
    assert "4 train lookup tasks" in out
    cfg = yaml.safe_load((tmp_path / "qs" / "sft.yaml").read_text())
    assert (cfg["template"], cfg["finetuning_type"], cfg["freeze_trainable_layers"], cfg["cutoff_len"]) == (
        "gemma", "freeze", 2, PRETRAINED_SETTINGS["sft_cutoff_len"])
    report = json.loads((tmp_path / "qs" / "mask_report.json").read_text())
    assert report["train"]["tokens_masked"] > 0  # observations masked in Gemma's vocabulary
    # freeze fine-tuning: every decoder layer moved, the (tied) embedding did not
    before, after = load_file(tiny_gemma / "model.safetensors"), load_file(tmp_path / "qs" / "sft" / "model.safetensors")
    assert torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    for layer in (0, 1):
        name = f"model.layers.{layer}.mlp.down_proj.weight"
        assert not torch.equal(before[name], after[name]), name
    assert "the student: " in (tmp_path / "qs" / "report.md").read_text()
    # the end-of-turn probe ran on the SFT policy's answered trajectories, if the random model answered any
    assert summary["turn_end"]["sft"]["checked"] == 0 or summary["turn_end"]["sft"]["token"] == "<end_of_turn>"


def test_engine_choice_says_why(monkeypatch, tmp_path):
    from afm.quickstart import engine

    assert engine.choose("").name == "hf"
    assert engine.choose(str(tmp_path)).name == "hf"
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "no-such-binary"))
    chosen = engine.choose("gemma3-270m")
    assert chosen.name == "hf" and "llama-server is not built" in chosen.why


def test_a_served_student_is_evaluated_through_llama_cpp(tiny_gemma, tmp_path):
    """The llama.cpp path of the evaluations: the policy exported to f16, served by serve_model.sh, evaluated with
    afm eval run through afm's llama.cpp dialect; the server stops and the export is removed afterwards."""
    import os

    from afm.quickstart.engine import EvalEngine, llama_server, serving
    from afm.quickstart.recipe import evaluate, make_world
    from afm.quickstart.servers import DemoServers

    binary = llama_server()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"llama-server is not built ({binary}): AFM_ENGINES=llamacpp bash scripts/install.sh")
    chosen = EvalEngine("llamacpp", "test", server=binary, base_gguf=tiny_gemma.parent / "tiny.gguf")
    world, root = make_world(tmp_path, 0, {"train": 1, "rl": 1, "heldout": 1})
    with DemoServers(tmp_path / "servers", world=world) as servers, \
            serving(chosen, tiny_gemma, tmp_path / "engine") as backend:
        assert backend[:2] == ["--backend", "openai"] and (tmp_path / "engine" / "policy-f16.gguf").exists()
        acc = evaluate(tiny_gemma, root, servers, tmp_path / "eval", limit=1, backend=backend)
    assert set(acc) == {"arith", "lookup", "multihop", "calc", "macro"}
    rows = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["ids_source"] == "sampled" for r in rows)
    config = json.loads((tmp_path / "eval" / "config.json").read_text())
    assert config["backend"] == "openai"
    assert not (tmp_path / "engine" / "policy-f16.gguf").exists()


def test_the_turn_end_probe_replays_the_trajectory_the_model_wrote(tiny_gemma, tmp_path):
    """The probe's context is the evaluation's prompt, then every segment's ids up to ``</answer>``; it reads the
    chat format's end-of-turn token there (Gemma's ``<end_of_turn>``), and skips trajectories without an answer."""
    import torch
    from transformers import AutoModelForCausalLM

    from afm.agent.tokens import TokenizerAdapter
    from afm.eval.datasets import WORLD_PROMPT
    from afm.prompts import build_messages, get_prompt
    from afm.quickstart.turn_end import turn_end_probe

    tok = TokenizerAdapter.from_pretrained(str(tiny_gemma))
    model_text, obs_text = "<code>ab</code>", "<observation>abc</observation><answer> c</answer>"
    segments = [{"kind": "model", "text": model_text, "ids": tok.encode(model_text)},
                {"kind": "observation", "text": obs_text, "ids": tok.encode(obs_text)}]
    rows = [{"status": "ok", "question": "Compute 2+3.", "trajectory": {"segments": segments,
                                                                        "response": model_text + obs_text}},
            {"status": "ok", "question": "x", "trajectory": {"segments": segments[:1], "response": model_text}}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    probe = turn_end_probe(tiny_gemma, tmp_path, WORLD_PROMPT, limit=8)
    assert probe["token"] == "<end_of_turn>" and probe["checked"] == 1 and probe["top"] in (0, 1)
    ids = tok.chat_prompt_ids(build_messages(get_prompt(WORLD_PROMPT), "Compute 2+3."))
    ids += segments[0]["ids"] + segments[1]["ids"]
    model = AutoModelForCausalLM.from_pretrained(str(tiny_gemma), dtype=torch.float32).eval()
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([ids])).logits[0, -1], -1)
    end = tok.tok.convert_tokens_to_ids("<end_of_turn>")
    assert probe["p_median"] == pytest.approx(float(p[end]), rel=1e-5)
    assert probe["top"] == int(int(p.argmax()) == end)
    (tmp_path / "results.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert turn_end_probe(tiny_gemma, tmp_path, WORLD_PROMPT, limit=8) == {"checked": 0}
