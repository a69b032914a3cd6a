"""``code_agent``: competitive programming in Python, testing in the sandbox before submitting one program.

Structure of AFM's code-agent prompt (``reference/upstream_afm.md`` §1.3) in afm's own words: a single plan
first, code calls in two formats (Python only, or Python plus a ```` ```sh ```` block holding stdin),
reflection after each observation, the required sequence
``plan, (think, code, observation, reflection)*N, think, answer``, and an answer that is one complete
```` ```py ```` program.

``extra`` for :func:`afm.prompts.build_messages`: ``stdin=True`` for problems that read standard input and
write standard output; ``starter_code="class Solution: ..."`` for LeetCode-style problems. Either way the user
message ends with the answer format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from afm.prompts._grammar import Grammar
from afm.prompts._text import format_rules, unwrap
from afm.prompts.registry import START
from afm.trajectory import render

VERSION = "2026-11-22.1"
GRAMMAR = Grammar(
    tools=("code",),
    tags=("think", "plan", "code", "observation", "reflection", "answer"),
    answer_format="<answer> holding one complete ```py program (no tests, no explanation)",
    successors=(
        (START, ("plan",)),
        ("plan", ("code",)),
        ("code", ("reflection",)),
        ("reflection", ("code", "answer")),
    ),
    think_before=("code", "answer"),
)

SEQUENCE = unwrap("""
Required sequence
Your response must follow this order exactly: plan, (think, code, observation, reflection) repeated N times,
  think, answer. That is: one <plan> first; then for each test a <think>, a <code> call, the environment's
  <observation> and your <reflection>; then a last <think> and the <answer>. Test at least once before you
  answer.
""")

STDIN_NOTE = unwrap("""
Input and output: your program must read the input from standard input (STDIN) and write the answer to
  standard output (STDOUT). Do not print prompts or anything else, and do not read from files.
""")

LEETCODE_NOTE = unwrap("""
Starter code: complete the code below. Keep the class name, the method names and their signatures unchanged;
  you may add helper functions. Do not read input, and do not call the method yourself in the answer.
""")

ANSWER_NOTE = unwrap("""
Answer format: inside <answer>, one code block that begins with a line ```py and ends with a line ```.
""")

_EXAMPLE_PROGRAM = ("import sys\n\n\ndef main():\n    data = sys.stdin.read().split()\n    n = int(data[0])\n"
                    "    print(sum(int(x) for x in data[1:1 + n]))\n\n\nmain()")

EXAMPLE = render([
    ("plan", "1. Read n and then n integers. 2. Print their sum. 3. Test on the sample, then submit."),
    ("think", "A single pass is enough. Run it on the sample input through stdin."),
    ("code", f"\n```py\n{_EXAMPLE_PROGRAM}\n```\n```sh\n3\n4 5 6\n```\n"),
    ("observation", "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n15\n[STDOUT:END]"),
    ("reflection", "The output 15 equals 4 + 5 + 6 and the parsing accepts any whitespace, so the program is "
                   "correct."),
    ("think", "Submit the tested program unchanged."),
    ("answer", f"\n```py\n{_EXAMPLE_PROGRAM}\n```\n"),
])

TEXT = unwrap("""
You are an expert Python programmer. You solve a programming problem by reasoning, testing your code in a
  sandbox and then submitting one complete program. You write your whole work in one response as a sequence of
  functions. A function is a tag pair around its content.

Functions
1. <plan>...</plan>: written once, first: the algorithm, its complexity and the edge cases to test.
2. <think>...</think>: private reasoning. Write one before every <code> call and before the <answer>.
3. <code>...</code>: run Python in a sandbox. Two formats are accepted.
Format 1, Python only: a block that starts with ```py and ends with ```.
Format 2, Python with input: the ```py block followed by a ```sh block whose content is given to the program
  as its standard input.
The sandbox shows only what the program prints, so print the values you want to check. Do not read or write
  files and do not use the network.
4. <observation>...</observation>: the program's output or error, written by the environment after each
  <code> call.
5. <reflection>...</reflection>: compare the output with what you expected, find bugs and decide whether to
  test again or to answer. Always close it with </reflection>.
6. <answer>...</answer>: the final solution, one complete ```py program with no test calls and no
  explanation. It ends your response.
""") + "\n\n" + SEQUENCE + "\n\n" + format_rules() + "\n\n" + unwrap("""
Example (the problem was "Read n and n integers, print their sum"; the <observation> block is what the
  environment inserts):
""") + "\n\n" + EXAMPLE


def render_extra(extra: Mapping[str, Any]) -> str:
    """Text after the question: the stdin or starter-code instructions, then the answer format."""
    stdin, starter = extra.get("stdin", False), extra.get("starter_code")
    if not isinstance(stdin, bool):
        raise ValueError(f"extra['stdin'] must be true or false, got {stdin!r}")
    if starter is not None and not isinstance(starter, str):
        raise ValueError(f"extra['starter_code'] must be a string, got {type(starter).__name__}")
    if stdin and starter and starter.strip():
        raise ValueError("give either extra['stdin']=True (a STDIN/STDOUT problem) or extra['starter_code'] "
                         "(a LeetCode problem), not both")
    parts = []
    if starter and starter.strip():
        parts.append(LEETCODE_NOTE + "\n```py\n" + starter.strip("\n").rstrip() + "\n```")
    elif stdin:
        parts.append(STDIN_NOTE)
    parts.append(ANSWER_NOTE)
    return "\n\n".join(parts)


CODE_AGENT = GRAMMAR.prompt(
    "code_agent", VERSION, TEXT, EXAMPLE,
    "Code agent: plan, then test code in the sandbox with reflection, then answer one complete program; extra "
    "stdin=True or starter_code=... (AFM CodeAgent).",
    extra_keys=("stdin", "starter_code"),
    render_extra=render_extra,
)
