"""afm.prompts: built-in keys, versions, stop strings, messages, the format self-check and user prompt files."""

from __future__ import annotations

import doctest
import re
import textwrap

import pytest

import afm.prompts
from afm.prompts import (
    START,
    Prompt,
    build_messages,
    check_prompt,
    get_prompt,
    list_prompts,
    load_prompt_file,
    register_prompt,
    save_prompt_file,
    sequence_problems,
    stop_strings_for,
    unregister_prompt,
)
from afm.tools.code import parse_code_body
from afm.trajectory import (
    DEFAULT_REGISTRY,
    TagKind,
    last_answer,
    observation_spans,
    render,
    tool_calls,
    validate,
)

# key -> (version, fingerprint). A text change must bump the version: update both here deliberately.
PINNED = {
    "web_agent": ("2026-11-22.1", "f1af68beb7f0599d"),
    "afm_all_tools": ("2026-11-22.1", "a076664123d520ce"),
    "mhqa": ("2026-11-22.1", "2f14a8fcc603b73e"),
    "code_agent": ("2026-11-22.1", "4dc65b94f1327f7d"),
    "math_agent": ("2026-11-22.1", "e4a182c5f6f5af9a"),
    "search_r1": ("2026-11-22.1", "bb0274cdf50621c5"),
}

STOPS = {
    "web_agent": ["</web_search>", "</crawl_page>", "</answer>"],
    "afm_all_tools": ["</web_search>", "</crawl_page>", "</code>", "</answer>"],
    "mhqa": ["</wiki_search>", "</answer>"],
    "code_agent": ["</code>", "</answer>"],
    "math_agent": ["</code>", "</answer>"],
    "search_r1": ["</search>", "</answer>"],
}

USER_TEXT = "You answer with <think>, then <web_search> if needed (results come in <observation>), then <answer>."


@pytest.fixture
def cleanup():
    """Keys registered by a test; removed afterwards so the registry holds only the built-ins."""
    keys: list[str] = []
    yield keys
    for key in keys:
        if key in list_prompts():
            unregister_prompt(key)


def test_every_builtin_key_loads_with_a_dated_version():
    assert set(PINNED) <= set(list_prompts())
    assert list_prompts() == sorted(list_prompts())
    for key in PINNED:
        p = get_prompt(key)
        assert p.key == key
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}\.\d+", p.version), p.version
        assert p.ref == f"{key}@{p.version}"
        assert p.description and p.answer_format
        assert check_prompt(p) == []


@pytest.mark.parametrize("key", sorted(PINNED))
def test_text_changes_bump_the_version(key):
    p = get_prompt(key)
    version, fingerprint = PINNED[key]
    assert (p.version, p.fingerprint) == (version, fingerprint), (
        f"{key} changed: bump its VERSION and update PINNED to ({p.version!r}, {p.fingerprint!r})")


@pytest.mark.parametrize("key", sorted(PINNED))
def test_tools_are_registered_tool_tags(key):
    p = get_prompt(key)
    assert p.tools
    for name in p.tools:
        assert p.tag_registry.get(name).kind == TagKind.TOOL
        assert name in p.tags
    for name in p.tags:
        assert name in p.tag_registry
    assert p.tag_registry.get(p.observation_tag).kind == TagKind.OBSERVATION


@pytest.mark.parametrize(("key", "stops"), sorted(STOPS.items()))
def test_stop_strings(key, stops):
    assert stop_strings_for(key) == stops
    assert stop_strings_for(get_prompt(key)) == stops


@pytest.mark.parametrize(("key", "tags"), [
    ("web_agent", {"think", "plan", "web_search", "crawl_page", "observation", "reflection", "suggested_answer",
                   "double_check", "answer"}),
    ("afm_all_tools", {"think", "plan", "web_search", "crawl_page", "code", "observation", "reflection",
                       "suggested_answer", "double_check", "answer"}),
    ("mhqa", {"think", "plan", "wiki_search", "observation", "reflection", "answer"}),
    ("code_agent", {"think", "plan", "code", "observation", "reflection", "answer"}),
    ("math_agent", {"think", "plan", "code", "observation", "reflection", "answer"}),
    ("search_r1", {"think", "search", "information", "answer"}),
])
def test_each_prompt_allows_exactly_its_tags(key, tags):
    assert set(get_prompt(key).tags) == tags


@pytest.mark.parametrize("key", sorted(PINNED))
def test_texts_state_the_format_rules(key):
    p = get_prompt(key)
    text = p.text
    assert "reserved" in text
    assert f"You never write <{p.observation_tag}> yourself" in text
    assert "<answer></answer>" in text
    assert "written by the environment" in text or "environment inserts" in text


def test_prompt_specific_rules_are_stated():
    web = get_prompt("web_agent").text
    for phrase in ("good, average or poor", "Information conflict", "Tool effectiveness", "Trajectory monitoring",
                   "Score: N", "A score of 3 or 4", "A score of 1 or 2", 'separated by "|"', "concise and definite",
                   "- After <suggested_answer>: <double_check>."):
        assert phrase in web, phrase
    assert "You must use <code> for every calculation" in get_prompt("afm_all_tools").text
    assert 'separated by "|"' in get_prompt("mhqa").text
    for key in ("code_agent", "math_agent"):
        assert "plan, (think, code, observation, reflection) repeated N times, think, answer" in get_prompt(key).text
    assert "```sh" in get_prompt("code_agent").text
    assert "\\boxed{" in get_prompt("math_agent").text


@pytest.mark.parametrize("key", sorted(PINNED))
def test_examples_validate_under_the_prompts_own_rules(key):
    p = get_prompt(key)
    assert p.examples
    for example in p.examples:
        assert example in p.text
        assert validate(example, p.tags, registry=p.tag_registry) == []
        assert sequence_problems(p, example) == []
        assert last_answer(example, p.tag_registry)
        calls = tool_calls(example, p.tag_registry)
        assert calls and {c.name for c in calls} <= set(p.tools)
        assert len(observation_spans(example, tag=p.observation_tag)) == len(calls)
        for call in calls:
            if call.name == "code":
                code, _stdin, problem = parse_code_body(call.argument)
                assert problem is None and code


def test_example_answers_have_the_announced_shape():
    assert last_answer(get_prompt("math_agent").examples[0]).startswith("\\boxed{")
    code_answer = last_answer(get_prompt("code_agent").examples[0])
    assert code_answer.startswith("```py\n") and code_answer.endswith("\n```")
    _code, stdin, problem = parse_code_body(get_prompt("code_agent").examples[0].split("<code>")[1])
    assert problem is None and stdin == "3\n4 5 6\n"


def test_build_messages_user_style_embeds_the_prompt():
    p = get_prompt("web_agent")
    msgs = build_messages(p, "  Which river flows through Velmora?\n")
    assert msgs == [{"role": "user",
                     "content": p.text.strip() + "\n\nQuestion: Which river flows through Velmora?"}]
    assert build_messages("web_agent", "Which river flows through Velmora?", style="user") == msgs


def test_build_messages_system_style():
    p = get_prompt("mhqa")
    msgs = build_messages(p, "Who founded Velmora?", style="system")
    assert msgs == [{"role": "system", "content": p.text.strip()},
                    {"role": "user", "content": "Who founded Velmora?"}]


def test_code_agent_extra_variants():
    plain = build_messages("code_agent", "Add two numbers.")[0]["content"]
    assert plain.endswith("Question: Add two numbers.\n\n" + afm.prompts.code_agent.ANSWER_NOTE)
    stdin = build_messages("code_agent", "Add two numbers.", extra={"stdin": True})[0]["content"]
    assert "standard input (STDIN)" in stdin and stdin.endswith(afm.prompts.code_agent.ANSWER_NOTE)
    starter = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        "
    msgs = build_messages("code_agent", "Add two numbers.", style="system", extra={"starter_code": starter})
    user = msgs[1]["content"]
    assert user.startswith("Add two numbers.\n\nStarter code:")
    assert "```py\nclass Solution:\n    def add(self, a: int, b: int) -> int:\n```" in user
    assert "standard input" not in user
    with pytest.raises(ValueError, match="not both"):
        build_messages("code_agent", "q", extra={"stdin": True, "starter_code": starter})
    with pytest.raises(ValueError, match="true or false"):
        build_messages("code_agent", "q", extra={"stdin": "yes"})


def test_build_messages_rejects_bad_input():
    with pytest.raises(ValueError, match="style"):
        build_messages("web_agent", "q", style="assistant")
    with pytest.raises(ValueError, match="empty"):
        build_messages("web_agent", "  ")
    with pytest.raises(ValueError, match=r"extra keys \['stdin'\].*accepted: none"):
        build_messages("web_agent", "q", extra={"stdin": True})


def test_unknown_key_lists_known_keys():
    with pytest.raises(KeyError) as info:
        get_prompt("web_agnet")
    message = str(info.value)
    assert "web_agnet" in message
    for key in PINNED:
        assert key in message


def test_pinned_version_lookup():
    p = get_prompt("mhqa")
    assert get_prompt(f"mhqa@{p.version}") is p
    with pytest.raises(KeyError, match=r"not 1999-01-01\.1"):
        get_prompt("mhqa@1999-01-01.1")


def test_import_path_lookup():
    assert get_prompt("afm.prompts.web_agent:WEB_AGENT") is get_prompt("web_agent")
    with pytest.raises(TypeError, match="not a Prompt"):
        get_prompt("afm.prompts.web_agent:GRAMMAR")


def test_search_r1_keeps_its_tags_out_of_the_default_registry():
    p = get_prompt("search_r1")
    assert "search" not in DEFAULT_REGISTRY and "information" not in DEFAULT_REGISTRY
    assert p.observation_tag == "information"
    assert p.tag_registry is afm.prompts.SEARCH_R1_TAGS


def _user_prompt(**overrides) -> Prompt:
    example = render([("think", "Search first."), ("web_search", "Velmora river"),
                      ("observation", "Velmora is on the River Aster."), ("think", "Found it."),
                      ("answer", "River Aster")])
    fields = {"key": "my_web", "version": "2026-11-22.1", "text": USER_TEXT + "\n\nExample:\n\n" + example,
              "tools": ["web_search"], "answer_format": "<answer>short</answer>", "description": "test prompt",
              "examples": [example], "successors": {START: ["web_search"], "web_search": ["answer"]},
              "think_before": ["web_search", "answer"]}
    fields.update(overrides)
    return Prompt(**fields)


def test_prompt_normalises_lists_and_mappings():
    p = _user_prompt()
    assert p.tools == ("web_search",)
    assert p.tags == ("think", "web_search", "observation", "answer")
    assert p.successors == ((START, ("web_search",)), ("web_search", ("answer",)))
    with pytest.raises(TypeError, match="list of strings"):
        _user_prompt(tools="web_search")


@pytest.mark.parametrize("suffix", [".yaml", ".md"])
def test_user_prompt_file_round_trips(tmp_path, cleanup, suffix):
    p = _user_prompt()
    path = save_prompt_file(p, tmp_path / f"mine{suffix}")
    loaded = load_prompt_file(path)
    assert loaded == p
    assert "my_web" not in list_prompts()
    cleanup.append("my_web")
    assert load_prompt_file(path, register=True) is get_prompt("my_web")
    assert get_prompt(str(path)) == p  # a path works as a key too
    assert stop_strings_for("my_web") == ["</web_search>", "</answer>"]
    assert build_messages("my_web", "Q?")[0]["content"] == p.text + "\n\nQuestion: Q?"


def test_hand_written_markdown_prompt(tmp_path, cleanup):
    path = tmp_path / "short.md"
    path.write_text(textwrap.dedent("""\
        ---
        key: short_wiki
        version: 2026-11-22.1
        tools: [wiki_search]
        description: a short MHQA prompt
        ---

        Use <think>, <wiki_search> (results arrive in <observation>) and <answer>.
        """))
    p = load_prompt_file(path, register=True)
    cleanup.append("short_wiki")
    assert p.version == "2026-11-22.1"  # a YAML date comes back as the string it was written as
    assert p.text == "Use <think>, <wiki_search> (results arrive in <observation>) and <answer>."
    assert stop_strings_for("short_wiki") == ["</wiki_search>", "</answer>"]


def test_prompt_files_are_parsed_strictly(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("key: x\nversion: '1'\ntext: 'Use <think> and <answer>.'\ntemperature: 0.7\n")
    with pytest.raises(ValueError, match=r"unknown fields \['temperature'\]"):
        load_prompt_file(bad)
    bad.write_text("key: x\ntext: 'Use <think> and <answer>.'\n")
    with pytest.raises(ValueError, match="missing required fields"):
        load_prompt_file(bad)
    bad.write_text("key: x\nversion: '1'\ntools: [web_search]\ntext: 'Use <think> and <answer>.'\n")
    with pytest.raises(ValueError, match="never names <web_search>"):
        load_prompt_file(bad)
    (tmp_path / "nofront.md").write_text("Use <think> and <answer>.\n")
    with pytest.raises(ValueError, match="front matter"):
        load_prompt_file(tmp_path / "nofront.md")
    with pytest.raises(ValueError, match="custom tag registry"):
        save_prompt_file(get_prompt("search_r1"), tmp_path / "sr1.yaml")


def test_self_check_catches_broken_prompts():
    broken_example = "<think>go</think>\n<web_search>q</web_search>\n<answer>a</answer>"  # no observation
    problems = check_prompt(_user_prompt(examples=[broken_example]))
    assert any("does not appear verbatim" in p for p in problems)
    assert any("missing_observation" in p for p in problems)
    problems = check_prompt(_user_prompt(tools=["think"], tags=["think", "observation", "answer"]))
    assert any("not a tool" in p for p in problems)
    problems = check_prompt(_user_prompt(tools=["bing"], tags=["think", "bing", "observation", "answer"]))
    assert any("'bing' is not registered" in p for p in problems)
    assert any("names <code>" in p for p in check_prompt(_user_prompt(text=USER_TEXT + " Or <code>.")))
    assert any("version" in p for p in check_prompt(_user_prompt(version="v 1")))
    with pytest.raises(ValueError, match="is invalid"):
        register_prompt(_user_prompt(key="bad key"))


def test_sequence_problems_enforce_order_and_think():
    p = get_prompt("web_agent")
    skip_check = render([("think", "t"), ("plan", "p"), ("think", "t"), ("suggested_answer", "x"),
                         ("think", "t"), ("answer", "x")])
    (problem,) = sequence_problems(p, skip_check)
    assert problem.code == "bad_successor" and problem.tag == "answer"
    assert "after <suggested_answer>" in problem.message and "<double_check>" in problem.message
    no_think = render([("think", "t"), ("plan", "p"), ("web_search", "q"), ("observation", "o")])
    (problem,) = sequence_problems(p, no_think)
    assert problem.code == "missing_think" and problem.tag == "web_search"
    code = get_prompt("code_agent")
    no_plan = render([("think", "t"), ("code", "```py\nprint(1)\n```"), ("observation", "1"),
                      ("reflection", "ok"), ("think", "t"), ("answer", "```py\nprint(1)\n```")])
    (problem,) = sequence_problems(code, no_plan)
    assert problem.code == "bad_successor" and "at the start" in problem.message


def test_registering_twice(cleanup):
    cleanup.append("my_web")
    p = register_prompt(_user_prompt())
    assert register_prompt(_user_prompt()) is p  # an identical prompt again: a no-op
    newer = _user_prompt(version="2026-11-22.2", text=USER_TEXT + " Be brief.\n\n" + p.examples[0])
    with pytest.raises(ValueError, match=r"already registered at version 2026-11-22\.1"):
        register_prompt(newer)
    assert register_prompt(newer, overwrite=True) is get_prompt("my_web")
    assert get_prompt("my_web").version == "2026-11-22.2"
    assert unregister_prompt("my_web") is newer
    with pytest.raises(KeyError, match="known prompts"):
        unregister_prompt("my_web")


def test_module_doctest():
    result = doctest.testmod(afm.prompts)
    assert result.attempted >= 3 and result.failed == 0
