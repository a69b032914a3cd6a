"""The teacher's roles: their prompt templates and strict parsers of their replies.

Every role answers in tagged fields, each exactly once, e.g. ``<think>...</think><plan>...</plan>``. Text
outside the fields is ignored; a missing, repeated or empty field, a value outside its vocabulary, or a field that
contains a Chain-of-Agents tag (which would break the trajectory built from it) is a :class:`ProtocolError`, whose
message is sent back to the role as the corrective instruction.

Roles (``afm.data.teacher.config.tool_agent_role`` names the tool agents):

- planner: ``think``, ``plan`` (numbered steps, shown to the student), ``steps`` (one ``tool: goal`` line per
  step, ``answer: ...`` as the last line when the evidence will suffice; read by the controller only).
- ``<tool>_agent``: ``think``, ``argument`` (the tool-call body: a query, ``url | url``, or a fenced ```py block).
- reflector: ``think``, ``rating`` (good | average | poor), ``reflection``.
- answerer: ``think``, ``answer``.
- verifier: ``think``, ``check`` (the verification), ``score`` (1-4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from afm.tools.code import PY_BLOCK
from afm.trajectory import DEFAULT_REGISTRY, TagKind

RATINGS = ("good", "average", "poor")
ANSWER_STEP = "answer"
_FIELD_RE_CACHE: dict[str, re.Pattern] = {}
_COA_TAG_RE = re.compile(r"</?(" + "|".join(sorted(map(re.escape, DEFAULT_REGISTRY.names()), key=len,
                                                        reverse=True)) + r")>")
_STEP_RE = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.+?)\s*$")
_SCORE_TAIL_RE = re.compile(r"\s*Score:\s*([1-4])\s*\.?\s*$", re.IGNORECASE)
_URL_RE = re.compile(r"^https?://\S+$")


class ProtocolError(ValueError):
    """A role's reply does not follow its format; the message says what to fix."""


@dataclass(frozen=True)
class Step:
    """One planned step: the tool to call (or ``answer``) and what the call should achieve."""

    tool: str
    goal: str


# ---------------------------------------------------------------------------------------------------- prompts

COMMON_RULES = """Reply ONLY with the fields below, each written exactly once as <field>...</field>, in this order.
Never write any of these tags inside a field: {coa_tags}."""

SYSTEMS: dict[str, str] = {
    "planner": """You are the PLANNER of a research team that answers a question with tools.
Available tools: {tool_descriptions}
Write a short numbered plan for the student-facing trajectory, and the same plan as machine-readable steps:
one line per step, "tool_name: what this call should find or compute", using only the available tools, and
"answer: why the evidence will then suffice" as the last line once the remaining work leads to the answer.
""" + COMMON_RULES + """
<think>your reasoning about how to solve the task</think>
<plan>1. ... 2. ...</plan>
<steps>
web_search: ...
answer: ...
</steps>""",
    "tool_agent": """You are the {tool} AGENT of a research team. You write the argument of ONE {tool} call that
achieves the current step's goal. Argument format: {argument_format}
""" + COMMON_RULES + """
<think>why this call, and what you expect from it</think>
<argument>the {tool} argument</argument>""",
    "reflector": """You are the REFLECTOR of a research team. Judge the progress so far on three aspects:
information conflict (do sources agree?), tool effectiveness (do calls bring useful evidence?) and trajectory
monitoring (is the work converging or drifting?). Rate the overall progress good, average or poor; poor means
the current plan should be replaced.
""" + COMMON_RULES + """
<think>your assessment</think>
<rating>good|average|poor</rating>
<reflection>one short paragraph rating each aspect with a reason</reflection>""",
    "answerer": """You are the ANSWERER of a research team. From the evidence gathered so far, propose the answer
to the question. Answer format: {answer_format}
""" + COMMON_RULES + """
<think>which evidence supports the answer</think>
<answer>the answer only</answer>""",
    "verifier": """You are the VERIFIER of a research team. Double-check the suggested answer against every
condition of the question and against the evidence. Score it: 4 = certainly correct and fully supported;
3 = very likely correct, minor doubt left; 2 = doubtful, weakly supported or partial; 1 = wrong or contradicted.
""" + COMMON_RULES + """
<think>how you check it</think>
<check>the verification, condition by condition</check>
<score>1, 2, 3 or 4</score>""",
}

USERS: dict[str, str] = {
    "planner": "Question: {question}\n\nWork so far:\n{history}\n\n{reason}Write the plan.",
    "tool_agent": "Question: {question}\n\nCurrent plan:\n{plan}\n\nWork so far:\n{history}\n\n"
                  "Current step ({tool}): {goal}\n\nWrite the {tool} call.",
    "reflector": "Question: {question}\n\nCurrent plan:\n{plan}\n\nWork so far:\n{history}\n\nReflect on the progress.",
    "answerer": "Question: {question}\n\nWork so far:\n{history}\n\nPropose the answer.",
    "verifier": "Question: {question}\n\nWork so far:\n{history}\n\nSuggested answer: {answer}\n\n"
                "Double-check the suggested answer.",
}

TOOL_DESCRIPTIONS = {
    "web_search": "web_search (one free-text web query; returns result snippets with URLs)",
    "crawl_page": "crawl_page (URLs separated by ' | '; returns a summary of each page for the task)",
    "wiki_search": "wiki_search (one query over Wikipedia passages)",
    "code": "code (a Python program in a ```py fenced block, optionally a ```sh block with stdin; returns the "
            "printed output; use it for every calculation)",
}
ARGUMENT_FORMATS = {
    "web_search": "one search query on a single line.",
    "crawl_page": "one or more full http(s) URLs separated by ' | ', nothing else.",
    "wiki_search": "one search query on a single line.",
    "code": "a fenced block that starts with ```py and ends with ``` (optionally followed by a ```sh block "
            "holding stdin); print every value you need.",
}
FIELDS: dict[str, tuple[str, ...]] = {
    "planner": ("think", "plan", "steps"),
    "tool_agent": ("think", "argument"),
    "reflector": ("think", "rating", "reflection"),
    "answerer": ("think", "answer"),
    "verifier": ("think", "check", "score"),
}


class _SafeDict(dict):
    def __missing__(self, key: str) -> str:  # unknown placeholders stay visible instead of raising
        return "{" + key + "}"


def fill(template: str, values: dict[str, Any]) -> str:
    """``template.format_map(values)``; unknown ``{names}`` are left as they are."""
    return template.format_map(_SafeDict(values))


def role_kind(role: str) -> str:
    """``web_search_agent`` -> ``tool_agent``; other roles are their own kind."""
    return "tool_agent" if role.endswith("_agent") else role


# ---------------------------------------------------------------------------------------------------- parsing

def _field_re(name: str) -> re.Pattern:
    if name not in _FIELD_RE_CACHE:
        _FIELD_RE_CACHE[name] = re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL)
    return _FIELD_RE_CACHE[name]


def extract_fields(text: str, names: tuple[str, ...]) -> dict[str, str]:
    """Each named field's stripped body; raise :class:`ProtocolError` unless each occurs exactly once, non-empty."""
    out: dict[str, str] = {}
    problems = []
    for name in names:
        found = _field_re(name).findall(text)
        if not found:
            problems.append(f"<{name}>...</{name}> is missing")
        elif len(found) > 1:
            problems.append(f"<{name}> appears {len(found)} times (write it once)")
        elif not found[0].strip():
            problems.append(f"<{name}> is empty")
        else:
            out[name] = found[0].strip()
    if problems:
        raise ProtocolError("; ".join(problems))
    return out


def _no_coa_tags(fields: dict[str, str], skip: tuple[str, ...] = ()) -> None:
    for name, body in fields.items():
        if name in skip:
            continue
        m = _COA_TAG_RE.search(body)
        if m:
            raise ProtocolError(f"<{name}> contains the tag {m.group(0)}, which is reserved; rephrase without it")


def parse_planner(text: str, tools: tuple[str, ...]) -> dict[str, Any]:
    """``{think, plan, steps: [Step]}``; every step names an available tool or ``answer`` (last only)."""
    f = extract_fields(text, FIELDS["planner"])
    _no_coa_tags(f)
    steps: list[Step] = []
    for line in f["steps"].splitlines():
        if not line.strip():
            continue
        m = _STEP_RE.match(line)
        if not m:
            raise ProtocolError(f"cannot read the step line {line.strip()!r}; write 'tool_name: goal'")
        tool, goal = m.group(1).lower(), m.group(2)
        if tool != ANSWER_STEP and tool not in tools:
            raise ProtocolError(f"step {line.strip()!r} names {tool!r}; available: {', '.join(tools)} or answer")
        if steps and steps[-1].tool == ANSWER_STEP:
            raise ProtocolError("'answer' must be the last step")
        steps.append(Step(tool, goal))
    if not steps:
        raise ProtocolError("<steps> holds no step")
    return {"think": f["think"], "plan": f["plan"], "steps": steps}


def normalize_argument(tool: str, argument: str) -> str:
    """The tool-call body in the form the student prompts teach; raise :class:`ProtocolError` when unusable."""
    if tool == "code":
        if f"</{tool}>" in argument:
            raise ProtocolError("the code contains </code>; avoid that string")
        if not PY_BLOCK.search(argument):
            raise ProtocolError("the code argument must be a fenced block starting with ```py and ending with ```")
        return "\n" + argument.strip("\n") + "\n"
    m = _COA_TAG_RE.search(argument)
    if m:
        raise ProtocolError(f"<argument> contains the tag {m.group(0)}, which is reserved")
    if tool == "crawl_page":
        urls = [u.strip() for u in argument.split("|")]
        bad = [u for u in urls if not _URL_RE.match(u)]
        if bad:
            raise ProtocolError(f"crawl_page takes full http(s) URLs separated by ' | '; not a URL: {bad[0]!r}")
        return " | ".join(urls)
    if tool in ("web_search", "wiki_search") and "\n" in argument:
        raise ProtocolError(f"{tool} takes one query on a single line")
    return argument


def parse_tool_agent(text: str, tool: str) -> dict[str, Any]:
    """``{think, argument}`` with the argument normalised for ``tool``."""
    f = extract_fields(text, FIELDS["tool_agent"])
    _no_coa_tags(f, skip=("argument",))
    return {"think": f["think"], "argument": normalize_argument(tool, f["argument"])}


def parse_reflector(text: str) -> dict[str, Any]:
    """``{think, rating, reflection}``; rating in good | average | poor."""
    f = extract_fields(text, FIELDS["reflector"])
    _no_coa_tags(f)
    rating = f["rating"].strip().strip(".").lower()
    if rating not in RATINGS:
        raise ProtocolError(f"<rating> must be good, average or poor, not {f['rating']!r}")
    return {"think": f["think"], "rating": rating, "reflection": f["reflection"]}


def parse_answerer(text: str, require_py: bool = False) -> dict[str, Any]:
    """``{think, answer}``; with ``require_py`` the answer must be a fenced ```py program."""
    f = extract_fields(text, FIELDS["answerer"])
    _no_coa_tags(f)
    answer = f["answer"]
    if require_py:
        if not PY_BLOCK.search(answer):
            raise ProtocolError("the answer must be one complete program in a ```py fenced block")
        answer = "\n" + answer.strip("\n") + "\n"
    return {"think": f["think"], "answer": answer}


def parse_verifier(text: str) -> dict[str, Any]:
    """``{think, check, score}``; score 1-4. The check's own trailing ``Score: N`` must agree."""
    f = extract_fields(text, FIELDS["verifier"])
    _no_coa_tags(f)
    m = re.fullmatch(r"\s*([1-4])\s*(?:/\s*4)?\s*\.?\s*", f["score"])
    if not m:
        raise ProtocolError(f"<score> must be one of 1, 2, 3, 4, not {f['score']!r}")
    score = int(m.group(1))
    check = f["check"]
    tail = _SCORE_TAIL_RE.search(check)
    if tail:
        if int(tail.group(1)) != score:
            raise ProtocolError(f"<check> ends with Score: {tail.group(1)} but <score> is {score}")
        check = check[: tail.start()].rstrip()
    if not check:
        raise ProtocolError("<check> holds no verification")
    return {"think": f["think"], "check": check, "score": score}


def format_instructions(role: str) -> str:
    """The corrective reminder sent after an off-protocol reply."""
    return "Reply again with exactly these fields, each once: " + ", ".join(
        f"<{n}>...</{n}>" for n in FIELDS[role_kind(role)]) + "."


def coa_tag_names() -> str:
    """The reserved tag list shown in the role prompts."""
    return ", ".join(f"<{t.name}>" for t in DEFAULT_REGISTRY if t.kind != TagKind.OBSERVATION) + ", <observation>"
