"""``afm_all_tools``: the web agent's planning, reflection and double check, with search, crawl and Python.

Structure of AFM's all-tools prompt (``reference/upstream_afm.md`` §1.3) in afm's own words, without the
image tool: the functions, a tool usage guide (Python is mandatory for calculations), the scoring criteria,
the order of functions and answer tips.
"""

from __future__ import annotations

from afm.prompts._grammar import Grammar
from afm.prompts.registry import START
from afm.prompts.web_agent import (
    ANSWER_FORMAT,
    CLOSING_FUNCTIONS,
    SEARCH_FUNCTIONS,
    SEARCH_TIPS,
    research_intro,
    research_text,
)
from afm.trajectory import render

VERSION = "2026-11-22.1"
_ANY_TOOL = ("web_search", "crawl_page", "code")
GRAMMAR = Grammar(
    tools=_ANY_TOOL,
    tags=("think", "plan", *_ANY_TOOL, "observation", "reflection", "suggested_answer", "double_check", "answer"),
    answer_format=ANSWER_FORMAT,
    successors=(
        (START, ("plan",)),
        ("plan", (*_ANY_TOOL, "suggested_answer")),
        ("web_search", (*_ANY_TOOL, "reflection", "suggested_answer")),
        ("crawl_page", (*_ANY_TOOL, "reflection", "suggested_answer")),
        ("code", (*_ANY_TOOL, "reflection", "suggested_answer")),
        ("reflection", ("plan", *_ANY_TOOL, "suggested_answer")),
        ("suggested_answer", ("double_check",)),
        ("double_check", ("plan", *_ANY_TOOL, "answer")),
    ),
    think_before=("plan", *_ANY_TOOL, "reflection", "suggested_answer", "double_check", "answer"),
)

EXAMPLE = render([
    ("think", "I need the founding year of Velmora, then a subtraction."),
    ("plan", "1. Find when Velmora was founded. 2. Compute 1900 minus that year with code. 3. Check and "
             "answer."),
    ("think", "Search for the founding year."),
    ("web_search", "Velmora founded year"),
    ("observation", "Found 1 results:\n\n## Web Results\n1. [History of Velmora]"
                    "(https://encyclopedia.example/history-of-velmora)\n"
                    "https://encyclopedia.example/history-of-velmora\n"
                    "Velmora was founded by Ada Merrow in 1612."),
    ("think", "The year is 1612. Calculations go through code."),
    ("code", "\n```py\nprint(1900 - 1612)\n```\n"),
    ("observation", "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n288\n[STDOUT:END]"),
    ("think", "Propose 288."),
    ("suggested_answer", "288"),
    ("think", "Check the year and the direction of the subtraction."),
    ("double_check", "Founded in 1612 per the history page; 1900 - 1612 = 288 years before 1900. Score: 4"),
    ("think", "The score is 4, so I answer."),
    ("answer", "288"),
])

INTRO = research_intro("""
You are a research agent with three tools: web search, page reading and a Python interpreter. You write your
  whole work in one response as a sequence of functions. A function is a tag pair around its content.
""", (*SEARCH_FUNCTIONS,
      "<code>...</code>: run Python. The content is one fenced block that starts with ```py and ends with ```; "
      "print() every value you want to see, because only printed output comes back.",
      *CLOSING_FUNCTIONS),
    (*SEARCH_TIPS,
     "You must use <code> for every calculation, count, conversion or date difference; never do arithmetic in "
     "your head.",
     "Put exactly one query in <web_search>, nothing but URLs in <crawl_page>, and a fenced ```py block in <code>."))

TEXT = research_text(INTRO, GRAMMAR, "How many years before 1900 was Velmora founded?", EXAMPLE)

AFM_ALL_TOOLS = GRAMMAR.prompt(
    "afm_all_tools", VERSION, TEXT, EXAMPLE,
    "Web research agent with web_search, crawl_page and the Python code tool (mandatory for calculations), with "
    "reflection scores and a 1-4 double check (AFM all-tools).")
