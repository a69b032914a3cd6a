"""QA scoring: normalisation, EM/F1, the multi-answer rule, ground-truth shapes and the verl call signature."""

from __future__ import annotations

import json

import numpy as np
import pytest

from afm.rewards import RESULT_KEYS, compute_score, exact_match, f1_score, normalize_answer, qa_match
from afm.rewards.ground_truth import normalize_ground_truth
from afm.rewards.qa import resolve_mode


def traj(answer: str) -> str:
    return f"<think>look it up</think>\n<wiki_search>capital of France</wiki_search>\n\n<observation>\nParis is the capital.\n</observation>\n\n<answer>{answer}</answer>"


@pytest.mark.parametrize(("text", "expected"), [
    ("The Eiffel Tower", "eiffel tower"),  # article and case
    ("  Paris,   France. ", "paris france"),  # punctuation and spaces
    ("an apple a day", "apple day"),  # every article goes
    ("theatre", "theatre"),  # "the" inside a word stays
    ("U.S.A.", "usa"),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_and_f1_values():
    assert exact_match("the Paris", ["paris", "Lutetia"])
    assert not exact_match("Paris France", ["paris"])
    assert f1_score("Paris", ["paris"]) == 1.0
    # tokens {big, cat} vs {big, dog}: precision 1/2, recall 1/2
    assert f1_score("the big cat", ["big dog"]) == pytest.approx(0.5)
    # best over golds: "new york city" vs "new york" -> P 2/3, R 1 -> 0.8
    assert f1_score("New York City", ["Boston", "new york"]) == pytest.approx(0.8)
    assert f1_score("", ["x"]) == 0.0


@pytest.mark.parametrize(("pred", "mode", "em"), [
    ("Paris | London", "train", True),  # every part is a gold answer
    ("Paris | London", "eval", True),
    ("Paris | Rome", "train", False),  # one wrong part fails train
    ("Paris | Rome", "eval", True),  # eval checks only the first part
    ("Rome | Paris", "eval", False),
    ("Paris ||  ", "train", True),  # empty parts are dropped
    (" | ", "train", False),  # nothing left: not vacuously correct
    ("| Paris", "eval", False),  # eval's first part is empty
    ("the london", "train", True),
])
def test_multi_answer_rule(pred, mode, em):
    assert qa_match(pred, ["paris", "London"], mode)[0] is em


def test_qa_mode_resolution():
    assert resolve_mode(None, {}) == "train"
    assert resolve_mode(None, {"split": "test"}) == "eval"
    assert resolve_mode("train", {"split": "test"}) == "train"
    with pytest.raises(ValueError, match="qa_mode"):
        resolve_mode("exam", {})


@pytest.mark.parametrize("ground_truth", [
    {"target": ["Paris", "City of Light"], "question": "Capital of France?"},
    json.dumps({"target": ["Paris"], "question": "Capital of France?"}),  # the original's RL parquet form
    ["Paris"],
    np.array(["Paris", "Lutetia"]),  # how verl's parquet loader hands lists over
    {"target": np.array(["Paris"])},
    "Paris",
    {"answer": "Paris"},
])
def test_ground_truth_shapes_score_the_same(ground_truth):
    result = compute_score("hotpotqa", traj("paris"), ground_truth)
    assert (result["score"], result["acc"], result["method"]) == (1.0, 1.0, "em")
    assert json.loads(result["details"])["f1"] == 1.0


def test_verl_style_call_with_extra_kwargs():
    # verl calls with keywords and may add its own (reward_router_address); extra_info.split selects eval.
    result = compute_score(data_source="nq", solution_str=traj("Paris | Rome"),
                           ground_truth={"target": ["Paris"]}, extra_info={"split": "test", "index": 7},
                           reward_router_address=None)
    assert result["acc"] == 1.0 and json.loads(result["details"])["qa_mode"] == "eval"
    train = compute_score("nq", traj("Paris | Rome"), {"target": ["Paris"]}, {"split": "train"})
    assert train["acc"] == 0.0
    assert json.loads(train["details"])["f1"] == pytest.approx(0.5)
    assert set(result) == set(train) == set(RESULT_KEYS)


def test_answer_after_a_block_the_model_left_open_is_scored():
    # a real model (the SFT'd Gemma 3 270M, issue 24) closed its <plan> with a made-up tag; the answer still counts
    text = ("<think>Town 8898: the founding year.</think>\n<plan>1. Find it. 2. Answer.</subtracting>\n"
            "<wiki_search> Town 8898</wiki_search>\n\n<observation>\nTown 8898 was founded in 1541.\n</observation>"
            "\n\n<answer> 1541</answer>")
    result = compute_score("hotpotqa", text, ["1541"])
    assert result["acc"] == 1.0 and result["pred"] == "1541"


def test_wrong_answer_and_missing_answer():
    wrong = compute_score("triviaqa", traj("Lyon"), ["Paris"])
    assert (wrong["score"], wrong["acc"], wrong["pred"]) == (0.0, 0.0, "Lyon")
    none = compute_score("triviaqa", "<think>I give up</think>", ["Paris"])
    assert (none["acc"], none["method"], none["pred"]) == (0.0, "no_answer", "")
    assert "missing_answer" in none["format_problems"]


@pytest.mark.parametrize(("ground_truth", "message"), [
    (None, "ground_truth is None"),
    ('{"target": ["Paris"', "not valid JSON"),
    ("[Paris]", "not valid JSON"),
    (object(), "has type object"),
    ({1, 2}, "has type set"),
    (b"Paris", "bytes"),
    ({"question": "Capital?"}, "no gold answer.*found keys \\['question'\\]"),
    ([], "no gold answer"),
    (["  "], "no gold answer"),
    ({"target": [{"a": 1}]}, "contains a dict"),
    (True, "has type bool"),
])
def test_bad_ground_truth_names_the_data_source(ground_truth, message):
    with pytest.raises(ValueError, match=f"^musique: .*{message}"):
        compute_score("musique", traj("Paris"), ground_truth)


def test_math_strings_are_not_misread_as_json():
    assert normalize_ground_truth("[0,1)", "MATH500", "math").targets == ("[0,1)",)
    assert normalize_ground_truth("[0, 1]", "MATH500", "math").targets == ("[0, 1]",)  # an interval
    assert normalize_ground_truth('["1/2", "0.5"]', "MATH500", "math").targets == ("1/2", "0.5")
    assert normalize_ground_truth(27, "amc23", "math").targets == ("27",)
    gt = normalize_ground_truth('{"stdin": ["1"], "expected_output": ["2"], "question_id": "abc"}', "lcb_v5", "code")
    assert gt.targets == () and gt.data["question_id"] == "abc"


# Golds of the original's hle_test.json (rows 164, 19, 314) contain "|" that is part of the answer.
HLE_PIPE_GOLDS = ["f bc=X|V|U|T|L", "$\\frac{1}{2\\pi}\\int_{|z|=1}h(x)z_iz_jdz$", "\\omega_s = \\omega_0 * \\sqrt{|\\ell| + 1}"]


@pytest.mark.parametrize("gold", HLE_PIPE_GOLDS)
@pytest.mark.parametrize("split", ["test", "train"])
def test_gold_with_a_pipe_scores_itself_under_the_em_fallback(gold, split, monkeypatch):
    monkeypatch.delenv("GRM_BASE_URL", raising=False)  # no judge: the EM/F1 fallback grades
    result = compute_score("hle", traj(gold), {"target": [gold]}, {"split": split})
    assert (result["method"], result["acc"]) == ("em_f1_fallback", 1.0), result
    assert json.loads(result["details"])["f1"] == 1.0
    # The web format has no multi-answer rule: the first "part" of the gold is not the answer.
    first = gold.split("|")[0]
    assert compute_score("hle", traj(first), {"target": [gold]}, {"split": split})["acc"] == 0.0


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_mhqa_pipe_rule_still_accepts_a_gold_that_contains_a_pipe(mode):
    # MHQA's format defines "|" between answers; a prediction equal to the whole gold is still that gold.
    assert qa_match("f bc=X|V|U|T|L", ["f bc=X|V|U|T|L"], mode) == (True, 1.0)
    assert compute_score("nq", traj("AC|DC"), ["AC|DC"], {"split": "test"})["acc"] == 1.0
    assert qa_match("Paris | Rome", ["paris", "London"], "eval")[0] is True  # the rule itself is unchanged
    assert qa_match("Paris | Rome", ["paris"], mode, multi_answer=False)[0] is False
