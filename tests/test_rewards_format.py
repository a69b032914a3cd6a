"""CoA format checks, the three composition modes and the DAPO overlong penalty, alone and through compute_score."""

from __future__ import annotations

import json

import pytest

from afm.rewards import apply_format, compute_score, format_problems, overlong_penalty, penalty_from_options
from afm.trajectory import render

GOOD = render([
    ("think", "compute 6*7"),
    ("code", "```py\nprint(6 * 7)\n```"),
    ("observation", "42"),
    ("reflection", "the tool agrees"),
    ("answer", "42"),
])


def codes(text: str, **kw) -> list[str]:
    return [p.code for p in format_problems(text, **kw)]


def test_well_formed_trajectory_has_no_problems():
    assert codes(GOOD) == []
    # A code body that is plain Python (no fence), and a ```python fence with a ```sh stdin block.
    plain = render([("code", "x = 6 * 7\nprint(x)"), ("observation", "42"), ("answer", "42")])
    fenced = render([("code", "```python\nprint(input())\n```\n```sh\n42\n```"), ("observation", "42"),
                     ("answer", "42")])
    assert codes(plain) == [] and codes(fenced) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>a</think>\n<code>please compute six times seven</code>\n\n<observation>\nerr\n</observation>\n\n"
     "<answer>42</answer>", ["bad_code_tag"]),  # prose is neither a fenced block nor Python
    ("<think>a</think>\n<think>b</think>", ["missing_answer"]),
    ("<answer>42</answer>\n<think>after</think>", ["last_tag_not_answer"]),
    ("<think></think>\n<answer>42</answer>", ["empty_tag"]),
    ("<think>a\n<answer>42</answer>", ["unclosed_tag"]),
    ("<think>a</think></plan>\n<answer>42</answer>", ["stray_closing_tag"]),
    ("<think>a <plan>b</plan></think>\n<answer>42</answer>", ["nested_tag"]),
    ("Sure!\n<answer>42</answer>", ["text_outside_tags"]),
    ("<answer>41</answer>\n<answer>42</answer>", ["multiple_answers"]),
    ("<web_search>q</web_search>\n<answer>42</answer>", ["missing_observation"]),
])
def test_format_problems(text, expected):
    found = codes(text)
    for code in expected:
        assert code in found, (code, found)


def test_allowed_tags_and_free_text_options():
    assert "disallowed_tag" in codes(GOOD, allowed_tags=["think", "answer", "observation", "reflection"])
    assert codes(GOOD, allowed_tags=["think", "code", "observation", "reflection", "answer"]) == []
    assert codes("Sure!\n<answer>42</answer>", allow_text_outside_tags=True) == []


@pytest.mark.parametrize(("score", "ok", "mode", "expected"), [
    (1.0, False, "score_only", 1.0),
    (1.0, False, "multiply", 0.0),
    (1.0, True, "multiply", 1.0),
    (1.0, False, "penalty", 0.5),
    (0.0, False, "penalty", -0.5),
    (0.0, True, "penalty", 0.0),
])
def test_apply_format_modes(score, ok, mode, expected):
    assert apply_format(score, ok, mode, penalty=0.5) == expected


def test_apply_format_rejects_unknown_mode():
    with pytest.raises(ValueError, match="format_mode"):
        apply_format(1.0, True, "sum")


BAD_FORMAT = "Let me answer directly.\n<answer>42</answer>"  # correct answer, text outside tags


@pytest.mark.parametrize(("options", "score"), [
    ({}, 1.0),
    ({"format_mode": "multiply"}, 0.0),
    ({"format_mode": "penalty", "format_penalty": 0.3}, 0.7),
    ({"format_mode": "multiply", "format_allow_text": True}, 1.0),
])
def test_compute_score_composes_format(options, score):
    result = compute_score("aime24", BAD_FORMAT, "42", None, **options)
    assert result["acc"] == 1.0  # the answer itself is right in every mode
    assert result["score"] == pytest.approx(score)
    ok = options.get("format_allow_text", False)
    assert result["format_ok"] == float(ok)
    assert result["format_problems"] == ("" if ok else "text_outside_tags")


def test_compute_score_format_tags_option():
    result = compute_score("aime24", GOOD, "42", format_tags="think,answer", format_mode="multiply")
    assert result["score"] == 0.0 and "disallowed_tag" in result["format_problems"]


@pytest.mark.parametrize(("length", "expected"), [
    (0, 0.0), (768, 0.0), (800, -0.125), (896, -0.5), (1024, -1.0), (5000, -1.0),
])
def test_overlong_penalty_is_linear_over_the_buffer(length, expected):
    assert overlong_penalty(length, max_len=1024, buffer=256) == pytest.approx(expected)


def test_overlong_penalty_factor_and_bad_config():
    assert overlong_penalty(1024, 1024, 256, factor=0.5) == -0.5
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(10, max_len=100, buffer=0)
    with pytest.raises(ValueError, match="max_resp_len"):
        penalty_from_options({"overlong_buffer_cfg": {"enable": True, "len": 10}}, {})


def test_overlong_penalty_in_compute_score():
    verl_style = {"max_resp_len": 1024, "overlong_buffer_cfg": {"enable": True, "len": 256, "penalty_factor": 1.0}}
    result = compute_score("aime24", GOOD, "42", {"response_length": 896}, **verl_style)
    assert (result["acc"], result["overlong_penalty"], result["score"]) == (1.0, -0.5, 0.5)
    flat = compute_score("aime24", GOOD, "42", None, max_resp_len=1024, overlong_buffer_len=256, response_length=1000)
    assert flat["overlong_penalty"] == pytest.approx(-232 / 256)
    disabled = compute_score("aime24", GOOD, "42", {"response_length": 1024}, max_resp_len=1024,
                             overlong_buffer_cfg={"enable": False, "len": 256})
    assert disabled["overlong_penalty"] == 0.0 and disabled["score"] == 1.0
    unknown_len = compute_score("aime24", GOOD, "42", None, **verl_style)
    assert unknown_len["overlong_penalty"] == 0.0
    assert "no response length" in json.loads(unknown_len["details"])["overlong_note"]


def test_bad_options_fail_before_scoring():
    calls = []
    from afm.rewards import register_scorer, unregister_scorer

    register_scorer("counting_ds", lambda s, gt, **kw: calls.append(1) or {"acc": 1}, kind="qa")
    try:
        with pytest.raises(ValueError, match="counting_ds: format_mode must be one of"):
            compute_score("counting_ds", GOOD, "42", format_mode="sum")
        with pytest.raises(ValueError, match=r"counting_ds: .*max_resp_len"):
            compute_score("counting_ds", GOOD, "42", overlong_buffer_cfg={"enable": True, "len": 8})
        assert calls == []  # nothing was scored (a judge call would have been spent)
    finally:
        unregister_scorer("counting_ds")
