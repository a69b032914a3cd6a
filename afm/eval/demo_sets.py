"""Small benchmark subsets written by the project for offline runs, in the original formats of the real
ones, so they go through the same loaders (:mod:`afm.eval.datasets`) and scorers as the real benchmarks.

- ``demo_mhqa``: the demo world's questions (:data:`afm.demo_content.web.DEMO_QUESTIONS`) as NQ-style JSON lines
  (``question``, ``answer`` list, ``data_source``); answered with ``wiki_search`` over the demo wiki corpus.
- ``demo_web``: the same questions as a GAIA-style JSON list (``task_id``, ``question``, ``answer``,
  ``Level`` = the number of hops); answered with ``web_search`` + ``crawl_page`` on the demo site; judged
  (EM without a judge).
- ``demo_math``: arithmetic questions in the style of :mod:`afm.demo_content.samples` as MATH-500-style JSON lines
  (``problem``, ``solution`` with ``\\boxed{}``, ``answer``); scored by Math-Verify.
- ``demo_code``: four tiny STDIN/STDOUT problems as LiveCodeBench rows (``question_content``,
  ``public_test_cases``/``private_test_cases`` JSON strings, ``metadata``); :data:`DEMO_CODE_SOLUTIONS`
  holds a correct program for each, so the grading can be checked.

>>> from afm.eval.demo_sets import write_demo_sets
>>> paths = write_demo_sets("/tmp/afm-demo-eval")          # doctest: +SKIP
>>> sorted(paths)                                           # doctest: +SKIP
['demo_code', 'demo_math', 'demo_mhqa', 'demo_web']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from afm.demo_content.samples import demo_samples
from afm.demo_content.web import DEMO_QUESTIONS
from afm.eval.benchmark_specs import get_benchmark
from afm.eval.records import write_records

DEMO_SET_NAMES = ("demo_mhqa", "demo_web", "demo_math", "demo_code")
# Other spellings of a demo answer that exact match should also accept.
_ALIASES = {"47 metres": ("47 meters", "47 m")}


def demo_mhqa_rows() -> list[dict[str, Any]]:
    """NQ-style rows: ``{"id", "question", "answer": [aliases], "data_source"}``."""
    ds = get_benchmark("demo_mhqa").data_source
    return [{"id": f"demo-mhqa-{k}", "question": q, "answer": [a, *_ALIASES.get(a, ())], "data_source": ds}
            for k, (q, a, _hops) in enumerate(DEMO_QUESTIONS)]


def demo_web_rows() -> list[dict[str, Any]]:
    """GAIA-style rows: ``{"id", "task_id", "question", "answer", "Level", "Annotator_Metadata"}``."""
    return [{"id": k, "task_id": f"demo-web-{k}", "question": q, "answer": a, "Level": str(hops),
             "Annotator_Metadata": {"Number of steps": str(hops), "Tools": "web_search, crawl_page"}}
            for k, (q, a, hops) in enumerate(DEMO_QUESTIONS)]


def demo_math_rows(n: int = 5, seed: int = 7) -> list[dict[str, Any]]:
    """MATH-500-style rows ``{"unique_id", "problem", "solution", "answer"}``: ``n`` arithmetic questions."""
    samples = [s for s in demo_samples(2 * n, seed) if s.kind == "arithmetic"][:n]
    return [{"unique_id": f"demo-math-{k}", "problem": s.question,
             "solution": f"Evaluating the expression gives $\\boxed{{{s.answer}}}$.", "answer": s.answer}
            for k, s in enumerate(samples)]


@dataclass(frozen=True)
class DemoCodeProblem:
    """A STDIN/STDOUT problem: statement, test inputs, a reference for the outputs, a solution program."""

    question_id: str
    title: str
    statement: str
    public_inputs: tuple[str, ...]
    private_inputs: tuple[str, ...]
    reference: Callable[[str], str]
    solution: str


def _max_of_list(text: str) -> str:
    return str(max(int(x) for x in text.split()[1:]))


DEMO_CODE_PROBLEMS: tuple[DemoCodeProblem, ...] = (
    DemoCodeProblem(
        "demo_sum", "Sum of two", "Read two integers A and B separated by a space and print A + B.",
        ("1 2\n", "10 -4\n"), ("123456 654321\n",),
        lambda s: str(sum(int(x) for x in s.split())),
        "a, b = map(int, input().split())\nprint(a + b)"),
    DemoCodeProblem(
        "demo_reverse", "Reverse a word", "Read one word S and print it reversed.",
        ("abc\n", "racecar\n"), ("Velmora\n",),
        lambda s: s.strip()[::-1],
        "print(input().strip()[::-1])"),
    DemoCodeProblem(
        "demo_vowels", "Count vowels",
        "Read one line of lowercase letters and spaces and print how many of its letters are vowels "
        "(a, e, i, o, u).",
        ("hello world\n", "rhythm\n"), ("marrowgate harbour\n",),
        lambda s: str(sum(c in "aeiou" for c in s)),
        "print(sum(c in 'aeiou' for c in input()))"),
    DemoCodeProblem(
        "demo_max", "Largest number",
        "The first line holds N, the second N integers. Print the largest of them.",
        ("3\n4 9 2\n", "1\n-5\n"), ("5\n-1 -7 0 -3 -2\n",),
        _max_of_list,
        "input()\nprint(max(map(int, input().split())))"),
)
DEMO_CODE_SOLUTIONS: dict[str, str] = {p.question_id: p.solution for p in DEMO_CODE_PROBLEMS}


def _tests(problem: DemoCodeProblem, inputs: Iterable[str]) -> str:
    return json.dumps([{"input": i, "output": problem.reference(i) + "\n", "testtype": "stdin"}
                       for i in inputs])


def demo_code_rows() -> list[dict[str, Any]]:
    """LiveCodeBench-style rows (the fields of ``livecodebench/code_generation_lite``)."""
    return [{"question_title": p.title, "question_content": p.statement, "platform": "demo",
             "question_id": p.question_id, "contest_id": "demo", "contest_date": "2025-01-01T00:00:00",
             "starter_code": "", "difficulty": "easy", "public_test_cases": _tests(p, p.public_inputs),
             "private_test_cases": _tests(p, p.private_inputs), "metadata": "{}"}
            for p in DEMO_CODE_PROBLEMS]


_ROWS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "demo_mhqa": demo_mhqa_rows, "demo_web": demo_web_rows, "demo_math": demo_math_rows,
    "demo_code": demo_code_rows}


def write_demo_sets(out_dir: str | Path, names: Iterable[str] = DEMO_SET_NAMES) -> dict[str, Path]:
    """Write the demo sets under ``out_dir`` at their benchmarks' default files; returns name -> path.

    ``out_dir`` then works as a data root: ``load_benchmark("demo_web", data_root=out_dir)``.
    """
    written = {}
    for name in names:
        if name not in _ROWS:
            raise KeyError(f"unknown demo set {name!r}; known: {', '.join(DEMO_SET_NAMES)}")
        spec = get_benchmark(name)
        written[name] = write_records(_ROWS[name](), Path(out_dir) / str(spec.default_file))
    return written
