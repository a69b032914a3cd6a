"""How far DAPO moved a policy on the teacher-shortcut world's decision, and whether it broke the format on the way.

Over the held-out ``lookup`` trajectories of a finished quickstart run's SFT evaluation (``eval/sft``), for each model
given (the SFT policy, DAPO checkpoints ``rl/checkpoints/global_step_N/actor/huggingface``), in float32:

* **own-page share**: at the first token of the crawl address's path (``http://host:port/``), P(own page) /
  (P(own page) + P(census page)), from the first tokens of ``town-`` and ``census-``; *greedy own* counts the
  trajectories where the own page wins;
* **closing tags**: P(``plan`` | ``</``) at ``</plan>`` and P(``crawl`` | ``</``) at ``</crawl_page>``, the lowest
  over the trajectories (the SFT policy's are 1.000). A policy that closes a tag with anything else loses the call.

``--random-sign LR`` adds a control: the first model with every weight moved by ``+-LR`` at random (what Adam's first
update does, with random signs instead of the gradient's). RESULTS.md 2026-11-29 (seventeenth session) has what it
said on Gemma 3 270M: DAPO's first update at 1e-5 moved the route on every town and broke the tags; random signs of
1e-5 leave the tags at 1.000.

    .venv/bin/python benchmarks/probe_tags.py RUN MODEL_DIR [MODEL_DIR ...] [--random-sign 1e-5]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any


def cases(run: Path, tok: Any) -> list[tuple[list[int], list[int], list[int]]]:
    """Per held-out lookup trajectory of ``run/eval/sft`` that planned, searched and crawled: the token ids up to
    ``</`` of ``</plan>``, up to the crawl address's path, and up to ``</`` of ``</crawl_page>``."""
    from afm.eval.datasets import WORLD_PROMPT
    from afm.prompts import build_messages, get_prompt

    prompt = get_prompt(WORLD_PROMPT)
    out = []
    for line in (run / "eval" / "sft" / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        segs = (r.get("trajectory") or {}).get("segments") or []
        if r["benchmark"] != "world_lookup" or len(segs) < 3:
            continue
        first, obs, second = segs[0]["text"], segs[1]["text"], segs[2]["text"]
        url = re.search(r"<crawl_page>\s*http://[^/\s]+/", second)
        if not url or "</plan>" not in first or "</crawl_page>" not in second:
            continue
        head = tok.chat_prompt_ids(build_messages(prompt, r["question"]))
        base = head + list(segs[0].get("ids") or tok.encode(first)) + tok.encode(obs)
        out.append((head + tok.encode(first[:first.index("</plan>") + 2]), base + tok.encode(second[:url.end()]),
                    base + tok.encode(second[:second.index("</crawl_page>") + 2])))
    return out


def probe(model: Any, tok: Any, rows: list[tuple[list[int], list[int], list[int]]]) -> dict[str, float]:
    """The own-page share (mean, greedy count) and the closing tags' lowest probabilities under ``model``."""
    import torch

    vocab = tok.tok
    town, census = (vocab.encode(w, add_special_tokens=False)[0] for w in ("town", "census"))
    plan, crawl = (vocab.encode(w, add_special_tokens=False)[0] for w in ("plan", "crawl"))

    def next_probs(ids: list[int]) -> Any:
        with torch.no_grad():
            return torch.softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)

    share, p_plan, p_crawl = [], [], []
    for at_plan, at_url, at_crawl in rows:
        p = next_probs(at_url)
        share.append(float(p[town] / (p[town] + p[census])))
        p_plan.append(float(next_probs(at_plan)[plan]))
        p_crawl.append(float(next_probs(at_crawl)[crawl]))
    return {"own_share": sum(share) / len(share), "greedy_own": sum(s > 0.5 for s in share), "n": len(share),
            "plan_min": min(p_plan), "crawl_min": min(p_crawl)}


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from afm.agent.tokens import TokenizerAdapter

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished afm quickstart run (its eval/sft has the trajectories)")
    p.add_argument("models", type=Path, nargs="+", help="policies to probe (Hugging Face folders)")
    p.add_argument("--random-sign", type=float, default=0.0, help="also the first model with every weight +-LR")
    args = p.parse_args(argv)
    tok = TokenizerAdapter.from_pretrained(str(args.models[0]))
    rows = cases(args.run, tok)
    if not rows:
        raise SystemExit(f"no held-out lookup trajectory with a plan, a search and a crawl in {args.run}/eval/sft")
    print(f"{len(rows)} held-out lookup trajectories of {args.run / 'eval' / 'sft'}")
    print("| policy | own-page share (mean) | greedy own page | P(plan \\| </) min | P(crawl \\| </) min |")
    print("| --- | --- | --- | --- | --- |")
    variants = [(str(m), m, 0.0) for m in args.models]
    if args.random_sign:
        variants.append((f"{args.models[0]} +- {args.random_sign:g} at random", args.models[0], args.random_sign))
    for name, folder, sign in variants:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
        if sign:
            g = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for w in model.parameters():
                    w.add_(sign * (torch.randint(0, 2, w.shape, generator=g) * 2 - 1).to(w.dtype))
        r = probe(model, tok, rows)
        print(f"| {name} | {r['own_share']:.3f} | {r['greedy_own']} / {r['n']} | {r['plan_min']:.3f} | "
              f"{r['crawl_min']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
