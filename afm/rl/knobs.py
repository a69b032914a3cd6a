"""The RL launch: the verl command built from the RL settings (:mod:`afm.launch.rl`), and its run.

The scripts (experiments/train_*_agent.sh) stay short: experiments/common.sh sources environment.sh and runs this
module with the RL environment's python. Everything else happens here, in one process: the script's arguments, the
original project's names and the misspelling check, the settings (the per-task defaults and profiles are data in
afm.launch.rl), every knob's check (a bad one stops the launch with a message naming it, before Ray or verl start),
resolving paths, the Hydra overrides (the DAPO/PPO recipe included), the summary, and the launch with its log, or
with ``--dry-run`` the exact command. Standard library only, so it runs with any python 3.10+, not only the
trainer's (``PYTHON``): ``python -m afm.rl.knobs --help``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from afm.launch.command import run_logged, script_parser
from afm.launch.rl import LOGGERS, PATH_KNOBS, TASK_NAMES, RlSettings, check, resolve, usage
from afm.launch.rl_overrides import (
    Resolved,
    actor_overrides,
    algorithm_overrides,
    checkpoint_overrides,
    data_overrides,
    device_overrides,
    overlong_buffer_len,
    reward_overrides,
    rollout_overrides,
    trainer_overrides,
    zygote_here,
    zygote_overrides,
)
from afm.launch.values import KnobError, as_bool, is_posint, split_list
from afm.rl.cluster import auth_env, dead_actor_line, runtime_env_overrides

ZYGOTE_ADDRESS = "AFM_WORKER_ZYGOTE"  # afm.rl.local.zygote.ADDRESS_VARIABLE (this module is standard library only)

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_HYDRA_UNSAFE = re.compile(r"[][\s=,\"{}']")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_./:,=+@%-]+$")


def shell_word(word: str) -> str:
    """A word as the shell reads it back: plain when it holds only safe characters, else in single quotes."""
    return word if _SHELL_SAFE.match(word) else "'" + word.replace("'", "'\\''") + "'"


def warn(message: str) -> None:
    print(f"[afm] warning: {message}", file=sys.stderr, flush=True)


@dataclass
class RlLaunch:
    """A checked run: the command, what it prints first, and what a real run must find or prepare."""

    python: str
    overrides: list[str]
    summary: str
    ckpt_dir: str
    device: str
    nnodes: int
    dry_run: bool
    inputs: list[str] = field(default_factory=list)  # files a real run reads: data files, tool and loop configs
    model: str = ""
    env: dict[str, str] = field(default_factory=dict)  # added to the trainer's environment
    gpus: int = 1  # per node
    join_timeout: str = "300"  # NNODES > 1: seconds to wait for the nodes (afm/rl/cluster.py)
    engine: str = ""  # ROLLOUT_ENGINE
    zygote: bool = False  # WORKER_ZYGOTE on: run() starts the zygote the command's py_executable asks

    def problems(self) -> list[str]:
        """What a real run would not find (checked after --local built its toy task)."""
        out = []
        data, (tool_cfg, agent_cfg) = self.inputs[:-2], self.inputs[-2:]
        for path in data:
            if path and not os.path.isfile(path):
                out.append(f"data file not found: {path} (build it with data/prepare_rl.sh or 'afm data rl')")
        if not os.path.isfile(tool_cfg):
            out.append(f"tool config not found: {tool_cfg}")
        if not os.path.isfile(agent_cfg):
            out.append(f"agent loop config not found: {agent_cfg}")
        if self.model.startswith("/") and not os.path.exists(self.model):
            out.append(f"MODEL_PATH not found: {self.model} (train the SFT model first, or set MODEL_PATH to a hub "
                       "id)")
        return out

    @property
    def command(self) -> list[str]:
        return [self.python, "-m", "verl.trainer.main_ppo", *self.overrides]


def hydra_files(name: str, value: str, base: str) -> str:
    """A comma-separated file list as a Hydra value: one path as is, several as ``[a,b]``; relative paths are taken
    from ``base``."""
    out = []
    for item in split_list(value):
        item = item.strip()
        if not item:
            continue
        if not item.startswith(("/", "~")):
            item = f"{base}/{item[2:] if item.startswith('./') else item}"
        if _HYDRA_UNSAFE.search(item):
            raise KnobError(f"{name}: path '{item}' has spaces, quotes, '=' or brackets, which Hydra overrides "
                            "cannot carry")
        out.append(item)
    if not out:
        raise KnobError(f"{name} is empty")
    return out[0] if len(out) == 1 else "[" + ",".join(out) + "]"


def has_gpu(env: Mapping[str, str]) -> bool:
    """Whether ``nvidia-smi -L`` lists a GPU on this machine."""
    if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        return False
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU ") for line in listing.stdout.splitlines())


def attention(impl: str, python: str, env: Mapping[str, str]) -> str:
    """``"<implementation> (<why>)"`` for ATTN_IMPL; auto looks at this machine and the trainer's python."""
    if impl in ("flash_attention_2", "sdpa", "eager"):
        return f"{impl} (ATTN_IMPL={impl})"
    if impl != "auto":
        raise KnobError(f"ATTN_IMPL must be auto, flash_attention_2, sdpa or eager (got '{impl}')")
    if not has_gpu(env):
        return "sdpa (no GPU on this machine)"
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('flash_attn') is None)"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, env=dict(env), timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        found = False
    if found:
        return "flash_attention_2 (GPU and flash_attn found)"
    return "sdpa (flash_attn is not installed: pip install flash-attn for FlashAttention-2)"


def plan(s: RlSettings, env: Mapping[str, str], *, task: str, script: str, root: str, caller_dir: str,
         user_paths: set[str], python: str, dry_run: bool, tail: Sequence[str]) -> RlLaunch:
    """Check the settings and build the verl command, group by group (:mod:`afm.launch.rl_overrides`); warnings are
    printed as they are found. ``env`` is the process environment (CUDA_VISIBLE_DEVICES, SWANLAB_*, what the
    trainer's workers inherit)."""
    # checks before anything starts: each knob's own (RlSettings), then the rules between knobs
    message = check(s, task)
    if message:
        raise KnobError(message)
    # a relative path is taken from the caller's directory when the caller gave it, else from the repo
    bases = {name: caller_dir.rstrip("/") if name in user_paths else root for name in PATH_KNOBS}
    ckpt_dir = checkpoint_dir(s, root, bases)
    loggers = check_rules(s)
    r = resolve_paths(s, task, bases, ckpt_dir, root, loggers, attention(s.attn_impl, python, env))
    if s.reward_manager == "dapo" and s.algorithm == "ppo":
        warn("REWARD_MANAGER=dapo with ALGORITHM=ppo: DAPO's overlong shaping on PPO")
    zygote = zygote_overrides(s, python, root)
    ov = [*data_overrides(s, r), *actor_overrides(s, r), *algorithm_overrides(s, r), *rollout_overrides(s, r),
          *device_overrides(s), *zygote, *multinode_overrides(s, env), *checkpoint_overrides(s),
          *reward_overrides(s, r), *trainer_overrides(s, r), *s.extra_args.split(), *tail]
    added, notes = environment_notes(s, env, r.ckpt_dir, caller_dir)
    if zygote and zygote_here(s):
        notes.append(f"WORKER_ZYGOTE={s.worker_zygote}: Ray's workers fork from one process with torch, tensordict and "
                     f"transformers imported (log: {r.ckpt_dir}/{ZYGOTE_LOG})")
    elif zygote:
        notes.append(f"WORKER_ZYGOTE={s.worker_zygote}: Ray's workers fork from their node's zygote, where "
                     "experiments/ray_cluster.sh started one (its log: RAY_TEMP_DIR/afm_worker_zygote.log); "
                     "elsewhere they start as usual")
    files = [f.removesuffix("]") for f in split_list(f"{r.train_files.removeprefix('[')},"
                                                      f"{r.val_files.removeprefix('[')}")]
    return RlLaunch(python, ov, summary(s, task, script, python, ov, r, notes), r.ckpt_dir, s.device,
                    int(s.nnodes), as_bool("DRY_RUN", s.dry_run) == "true" or dry_run,
                    inputs=[*files, r.tool_cfg, r.agent_cfg], model=r.model, env=added,
                    gpus=int(s.gpus_per_node), join_timeout=s.join_timeout, engine=s.rollout_engine,
                    zygote=bool(zygote) and zygote_here(s))


def checkpoint_dir(s: RlSettings, root: str, bases: Mapping[str, str]) -> str:
    """CKPT_DIR, else the original's SAVE_MODEL_FOLDER/EXPERIMENT_NAME (its scripts saved there), else
    checkpoints/PROJECT_NAME/EXPERIMENT_NAME under the repo; a relative CKPT_DIR is resolved later."""
    ckpt_dir = s.ckpt_dir or f"{root}/checkpoints/{s.project_name}/{s.experiment_name}"
    if s.save_model_folder and s.ckpt_dir:
        warn(f"SAVE_MODEL_FOLDER (the original's name) is ignored: CKPT_DIR={ckpt_dir} is also set")
    elif s.save_model_folder:
        ckpt_dir = f"{s.save_model_folder.rstrip('/')}/{s.experiment_name}"
        if not ckpt_dir.startswith("/"):
            ckpt_dir = f"{bases['SAVE_MODEL_FOLDER']}/{ckpt_dir.removeprefix('./')}"
        print(f"[afm]   SAVE_MODEL_FOLDER -> CKPT_DIR={ckpt_dir} (SAVE_MODEL_FOLDER/EXPERIMENT_NAME, as the original "
              "saved)", file=sys.stderr, flush=True)
    return ckpt_dir


def check_rules(s: RlSettings) -> list[str]:
    """The rules between knobs (each knob's own check passed): a broken one stops the launch with a message naming
    the knobs, a doubtful one is a warning. Returns LOGGER's backends."""

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise KnobError(message)

    engine, tp, train_bs, mini_bs = s.rollout_engine, s.tp, s.train_batch_size, s.mini_batch_size
    need(s.trainer_mode != "separate_async" or s.device == "gpu",
         "TRAINER_MODE=separate_async needs GPUs: verl pushes weights to the separate rollout through an "
         "nccl/nixl/mooncake checkpoint engine (trainer_separate_async.py:68); on the CPU use colocate_async")
    need(s.device != "cpu" or engine in ("hf", "vllm"),
         "DEVICE=cpu needs ROLLOUT_ENGINE=hf or vllm (vLLM's CPU build; SGLang needs a GPU)")
    need(s.device != "cpu" or engine != "vllm" or tp == "1",
         f"ROLLOUT_ENGINE=vllm with DEVICE=cpu: vLLM's CPU build serves one copy: TP must be 1 (got '{tp}')")
    need(engine != "hf" or tp == "1", f"ROLLOUT_ENGINE=hf runs one model copy per rank: TP must be 1 (got '{tp}')")
    need(s.resume_mode != "resume_path" or bool(s.resume_from_path),
         "RESUME_MODE=resume_path needs RESUME_FROM_PATH=<CKPT_DIR>/global_step_N")
    loggers = split_list(s.logger.replace(" ", ""))
    need(bool(loggers), "LOGGER is empty (use console)")
    for item in loggers:
        need(item in LOGGERS, f"LOGGER must be a comma-separated list of {', '.join(LOGGERS)} (got '{s.logger}')")
    n_nodes, n_gpus, n = int(s.nnodes), int(s.gpus_per_node), int(s.rollout_n)
    n_train, n_mini = int(train_bs), int(mini_bs)
    need(n_mini <= n_train, f"MINI_BATCH_SIZE ({mini_bs}) must not exceed TRAIN_BATCH_SIZE ({train_bs})")
    need(n_train % n_mini == 0, f"TRAIN_BATCH_SIZE ({train_bs}) must be a multiple of MINI_BATCH_SIZE ({mini_bs})")
    if s.algorithm != "ppo" and n <= 1:
        warn("ROLLOUT_N=1: GRPO advantages are zero and filter_groups keeps nothing (ALGORITHM=ppo trains with n=1)")
    need(n_gpus % int(tp) == 0, f"GPUS_PER_NODE ({s.gpus_per_node}) must be a multiple of TP ({tp})")
    if as_bool("USE_DYNAMIC_BSZ", s.use_dynamic_bsz) == "false":
        need(n_train * n % (n_nodes * n_gpus) == 0,
             f"TRAIN_BATCH_SIZE x ROLLOUT_N ({n_train * n}) must be divisible by the {n_nodes * n_gpus} GPUs (verl "
             "checks it; or USE_DYNAMIC_BSZ=true)")
    overlong_len = overlong_buffer_len(s)
    if s.reward_manager == "dapo" and as_bool("OVERLONG_BUFFER", s.overlong_buffer) == "true":
        need(is_posint(overlong_len) and int(overlong_len) <= int(s.max_response_length),
             f"OVERLONG_BUFFER_LEN must be 1 .. MAX_RESPONSE_LENGTH ({s.max_response_length}) (got '{overlong_len}')")
    if s.reward_manager != "dapo" and s.overlong_buffer_len:
        warn(f"OVERLONG_BUFFER_LEN is used by REWARD_MANAGER=dapo only; {s.reward_manager} applies no length "
             "penalty")
    need(bool(s.model_path), "MODEL_PATH is empty")
    need(bool(_NAME.match(s.experiment_name)),
         f"EXPERIMENT_NAME may hold letters, digits, '_', '.', '-' (got '{s.experiment_name}')")
    need(bool(_NAME.match(s.project_name)),
         f"PROJECT_NAME may hold letters, digits, '_', '.', '-' (got '{s.project_name}')")
    return loggers


def resolve_paths(s: RlSettings, task: str, bases: Mapping[str, str], ckpt_dir: str, root: str, loggers: list[str],
                  attn: str) -> Resolved:
    """Every path of the command made absolute (a relative one from ``bases``: the caller's directory for what the
    caller gave, else the repo), with the checks' results the overrides take."""

    def absolute(path: str, name: str) -> str:
        return path if not path or path.startswith("/") else f"{bases[name]}/{path}"

    model, model_base = s.model_path, bases["MODEL_PATH"]
    # A relative path that exists (here, or under the repo for the default) is a local folder; saves/... and ./...
    # are always folders; anything else is a hub id (org/name).
    if not model.startswith("/") and os.path.exists(f"{model_base}/{model}"):
        model = f"{model_base}/{model.removeprefix('./')}"
    if model.startswith(("saves/", "./")):
        model = f"{model_base}/{model.removeprefix('./')}"
    train_files = hydra_files("TRAIN_FILES", s.train_files, bases["TRAIN_FILES"])
    val_value = s.val_files
    val_files = hydra_files("VAL_FILES", val_value, bases["VAL_FILES"]) if val_value.replace(" ", "") else ""
    agent_cfg = absolute(s.agent_loop_config, "AGENT_LOOP_CONFIG")
    tool_cfg = absolute(s.tool_config or f"configs/verl/tools/{task}.yaml", "TOOL_CONFIG")
    ckpt_dir = absolute(ckpt_dir, "CKPT_DIR")
    # The validation dumps default to a folder of the resolved checkpoint directory.
    val_dir = f"{ckpt_dir}/validation" if s.val_data_dir is None else absolute(s.val_data_dir, "VAL_DATA_DIR")
    reward_path = f"{root}/afm/rewards/score.py"
    if not os.path.isfile(reward_path):
        raise KnobError(f"reward entry not found: {reward_path}")
    return Resolved(model=model, train_files=train_files, val_files=val_files, tool_cfg=tool_cfg,
                    agent_cfg=agent_cfg, ckpt_dir=ckpt_dir, val_dir=val_dir,
                    rollout_dir=absolute(s.rollout_data_dir, "ROLLOUT_DATA_DIR"),
                    resume_path=absolute(s.resume_from_path, "RESUME_FROM_PATH"), reward_path=reward_path,
                    loggers=loggers, attention=attn)


def multinode_overrides(s: RlSettings, env: Mapping[str, str]) -> list[str]:
    """On more than one node: the trainer's environment for every node's workers (Ray's runtime env)."""
    return runtime_env_overrides(trainer_env(s.device, env)) if int(s.nnodes) > 1 else []


def environment_notes(s: RlSettings, env: Mapping[str, str], ckpt_dir: str,
                      caller_dir: str) -> tuple[dict[str, str], list[str]]:
    """What the launch adds to the trainer's environment, and the environment lines its summary prints."""
    added: dict[str, str] = {}
    lines = []
    ray_address = s.ray_address
    if int(s.nnodes) > 1:
        added["RAY_ADDRESS"] = ray_address = ray_address or "auto"
        lines.append(f"RAY_ADDRESS={ray_address}")
    elif ray_address:
        lines.append(f"RAY_ADDRESS={ray_address}")
    if "CUDA_VISIBLE_DEVICES" in env:
        lines.append(f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}")
    if "swanlab" in s.logger.replace(" ", "").split(","):
        # verl's swanlab logger reads these from the environment; its default log dir is relative to the repo root.
        log_dir = env.get("SWANLAB_LOG_DIR") or f"{ckpt_dir}/swanlog"
        added["SWANLAB_LOG_DIR"] = (log_dir if log_dir.startswith("/")
                                    else f"{caller_dir.rstrip('/')}/{log_dir.removeprefix('./')}")
        lines.append(f"SWANLAB_LOG_DIR={added['SWANLAB_LOG_DIR']}")
        if env.get("SWANLAB_MODE"):
            lines.append(f"SWANLAB_MODE={env['SWANLAB_MODE']}")
    return added, lines


def summary(s: RlSettings, task: str, script: str, python: str, overrides: Sequence[str], r: Resolved,
            notes: Sequence[str]) -> str:
    """What a launch prints first: the run in three lines, the environment notes, the exact command."""
    lines = [f"[afm] {script}: task={task} nodes={s.nnodes} gpus/node={s.gpus_per_node} device={s.device} "
             f"engine={s.rollout_engine} TP={s.tp} prompts/step={s.train_batch_size} x {s.rollout_n} rollouts, "
             f"mini-batch={s.mini_batch_size}, prompt+response={s.max_prompt_length}+{s.max_response_length}, "
             f"turns<={s.max_turns}, reward={s.reward_manager}/{s.reward_fn}",
             f"[afm] algorithm: {s.algorithm}; attention: {r.attention}",
             f"[afm] checkpoints: {r.ckpt_dir} (resume_mode={s.resume_mode})"]
    if notes:
        lines += ["[afm] environment:", *(f"  {line}" for line in notes)]
    lines.append("[afm] command:")
    lines.append(f"{shell_word(python)} -m verl.trainer.main_ppo"
                 + "".join(f" \\\n    {shell_word(arg)}" for arg in overrides))
    return "\n".join(lines)


def prepare_local(python: str, workdir: str, settings: RlSettings) -> None:
    """--local: build the toy parquet and policy when the profile's defaults point at them."""
    if not workdir:
        return
    wanted = (settings.train_files == f"{workdir}/toy_train.parquet"
              or settings.model_path == f"{workdir}/toy_policy")
    from afm.rl.local.toy import policy_is_current

    built = os.path.isfile(f"{workdir}/toy_train.parquet") and policy_is_current(f"{workdir}/toy_policy")
    if wanted and not built:
        print(f"[afm] --local: building the toy task and policy in {workdir}", flush=True)
        # one thread, as the CPU trainer's workers get (run()): two OpenMP threads next to a busy core spin-wait,
        # and this seconds-long build took minutes beside another job
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or "1"}
        if subprocess.run([python, "-m", "afm.rl.local.toy", workdir], stdout=subprocess.DEVNULL,
                          env=env).returncode != 0:
            raise KnobError("could not build the toy task")


def trainer_env(device: str, env: Mapping[str, str]) -> dict[str, str]:
    """What the trainer's processes need beyond the caller's environment (the replay buffer's poll, the cpu
    platform); on a cluster it also goes to every node's workers (afm/rl/cluster.py)."""
    # The replay buffer's fixed 2 s poll (afm/rl/local/patches.py) is replaced for every engine.
    out = {"AFM_VERL_POLL_S": env.get("AFM_VERL_POLL_S") or "0.02"}
    if device == "cpu":
        out.update(VERL_PLATFORM="cpu", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS") or "1",
                   TOKENIZERS_PARALLELISM="false",
                   # vLLM's CPU build: its KV cache in GiB (the default of 4 is more than a toy run needs)
                   VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE") or "1",
                   VLLM_TARGET_DEVICE="cpu",
                   # keep vLLM's CPU weights reloadable (verl pushes the trainer's each step: afm/rl/local/vllm_cpu.py)
                   # and give up on a weight sync the rollout does not answer within 2 minutes
                   AFM_VLLM_RELOADABLE_WEIGHTS=env.get("AFM_VLLM_RELOADABLE_WEIGHTS") or "1",
                   AFM_WEIGHT_SYNC_TIMEOUT_S=env.get("AFM_WEIGHT_SYNC_TIMEOUT_S") or "120")
    if env.get("AFM_RL_TRACE_DIR"):
        out["AFM_RL_TRACE_DIR"] = env["AFM_RL_TRACE_DIR"]
    return out


def missing_modules(python: str, names: list[str], env: Mapping[str, str]) -> list[str]:
    """Which of ``names`` the interpreter ``python`` cannot find (all of them when it does not run).

    Found, not imported: importing verl takes ~5 s of a core (torch, torch._dynamo, transformers) and verl's driver
    imports it again right after, so the launch checks only that the packages are there (RESULTS.md, 2026-11-29)."""
    probe = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m) is None])"
    try:
        check = subprocess.run([python, "-c", probe, *names], capture_output=True, text=True, env=dict(env))
    except OSError:  # no such interpreter
        return list(names)
    return check.stdout.split() if check.returncode == 0 else list(names)


ZYGOTE_LOG = "worker_zygote.log"


@contextlib.contextmanager
def worker_zygote(launch: RlLaunch, env: dict[str, str], root: str) -> Iterator[None]:
    """WORKER_ZYGOTE: the zygote (afm/rl/local/zygote.py) for the run's workers, its address in ``env`` (which verl's
    driver, Ray and so each worker inherit); stopped when the run ends. It imports beside verl's driver, on another
    core; a worker that asks before it is ready waits for it. No zygote: each worker starts as usual."""
    if not launch.zygote:
        yield
        return
    env[ZYGOTE_ADDRESS] = f"afm-zygote-{os.getpid()}-{secrets.token_hex(4)}"
    with open(f"{launch.ckpt_dir}/{ZYGOTE_LOG}", "a", encoding="utf-8") as log:
        proc = subprocess.Popen([launch.python, "-m", "afm.rl.local.zygote", "--address", env[ZYGOTE_ADDRESS]],
                                env=env, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(launch: RlLaunch, root: str) -> int:
    """Start verl: its output goes to the terminal and is appended to CKPT_DIR/train.log."""
    env = dict(os.environ)
    env.update(launch.env)
    missing = missing_modules(launch.python, ["verl", "afm", *(["vllm"] if launch.engine == "vllm" else [])], env)
    if "verl" in missing or "afm" in missing:
        raise KnobError(f"'{launch.python}' cannot import verl and afm: run 'AFM_VENV=.venv-rl AFM_EXTRAS=rl bash "
                        "scripts/install.sh' or set PYTHON")
    if "vllm" in missing and launch.device == "cpu":  # on GPU nodes verl's own import check speaks
        raise KnobError(f"ROLLOUT_ENGINE=vllm: '{launch.python}' has no vLLM: run 'AFM_VENV=.venv-rl "
                        "AFM_EXTRAS=rl,servers,sandbox,eval,dev AFM_ENGINES=vllm bash scripts/install.sh' "
                        "(vLLM's CPU build beside verl), or use ROLLOUT_ENGINE=hf")
    env.update(trainer_env(launch.device, env))
    if launch.nnodes > 1:
        env.update(auth_env(env))
        # every node joined, with this afm and verl, or one line saying which is not (afm/rl/cluster.py)
        check = subprocess.run([launch.python, "-m", "afm.rl.cluster", f"--address={env['RAY_ADDRESS']}",
                                f"--nnodes={launch.nnodes}", f"--gpus={launch.gpus}",
                                f"--timeout={launch.join_timeout}"], env=env, cwd=root)
        if check.returncode != 0:
            return 2
    # swanlab >= 0.10 parses SWANLAB_PROJECT (exported by environment.sh for the SFT scripts) as its own nested
    # settings and fails on a plain name; verl names the project itself (trainer.project_name).
    env.pop("SWANLAB_PROJECT", None)
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = 65535 if hard == resource.RLIM_INFINITY else min(65535, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    except (ImportError, ValueError, OSError):
        pass  # as `ulimit -n 65535 || true`: more open files help Ray, fewer are not fatal
    os.makedirs(launch.ckpt_dir, exist_ok=True)
    log_path = f"{launch.ckpt_dir}/train.log"
    start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    with worker_zygote(launch, env, root):
        status = run_logged(launch.command, env=env, cwd=root, log_path=log_path, summary=launch.summary)
    if status != 0:
        # a trainer rank or rollout server that died is a page of Ray tracebacks: say which one, in one line
        with open(log_path, "rb") as log:
            log.seek(start)
            line = dead_actor_line(log.read().decode(errors="replace"), launch.gpus)
        if line:
            print(f"[afm] error: {line} (log: {log_path})", file=sys.stderr, flush=True)
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"[afm] error: {line}\n")
    return status


def script_arguments(args: Sequence[str]) -> tuple[str, bool, bool, list[str]]:
    """A script's arguments: ("help" | "", --dry-run, --local, the Hydra overrides), read in order as the scripts
    always did (the first --help wins; an unknown option or a word that is no key=value stops the launch)."""
    dry_run = local = False
    tail = []
    for arg in args:
        if arg in ("-h", "--help"):
            return "help", dry_run, local, tail
        if arg == "--dry-run":
            dry_run = True
        elif arg == "--local":
            local = True
        elif arg.startswith("-"):
            raise KnobError(f"unknown option '{arg}' (options: --dry-run, --local, --help; everything else is a Hydra "
                            "override key=value)")
        elif "=" not in arg:
            raise KnobError(f"argument '{arg}' is not a Hydra override (key=value)")
        else:
            tail.append(arg)
    return "", dry_run, local, tail


def main(argv: Sequence[str] | None = None) -> int:
    p = script_parser("python -m afm.rl.knobs", __doc__)
    p.add_argument("--task", required=True, choices=TASK_NAMES)
    p.add_argument("--python", required=True, help="the trainer's python (PYTHON, else $AFM_RL_VENV/bin/python)")
    p.add_argument("--caller-names", default=None,
                   help="the variables the caller exported, space-separated, for the misspelling check (before "
                        "environment.sh added its own); default: this process's environment")
    p.add_argument("args", nargs="*", help="the script's arguments (after --): --dry-run, --local, --help, "
                                           "Hydra overrides key=value")
    args = p.parse_args(argv)
    try:
        mode, dry_run, local, tail = script_arguments(args.args)
        if mode == "help":
            print(usage(args.script, args.task, os.environ), end="", flush=True)
            return 0
        workdir = (os.environ.get("AFM_LOCAL_DIR") or f"{args.root}/runs/rl_local/{args.task}") if local else ""
        callers = None if args.caller_names is None else args.caller_names.split()
        # Into this process's environment, as the scripts exported them: the trainer inherits the knobs' names.
        settings, given = resolve(os.environ, args.task, local=local, work=workdir, caller_names=callers)
        launch = plan(settings, os.environ, task=args.task, script=args.script, root=args.root, caller_dir=args.cwd,
                      user_paths=given, python=args.python, dry_run=dry_run, tail=tail)
        if not launch.dry_run:
            prepare_local(args.python, workdir, settings)
        problems = launch.problems()
        if args.task == "web" and not os.environ.get("GRM_BASE_URL"):
            warn("GRM_BASE_URL is empty: web rewards fall back to exact match / F1 instead of the LLM judge")
        if launch.dry_run:
            print(launch.summary, flush=True)
            for problem in problems:
                warn(problem)
            return 0
        if problems:
            print(launch.summary, flush=True)
            for problem in problems:
                print(f"[afm] error: {problem}", file=sys.stderr, flush=True)
            return 2
        return run(launch, args.root)
    except KnobError as exc:
        print(f"[afm] error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
