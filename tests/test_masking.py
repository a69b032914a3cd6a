"""Observation masks checked token by token against character spans, on two real Qwen2-style BPE tokenizers.

``tiny``: the demo tokenizer trained locally (vocab 2048); ``qwen2.5``: Qwen2.5's own 151k vocabulary, built
offline from the dashscope wheel (afm.offline.qwen_tokenizer). The oracle uses the fast tokenizer's own
``offset_mapping`` (character offsets) — an independent path from the byte table that :mod:`afm.sft.masking` uses.
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


@pytest.fixture(scope="module", params=["tiny", "qwen2.5"])
def tokenizer(request, tokenizer):
    """conftest's tiny tokenizer, then Qwen2.5's vocabulary: every test below runs with both."""
    return tokenizer if request.param == "tiny" else request.getfixturevalue("qwen_tokenizer")


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
    # every model-written tag survives whole (the tool tag must be learned, including its last '>') unless the
    # tokenizer glues its '>' to the observation's '<' (Qwen's '><'): that token overlaps the core, so it is masked
    glued = "><" in [tokenizer.decode([i]) for i in ids]
    assert ("</web_search" if glued else "</web_search>") in trained
    assert "<answer>Paris</answer>" in trained or "answer" not in text


def test_model_tag_glued_to_observation_is_counted_as_mixed(tokenizer, table):
    text = CASES["glued_no_whitespace"]
    ids = tokenizer.encode(text, add_special_tokens=False)
    res = mask_observation_labels(ids, table)
    pieces = [tokenizer.decode([i]) for i in ids]
    # Qwen2's pre-tokenizer glues '>' and '<' into one token: at both edges of the observation each such token
    # carries a model-written '>' or '<' and a piece of the observation's tag
    assert res.mixed_tokens == pieces.count("><")


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


def test_text_problem_pairs_tags_like_find_observations():
    """The lean scan in text_problem gives the verdicts that find_observations' pairing defines."""
    import random

    from afm.sft.overlay import _nfc_merges_tag, text_problem

    def by_spans(text):
        if _nfc_merges_tag(text, "observation"):
            return "normalization_breaks_tag"
        spans = find_observations(text)
        if any(not s.closed for s in spans):
            return "unclosed_observation"
        return "stray_closing_observation" if text.count("</observation>") > len(spans) else None

    rng = random.Random(0)
    pieces = ["<observation>", "</observation>", "x", "\n\n", "<obs", "</observation", "<answer>", " ", "\u0338",
              "\u0301", "é"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert text_problem(text, "observation", "observation") == by_spans(text), text


def test_token_bytes_fast_table_is_exact(qwen_tokenizer):
    """The translate-based table equals the per-character byte-level mapping for all 151,665 ids."""
    from afm.sft.token_bytes import _UNICODE_TO_BYTE

    table = TokenBytes(qwen_tokenizer)
    tokens = qwen_tokenizer.convert_ids_to_tokens(list(range(len(qwen_tokenizer))))
    added = {i: t.content for i, t in qwen_tokenizer.added_tokens_decoder.items()}
    want = [added[i].encode() if i in added else bytes(_UNICODE_TO_BYTE[c] for c in t) for i, t in enumerate(tokens)]
    assert table.table == want
    ids = qwen_tokenizer.encode(CASES["unicode_emoji"], add_special_tokens=False)
    blob, ends = table.gather(ids)
    assert blob == table.join(ids) == CASES["unicode_emoji"].encode()
    assert ends.tolist() == table.ends(ids)


# ------------------------------------------------------------------------------------------------------------
# runs cut by cutoff_len at the start of an observation (Qwen2.5's vocabulary: '<' is a token of its own there)


def _cut_after(tokenizer, text: str, prefix: str) -> list[int]:
    """The ids of ``text`` up to the token that ends exactly where ``prefix`` ends."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    k = next(i for i, (_, end) in enumerate(enc["offset_mapping"]) if end == len(prefix))
    return enc["input_ids"][: k + 1]


def test_cut_after_a_lone_lt_of_the_opening_tag_is_truncated(qwen_tokenizer):
    tok, table = qwen_tokenizer, TokenBytes(qwen_tokenizer)
    text = CALL + "\n\n<observation>\nParis is the capital.\n</observation>\n\n" + ANSWER
    ids = _cut_after(tok, text, CALL + "\n\n<")
    assert tok.decode(ids[-2:]) == ">\n\n<"  # '>' carries the padding, '<' is alone
    for source in (None, [text]):
        res = mask_observation_labels(list(ids), table, source=source)
        assert res.truncated, source  # the sample is dropped: it would teach '<' after a tool call
        assert res.labels[-1] == IGNORE_INDEX and res.labels[-2] == ids[-2]  # '<' masked, '>\n\n' is the model's
    glued = CALL + "<observation>Paris</observation>" + ANSWER  # '><' holds the tool tag's end and the cut tag
    res = mask_observation_labels(_cut_after(tok, glued, CALL + "<"), table, source=[glued])
    assert res.truncated and res.labels[-1] == IGNORE_INDEX


def test_cut_after_a_lt_that_starts_another_tag_is_kept_when_the_text_says_so(qwen_tokenizer):
    tok, table = qwen_tokenizer, TokenBytes(qwen_tokenizer)
    text = CASES["standard"]  # ... </observation>\n\n<think>done</think>\n<answer>Paris</answer>
    ids = _cut_after(tok, text, text[: text.index("<answer>") + 1])
    assert tok.decode(ids[-1:]) == "<"
    res = mask_observation_labels(list(ids), table, source=["question?", text])
    assert not res.truncated and res.labels[-1] == ids[-1]  # the model does write '<answer>' there
    assert mask_observation_labels(list(ids), table).truncated  # without the text: assume the worst


@pytest.mark.parametrize("pad", [" \n\n", "\n \n", "\t"])
def test_cut_in_the_padding_before_an_observation_masks_the_padding(qwen_tokenizer, pad):
    tok, table = qwen_tokenizer, TokenBytes(qwen_tokenizer)
    text = CALL + pad + "<observation>\nParis\n</observation>\n\n" + ANSWER
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    # the last token lying wholly in the padding (the cut removed the tag after it)
    k = max(i for i, (a, b) in enumerate(enc["offset_mapping"]) if a >= len(CALL) and b <= len(CALL) + len(pad))
    ids = enc["input_ids"][: k + 1]
    res = mask_observation_labels(list(ids), table, source=[text])
    assert not res.truncated
    trained = tok.decode([i for i, lab in zip(ids, res.labels, strict=True) if lab != IGNORE_INDEX])
    assert trained.endswith("</web_search>") or trained.endswith("</web_search>\n"), repr(trained)
    # exactly the tokens that lie wholly in the padding are masked (a token holding the call's '>' is trained)
    masked = [i for i, lab in enumerate(res.labels) if lab == IGNORE_INDEX]
    assert masked == [i for i, (a, _) in enumerate(enc["offset_mapping"][: k + 1]) if a >= len(CALL)]
    assert res.masked_tokens == len(masked)
    # a row's natural end ("<|im_end|>\n": padding-like whitespace) is left alone
    full = tok.encode(text + "<|im_end|>\n", add_special_tokens=False)
    assert mask_observation_labels(list(full), table, source=[text]).labels[-1] == full[-1]


def test_several_trained_runs_are_masked_each(tokenizer, table):
    """Multi-turn rows: each assistant turn is its own run of trained labels."""
    resp = tokenizer.encode(CASES["standard"] + "<|im_end|>\n", add_special_tokens=False)
    labels = [IGNORE_INDEX] * 3 + resp + [IGNORE_INDEX] * 2 + resp
    res = mask_observation_labels(labels, table)
    one = mask_observation_labels(list(resp), table).labels
    assert res.labels == [IGNORE_INDEX] * 3 + one + [IGNORE_INDEX] * 2 + one
    assert res.observations == 2 and res.target_tokens == 2 * len(resp) and not res.truncated


def test_rows_with_nothing_trained_are_left_alone(table):
    for labels in ([], [IGNORE_INDEX] * 5):
        res = mask_observation_labels(list(labels), table)
        assert res.labels == labels and res.target_tokens == res.masked_tokens == 0 and not res.truncated
