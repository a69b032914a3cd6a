"""afm.trajectory: parse, render, validate, spans, tool calls, answers."""

from __future__ import annotations

import pytest

from afm.trajectory import (
    DEFAULT_REGISTRY,
    Tag,
    TagKind,
    TagRegistry,
    find_observations,
    format_observation,
    last_answer,
    last_tool_call,
    observation_spans,
    pairing_problems,
    parse,
    render,
    stop_strings,
    tool_calls,
    validate,
)

TRAJ = render([
    ("think", "need numbers"),
    ("plan", "1. compute"),
    ("code", "\n```py\nprint(6*7)\n```\n"),
    ("observation", "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"),
    ("think", "got it"),
    ("answer", "42"),
])


def test_render_uses_environment_padding_and_round_trips():
    assert "</code>\n\n<observation>\n[EXECUTED]" in TRAJ
    assert "[STDOUT:END]\n</observation>\n\n<think>" in TRAJ
    got = [(s.tag, s.body) for s in parse(TRAJ) if s.tag]
    assert got[0] == ("think", "need numbers")
    assert got[3] == ("observation", "\n[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]\n")
    assert render(parse(TRAJ)) == TRAJ


def test_segments_tile_the_text():
    text = "  <think>a</think> junk <answer>b</answer>\n"
    segs = parse(text)
    assert "".join(text[s.start:s.end] for s in segs) == text
    assert [s.tag for s in segs] == [None, "think", None, "answer", None]
    assert segs[1].body_start == text.index("a") and segs[1].body == "a"


def test_valid_trajectory_has_no_problems():
    assert validate(TRAJ) == []
    assert validate(TRAJ, allowed_tags=["think", "plan", "code", "observation", "answer"]) == []


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("<think>a</think><answer>b", "unclosed_tag"),
        ("<think>a</think></plan><answer>b</answer>", "stray_closing_tag"),
        ("<think>a <plan>b</plan></think><answer>c</answer>", "nested_tag"),
        ("<think> </think><answer>c</answer>", "empty_tag"),
        ("<think>a</think>", "missing_answer"),
        ("<answer>a</answer><think>b</think>", "last_tag_not_answer"),
        ("<answer>a</answer><answer>b</answer>", "multiple_answers"),
        ("<think>a</think> stray words <answer>b</answer>", "text_outside_tags"),
        ("<web_search>q</web_search><answer>b</answer>", "missing_observation"),
        ("<think>a</think>\n\n<observation>\nx\n</observation>\n\n<answer>b</answer>", "orphan_observation"),
    ],
)
def test_validate_reports_each_problem(text, code):
    codes = [p.code for p in validate(text)]
    assert code in codes, codes


def test_disallowed_tag_and_unknown_allowed_tag():
    text = "<think>a</think><crawl_page>u</crawl_page>\n\n<observation>\nx\n</observation>\n\n<answer>b</answer>"
    assert [p.code for p in validate(text, allowed_tags=["think", "web_search", "observation", "answer"])] == [
        "disallowed_tag"
    ]
    with pytest.raises(KeyError, match="unregistered"):
        validate(text, allowed_tags=["think", "nope"])


def test_observation_and_code_bodies_are_opaque():
    text = render([
        ("think", "x"),
        ("code", '\n```py\nprint("<answer>no</answer>")\n```\n'),
        ("observation", "<html><think>not a tag for us</think><answer>fake</answer>"),
        ("answer", "real"),
    ])
    assert validate(text) == []
    assert last_answer(text) == "real"


def test_tag_like_text_that_is_not_registered_is_plain_text():
    text = "<think>if a<b and <div> then</think><answer>x</answer>"
    assert validate(text) == []


def test_last_answer_and_tool_calls():
    assert last_answer(TRAJ) == "42"
    assert last_answer("<answer>a</answer> <answer> b </answer>") == "b"
    assert last_answer("<answer>unclosed") is None
    calls = tool_calls("<web_search>q1</web_search>\n\n<observation>\nr\n</observation>\n\n<crawl_page>u1 | u2</crawl_page>")
    assert [(c.name, c.argument) for c in calls] == [("web_search", "q1"), ("crawl_page", "u1 | u2")]
    last = last_tool_call("<think>t</think><web_search>q</web_search>")
    assert last is not None and last.name == "web_search" and last.argument == "q"
    assert last_tool_call("<web_search>q</web_search> then words") is None
    assert last_tool_call("<web_search>q") is None


def test_last_tool_call_after_a_block_the_model_left_open():
    # the SFT'd Gemma 3 270M closed its <plan> with a tag of its own making, then called the tool and stopped on
    # </wiki_search>: the call ends the text as the original's XML tool parser reads it (the strict scan ran the
    # unclosed <plan> over it and found no call)
    text = ("<think>Town 5033: I need its founding year.</think>\n<plan>1. Find when Town 5033 was founded. 2. Answer."
            "</subtracting>\n<think>Look up the town.</think>\n<wiki_search> Town 5033</wiki_search>")
    last = last_tool_call(text)
    assert last is not None and (last.name, last.argument, last.closed) == ("wiki_search", " Town 5033", True)
    assert text[last.start:last.end] == "<wiki_search> Town 5033</wiki_search>" and last.end == len(text)
    assert last_tool_call("<think>open <web_search>q</web_search>\n") is not None
    # still none: words after the call, a closing tag with no opener, an empty tail
    assert last_tool_call("<plan>open <web_search>q</web_search> then words") is None
    assert last_tool_call("<plan>open and a stray </web_search>") is None


# the SFT'd Gemma's multihop trajectory (issue 24): <plan> closed by a made-up tag, so the strict scan runs the plan to
# the end of the text and the answer is never seen
LEFT_OPEN = ("<think>Citizen 9404: I need the birthplace.</think>\n<plan>1. Find the birthplace. 2. Answer.</subtract>\n"
             "<wiki_search> Citizen 9404</wiki_search>\n\n<observation>\nCitizen 9404 was born in Town 4584.\n"
             "</observation>\n\n<think>Check it.</think>\n<answer> 1541</answer> <answer> 199404</answer>")


def test_last_answer_after_a_block_the_model_left_open():
    assert last_answer(LEFT_OPEN) == "199404"  # the last <answer>...</answer>, as the original's rewards read it
    assert last_answer("<answer>a</answer><plan>open <answer> b </answer> words") == "b"
    assert last_answer("<answer>a</answer><plan>open, no answer after it") == "a"
    assert last_answer("<plan>open <answer>unclosed") is None


def test_stop_strings():
    assert stop_strings(["web_search", "crawl_page"]) == ["</web_search>", "</crawl_page>", "</answer>"]
    with pytest.raises(ValueError, match="not a tool"):
        stop_strings(["think"])


def test_registry_is_extensible_and_rejects_duplicates():
    reg = TagRegistry(list(DEFAULT_REGISTRY))
    reg.register(Tag("search", TagKind.TOOL))
    assert "search" in reg and "search" not in DEFAULT_REGISTRY
    assert [c.name for c in tool_calls("<search>q</search>", reg)] == ["search"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Tag("search", TagKind.TOOL))
    with pytest.raises(ValueError, match="invalid tag name"):
        reg.register(Tag("bad tag", TagKind.TOOL))
    with pytest.raises(KeyError, match="known tags"):
        reg.get("nope")


# ---- observation spans ---------------------------------------------------------------------------------


def test_span_covers_padding_whitespace():
    text = "<code>c</code>\n\n<observation>\nout\n</observation>\n\n<answer>a</answer>"
    (start, end), = observation_spans(text)
    assert text[start:end] == "\n\n<observation>\nout\n</observation>\n\n"
    (s,) = find_observations(text)
    assert text[s.core_start:s.core_end] == "<observation>\nout\n</observation>" and s.closed


@pytest.mark.parametrize(
    ("after", "expected_tail"),
    [("\n<think>", "</observation>\n"), ("", "</observation>"), ("\n\n\n<think>", "</observation>\n\n\n"),
     (" <think>", "</observation> "), ("\r\n\r\n<think>", "</observation>\r\n\r\n")],
)
def test_span_end_whitespace_variants(after, expected_tail):
    text = "<web_search>q</web_search> <observation>r</observation>" + after
    (start, end), = observation_spans(text)
    assert text[start:end] == " <observation>r</observation>" + expected_tail[len("</observation>"):]


def test_several_observations_unicode_and_tag_like_content():
    obs1 = format_observation("résumé 中文 😀")
    obs2 = format_observation("<observation> inside? <answer>x</answer>")
    text = "<web_search>a</web_search>" + obs1 + "<web_search>b</web_search>" + obs2 + "<answer>z</answer>"
    spans = observation_spans(text)
    assert [text[s:e] for s, e in spans] == [obs1, obs2]


def test_unclosed_observation_is_reported_not_hidden():
    text = "<web_search>a</web_search>\n\n<observation>\npartial"
    (s,) = find_observations(text)
    assert not s.closed and s.end == len(text)
    assert [p.code for p in pairing_problems(text)] == ["unclosed_tag"]


def test_spans_on_bytes_match_spans_on_text():
    text = "x😀<code>c</code>\n\n<observation>\né😀\n</observation>\n\n<answer>a</answer>"
    (sc,) = find_observations(text)
    (sb,) = find_observations(text.encode())
    assert text.encode()[sb.start:sb.end].decode() == text[sc.start:sc.end]


def test_custom_observation_tag():
    text = "<search>q</search>\n<information>doc</information>\n<answer>a</answer>"
    (start, end), = observation_spans(text, tag="information")
    assert text[start:end] == "\n<information>doc</information>\n"
    with pytest.raises(ValueError, match="bare name"):
        observation_spans(text, tag="<information>")
