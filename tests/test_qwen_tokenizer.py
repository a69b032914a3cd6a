"""The Qwen2.5-compatible tokenizer built offline from dashscope's BPE ranks (afm.offline.qwen_tokenizer).

Checked three ways: ids known from Qwen2.5's own tokenizer, tiktoken's BPE run directly on the ranks (an
independent implementation: our merges are recovered, tiktoken needs none), and decode(encode(x)) == NFC(x).
"""

from __future__ import annotations

import json
import unicodedata

import pytest

from afm.offline.qwen_tokenizer import ADDED_TOKENS, N_RANKS, build_qwen25_tokenizer, load_ranks, ranks_path

STRINGS = [
    "Hello, world!",
    "The year 2024 had 366 days; 3.14159 ≈ π, 1,000,000.",
    "你好，世界！这是一个测试。东京都の天気は晴れです 서울의 날씨",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\n\nclass A:\n\tpass\r\n",
    "    \t\t  \n\n\n   x  \n \n",
    "<think>plan</think>\n<web_search>capital of France</web_search>\n\n<observation>\nParis\n</observation>\n\n",
    "</crawl_page>\n\n<observation>[EXECUTED] Code exited with status 0.\n</observation><answer>42</answer>",
    "émoji 😀🇫🇷👩‍💻 naïve café e\u0301 A\u030a",
    "I'm sure they'll say 'WE'RE DONE' isn't it",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>\n",
]


def test_known_qwen25_ids(qwen_tokenizer):
    tok = qwen_tokenizer
    assert len(tok) == N_RANKS + len(ADDED_TOKENS) == 151665
    assert tok.encode("Hello, world!", add_special_tokens=False) == [9707, 11, 1879, 0]
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "<|file_sep|>"]) \
        == [151643, 151644, 151645, 151657, 151664]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    # the pieces the masking edge cases hinge on: '<' alone before 'observation', '>' glued to the newlines
    assert tok.encode("</crawl_page>\n\n<observation>\n", add_special_tokens=False)[-4:] == [1339, 27, 77960, 397]
    assert tok.encode("\n\n", add_special_tokens=False) == [271]
    assert tok.encode("52", add_special_tokens=False) == [20, 17]  # digits one by one (Qwen2's pre-tokenizer)


def test_merges_begin_like_qwen2(qwen_tokenizer_dir):
    merges = json.loads((qwen_tokenizer_dir / "tokenizer.json").read_text())["model"]["merges"]
    assert len(merges) == N_RANKS - 256  # one per multi-byte token
    # the first lines of Qwen2's merges.txt
    assert [" ".join(m) for m in merges[:10]] == ["Ġ Ġ", "ĠĠ ĠĠ", "i n", "Ġ t", "ĠĠĠĠ ĠĠĠĠ", "e r", "ĠĠ Ġ",
                                                 "o n", "Ġ a", "r e"]


def test_same_ids_as_tiktoken_and_round_trip(qwen_tokenizer):
    tiktoken = pytest.importorskip("tiktoken")  # a dependency of dashscope, listed in the dev extra
    from afm.offline.qwen_tokenizer import QWEN2_PATTERN

    enc = tiktoken.Encoding("qwen-ranks", pat_str=QWEN2_PATTERN, mergeable_ranks=load_ranks(ranks_path()),
                            special_tokens={c: N_RANKS + i for i, (c, _) in enumerate(ADDED_TOKENS)})
    for text in STRINGS:
        ids = qwen_tokenizer.encode(text, add_special_tokens=False)
        nfc = unicodedata.normalize("NFC", text)  # Qwen2's normaliser; tiktoken has none
        assert ids == enc.encode(nfc, allowed_special="all"), text
        assert qwen_tokenizer.decode(ids) == nfc


def test_chat_template_is_qwen25(qwen_tokenizer):
    msgs = [{"role": "user", "content": "hi"}]
    assert qwen_tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    sys_msgs = [{"role": "system", "content": "S"}, *msgs, {"role": "assistant", "content": "ok"}]
    assert qwen_tokenizer.apply_chat_template(sys_msgs, tokenize=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
    )


def test_llamafactory_loads_it_by_path(qwen_tokenizer_dir):
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments, ModelArguments
    from llamafactory.model import load_tokenizer

    tok = load_tokenizer(ModelArguments(model_name_or_path=str(qwen_tokenizer_dir)))["tokenizer"]
    template = get_template_and_fix_tokenizer(tok, DataArguments(template="qwen"))
    prompt, answer = template.encode_oneturn(tok, [{"role": "user", "content": "hi"},
                                                   {"role": "assistant", "content": "Hello, world!"}])
    assert answer == [9707, 11, 1879, 0, 151645, 198]  # content, <|im_end|>, "\n"
    assert prompt[:1] == [151644] and prompt[-3:] == [151644, 77091, 198]  # <|im_start|>assistant\n


def test_built_once_then_reused_and_bad_ranks_are_refused(qwen_tokenizer_dir, tmp_path):
    stamp = qwen_tokenizer_dir / "afm_qwen_tokenizer.stamp"
    before = stamp.stat().st_mtime_ns
    assert build_qwen25_tokenizer(qwen_tokenizer_dir) == qwen_tokenizer_dir
    assert stamp.stat().st_mtime_ns == before
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("IQ== 0\nnot-base64!! 1\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken:2: not a tiktoken"):
        build_qwen25_tokenizer(tmp_path / "out", ranks_file=bad)
    short = tmp_path / "short.tiktoken"
    short.write_text("IQ== 0\nIg== 1\n")
    with pytest.raises(ValueError, match="2 ranks, expected Qwen's 151643"):
        build_qwen25_tokenizer(tmp_path / "out", ranks_file=short)
    assert not (tmp_path / "out").exists()



def test_a_folder_another_process_built_meanwhile_is_kept(qwen_tokenizer_dir, tmp_path, monkeypatch):
    """Two pytest-xdist workers of a fresh checkout may build the shared cache folder at once: the one that finishes
    second finds the folder there when it renames its own, keeps the other's and returns it."""
    import shutil
    from pathlib import Path

    from afm.offline import qwen_tokenizer

    out = tmp_path / "shared" / "tokenizer"
    real_replace = qwen_tokenizer.os.replace
    raced = []

    def replace(src, dst):
        if Path(dst) == out and not raced:  # the other worker renames its folder first
            shutil.copytree(qwen_tokenizer_dir, out)
            raced.append(True)
        return real_replace(src, dst)

    monkeypatch.setattr(qwen_tokenizer.os, "replace", replace)
    assert build_qwen25_tokenizer(out) == out
    assert raced and sorted(p.name for p in out.parent.iterdir()) == ["tokenizer"]  # its own copy removed
    assert (out / "afm_qwen_tokenizer.stamp").read_text() == (qwen_tokenizer_dir / "afm_qwen_tokenizer.stamp").read_text()
