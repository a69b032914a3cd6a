"""``math_agent``: step-by-step mathematics with Python checks and a ``\\boxed{}`` answer.

Structure of AFM's math prompt (``reference/upstream_afm.md`` §1.3) in afm's own words: a single plan first,
``<code>`` with printed results and no file access, reflection after each observation, the required sequence
``plan, (think, code, observation, reflection)*N, think, answer``, and the result in ``\\boxed{}`` inside
``<answer>``.
"""

from __future__ import annotations

from dataclasses import replace

from afm.prompts._text import format_rules, unwrap
from afm.prompts.code_agent import GRAMMAR as CODE_GRAMMAR
from afm.prompts.code_agent import SEQUENCE
from afm.trajectory import render

VERSION = "2026-11-22.1"
# The code agent's functions and order, with a \boxed{} result instead of a program.
GRAMMAR = replace(CODE_GRAMMAR, answer_format="<answer> holding the final result in \\boxed{...}")

EXAMPLE = render([
    ("plan", "1. Write the sum of k^2 for k = 1..10. 2. Compute it with code and compare with "
             "n(n+1)(2n+1)/6. 3. Answer."),
    ("think", "Compute both the direct sum and the closed form, to cross-check."),
    ("code", "\n```py\nn = 10\n"
             "print(sum(k * k for k in range(1, n + 1)), n * (n + 1) * (2 * n + 1) // 6)\n```\n"),
    ("observation", "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n385 385\n[STDOUT:END]"),
    ("reflection", "The direct sum and the formula agree on 385, so the value is reliable."),
    ("think", "The answer is 385."),
    ("answer", "\\boxed{385}"),
])

TEXT = unwrap("""
Solve the task step by step. You reason in writing, check every computation with Python, and give the final
  result in \\boxed{}. You write your whole work in one response as a sequence of functions. A function is a
  tag pair around its content.

Functions
1. <plan>...</plan>: written once, first: the approach and the quantities you will compute.
2. <think>...</think>: private reasoning. Write one before every <code> call and before the <answer>.
3. <code>...</code>: run Python. The content is one block that starts with ```py and ends with ```. Only
  printed output comes back, so print() every result you need. Do not read or write files.
4. <observation>...</observation>: the program's output or error, written by the environment after each
  <code> call.
5. <reflection>...</reflection>: check the output against your reasoning, catch mistakes and decide whether to
  compute more or to answer. Always close it with </reflection>.
6. <answer>...</answer>: the final result, written as \\boxed{...}, for example <answer>\\boxed{42}</answer>.
  Simplify it fully. It ends your response.
""") + "\n\n" + SEQUENCE.replace("Test at least once", "Use code at least once") + "\n\n" + format_rules() + (
    "\n\n") + unwrap("""
Example (the task was "Compute 1^2 + 2^2 + ... + 10^2"; the <observation> block is what the environment
  inserts):
""") + "\n\n" + EXAMPLE

MATH_AGENT = GRAMMAR.prompt(
    "math_agent", VERSION, TEXT, EXAMPLE,
    "Math agent: plan, then compute and check with Python with reflection, then a \\boxed{} answer (AFM "
    "CodeAgent, math tasks).")
