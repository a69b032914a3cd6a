"""Demo Chain-of-Agents data written by the project: arithmetic solved with the code tool and lookups solved
with web search over a small invented encyclopedia. Deterministic for a given seed.

Outputs LLaMA-Factory alpaca files (``afm_demo_sft.json``; ``afm_demo_dpo.json`` with chosen/rejected) and their
``dataset_info.json`` entries. ``broken`` extra SFT samples have an observation cut open on purpose, so the
masking report has something to report.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from afm.trajectory import render, validate

DEMO_SYSTEM = (
    "You solve tasks as a chain of agents. Think in <think>, plan in <plan>, call tools with <code> (a ```py block) "
    "or <web_search> (a query), read results in <observation>, reflect in <reflection>, and finish with <answer>."
)

_PLACES = ["Velmora", "Ostrand", "Kiriva", "Dunmere", "Saltreach", "Emberfall", "Quillon", "Marrowick", "Tessaly",
           "Brightwater", "Corvane", "Lunhold"]
_RIVERS = ["Aster", "Brennet", "Calder", "Dovey", "Esk", "Fennick", "Galloway", "Harrow", "Ivel", "Jorun", "Kessel",
           "Lyne"]
_FOUNDERS = ["Ada Merrow", "Bram Tolliver", "Cora Vance", "Dario Quell", "Edda Marsh", "Felix Orme", "Greta Lund",
             "Hugo Sarne", "Iris Pell", "Jonas Vey", "Kara Wynn", "Leo Hartt"]


@dataclass
class DemoSample:
    """One task with a correct and an incorrect trajectory."""

    question: str
    chosen: str
    rejected: str
    answer: str
    kind: str


def _code_obs(value: str) -> str:
    return f"[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n{value}\n[STDOUT:END]"


def _arith(rng: random.Random) -> DemoSample:
    a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(1, 50)
    value = a * b + c
    question = f"What is {a} * {b} + {c}?"
    code = f"\n```py\nprint({a} * {b} + {c})\n```\n"
    steps = [("think", f" I must compute {a} * {b} + {c}; code is more reliable than mental arithmetic. ")]
    if rng.random() < 0.5:
        steps.append(("plan", " 1. Evaluate the expression with Python. 2. Report the printed value. "))
    steps += [
        ("code", code),
        ("observation", _code_obs(str(value))),
        ("think", f" The program printed {value}. "),
        ("answer", str(value)),
    ]
    wrong = value + rng.choice([-10, -1, 1, 10])
    rejected = render([("think", f" {a} * {b} is about {a * b + rng.choice([-3, 3])}, plus {c}. "),
                       ("answer", str(wrong))])
    return DemoSample(question, render(steps), rejected, str(value), "arithmetic")


def _search_obs(query: str, hits: list[tuple[str, str]]) -> str:
    lines = [f"A search for '{query}' found {len(hits)} results:", "", "## Web Results"]
    for i, (title, snippet) in enumerate(hits, 1):
        slug = title.lower().replace(" ", "-")
        lines.append(f"{i}. [{title}](https://encyclopedia.example/{slug})\n{snippet}")
    return "\n".join(lines)


def _lookup(rng: random.Random) -> DemoSample:
    i = rng.randrange(len(_PLACES))
    place, river, founder = _PLACES[i], _RIVERS[i], _FOUNDERS[i]
    other = _PLACES[(i + 1) % len(_PLACES)]
    if rng.random() < 0.5:
        question, answer = f"Which river flows through {place}?", river
        query = f"{place} river"
        hits = [(place, f"{place} is a town on the River {river}, founded by {founder}."),
                (other, f"{other} lies on the River {_RIVERS[(i + 1) % len(_RIVERS)]}.")]
    else:
        question, answer = f"Who founded {place}?", founder
        query = f"{place} founder"
        hits = [(f"History of {place}", f"{place} was founded by {founder} beside the River {river}."),
                (other, f"{other} was founded by {_FOUNDERS[(i + 1) % len(_FOUNDERS)]}.")]
    steps = [("think", f" I do not know {place}; I should search for it. "), ("web_search", query),
             ("observation", _search_obs(query, hits))]
    if rng.random() < 0.4:
        steps += [("reflection", " The first result is about the right town and answers the question directly. "),
                  ("suggested_answer", answer), ("double_check", " The snippet states it explicitly. Score: 4 ")]
    steps += [("think", f" The first result answers it: {answer}. "), ("answer", answer)]
    wrong = _FOUNDERS[(i + 2) % len(_FOUNDERS)] if answer == founder else _RIVERS[(i + 2) % len(_RIVERS)]
    rejected = render([("think", " I will guess without searching. "), ("answer", wrong)])
    return DemoSample(question, render(steps), rejected, answer, "lookup")


def demo_samples(n: int, seed: int = 0) -> list[DemoSample]:
    """``n`` demo tasks, alternating arithmetic and lookup."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        sample = _arith(rng) if k % 2 == 0 else _lookup(rng)
        problems = validate(sample.chosen, allow_text_outside_tags=False)
        if problems:  # the generator must only write valid trajectories
            raise AssertionError(f"demo generator wrote an invalid trajectory: {problems}")
        out.append(sample)
    return out


def _broken(sample: DemoSample) -> str:
    """The chosen trajectory cut right after an observation's content: ``</observation>`` is missing."""
    cut = sample.chosen.index("</observation>")
    return sample.chosen[:cut]


DATASET_INFO = {
    "afm_demo_sft": {
        "file_name": "afm_demo_sft.json",
        "columns": {"prompt": "instruction", "query": "input", "response": "output", "system": "system"},
    },
    "afm_demo_dpo": {
        "file_name": "afm_demo_dpo.json",
        "ranking": True,
        "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected",
                    "system": "system"},
    },
}


def write_demo_data(out_dir: str | Path, n_sft: int = 64, n_dpo: int = 32, broken: int = 2, seed: int = 0) -> Path:
    """Write the demo SFT/DPO sets and ``dataset_info.json`` into ``out_dir``; returns ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    samples = demo_samples(max(n_sft, n_dpo), seed)
    sft = [{"instruction": s.question, "input": "", "output": s.chosen, "system": DEMO_SYSTEM} for s in samples[:n_sft]]
    sft += [{"instruction": s.question, "input": "", "output": _broken(s), "system": DEMO_SYSTEM}
            for s in samples[:n_sft] if "</observation>" in s.chosen][:broken]
    dpo = [{"instruction": s.question, "input": "", "chosen": s.chosen, "rejected": s.rejected, "system": DEMO_SYSTEM}
           for s in samples[:n_dpo]]
    (out / "afm_demo_sft.json").write_text(json.dumps(sft, indent=1, ensure_ascii=False))
    (out / "afm_demo_dpo.json").write_text(json.dumps(dpo, indent=1, ensure_ascii=False))
    info_path = out / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    info.update(DATASET_INFO)
    info_path.write_text(json.dumps(info, indent=2))
    return out


def tokenizer_corpus(seed: int = 0) -> list[str]:
    """Text to train the tiny tokenizer on: demo trajectories, questions and the system prompt."""
    texts = [DEMO_SYSTEM]
    for s in demo_samples(400, seed + 1):
        texts += [s.question, s.chosen, s.rejected]
    return texts
