"""``web_agent``: web research with planning, reflection, a suggested answer and a scored double check.

Structure of AFM's double-check web prompt (``reference/upstream_afm.md`` §1.3), in afm's own words: the
functions, how to use the two web tools, the scoring criteria of ``<reflection>`` and ``<double_check>``,
which function may follow which, and tips for a concise, definite answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from afm.prompts._grammar import Grammar
from afm.prompts._text import format_rules, unwrap
from afm.prompts.registry import START
from afm.trajectory import render

VERSION = "2026-11-22.1"
_TAGS = ("think", "plan", "web_search", "crawl_page", "observation", "reflection", "suggested_answer",
         "double_check", "answer")
ANSWER_FORMAT = "<answer>a concise, definite answer: a name, number, date or short phrase</answer>"
GRAMMAR = Grammar(
    tools=("web_search", "crawl_page"),
    tags=_TAGS,
    answer_format=ANSWER_FORMAT,
    successors=(
        (START, ("plan",)),
        ("plan", ("web_search", "crawl_page", "suggested_answer")),
        ("web_search", ("web_search", "crawl_page", "reflection", "suggested_answer")),
        ("crawl_page", ("web_search", "crawl_page", "reflection", "suggested_answer")),
        ("reflection", ("plan", "web_search", "crawl_page", "suggested_answer")),
        ("suggested_answer", ("double_check",)),
        ("double_check", ("plan", "web_search", "crawl_page", "answer")),
    ),
    think_before=tuple(t for t in _TAGS if t not in ("think", "observation")),
)

SCORING = unwrap("""
Scoring
- In <reflection>, rate each of these three aspects as good, average or poor, with a short reason:
(1) Information conflict: do your sources agree with each other and with what you found earlier?
(2) Tool effectiveness: are your queries and page visits bringing back useful evidence?
(3) Trajectory monitoring: are you getting closer to the answer, or repeating yourself and drifting?
If any aspect is poor, write a new <plan> next.
- In <double_check>, test the suggested answer against every condition of the question and against your
  evidence, then end with "Score: N":
4 = certainly correct and fully supported; 3 = very likely correct, minor doubt left;
2 = doubtful, weakly supported or only partly answers the question; 1 = wrong or contradicted by the evidence.
- A score of 3 or 4 means you give the <answer> next. A score of 1 or 2 means the answer is not settled: write
  a new <plan> (or search and read again) and keep working.
""")

ANSWER_TIPS = unwrap("""
Answer tips
- Be concise and definite: give the name, number, date or short phrase that answers the question, not a
  sentence of explanation.
- Do not hedge or list several options; commit to the best-supported one.
- Follow any format, unit or precision the question asks for.
""")

EXAMPLE = render([
    ("think", "I know nothing about Velmora, so I need a short plan and a search."),
    ("plan", "1. Search for Velmora and its river. 2. Read the best pages to confirm. 3. Propose and check "
             "the answer."),
    ("think", "Start with a direct query."),
    ("web_search", "Velmora town river"),
    ("observation", "Found 1 results:\n\n## Web Results\n1. [Velmora](https://encyclopedia.example/velmora)\n"
                    "https://encyclopedia.example/velmora\nVelmora is a town on the River Aster."),
    ("think", "The snippet is short; read the town page and the river page."),
    ("crawl_page", "https://encyclopedia.example/velmora | https://encyclopedia.example/river-aster"),
    ("observation", "Page 1 [https://encyclopedia.example/velmora] Summary:\n"
                    "Velmora lies on the River Aster.\n\n"
                    "Page 2 [https://encyclopedia.example/river-aster] Summary:\n"
                    "The Aster flows through Velmora."),
    ("think", "Both pages agree. Take stock before answering."),
    ("reflection", "Information conflict: good, both pages name the Aster. Tool effectiveness: good, one "
                   "search and one crawl found it. Trajectory monitoring: good, the question is answered."),
    ("think", "Propose the answer."),
    ("suggested_answer", "River Aster"),
    ("think", "Check it against the question."),
    ("double_check", "The question asks which river flows through Velmora; two pages say the Aster. "
                     "Score: 4"),
    ("think", "The score is 4, so I answer."),
    ("answer", "River Aster"),
])

# The functions and tool tips every web research prompt states (numbered and joined by research_intro); a prompt
# with more tools puts its own between them.
SEARCH_FUNCTIONS = (
    "<think>...</think>: private reasoning. Write one before every other function, to decide what to do next and "
    "why.",
    "<plan>...</plan>: split the task into numbered steps. Plan at the start, and again whenever you change "
    "course.",
    "<web_search>query</web_search>: search the web for one free-text query.",
    '<crawl_page>url_1 | url_2</crawl_page>: open one or more pages, their URLs separated by "|", and receive a '
    "summary of what they say about your task.",
)
CLOSING_FUNCTIONS = (
    "<observation>...</observation>: a tool's result, written by the environment after each tool call.",
    "<reflection>...</reflection>: judge your progress so far (see Scoring).",
    "<suggested_answer>...</suggested_answer>: a candidate answer that your evidence supports.",
    "<double_check>...</double_check>: verify the suggested answer and score it (see Scoring).",
    "<answer>...</answer>: the final answer. It ends your response.",
)
SEARCH_TIPS = (
    "When results are off-topic or thin, rephrase the query and search again rather than guess.",
    "Search results are only snippets: when you need details, crawl the most promising URLs.",
    "Go deeper by alternating: a page you read often names the next thing to search for.",
)


def research_intro(opening: str, functions: Sequence[str], tips: Sequence[str]) -> str:
    """``opening``, then the numbered ``functions`` and the ``tips`` as bullets (source lines unwrapped)."""
    numbered = "\n".join(f"{i}. {f}" for i, f in enumerate(functions, 1))
    bullets = "\n".join(f"- {t}" for t in tips)
    return unwrap(f"{opening.strip()}\n\nFunctions\n{numbered}\n\nTool usage\n{bullets}")


INTRO = research_intro("""
You are a research agent. You answer a question by searching the web and reading pages, and you write your
  whole work in one response as a sequence of functions. A function is a tag pair around its content.
""", (*SEARCH_FUNCTIONS, *CLOSING_FUNCTIONS),
    (*SEARCH_TIPS, "Put exactly one query in <web_search> and nothing but URLs in <crawl_page>."))


def research_text(intro: str, grammar: Grammar, example_question: str, example: str) -> str:
    """The text of a web research prompt: ``intro`` (its functions and tool usage), the scoring, the order of
    functions, the format rules, the answer tips and the example of ``example_question``."""
    order = "Order of functions\n" + unwrap("""
Write <think> before every function. Apart from <think>, each function may be followed only by:
""") + "\n" + grammar.order_lines()
    example_intro = unwrap(f"""
Example (the question was "{example_question}"; the <observation> blocks are what the
  environment inserts):
""")
    return "\n\n".join([intro, SCORING, order, format_rules(), ANSWER_TIPS, example_intro, example])


TEXT = research_text(INTRO, GRAMMAR, "Which river flows through Velmora?", EXAMPLE)

WEB_AGENT = GRAMMAR.prompt(
    "web_agent", VERSION, TEXT, EXAMPLE,
    "Web research agent: plan, web_search, crawl_page, reflection scores, suggested answer and a 1-4 double check "
    "before the answer (AFM WebAgent).")
