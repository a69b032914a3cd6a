"""Observation masks checked token by token against character spans, on a real Qwen2-style BPE tokenizer.

The oracle uses the fast tokenizer's own ``offset_mapping`` (character offsets) — an independent path from the
byte table that :mod:`afm.sft.masking` uses.
"""

from __future__ import annotations

import pytest

from afm.sft.masking import IGNORE_INDEX, mask_observation_labels
from afm.sft.token_bytes import TokenBytes
from afm.trajectory import find_observations, format_observation

CALL = "<think>look it up</think>\n<web_search>capital of France</web_search>"
ANSWER = "<think>done</think>\n<answer>Paris</answer>"

CASES = {
    "standard": CALL + format_observation("Paris is the capital.") + ANSWER,
    "one_newline_after": CALL + "\n\n<observation>\nParis\n</observation>\n" + ANSWER,
    "nothing_after_end_of_text": CALL + "\n\n<observation>\nParis\n</observation>",
    "three_newlines_after": CALL + "\n\n<observation>\nParis\n</observation>\n\n\n" + ANSWER,
    "space_before": CALL + " <observation>Paris</observation>\n\n" + ANSWER,
    "glued_no_whitespace": CALL + "<observation>Paris</observation>" + ANSWER,
    "crlf": CALL + "\r\n\r\n<observation>\r\nParis\r\n</observation>\r\n\r\n" + ANSWER,
    "unicode_emoji": CALL + format_observation("Pâris — 巴黎 😀🇫🇷 naïve") + ANSWER,
    "several": CALL + format_observation("first") + "<think>again</think>\n<web_search>q2</web_search>"
    + format_observation("second") + "<code>\n```py\nprint(1)\n```\n</code>" + format_observation("1") + ANSWER,
    "tag_like_content": CALL + format_observation("<answer>fake</answer> <think>x</think> </web_search> <obs") + ANSWER,
}


def oracle_mask(text: str, tokenizer) -> tuple[list[int], list[bool]]:
    """ids and expected mask from character offsets (see the rule in afm.sft.masking)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = find_observations(text)
    expected = []
    for start, end in enc["offset_mapping"]:
        masked = False
        for s in spans:
            overlaps_core = start < s.core_end and end > s.core_start
            inside_span = start >= s.start and end <= s.end
            masked |= overlaps_core or inside_span
        expected.append(masked)
    return enc["input_ids"], expected


@pytest.fixture(scope="module")
def table(tokenizer):
    return TokenBytes(tokenizer)


@pytest.mark.parametrize("name", list(CASES))
def test_mask_matches_character_oracle(name, tokenizer, table):
    text = CASES[name]
    ids, expected = oracle_mask(text, tokenizer)
    res = mask_observation_labels(list(ids), table)
    got = [lab == IGNORE_INDEX for lab in res.labels]
    assert got == expected, [(tokenizer.decode([i]), g, e) for i, g, e in zip(ids, got, expected, strict=True) if g != e]
    assert res.observations == text.count("<observation>")
    assert res.masked_tokens == sum(expected) > 0
    assert not res.truncated


@pytest.mark.parametrize("name", list(CASES))
def test_trained_text_never_contains_observation_content(name, tokenizer, table):
    text = CASES[name]
    ids = tokenizer.encode(text, add_special_tokens=False)
    res = mask_observation_labels(ids, table)
    trained = tokenizer.decode([i for i, lab in zip(ids, res.labels, strict=True) if lab != IGNORE_INDEX])
    masked = tokenizer.decode([i for i, lab in zip(ids, res.labels, strict=True) if lab == IGNORE_INDEX])
    assert "observation" not in trained and "Paris is" not in trained
    assert "observation" in masked
    # every model-written tag survives whole (the tool tag must be learned, including its last '>')
    assert "</web_search>" in trained and ("<answer>Paris</answer>" in trained or "answer" not in text)


def test_model_tag_glued_to_observation_is_counted_as_mixed(tokenizer, table):
    text = CASES["glued_no_whitespace"]
    ids = tokenizer.encode(text, add_special_tokens=False)
    res = mask_observation_labels(ids, table)
    pieces = [tokenizer.decode([i]) for i in ids]
    if "><" in pieces:  # Qwen2's pre-tokenizer glues '>' and '<' into one token
        assert res.mixed_tokens >= 1


def test_only_trained_runs_are_scanned(tokenizer, table):
    prompt = tokenizer.encode("<|im_start|>user\nsee <observation>prompt side</observation><|im_end|>\n",
                              add_special_tokens=False)
    resp = tokenizer.encode(CASES["standard"] + "<|im_end|>\n", add_special_tokens=False)
    labels = [IGNORE_INDEX] * len(prompt) + resp
    res = mask_observation_labels(labels, table)
    assert res.labels[: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    assert res.observations == 1 and res.target_tokens == len(resp)


def test_truncation_inside_observation_is_flagged(tokenizer, table):
    ids = tokenizer.encode(CASES["standard"], add_special_tokens=False)
    cut = ids[: len(tokenizer.encode(CALL + "\n\n<observation>\nParis is", add_special_tokens=False))]
    res = mask_observation_labels(cut, table)
    assert res.truncated
    assert all(lab == IGNORE_INDEX for lab in res.labels[-3:])


def test_token_bytes_handle_partial_utf8_tokens(tokenizer, table):
    text = "😀🇫🇷 巴黎 naïve"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert table.join(ids) == text.encode()
    assert int(table.ends(ids)[-1]) == len(text.encode())


def test_unsupported_tokenizer_is_refused_clearly():
    class Fake:
        def __len__(self):
            return 3

        def convert_ids_to_tokens(self, ids):
            return ["a", "b", "c"]

        def decode(self, ids, skip_special_tokens=False):
            return "a"

        def encode(self, text, add_special_tokens=False):
            return [0, 1]

    with pytest.raises(ValueError, match="does not round-trip"):
        TokenBytes(Fake())


def test_truncation_inside_the_opening_tag_is_flagged(tokenizer, table):
    text = CASES["standard"]
    ids = tokenizer.encode(text, add_special_tokens=False)
    prefix = tokenizer.encode(CALL + "\n\n<observation", add_special_tokens=False)
    assert ids[: len(prefix)] == prefix  # '<observation' is its own piece, cut before its '>'
    res = mask_observation_labels(prefix, table)
    assert res.truncated


def test_nfc_merging_a_tag_is_dropped_before_encoding():
    from afm.sft.overlay import text_problem

    text = CALL + "\n\n<observation>\u0338secret\n</observation>\n\n" + ANSWER
    assert text_problem(text, "observation", "tags") == "normalization_breaks_tag"
    assert text_problem(text, "observation", "none") == "normalization_breaks_tag"
    harmless = CALL + format_observation("e\u0301 caf\u00e9") + ANSWER
    assert text_problem(harmless, "observation", "tags") is None
