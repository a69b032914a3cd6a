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

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from afm.launch.command import run_logged
from afm.launch.rl import (
    LOGGERS,
    TASK_NAMES,
    RlSettings,
    check,
    dapo_overrides,
    ppo_overrides,
    resolve,
    usage,
)
from afm.launch.values import KnobError, is_posint, parse_bool, split_list
from afm.rl.cluster import auth_env, dead_actor_line, runtime_env_overrides

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_HYDRA_UNSAFE = re.compile(r"[][\s=,\"{}']")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_./:,=+@%-]+$")


def as_bool(name: str, value: str) -> str:
    """``true``/``false`` (the words verl's overrides take) from the spellings people type."""
    return "true" if parse_bool(name, value) else "false"


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


def engine_overrides(engine: str, device: str, gpus: int, nnodes: int = 1) -> list[str]:
    """Overrides of the rollout engine and the device (experiments/local.sh describes both). On more than one node
    Ray is the cluster ray_cluster.sh started (its nodes declare their logical GPUs; ray.init refuses resources)."""
    out = ["actor_rollout_ref.rollout.tensor_model_parallel_size=1"] if engine == "hf" else []
    if device == "cpu":
        out += [
            "trainer.device=cpu",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.ref.strategy=fsdp2",
            "actor_rollout_ref.model.use_remove_padding=False",
            "actor_rollout_ref.model.enable_gradient_checkpointing=False",
            "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            "actor_rollout_ref.actor.use_torch_compile=False",
            "actor_rollout_ref.actor.fsdp_config.param_offload=False",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
            "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
            "actor_rollout_ref.rollout.free_cache_engine=False",
            "data.dataloader_num_workers=0",
            "++transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        ]
        if nnodes == 1:
            out += [f"++ray_kwargs.ray_init.num_gpus={gpus}", f"++ray_kwargs.ray_init.num_cpus={4 + 2 * gpus}"]
    return out


def plan(s: RlSettings, env: Mapping[str, str], *, task: str, script: str, root: str, caller_dir: str,
         user_paths: set[str], python: str, dry_run: bool, tail: Sequence[str]) -> RlLaunch:
    """Check the settings and build the verl command; warnings are printed as they are found. ``env`` is the
    process environment (CUDA_VISIBLE_DEVICES, SWANLAB_*, what the trainer's workers inherit)."""

    def base(name: str) -> str:
        # A relative value is taken from the caller's directory when the caller gave it, else from the repo.
        return caller_dir.rstrip("/") if name in user_paths else root

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise KnobError(message)

    # ---- checks (before anything starts): each knob's own (RlSettings), then the rules between knobs ----------
    message = check(s, task)
    if message:
        raise KnobError(message)
    algorithm, device, engine = s.algorithm, s.device, s.rollout_engine
    nnodes, gpus, tp, rollout_n = s.nnodes, s.gpus_per_node, s.tp, s.rollout_n
    train_bs, mini_bs, micro = s.train_batch_size, s.mini_batch_size, s.micro_batch_size
    prompt_len, response_len, max_turns = s.max_prompt_length, s.max_response_length, s.max_turns
    dry_run = as_bool("DRY_RUN", s.dry_run) == "true" or dry_run
    use_dyn, overlong = as_bool("USE_DYNAMIC_BSZ", s.use_dynamic_bsz), as_bool("OVERLONG_BUFFER", s.overlong_buffer)
    val_sample, val_before = as_bool("VAL_DO_SAMPLE", s.val_do_sample), as_bool("VAL_BEFORE_TRAIN", s.val_before_train)
    param_offload = as_bool("PARAM_OFFLOAD", s.param_offload)
    opt_offload = as_bool("OPTIMIZER_OFFLOAD", s.optimizer_offload)
    # derived defaults: from knobs the checks above found sound
    max_len = str(int(prompt_len) + int(response_len))
    max_tool_calls = s.max_tool_calls or max_turns
    ppo_max_tokens = s.ppo_max_token_len or max_len
    overlong_len = s.overlong_buffer_len or str(int(response_len) // 8)
    tool_cfg = s.tool_config or f"configs/verl/tools/{task}.yaml"
    agent_cfg = s.agent_loop_config
    project, experiment, logger = s.project_name, s.experiment_name, s.logger
    ckpt_dir = s.ckpt_dir or f"{root}/checkpoints/{project}/{experiment}"
    # The original's SAVE_MODEL_FOLDER: its scripts saved to $SAVE_MODEL_FOLDER/$EXPERIMENT_NAME.
    save_folder = s.save_model_folder
    if save_folder and s.ckpt_dir:
        warn(f"SAVE_MODEL_FOLDER (the original's name) is ignored: CKPT_DIR={ckpt_dir} is also set")
    elif save_folder:
        ckpt_dir = f"{save_folder.rstrip('/')}/{experiment}"
        if not ckpt_dir.startswith("/"):
            ckpt_dir = f"{base('SAVE_MODEL_FOLDER')}/{ckpt_dir.removeprefix('./')}"
        print(f"[afm]   SAVE_MODEL_FOLDER -> CKPT_DIR={ckpt_dir} (SAVE_MODEL_FOLDER/EXPERIMENT_NAME, as the original "
              "saved)", file=sys.stderr, flush=True)
    resume_mode, resume_path = s.resume_mode, s.resume_from_path
    rollout_dir = s.rollout_data_dir
    reward_manager, reward_fn = s.reward_manager, s.reward_fn
    total_steps = s.total_training_steps

    need(s.trainer_mode != "separate_async" or device == "gpu",
         "TRAINER_MODE=separate_async needs GPUs: verl pushes weights to the separate rollout through an "
         "nccl/nixl/mooncake checkpoint engine (trainer_separate_async.py:68); on the CPU use colocate_async")
    need(device != "cpu" or engine == "hf", "DEVICE=cpu needs ROLLOUT_ENGINE=hf (vLLM/SGLang need a GPU)")
    need(engine != "hf" or tp == "1", f"ROLLOUT_ENGINE=hf runs one model copy per rank: TP must be 1 (got '{tp}')")
    need(resume_mode != "resume_path" or bool(resume_path),
         "RESUME_MODE=resume_path needs RESUME_FROM_PATH=<CKPT_DIR>/global_step_N")
    loggers = split_list(logger.replace(" ", ""))
    need(bool(loggers), "LOGGER is empty (use console)")
    for item in loggers:
        need(item in LOGGERS, f"LOGGER must be a comma-separated list of {', '.join(LOGGERS)} (got '{logger}')")
    n_nodes, n_gpus, n_tp, n = int(nnodes), int(gpus), int(tp), int(rollout_n)
    n_train, n_mini, n_response = int(train_bs), int(mini_bs), int(response_len)
    need(n_mini <= n_train, f"MINI_BATCH_SIZE ({mini_bs}) must not exceed TRAIN_BATCH_SIZE ({train_bs})")
    need(n_train % n_mini == 0, f"TRAIN_BATCH_SIZE ({train_bs}) must be a multiple of MINI_BATCH_SIZE ({mini_bs})")
    if algorithm != "ppo" and n <= 1:
        warn("ROLLOUT_N=1: GRPO advantages are zero and filter_groups keeps nothing (ALGORITHM=ppo trains with n=1)")
    need(n_gpus % n_tp == 0, f"GPUS_PER_NODE ({gpus}) must be a multiple of TP ({tp})")
    if use_dyn == "false":
        need(n_train * n % (n_nodes * n_gpus) == 0,
             f"TRAIN_BATCH_SIZE x ROLLOUT_N ({n_train * n}) must be divisible by the {n_nodes * n_gpus} GPUs (verl "
             "checks it; or USE_DYNAMIC_BSZ=true)")
    if reward_manager == "dapo" and overlong == "true":
        need(is_posint(overlong_len) and int(overlong_len) <= n_response,
             f"OVERLONG_BUFFER_LEN must be 1 .. MAX_RESPONSE_LENGTH ({response_len}) (got '{overlong_len}')")
    if reward_manager != "dapo" and s.overlong_buffer_len:
        warn(f"OVERLONG_BUFFER_LEN is used by REWARD_MANAGER=dapo only; {reward_manager} applies no length penalty")
    max_rpm, max_tpm = s.reward_max_rpm, s.reward_max_tpm
    need(bool(s.model_path), "MODEL_PATH is empty")
    need(bool(_NAME.match(experiment)),
         f"EXPERIMENT_NAME may hold letters, digits, '_', '.', '-' (got '{experiment}')")
    need(bool(_NAME.match(project)), f"PROJECT_NAME may hold letters, digits, '_', '.', '-' (got '{project}')")

    # ---- paths: a relative value the caller gave is taken from the caller's directory, a default from the repo --
    model, model_base = s.model_path, base("MODEL_PATH")
    # A relative path that exists (here, or under the repo for the default) is a local folder; saves/... and ./...
    # are always folders; anything else is a hub id (org/name).
    if not model.startswith("/") and os.path.exists(f"{model_base}/{model}"):
        model = f"{model_base}/{model.removeprefix('./')}"
    if model.startswith(("saves/", "./")):
        model = f"{model_base}/{model.removeprefix('./')}"
    train_files = hydra_files("TRAIN_FILES", s.train_files, base("TRAIN_FILES"))
    val_value = s.val_files
    val_files = hydra_files("VAL_FILES", val_value, base("VAL_FILES")) if val_value.replace(" ", "") else ""
    if not agent_cfg.startswith("/"):
        agent_cfg = f"{base('AGENT_LOOP_CONFIG')}/{agent_cfg}"
    if not tool_cfg.startswith("/"):
        tool_cfg = f"{base('TOOL_CONFIG')}/{tool_cfg}"
    if not ckpt_dir.startswith("/"):
        ckpt_dir = f"{base('CKPT_DIR')}/{ckpt_dir}"
    # The validation dumps default to a folder of the resolved checkpoint directory.
    val_dir = f"{ckpt_dir}/validation" if s.val_data_dir is None else s.val_data_dir
    if val_dir and not val_dir.startswith("/"):
        val_dir = f"{base('VAL_DATA_DIR')}/{val_dir}"
    if rollout_dir and not rollout_dir.startswith("/"):
        rollout_dir = f"{base('ROLLOUT_DATA_DIR')}/{rollout_dir}"
    if resume_path and not resume_path.startswith("/"):
        resume_path = f"{base('RESUME_FROM_PATH')}/{resume_path}"
    reward_path = f"{root}/afm/rewards/score.py"
    need(os.path.isfile(reward_path), f"reward entry not found: {reward_path}")

    # ---- the overrides -----------------------------------------------------------------------------------------
    ov = [f"data.train_files={train_files}"]
    if val_files:
        ov += [f"data.val_files={val_files}", f"trainer.test_freq={s.test_freq}",
               f"trainer.val_before_train={val_before}"]
    else:
        # verl 0.9.1's V1 trainer builds a validation dataset even when it never validates (trainer_base.py:718):
        # data.val_files=null crashes it, so the training files stand in and validation stays off.
        ov += [f"data.val_files={train_files}", "trainer.test_freq=-1", "trainer.val_before_train=False"]
    ov += ["data.prompt_key=prompt", "data.reward_fn_key=data_source", f"data.max_prompt_length={prompt_len}",
           f"data.max_response_length={response_len}", f"data.train_batch_size={train_bs}",
           "data.return_raw_chat=True", "data.filter_overlong_prompts=True", "data.truncation=error",
           "data.shuffle=True"]
    # model and actor (FSDP)
    ov += [f"actor_rollout_ref.model.path={model}",
           "actor_rollout_ref.model.enable_gradient_checkpointing=True",
           "actor_rollout_ref.model.use_remove_padding=True",
           f"actor_rollout_ref.actor.optim.lr={s.lr}",
           f"actor_rollout_ref.actor.optim.lr_warmup_steps={s.warmup_steps}",
           f"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio={s.warmup_ratio}",
           f"actor_rollout_ref.actor.optim.weight_decay={s.weight_decay}",
           f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_bs}",
           f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
           f"actor_rollout_ref.actor.use_dynamic_bsz={use_dyn}",
           f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={ppo_max_tokens}",
           f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={s.sp_size}",
           f"actor_rollout_ref.actor.fsdp_config.param_offload={param_offload}",
           f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={opt_offload}"]
    attn = attention(s.attn_impl, python, env)
    impl = attn.split(" ", 1)[0]
    ov.append(f"+actor_rollout_ref.model.override_config.attn_implementation={impl}")
    if algorithm == "ppo":
        ov.append(f"+critic.model.override_config.attn_implementation={impl}")
    # DAPO (configs/verl/dapo.sh) or PPO (configs/verl/ppo.sh)
    ov += ppo_overrides(s, model) if algorithm == "ppo" else dapo_overrides(s, as_bool("FILTER_GROUPS", s.filter_groups))
    # rollout: async server, multi-turn through the afm_agent loop
    logprob_micro = s.logprob_micro_batch_size
    ov += [f"actor_rollout_ref.rollout.name={engine}",
           "actor_rollout_ref.rollout.mode=async",
           f"actor_rollout_ref.rollout.n={rollout_n}",
           f"actor_rollout_ref.rollout.temperature={s.temperature}",
           f"actor_rollout_ref.rollout.top_p={s.top_p}",
           f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
           f"actor_rollout_ref.rollout.gpu_memory_utilization={s.gpu_mem_util}",
           f"actor_rollout_ref.rollout.max_model_len={max_len}",
           f"actor_rollout_ref.rollout.max_num_batched_tokens={max_len}",
           f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={logprob_micro}",
           "actor_rollout_ref.rollout.calculate_log_probs=True",
           f"actor_rollout_ref.rollout.val_kwargs.n={s.val_n}",
           f"actor_rollout_ref.rollout.val_kwargs.temperature={s.val_temperature}",
           f"actor_rollout_ref.rollout.val_kwargs.top_p={s.val_top_p}",
           f"actor_rollout_ref.rollout.val_kwargs.do_sample={val_sample}",
           "actor_rollout_ref.rollout.multi_turn.enable=True",
           f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={max_turns}",
           f"actor_rollout_ref.rollout.multi_turn.max_user_turns={max_tool_calls}",
           f"actor_rollout_ref.rollout.multi_turn.max_tool_response_length={s.max_obs_chars}",
           f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_cfg}",
           f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_cfg}",
           f"actor_rollout_ref.rollout.agent.default_agent_loop={s.agent_loop}",
           f"actor_rollout_ref.rollout.agent.num_workers={s.agent_num_workers}",
           f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={logprob_micro}"]
    # rollout engine and device (experiments/local.sh)
    ov += engine_overrides(engine, device, n_gpus, n_nodes)
    if n_nodes > 1:
        ov += runtime_env_overrides(trainer_env(device, env))
    # SAVE_HF_MODEL=true: every checkpoint also holds the actor as a Hugging Face model
    # (global_step_N/actor/huggingface), ready for afm eval / afm infer without verl's model merger.
    if as_bool("SAVE_HF_MODEL", s.save_hf_model) == "true":
        ov += ["actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
               "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"]
    # reward: afm's entry through verl's reward loop; afm_<manager> is verl's manager that also hands compute_score
    # the agent loop's fields (afm/rl/reward_manager.py)
    ov += [f"reward.num_workers={s.reward_num_workers}", f"reward.reward_manager.name=afm_{reward_manager}",
           f"reward.custom_reward_function.path={reward_path}", f"reward.custom_reward_function.name={reward_fn}",
           f"+reward.custom_reward_function.reward_kwargs.format_mode={s.format_mode}",
           f"+reward.custom_reward_function.reward_kwargs.infra_fail_limit={s.infra_fail_limit}"]
    if reward_manager == "dapo":
        if algorithm == "ppo":
            warn("REWARD_MANAGER=dapo with ALGORITHM=ppo: DAPO's overlong shaping on PPO")
        ov += [f"+reward.reward_kwargs.max_resp_len={response_len}",
               f"+reward.reward_kwargs.overlong_buffer_cfg.enable={overlong}",
               f"+reward.reward_kwargs.overlong_buffer_cfg.len={overlong_len}",
               f"+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={s.overlong_penalty_factor}",
               "+reward.reward_kwargs.overlong_buffer_cfg.log=True"]
    elif reward_manager == "rate_limited":
        ov += [f"+reward.max_concurrent={s.reward_max_concurrent}", f"+reward.estimated_tokens_per_request={s.reward_tokens_per_request}",
               f"+reward.timeout={s.reward_timeout}"]
        ov += [f"+reward.max_rpm={max_rpm}"] if max_rpm else []
        ov += [f"+reward.max_tpm={max_tpm}"] if max_tpm else []
    # trainer: cluster, logging, checkpoints, validation
    ov += [f"trainer.nnodes={nnodes}", f"trainer.n_gpus_per_node={gpus}", f"trainer.project_name={project}",
           f"trainer.experiment_name={experiment}", f"trainer.logger=[{','.join(loggers)}]",
           f"trainer.total_epochs={s.total_epochs}", f"trainer.save_freq={s.save_freq}",
           f"trainer.default_local_dir={ckpt_dir}", f"trainer.resume_mode={resume_mode}",
           "trainer.log_val_generations=10",
           # Hydra's own log folder: next to the checkpoints, not ./outputs/ of wherever the script was started
           f"hydra.run.dir={ckpt_dir}/hydra/${{now:%Y-%m-%d_%H-%M-%S}}"]
    ov += [f"trainer.total_training_steps={total_steps}"] if total_steps else []
    ov += [f"trainer.resume_from_path={resume_path}"] if resume_mode == "resume_path" else []
    ov += [f"trainer.max_actor_ckpt_to_keep={s.max_ckpt_to_keep}"] if s.max_ckpt_to_keep else []
    ov += [f"trainer.validation_data_dir={val_dir}"] if val_dir else []
    ov += [f"trainer.rollout_data_dir={rollout_dir}"] if rollout_dir else []
    ov += [*s.extra_args.split(), *tail]

    # ---- environment notes -------------------------------------------------------------------------------------
    added: dict[str, str] = {}
    env_lines = []
    ray_address = s.ray_address
    if n_nodes > 1:
        added["RAY_ADDRESS"] = ray_address = ray_address or "auto"
        env_lines.append(f"RAY_ADDRESS={ray_address}")
    elif ray_address:
        env_lines.append(f"RAY_ADDRESS={ray_address}")
    if "CUDA_VISIBLE_DEVICES" in env:
        env_lines.append(f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}")
    if "swanlab" in logger.replace(" ", "").split(","):
        # verl's swanlab logger reads these from the environment; its default log dir is relative to the repo root.
        log_dir = env.get("SWANLAB_LOG_DIR") or f"{ckpt_dir}/swanlog"
        added["SWANLAB_LOG_DIR"] = (log_dir if log_dir.startswith("/")
                                    else f"{caller_dir.rstrip('/')}/{log_dir.removeprefix('./')}")
        env_lines.append(f"SWANLAB_LOG_DIR={added['SWANLAB_LOG_DIR']}")
        if env.get("SWANLAB_MODE"):
            env_lines.append(f"SWANLAB_MODE={env['SWANLAB_MODE']}")

    lines = [f"[afm] {script}: task={task} nodes={nnodes} gpus/node={gpus} device={device} engine={engine} TP={tp} "
             f"prompts/step={train_bs} x {rollout_n} rollouts, mini-batch={mini_bs}, "
             f"prompt+response={prompt_len}+{response_len}, turns<={max_turns}, reward={reward_manager}/{reward_fn}",
             f"[afm] algorithm: {algorithm}; attention: {attn}",
             f"[afm] checkpoints: {ckpt_dir} (resume_mode={resume_mode})"]
    if env_lines:
        lines += ["[afm] environment:", *(f"  {line}" for line in env_lines)]
    lines.append("[afm] command:")
    lines.append(f"{shell_word(python)} -m verl.trainer.main_ppo"
                 + "".join(f" \\\n    {shell_word(arg)}" for arg in ov))
    files = [f.removesuffix("]") for f in split_list(f"{train_files.removeprefix('[')},{val_files.removeprefix('[')}")]
    return RlLaunch(python, ov, "\n".join(lines), ckpt_dir, device, n_nodes, dry_run,
                    inputs=[*files, tool_cfg, agent_cfg], model=model, env=added, gpus=n_gpus,
                    join_timeout=s.join_timeout)


def prepare_local(python: str, workdir: str, settings: RlSettings) -> None:
    """--local: build the toy parquet and policy when the profile's defaults point at them."""
    if not workdir:
        return
    wanted = (settings.train_files == f"{workdir}/toy_train.parquet"
              or settings.model_path == f"{workdir}/toy_policy")
    built = (os.path.isfile(f"{workdir}/toy_train.parquet")
             and os.path.isfile(f"{workdir}/toy_policy/afm_toy_policy.json"))
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
                   TOKENIZERS_PARALLELISM="false")
    if env.get("AFM_RL_TRACE_DIR"):
        out["AFM_RL_TRACE_DIR"] = env["AFM_RL_TRACE_DIR"]
    return out


def run(launch: RlLaunch, root: str) -> int:
    """Start verl: its output goes to the terminal and is appended to CKPT_DIR/train.log."""
    env = dict(os.environ)
    env.update(launch.env)
    check = subprocess.run([launch.python, "-c", "import verl, afm"], capture_output=True, env=env)
    if check.returncode != 0:
        raise KnobError(f"'{launch.python}' cannot import verl and afm: run 'AFM_VENV=.venv-rl AFM_EXTRAS=rl bash "
                        "scripts/install.sh' or set PYTHON")
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
    p = argparse.ArgumentParser(prog="python -m afm.rl.knobs", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True, choices=TASK_NAMES)
    p.add_argument("--script", required=True, help="the script's name, for messages")
    p.add_argument("--root", required=True, help="the repository")
    p.add_argument("--cwd", default=os.getcwd(), help="where the script was started (relative knobs it was given)")
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
