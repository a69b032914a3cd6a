"""One Gemma checkpoint on three engines: vLLM (its CPU build here), llama.cpp's llama-server and afm's ``hf`` backend.

For ``afm model prepare gemma3-270m`` (or ``--model``: an HF folder, with ``--gguf`` for llama.cpp), each engine answers
the same ``--requests`` chat prompts (the demo world's questions) with greedy decoding and ``--max-tokens`` new tokens,
first one request at a time, then ``--concurrency`` at once, all through afm's own clients (``OpenAIBackend`` with
``--engine auto`` for the servers, ``HFBackend`` in this process). Reported per engine and concurrency: generated tokens
per second of wall time (prompt processing included), p50 seconds per request, and whether every id came back
``sampled``. The servers are started by ``evaluation/serve_model.sh`` (vLLM: its CPU settings, ``--dtype``; llama.cpp:
the GGUF, ``--slots`` slots on ``--threads`` threads) and stopped with SIGTERM. The weights differ where the engines
differ: vLLM and ``hf`` load the HF checkpoint (``--dtype`` for vLLM, float32 for ``hf``), llama.cpp the GGUF
(Q4_K_M for the prepared Gemma). An engine that is not installed is skipped, saying why.

    .venv/bin/python benchmarks/bench_engines.py [--engines vllm,llamacpp,hf] [--requests 16] [--max-tokens 64]
        [--concurrency 16] [--dtype bfloat16] [--json benchmarks/out/engines.json]

``time per DAPO step with each rollout engine`` is ``ROLLOUT_ENGINE=hf|vllm .venv-rl/bin/python
benchmarks/bench_gemma_real.py --parts dapo`` (verl's real trainer; the vLLM rollout is verl's own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from afm.agent import SamplingParams, TokenizerAdapter  # noqa: E402
from afm.common.procs import free_port  # noqa: E402
from benchmarks.bench_gemma_real import stop_pid  # noqa: E402


def serve(engine: str, model: Path, gguf: Path | None, args: argparse.Namespace, work: Path) -> tuple[int, str]:
    """Start ``engine`` through serve_model.sh; ``(pid, base_url)``."""
    port = free_port()
    env = {**os.environ, "ENGINE": engine, "PORT": str(port), "SERVED_NAME": f"bench-{engine}",
           "MAX_MODEL_LEN": str(args.ctx), "LOG": str(work / f"{engine}.log"), "READY_TIMEOUT": "900"}
    if engine == "vllm":
        env.update(MODEL_PATH=str(model), DTYPE=args.dtype, KV_CACHE_GB=str(args.kv_cache_gb), DEVICE="cpu")
    else:
        env.update(MODEL_PATH=str(gguf), TOKENIZER=str(model), PARALLEL=str(args.slots), THREADS=str(args.threads))
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(REPO / "evaluation/serve_model.sh")], env=env, capture_output=True, text=True,
                          timeout=1000)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} did not start: {proc.stderr[-2000:]}")
    print(f"{engine}: ready in {time.monotonic() - t0:.1f} s", flush=True)
    return int(re.search(r"pid (\d+)", proc.stdout).group(1)), f"http://127.0.0.1:{port}/v1"


async def measure(backend: Any, prompts: list[list[int]], sampling: SamplingParams, concurrency: int) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    tokens, sources = 0, set()

    async def one(p: list[int]) -> None:
        nonlocal tokens
        async with sem:
            t = time.perf_counter()
            gen = await backend.generate(p, sampling)
            lat.append(time.perf_counter() - t)
            tokens += len(gen.ids)
            sources.add(gen.ids_source)

    t0 = time.perf_counter()
    await asyncio.gather(*[one(p) for p in prompts])
    wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "tokens": tokens, "wall_s": round(wall, 2),
            "tok_per_s": round(tokens / wall, 1), "p50_s": round(statistics.median(lat), 3),
            "ids": sorted(sources)}


def run_engine(engine: str, model: Path, gguf: Path | None, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from afm.demo_content.web import DEMO_QUESTIONS

    tok = TokenizerAdapter.from_pretrained(str(model))
    questions = [q for q, *_ in DEMO_QUESTIONS][: args.requests]
    questions += questions * (args.requests // max(1, len(questions)))
    prompts = [tok.chat_prompt_ids([{"role": "user", "content": q}]) for q in questions[: args.requests]]
    sampling = SamplingParams(max_new_tokens=args.max_tokens, temperature=0.0)
    pid = None
    if engine == "hf":
        from afm.agent.hf_backend import HFBackend

        backend = HFBackend.from_pretrained(str(model), max_batch=args.concurrency)
    else:
        from afm.agent.openai_backend import OpenAIBackend

        pid, base = serve(engine, model, gguf, args, work)
        backend = OpenAIBackend(base, f"bench-{engine}", tok, concurrency=args.concurrency, retries=1)
    async def runs() -> list[dict[str, Any]]:
        # one event loop for the whole engine: the HTTP client's connections belong to the loop that opened them
        try:
            await measure(backend, prompts[:2], sampling, 1)  # warm-up
            return [await measure(backend, prompts, sampling, c) for c in (1, args.concurrency)]
        finally:
            if hasattr(backend, "aclose"):
                await backend.aclose()

    try:
        out = asyncio.run(runs())
    finally:
        if pid is not None:
            stop_pid(pid)
    for row in out:
        print(f"{engine:9s} c={row['concurrency']:<3d} {row['tok_per_s']:8.1f} tok/s  p50 {row['p50_s']:7.3f} s  "
              f"{row['tokens']} tokens in {row['wall_s']} s  ids {','.join(row['ids'])}", flush=True)
    return {"engine": engine, "runs": out}


def missing(engine: str) -> str | None:
    if engine == "vllm":
        for py in (REPO / ".venv-vllm/bin/python", REPO / ".venv-rl/bin/python"):
            if py.is_file() and subprocess.run([str(py), "-c", "import vllm"], capture_output=True).returncode == 0:
                return None
        return "vLLM is not installed (AFM_ENGINES=vllm bash scripts/install.sh)"
    if engine == "llamacpp":
        out = subprocess.run(["bash", str(REPO / "scripts/build_llamacpp.sh")], env={**os.environ, "DRY_RUN": "1"},
                             capture_output=True, text=True)
        binary = Path(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else None
        return None if binary and binary.is_file() else "llama-server is not built (AFM_ENGINES=llamacpp)"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="vllm,llamacpp,hf")
    ap.add_argument("--model", default=None, help="HF folder (default: afm model prepare gemma3-270m's)")
    ap.add_argument("--gguf", default=None, help="GGUF for llama.cpp (default: the prepared one)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--dtype", default="bfloat16", help="vLLM's weights dtype")
    ap.add_argument("--kv-cache-gb", type=int, default=2)
    ap.add_argument("--slots", type=int, default=16, help="llama-server's slots")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server's threads")
    ap.add_argument("--json", default=str(REPO / "benchmarks/out/engines.json"))
    args = ap.parse_args()
    if args.model:
        model, gguf = Path(args.model), Path(args.gguf) if args.gguf else None
    else:
        from afm.model import prepare

        prepared = prepare("gemma3-270m")
        model, gguf = prepared.hf_dir, Path(args.gguf) if args.gguf else prepared.gguf_path
    work = REPO / "benchmarks/out/engines"
    work.mkdir(parents=True, exist_ok=True)
    print(f"{model}; {os.cpu_count()} cores; {args.requests} requests x {args.max_tokens} tokens, greedy; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for engine in args.engines.split(","):
        why = missing(engine)
        if why:
            print(f"{engine}: skipped: {why}", flush=True)
            rows.append({"engine": engine, "skipped": why})
            continue
        rows.append(run_engine(engine, model, gguf, args, work))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
