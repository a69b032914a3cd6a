"""``mhqa``: multi-hop question answering over a Wikipedia retriever.

Structure of AFM's MHQA prompt (``reference/upstream_afm.md`` §1.3) in afm's own words: six functions
(think, plan, wiki_search, observation, reflection, answer), a reflection followed by a new plan or search,
and several acceptable answers separated by ``|``.
"""

from __future__ import annotations

from afm.prompts._grammar import Grammar
from afm.prompts._text import format_rules, unwrap
from afm.prompts.registry import START
from afm.trajectory import render

VERSION = "2026-11-22.1"
GRAMMAR = Grammar(
    tools=("wiki_search",),
    tags=("think", "plan", "wiki_search", "observation", "reflection", "answer"),
    answer_format="<answer>short answer</answer>; several acceptable answers separated by |, most likely first",
    successors=(
        (START, ("plan", "wiki_search")),
        ("plan", ("wiki_search",)),
        ("wiki_search", ("wiki_search", "reflection", "answer")),
        ("reflection", ("plan", "wiki_search")),
    ),
    think_before=("plan", "wiki_search", "answer"),
)

EXAMPLE = render([
    ("think", "Two hops: find the town on the River Aster, then who founded it."),
    ("plan", "1. Find which town lies on the River Aster. 2. Find that town's founder."),
    ("think", "First hop: the river."),
    ("wiki_search", "River Aster"),
    ("observation", "Doc 1 (Title: River Aster)\nThe Aster is a river whose course runs through the town of "
                    "Velmora."),
    ("reflection", "First hop solved: the town is Velmora. Next I need its founder."),
    ("think", "Second hop: the founder of Velmora."),
    ("wiki_search", "Velmora founder"),
    ("observation", "Doc 1 (Title: History of Velmora)\nVelmora was founded by Ada Merrow in 1612."),
    ("think", "Velmora was founded by Ada Merrow, which answers the question."),
    ("answer", "Ada Merrow"),
])

TEXT = unwrap("""
You answer questions that may need several steps of lookup ("hops") in Wikipedia. You write your whole work in
  one response as a sequence of functions. A function is a tag pair around its content.

Functions
1. <think>...</think>: private reasoning. Write one before a plan, before each search and before the answer.
2. <plan>...</plan>: split the question into the facts you must find, one hop at a time.
3. <wiki_search>query</wiki_search>: retrieve Wikipedia passages for one query, for example
  <wiki_search>River Aster</wiki_search>. Ask about one entity or fact per query.
4. <observation>...</observation>: the retrieved passages, written by the environment after each search.
5. <reflection>...</reflection>: check what the passages settled and what is still missing, or notice that a
  search failed and needs other words.
6. <answer>...</answer>: the final answer. It ends your response.

Rules
- Search each hop separately, using what the previous hop found.
- If the passages do not contain what you need, search again with different words instead of guessing.
- A <reflection> must be followed by a new <plan> or another <wiki_search>.

Order of functions
Apart from <think>, each function may be followed only by:
""") + "\n" + GRAMMAR.order_lines() + "\n\n" + format_rules() + "\n\n" + unwrap("""
Answer tips
- Give only the answer, a name, number, date or short phrase, with no explanation.
- If several answers are equally acceptable (for example different names of the same thing), write them all
  inside one <answer>, separated by "|", most likely first: <answer>New York City | NYC</answer>.

Example (the question was "Who founded the town that the River Aster flows through?"; the <observation>
  blocks are what the environment inserts):
""") + "\n\n" + EXAMPLE

MHQA = GRAMMAR.prompt(
    "mhqa", VERSION, TEXT, EXAMPLE,
    "Multi-hop QA agent over the Wikipedia retriever (wiki_search), answers separated by | (AFM MHQA-Agent).")
