"""The RL stage of the miniature recipe: DAPO through verl's real trainer on the local CPU backend.

The quickstart runs in the LLaMA-Factory environment (``.venv``); verl lives in its own (``.venv-rl``, transformers
pins differ), so this module never imports verl: it writes a verl tools yaml pointing at the running demo servers
and launches ``experiments/train_dapo_<task>.sh --local`` with the ``.venv-rl`` interpreter, exactly as a user
would, then reads the step metrics from the console log and the final Hugging Face checkpoint from disk.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from afm.common.cpu_features import cpu_bf16, usable_cores
from afm.common.procs import stop_group
from afm.common.ray_scope import private_ray_tmpdir, stop_ray_in

REPO = Path(__file__).resolve().parents[2]
VERL_TOOLS = REPO / "configs" / "verl" / "tools" / "afm.yaml"
AGENT_LOOPS = REPO / "configs" / "verl" / "agent_loops.yaml"
_STEP = re.compile(r"step:(\d+) - (.*)")


@dataclass
class DapoRun:
    """What a finished DAPO run left: the final policy (HF format), per-step metrics, the console log."""

    model: Path
    steps: list[dict[str, float]] = field(default_factory=list)
    log: Path | None = None
    seconds: float = 0.0

    def curve(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of one console metric, e.g. ``critic/score/mean``."""
        return [(int(s["step"]), s[key]) for s in self.steps if key in s]


def verl_tools_yaml(afm_tools: Mapping[str, Any], base: str | Path = VERL_TOOLS) -> dict[str, Any]:
    """verl's tools yaml for the tools of an afm tools config (``{"tools": [{"name", "config"}]}``).

    Entries come from ``base`` (schemas, call timeouts); each tool's afm settings (server URL, results per query,
    sandbox mode, ...) replace the base's, so the RL rollouts see the same observations as the SFT data and the
    evaluations. Tools the afm config does not name are left out.
    """
    wanted = {t["name"]: dict(t.get("config") or {}) for t in afm_tools["tools"]}
    doc = yaml.safe_load(Path(base).read_text())
    entries = []
    for entry in doc["tools"]:
        name = entry["config"]["afm_tool"]
        if name in wanted:
            entry["config"].update(wanted.pop(name))
            entries.append(entry)
    if wanted:
        raise ValueError(f"{base} has no entry for tool(s) {sorted(wanted)}")
    return {"tools": entries}


def agent_loops_yaml(max_tokens_per_turn: int, base: str | Path = AGENT_LOOPS) -> list[dict[str, Any]]:
    """verl's agent-loop yaml (``base``) with ``afm_agent``'s cap on one generation set: the RL rollouts then take
    the turns the evaluations take (without it a turn may use the whole response budget, which the evaluations
    never allow)."""
    doc = yaml.safe_load(Path(base).read_text())
    entry = next(e for e in doc if e.get("name") == "afm_agent")
    entry["max_tokens_per_turn"] = int(max_tokens_per_turn)
    return doc


def rl_python() -> Path:
    """The interpreter of verl's environment: ``$AFM_RL_PYTHON``, else ``$AFM_RL_VENV/bin/python`` (``.venv-rl``)."""
    if os.environ.get("AFM_RL_PYTHON"):
        return Path(os.environ["AFM_RL_PYTHON"])
    venv = Path(os.environ.get("AFM_RL_VENV", REPO / ".venv-rl"))
    python = (venv if venv.is_absolute() else REPO / venv) / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(
            f"the RL stage needs verl's environment, not found at {python}: run "
            "`AFM_VENV=.venv-rl AFM_EXTRAS=rl,servers,sandbox,eval,dev bash scripts/install.sh` "
            "(scripts/quickstart.sh does), or set AFM_RL_PYTHON")
    return python


def rollout_engine(student: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """DAPO's rollout engine for the quickstart (``student`` "" is the tiny one), and why: ``ROLLOUT_ENGINE`` when the
    environment sets it, else afm's transformers rollout (``hf``). Not verl's vLLM rollout by default, though vLLM's
    CPU build serves Gemma 3 270M's DAPO steps (RESULTS.md, 2026-11-29 twelfth session: 2 rollouts a prompt, 128
    tokens): at the quickstart's size (4 x 4 rollouts of up to 1024 tokens) Ray's memory monitor killed 4 workers at
    the first weight sync on a 24 GB machine (RESULTS.md, 2026-11-29 fifteenth session)."""
    env = os.environ if env is None else env
    if env.get("ROLLOUT_ENGINE"):
        return env["ROLLOUT_ENGINE"], "ROLLOUT_ENGINE is set in the environment"
    if not student:
        return "hf", "the tiny student: afm's transformers rollout server, no engine to start"
    return "hf", ("afm's transformers rollout: verl's vLLM rollout (ROLLOUT_ENGINE=vllm) ran out of memory at its "
                  "first weight sync on a 24 GB machine")


def rl_precision(student: str, env: Mapping[str, str] | None = None, *, native_bf16: bool | None = None
                 ) -> tuple[str, str]:
    """DAPO's CPU_PRECISION for the quickstart, and why: the environment's when set; float32 for the tiny student
    (its matmuls are too small for bf16 to pay); bf16 for a pretrained one on a CPU that computes it natively (a
    Gemma 3 270M forward and backward 1.6x faster, RESULTS.md 2026-11-29 sixteenth session), float32 elsewhere."""
    env = os.environ if env is None else env
    if env.get("CPU_PRECISION"):
        return env["CPU_PRECISION"], "CPU_PRECISION is set in the environment"
    if not student:
        return "fp32", "the tiny student: its matmuls are too small for bfloat16 to pay"
    if cpu_bf16() if native_bf16 is None else native_bf16:
        return "bf16", "this CPU computes bfloat16 natively (AVX512-BF16/AMX): the actor's step ~1.6x float32's"
    return "fp32", "this CPU has no native bfloat16 (no AVX512-BF16/AMX): float32 is faster"


def rl_threads(student: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """OMP_NUM_THREADS of DAPO's trainer and rollout processes, and why: the environment's when set; one for the tiny
    student (the launcher's CPU default: its small matmuls gain nothing from a second thread, whose spin-waits
    slowed the builds beside other work); every core this process may use for a pretrained one, whose rollout and
    update take turns in the sync trainer and each ran on one core of two otherwise (RESULTS.md 2026-11-29 sixteenth
    session)."""
    env = os.environ if env is None else env
    if env.get("OMP_NUM_THREADS"):
        return env["OMP_NUM_THREADS"], "OMP_NUM_THREADS is set in the environment"
    if not student:
        return "1", "the tiny student: one thread a process, the CPU launch's default"
    cores = usable_cores()
    return str(cores), f"every core of this machine ({cores}): the rollout and the update take turns"


def parse_steps(log_text: str) -> list[dict[str, float]]:
    """verl's console metrics (``step:N - key:value - ...``) as one dict per step (numbers only)."""
    out: dict[int, dict[str, float]] = {}
    for line in log_text.splitlines():
        m = _STEP.search(line)
        if not m:
            continue
        row: dict[str, float] = {"step": float(m.group(1))}
        for part in m.group(2).split(" - "):
            key, _, value = part.partition(":")
            try:
                row[key.strip()] = float(value)
            except ValueError:
                continue
        out[int(m.group(1))] = row  # a resumed run logs a step again: keep the last
    return [out[k] for k in sorted(out)]


def latest_hf_checkpoint(ckpt_dir: str | Path) -> Path:
    """``global_step_N/actor/huggingface`` of the highest N (written with ``SAVE_HF_MODEL=true``)."""
    ckpt = Path(ckpt_dir)
    steps = sorted((int(p.name.split("_")[-1]), p) for p in ckpt.glob("global_step_*") if p.name.split("_")[-1].isdigit())
    for _, path in reversed(steps):
        hf = path / "actor" / "huggingface"
        if (hf / "config.json").exists():
            return hf
    raise FileNotFoundError(f"no Hugging Face checkpoint under {ckpt} (global_step_*/actor/huggingface)")


class GroupsFiltered(RuntimeError):
    """DAPO stopped: the group filter dropped ``MAX_NUM_GEN_BATCHES`` batches of groups in one step (no gradient)."""

    def __init__(self, message: str, log: Path) -> None:
        super().__init__(message)
        self.log = log


def stopped_dapo(work: str | Path, stop: GroupsFiltered) -> DapoRun | None:
    """What a DAPO run that the refill cap stopped (``stop``) left in ``work``: its newest Hugging Face checkpoint
    and the metrics of the steps up to that checkpoint, or None when it saved none (a run that checkpoints only at
    its last step, :func:`run_dapo`'s default)."""
    try:
        model = latest_hf_checkpoint(Path(work) / "checkpoints")
    except FileNotFoundError:
        return None
    saved = int(model.parent.parent.name.rsplit("_", 1)[-1])  # global_step_N/actor/huggingface
    steps = [s for s in parse_steps(stop.log.read_text(errors="replace")) if s["step"] <= saved]
    if not steps:
        return None
    return DapoRun(model=model, steps=steps, log=stop.log)


def dapo_failure(text: str, log: Path, code: int) -> RuntimeError:
    """The error for a DAPO run that exited with ``code``: :class:`GroupsFiltered` when afm's refill cap stopped
    it (``afm.rl.local.patches.TooManyFilteredGroups``), else the log's tail."""
    stopped = re.search(r"TooManyFilteredGroups: (.*)", text)
    if stopped:
        return GroupsFiltered(stopped.group(1).strip(), log)
    tail = "\n".join(text.splitlines()[-40:])
    return RuntimeError(f"DAPO run failed (exit {code}); log {log}:\n{tail}")


class DapoJob:
    """A DAPO run started in the background (:func:`start_dapo`): :meth:`wait` for its :class:`DapoRun`, or
    :meth:`stop` it (the launch's process group and its Ray processes)."""

    def __init__(self, proc: subprocess.Popen, log: Path, work: Path, ray_tmp: Path, out: Any) -> None:
        self.proc, self.log, self.work, self.ray_tmp, self._out = proc, log, work, ray_tmp, out
        self.t0 = time.monotonic()

    def wait(self) -> DapoRun:
        """Block until the run ends; its policy and metrics, or the failure (:func:`dapo_failure`)."""
        try:
            code = self.proc.wait()
        finally:
            self._close()
        text = self.log.read_text(errors="replace")
        if code != 0:
            raise dapo_failure(text, self.log, code)
        return DapoRun(model=latest_hf_checkpoint(self.work / "checkpoints"), steps=parse_steps(text), log=self.log,
                       seconds=time.monotonic() - self.t0)

    def final_policy(self, steps: int, poll_s: float = 0.2) -> Path | None:
        """Block until the run has checkpointed step ``steps`` (verl writes ``latest_checkpointed_iteration.txt``
        after the step's Hugging Face weights) or has ended; that step's policy, or None when it ended without it.
        The policy can be evaluated while verl and Ray shut down (~6 s on 2 cores); :meth:`wait` still says how
        the run ended."""
        marker = self.work / "checkpoints" / "latest_checkpointed_iteration.txt"
        while True:
            done = self.proc.poll() is not None
            try:
                reached = marker.read_text().strip() == str(steps)
            except OSError:
                reached = False
            if reached:
                hf = self.work / "checkpoints" / f"global_step_{steps}" / "actor" / "huggingface"
                return hf if (hf / "config.json").exists() else None
            if done:
                return None
            time.sleep(poll_s)

    def stop(self, grace_s: float = 10.0) -> None:
        """End the run (TERM to the launch's process group, KILL after ``grace_s``) and its Ray processes."""
        stop_group(self.proc, grace_s)
        self._close()

    def _close(self) -> None:
        if not self._out.closed:
            self._out.close()
            # a Ray folder of this run's own: stopping it ends this run's Ray processes and no other cluster
            stop_ray_in(self.ray_tmp)


def start_dapo(model: str | Path, train_files: str | Path, afm_tools: Mapping[str, Any], work: str | Path, *,
               task: str = "code", steps: int, knobs: Mapping[str, Any] | None = None,
               max_tokens_per_turn: int | None = None, echo: bool = True) -> DapoJob:
    """Start ``bash experiments/train_dapo_<task>.sh --local`` from ``model`` on ``train_files`` with the given tools,
    in its own process group, and return at once (:class:`DapoJob`).

    ``knobs`` are the script's environment knobs (``ROLLOUT_N``, ``MAX_RESPONSE_LENGTH``, ``LR``, ...); the local
    profile fills the rest. ``max_tokens_per_turn`` caps one generation of ``afm_agent`` (:func:`agent_loops_yaml`;
    None: the response budget).
    """
    work = Path(work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    tools_yaml = work / "verl_tools.yaml"
    tools_yaml.write_text(yaml.safe_dump(verl_tools_yaml(afm_tools), sort_keys=False))
    python = rl_python()
    env = dict(os.environ)
    for key in ("RAY_ADDRESS", "VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(key, None)
    env.update({"MODEL_PATH": str(Path(model).absolute()), "TRAIN_FILES": str(Path(train_files).absolute()),
                "TOOL_CONFIG": str(tools_yaml), "CKPT_DIR": str(work / "checkpoints"),
                "AFM_LOCAL_DIR": str(work), "TOTAL_TRAINING_STEPS": str(steps), "SAVE_FREQ": str(steps),
                "SAVE_HF_MODEL": "true", "PYTHON": str(python), "RAY_DEDUP_LOGS": "0",
                "EXPERIMENT_NAME": "quickstart_rl"})
    if max_tokens_per_turn:
        loops = work / "agent_loops.yaml"
        loops.write_text(yaml.safe_dump(agent_loops_yaml(max_tokens_per_turn), sort_keys=False))
        env["AGENT_LOOP_CONFIG"] = str(loops)
    env.update({k: str(v) for k, v in (knobs or {}).items()})
    log = work / "dapo.log"
    cmd = ["bash", str(REPO / "experiments" / f"train_dapo_{task}_agent.sh"), "--local"]
    if echo:
        print(f"$ {' '.join(cmd)}   (log: {log})", flush=True)
    ray_tmp = private_ray_tmpdir()
    env["RAY_TMPDIR"] = str(ray_tmp)
    out = log.open("w")
    try:
        # its own process group: stop() ends the launch and everything it started, and a Ctrl-C at the terminal
        # reaches the quickstart, which stops it, rather than the launch in the middle of a step
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    except BaseException:
        out.close()
        stop_ray_in(ray_tmp)
        raise
    return DapoJob(proc, log, work, ray_tmp, out)


def run_dapo(model: str | Path, train_files: str | Path, afm_tools: Mapping[str, Any], work: str | Path, *,
             task: str = "code", steps: int, knobs: Mapping[str, Any] | None = None,
             max_tokens_per_turn: int | None = None, echo: bool = True) -> DapoRun:
    """:func:`start_dapo` and wait for it; raises with the log's tail when the run fails (stopped if interrupted)."""
    job = start_dapo(model, train_files, afm_tools, work, task=task, steps=steps, knobs=knobs,
                     max_tokens_per_turn=max_tokens_per_turn, echo=echo)
    try:
        return job.wait()
    finally:
        job.stop()


def main(argv: list[str] | None = None) -> int:
    """A few DAPO steps of the miniature recipe with the code tool (manual use); prints the run."""
    import argparse

    from afm.quickstart.profile import DEFAULT

    p = argparse.ArgumentParser(prog="python -m afm.quickstart.rl", description=main.__doc__)
    p.add_argument("model", help="policy to start from (a Hugging Face folder)")
    p.add_argument("train_files", help="verl RL parquet (afm data rl)")
    p.add_argument("workdir", help="folder for the tools yaml, the log and the checkpoints")
    p.add_argument("--steps", type=int, default=DEFAULT.rl_steps,
                   help=f"training steps (default: the quickstart's {DEFAULT.rl_steps})")
    args = p.parse_args(argv)
    print(run_dapo(args.model, args.train_files, {"tools": [{"name": "code", "config": {"mode": "pool"}}]},
                   args.workdir, steps=args.steps))
    return 0


if __name__ == "__main__":  # pragma: no cover - manual use
    sys.exit(main())
