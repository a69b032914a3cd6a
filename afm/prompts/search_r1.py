"""``search_r1``: the legacy Search-R1 format, ``<think>``, ``<search>``, ``<information>``, ``<answer>``.

These tags are not in :data:`afm.trajectory.DEFAULT_REGISTRY` (registering ``<search>`` globally would turn
the word into a tag in every other prompt's trajectories), so the prompt carries its own registry,
:data:`SEARCH_R1_TAGS`. Pass ``prompt.tag_registry`` to the ``afm.trajectory`` functions and wrap tool output
with ``format_observation(output, tag=prompt.observation_tag)``.
"""

from __future__ import annotations

from afm.prompts._grammar import Grammar
from afm.prompts._text import format_rules, unwrap
from afm.trajectory import DEFAULT_REGISTRY, Tag, TagKind, TagRegistry, render

VERSION = "2026-11-22.1"
SEARCH_R1_TAGS = TagRegistry([
    DEFAULT_REGISTRY.get("think"),
    DEFAULT_REGISTRY.get("answer"),
    Tag("search", TagKind.TOOL, "retrieval; body is the query"),
    Tag("information", TagKind.OBSERVATION, "retrieved passages inserted by the environment", opaque=True),
])
GRAMMAR = Grammar(
    tools=("search",),
    tags=("think", "search", "information", "answer"),
    answer_format="<answer>short answer</answer>",
    think_before=("search", "answer"),
    observation_tag="information",
    registry=SEARCH_R1_TAGS,
)

EXAMPLE = render([
    ("think", "I do not know which river flows through Velmora, so I search."),
    ("search", "Velmora river"),
    ("information", "Doc 1 (Title: Velmora)\nVelmora is a town on the River Aster."),
    ("think", "The passage names the River Aster."),
    ("answer", "River Aster"),
], registry=SEARCH_R1_TAGS)

TEXT = unwrap("""
Answer the question below. Each tag pair named here is a function. Reason inside <think>...</think> first,
  and again every time new information arrives. Whenever you lack some knowledge, search for it by writing
  <search>query</search>; the best matching passages then come back between <information> and
  </information>. You may search as many times as you need. Once you know the answer, write it inside
  <answer>...</answer>, with no explanation.
""") + "\n\n" + format_rules("information") + "\n\n" + unwrap("""
Example (the question was "Which river flows through Velmora?"; the <information> block is what the
  environment inserts):
""") + "\n\n" + EXAMPLE

SEARCH_R1 = GRAMMAR.prompt(
    "search_r1", VERSION, TEXT, EXAMPLE,
    "Legacy Search-R1 format: think, search, information (environment), answer.")
