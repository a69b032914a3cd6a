"""A toy code-agent task and a tiny policy that already calls the code tool: what the local RL profile trains.

A random tiny model never writes a tool call, so RL on it would exercise neither tools nor rewards. This module
builds, in seconds on a CPU:

* an RL parquet (through :func:`afm.data.rl_parquet.build_rl_rows`, the production builder) of three kinds of
  question, all asking for ``6*7`` (graded by Math-Verify through ``compute_score``):
  ``RIGHT`` (the policy writes ``print(6*7)``), ``WRONG`` (it writes ``print(6*8)``, and the gold is 43, so the
  group is always all-0) and ``MIX`` (either program, about half the time). RIGHT groups are mostly all-1 and WRONG
  groups all-0, which DAPO's group filter drops; MIX groups carry the signal, so RL should move the MIX questions
  towards ``print(6*7)``;
* the policy: the tiny Qwen2 of :mod:`afm.model.tiny`, taught by a short teacher-forced run to answer each
  kind with a CoA turn — ``<code>`` call, then (after the observation, which is masked) ``<answer>`` with the
  number the tool printed.

The trajectories go through the real ``afm_agent`` loop, the nsjail sandbox and ``compute_score``; only the policy's
starting point is made up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DATA_SOURCE = "aime24"  # a math source: Math-Verify grades the \boxed answer
KINDS = ("RIGHT", "WRONG", "MIX")
F = "```"


def _prompt():
    from afm.prompts.registry import Prompt

    return Prompt(key="afm_rl_toy", version="2026-11-24.1",
                  text="Solve the task with the code tool, then answer in <answer>\\boxed{...}</answer>.",
                  tools=("code",), answer_format="\\boxed{number}", description="toy code task of the local RL profile")


PROMPT = _prompt()


def reply(program: str, value: int) -> tuple[str, str, str]:
    """The three parts of one trajectory: the tool call, the observation the engine adds, the answer."""
    from afm.sandbox.limits import ExecResult, Limits
    from afm.tools.code import format_observation as code_observation
    from afm.trajectory import format_observation

    # The observation exactly as the code tool words it for a run that printed the value.
    text = code_observation(ExecResult(status="ok", exit_code=0, stdout=f"{value}\n", stderr="", wall_s=0.0),
                            4096, Limits())
    call = f"<think>use the tool</think>\n<code>\n{F}py\n{program}\n{F}\n</code>"
    return call, format_observation(text), f"<answer>\\boxed{{{value}}}</answer>"


def questions(n_per_kind: int, counts: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The toy questions (ids unique): by default ``n_per_kind`` RIGHT and WRONG ones and three times as many MIX.

    RIGHT and MIX have gold 42; WRONG has gold 43, which neither program prints, so a WRONG group is always
    all-0 (DAPO's filter must drop it). MIX groups carry the learning signal; with too few of them the filter would
    spend most of a step regenerating groups it then drops.
    """
    counts = dict(counts or {"RIGHT": n_per_kind, "WRONG": n_per_kind, "MIX": 3 * n_per_kind})
    gold = {"RIGHT": "42", "WRONG": "43", "MIX": "42"}
    return [{"id": f"{kind.lower()}-{i}", "question": f"{kind} {i}: compute 6*7.", "answer": gold[kind]}
            for kind in KINDS for i in range(counts.get(kind, 0))]


def write_parquet(path: str | Path, n_per_kind: int = 2, counts: Mapping[str, int] | None = None) -> Path:
    """The toy RL parquet (``afm data rl`` format, code tool enabled, short system prompt)."""
    from afm.data.rl_parquet import build_rl_rows, write_rl_parquet

    path = Path(path)
    rows, report = build_rl_rows(questions(n_per_kind, counts), data_source=DATA_SOURCE, prompt_key="afm.rl.local.toy:PROMPT",
                                 ability="math", tools=["code"])
    if not rows:
        raise RuntimeError(f"toy parquet: every row was dropped: {report}")
    return write_rl_parquet(rows, path)


def _examples(tokenizer: Any, rows: list[dict[str, Any]]) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) for teacher forcing: the loss covers the model's own turns, not the prompt or observation."""
    out = []
    for row in rows:
        kind = row["extra_info"]["question"].split()[0]
        programs = {"RIGHT": ["print(6*7)"], "WRONG": ["print(6*8)"], "MIX": ["print(6*7)", "print(6*8)"]}[kind]
        prompt = tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=False)
        for program in programs:
            value = eval(program.removeprefix("print"))
            call, obs, answer = reply(program, value)
            ids: list[int] = []
            labels: list[int] = []
            for text, learn in ((prompt, False), (call, True), (obs, False), (answer + "<|im_end|>", True)):
                piece = tokenizer.encode(text, add_special_tokens=False)
                ids += piece
                labels += piece if learn else [-100] * len(piece)
            out.append((ids, labels))
    return out


def build_policy(out_dir: str | Path, parquet: str | Path, *, steps: int = 120, lr: float = 3e-3,
                 seed: int = 0) -> Path:
    """Write the tiny policy to ``out_dir`` (reused when already there) and return the path."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from afm.demo_content.samples import tokenizer_corpus
    from afm.model.tiny import TINY_VLLM, build_tiny_model

    out = Path(out_dir)
    stamp = out / "afm_toy_policy.json"
    shape = asdict(TINY_VLLM)  # heads of 32: vLLM's CPU attention serves it too (ROLLOUT_ENGINE=vllm)
    if policy_is_current(out):
        return out
    build_tiny_model(out, tokenizer_corpus(0), TINY_VLLM, seed=seed)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    rows = pd.read_parquet(parquet).to_dict("records")
    examples = _examples(tok, rows)
    width = max(len(ids) for ids, _ in examples)
    pad = tok.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in examples])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in examples])
    mask = (torch.arange(width)[None, :] < torch.tensor([len(i) for i, _ in examples])[:, None]).long()
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = None
    for _ in range(steps):
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(out)
    stamp.write_text(json.dumps({"steps": steps, "lr": lr, "seed": seed, "size": shape,
                                 "final_loss": float(loss)}) + "\n")
    logger.info("toy policy written to %s (final loss %.3f)", out, float(loss))
    return out


def policy_is_current(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` holds a toy policy of today's shape (an older one, of 16-dimension heads, is rebuilt)."""
    from afm.model.tiny import TINY_VLLM

    stamp = Path(out_dir) / "afm_toy_policy.json"
    try:
        return json.loads(stamp.read_text()).get("size") == asdict(TINY_VLLM)
    except (OSError, ValueError):
        return False


def prepare(workdir: str | Path, n_per_kind: int = 2) -> dict[str, Path]:
    """The toy parquet (kept when present) and policy under ``workdir``: ``{"train": ..., "model": ...}``."""
    workdir = Path(workdir)
    train = workdir / "toy_train.parquet"
    if not train.exists():  # a parquet already there (another composition, say) is kept
        write_parquet(train, n_per_kind)
    model = build_policy(workdir / "toy_policy", train)
    return {"train": train, "model": model}


def main(argv: list[str] | None = None) -> int:
    """``python -m afm.rl.local.toy WORKDIR``: write the toy parquet and policy, print their paths as JSON."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m afm.rl.local.toy", description=main.__doc__)
    ap.add_argument("workdir")
    ap.add_argument("--per-kind", type=int, default=2,
                    help="RIGHT and WRONG questions (MIX: three times as many; default 2)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    paths = prepare(args.workdir, args.per_kind)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
