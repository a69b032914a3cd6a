"""Does the policy end its turn where its chat template does? A teacher-forced probe on its own trajectories.

afm's agent loop stops a generation at ``</answer>``, so an evaluation never shows what the model would write next;
the SFT data (LLaMA-Factory's template) trains the chat format's end-of-turn token right after the answer
(``<end_of_turn>`` for Gemma, ``<|im_end|>`` for Qwen), and verl's rollouts end at that token. The probe replays each
answered trajectory of an eval run (the prompt as the evaluation built it, then the sampled ids of every segment, up
to ``</answer>``) and reads the model's next-token distribution: an untrained Gemma gives ``<end_of_turn>`` ~0 there
(tests/test_model_gemma.py), a policy that learned the format puts it first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from afm.agent.tokens import END_OF_TURN_TOKENS


def _answered(run_dir: Path, limit: int) -> list[dict[str, Any]]:
    rows = []
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        traj = r.get("trajectory") or {}
        if r.get("status") == "ok" and traj.get("segments") and "</answer>" in (traj.get("response") or ""):
            rows.append(r)
        if len(rows) >= limit:
            break
    return rows


def turn_end_probe(model_dir: str | Path, run_dir: str | Path, prompt_key: str, limit: int) -> dict[str, Any]:
    """Over up to ``limit`` answered trajectories of ``run_dir`` (``afm eval run --keep-trajectories``): how often
    the chat format's end-of-turn token is the model's most likely next token right after ``</answer>``, and its
    median probability there. ``{"checked": 0}`` when no trajectory answered."""
    import torch
    from transformers import AutoModelForCausalLM

    from afm.agent.tokens import TokenizerAdapter
    from afm.prompts import build_messages, get_prompt

    rows = _answered(Path(run_dir), limit)
    if not rows:
        return {"checked": 0}
    tok = TokenizerAdapter.from_pretrained(str(model_dir))
    vocab = tok.tok.get_vocab()
    token = next(t for t in END_OF_TURN_TOKENS if t in vocab)
    end_id = vocab[token]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    prompt = get_prompt(prompt_key)
    top, probs = 0, []
    for r in rows:
        ids = tok.chat_prompt_ids(build_messages(prompt, r["question"]))
        for seg in r["trajectory"]["segments"]:
            ids += list(seg.get("ids") or tok.encode(seg.get("text") or ""))
        with torch.no_grad():
            p = torch.softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
        probs.append(float(p[end_id]))
        top += int(int(p.argmax()) == end_id)
    probs.sort()
    return {"token": token, "checked": len(rows), "top": top, "p_median": probs[len(probs) // 2],
            "p_min": probs[0]}
