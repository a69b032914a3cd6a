"""Where a policy stands on the teacher-shortcut world's one decision (issue 28), from a finished quickstart run.

For each model (the run's SFT policy by default, or the given folders, e.g. an RL checkpoint):

* **p(census)**: the probability of the census page's address token against the town's own page's, at the first
  token after the host of the crawl call, on every held-out ``lookup`` town (the prefix is one of the run's
  ``lookup`` demonstrations up to that token, with its town swapped for the held-out one);
* **copies**: the digits the policy writes greedily after ``<host>/town-`` and after ``<host>/census-town-`` (right
  when they are the town's number): a route copied worse than the other is a route
  DAPO learns to avoid;

and, from the run's RL selection samples (``rl_data/samples.jsonl``), which page each sample read and whether it
answered right. RESULTS.md 2026-11-27 has what these said on each design.

    .venv/bin/python benchmarks/probe_shortcut.py runs/quickstart [MODEL_DIR ...]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path
from typing import Any


def _demo(work: Path) -> tuple[dict[str, Any], str]:
    """A ``lookup`` demonstration of the run's SFT set and its town's number."""
    rows = json.loads((work / "distill" / "sft_data" / "afm_world_sft.json").read_text())
    demo = next(x for x in rows if "population of Town" in x["instruction"] + x["input"])
    return demo, re.search(r"Town (\d+)", demo["instruction"] + demo["input"]).group(1)


def sample_routes(samples: Path) -> dict[str, int]:
    """``{"census right": n, "census wrong": n, "own right": n, ...}`` over the selection's samples."""
    counts: collections.Counter[str] = collections.Counter()
    for line in samples.read_text().splitlines():
        row = json.loads(line)
        text = "".join(seg.get("text", "") for seg in row["segments"])
        crawls = re.findall(r"<crawl_page>\s*(\S+?)</crawl_page>", text)
        route = ("census" if "/census" in crawls[0] else "own") if crawls else "no crawl"
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.S)
        right = bool(answers) and answers[-1].strip() in row["gold"]
        counts[f"{route} {'right' if right else 'wrong'}"] += 1
    return dict(sorted(counts.items()))


def probe(work: Path, model_dir: Path) -> dict[str, Any]:
    """p(census) at the decision and the greedy copies on both routes for one model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    demo, town0 = _demo(work)
    towns = [re.search(r"Town (\d+)", json.loads(line)["question"]).group(1)
             for line in (work / "eval_data" / "world" / "heldout_lookup.jsonl").read_text().splitlines()]
    out = demo["output"]
    host = re.search(r"<crawl_page>\s*(http://[^/\s]+)/", out).group(1)
    body = out[:out.index("<crawl_page>") + len("<crawl_page> ")] + host
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    base = tok(host, add_special_tokens=False)["input_ids"]
    # "/" merges with the next word in these tokenizers: the decision is the token after the host's digits
    census_id = tok(host + "/census-town-1.html", add_special_tokens=False)["input_ids"][len(base)]
    own_id = tok(host + "/town-1.html", add_special_tokens=False)["input_ids"][len(base)]
    p_census, copies = [], {"/town-": 0, "/census-town-": 0}
    for town in towns:
        user = demo["instruction"] + ("\n\n" + demo["input"] if demo["input"] else "")
        msgs = ([{"role": "system", "content": demo["system"]}] if demo.get("system") else [])
        msgs.append({"role": "user", "content": user.replace(town0, town)})
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) + body.replace(town0, town)
        ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            probs = model(ids).logits[0, -1].softmax(-1)
            p_census.append((probs[census_id] / (probs[census_id] + probs[own_id])).item())
            for route in copies:
                ids = tok(prompt + route, add_special_tokens=False, return_tensors="pt")["input_ids"]
                new = model.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1]:]
                copies[route] += tok.decode(new).startswith(town + ".html")
    return {"model": str(model_dir), "towns": len(towns),
            "p_census": {"mean": round(sum(p_census) / len(p_census), 3), "min": round(min(p_census), 3),
                         "max": round(max(p_census), 3)},
            "greedy_census": sum(p > 0.5 for p in p_census),
            "copied_right": {"own page": copies["/town-"], "census page": copies["/census-town-"]}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdir", type=Path, help="a finished afm quickstart --teacher-shortcut run")
    p.add_argument("models", type=Path, nargs="*", help="model folders (default: the run's SFT policy)")
    args = p.parse_args(argv)
    samples = args.workdir / "rl_data" / "samples.jsonl"
    if samples.exists():
        print(json.dumps({"selection samples": sample_routes(samples)}))
    for model_dir in args.models or [args.workdir / "sft"]:
        print(json.dumps(probe(args.workdir, model_dir)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
