"""Which engine generates the quickstart's evaluations and RL-selection samples, and how it is served.

The tiny student runs in the quickstart's own process (``hf``). A pretrained student from ``afm model prepare``'s
catalog is served by llama.cpp when ``llama-server`` is built (``AFM_ENGINES=llamacpp bash scripts/install.sh``):
each policy is exported to an f16 GGUF (``afm model export``, the prepared GGUF giving metadata and vocabulary) and
served by ``evaluation/serve_model.sh`` with :data:`~afm.quickstart.profile.EVAL_SLOTS` slots. On Gemma 3 270M, 40
world questions took 126 s there against 302 s on ``hf``, with the same answers (RESULTS.md, 2026-11-29 fourteenth
session): llama.cpp keeps each conversation's cache between turns where ``hf`` reads the whole context again. Other
HF folders are evaluated on ``hf`` (export needs a base GGUF of the same model).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from afm.quickstart.profile import EVAL_SLOT_TOKENS, EVAL_SLOTS

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EvalEngine:
    """The engine of the quickstart's generations: ``hf`` (in process) or ``llamacpp`` (a served f16 export)."""

    name: str
    why: str
    server: Path | None = None  # llama-server
    base_gguf: Path | None = None  # metadata and vocabulary of each export


def llama_server() -> Path:
    """``$LLAMA_SERVER``, else where ``scripts/build_llamacpp.sh`` builds (or built) it."""
    if os.environ.get("LLAMA_SERVER"):
        return Path(os.environ["LLAMA_SERVER"])
    out = subprocess.run(["bash", str(REPO / "scripts" / "build_llamacpp.sh")], env={**os.environ, "DRY_RUN": "1"},
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.strip().splitlines()
    return Path(lines[-1]) if out.returncode == 0 and lines else Path("llama-server-not-found")


def choose(student: str) -> EvalEngine:
    """The engine for ``student`` (a profile's: "" is the tiny one) on this machine, and why."""
    if not student:
        return EvalEngine("hf", "the tiny student runs in the quickstart's process")
    from afm.model.catalog import MODELS

    if student not in MODELS:
        return EvalEngine("hf", f"{student} is a folder: llama.cpp serves a GGUF export, made here only for the "
                                f"models afm model prepare knows ({', '.join(sorted(MODELS))})")
    binary = llama_server()
    if not os.access(binary, os.X_OK):
        return EvalEngine("hf", f"llama-server is not built ({binary}): AFM_ENGINES=llamacpp bash scripts/install.sh "
                                "serves the evaluations ~2.4x faster")
    from afm.model import prepare

    return EvalEngine("llamacpp", f"llama-server ({binary}), {EVAL_SLOTS} slots, each policy exported to f16",
                      server=binary, base_gguf=prepare(student).gguf_path)


@contextmanager
def serving(engine: EvalEngine, model: Path, work: Path) -> Iterator[list[str]]:
    """The backend arguments of ``afm eval run`` / ``afm infer`` for ``model`` on ``engine``; a llama.cpp server
    (and its GGUF export, in ``work``) lives as long as the context."""
    if engine.name == "hf":
        from afm.quickstart.recipe import hf_backend

        yield hf_backend(model)
        return
    from afm.common.procs import free_port, stop_pid
    from afm.model.export import export_gguf

    assert engine.server is not None and engine.base_gguf is not None
    work.mkdir(parents=True, exist_ok=True)
    gguf = export_gguf(model, engine.base_gguf, work / "policy-f16.gguf", "f16")
    port, name = free_port(), "afm-quickstart-student"
    env = {**os.environ, "ENGINE": "llamacpp", "MODEL_PATH": str(gguf), "TOKENIZER": str(model), "PORT": str(port),
           "PARALLEL": str(EVAL_SLOTS), "MAX_MODEL_LEN": str(EVAL_SLOT_TOKENS), "SERVED_NAME": name,
           "LLAMA_SERVER": str(engine.server), "LOG": str(work / "llama-server.log")}
    proc = subprocess.run(["bash", str(REPO / "evaluation" / "serve_model.sh")], env=env, capture_output=True,
                          text=True, cwd=work)
    found = re.search(r"pid (\d+)", proc.stdout)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"llama-server did not start for {model} (see {work / 'llama-server.log'}):\n"
                           f"{(proc.stdout + proc.stderr)[-2000:]}")
    pid = int(found.group(1))
    try:
        yield ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", name, "--tokenizer",
               str(model), "--engine", "auto", "--concurrency", str(2 * EVAL_SLOTS)]
    finally:
        stop_pid(pid)
        gguf.unlink(missing_ok=True)  # ~0.5 GB a policy; the HF folder is the one kept
