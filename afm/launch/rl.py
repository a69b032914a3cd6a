"""The RL launch settings (experiments/train_*_agent.sh): every knob declared once (:class:`RlSettings`: default,
variable, help, check), the per-task defaults and the profiles that change them (``--local``, ``ALGORITHM=ppo``,
``STAGE=2``, the hf engine, the CPU) as data, and the original project's names. The Hydra overrides built from them
(the DAPO/PPO recipe included) are :mod:`afm.launch.rl_overrides`'s, one function per group.

How a value is found, first match wins: the caller's environment (the original's names applied), then the layers in
the order :func:`layers` lists them (``--local``, the hf engine's TP, ``ALGORITHM=ppo``, the code task's stage, the
task, the CPU), then the field's declared default. A knob set but empty counts as unset, except ``VAL_FILES`` and
``TOTAL_TRAINING_STEPS`` (empty switches validation / the step cap off) and ``VAL_DATA_DIR``. The verl command is
built from these settings by :mod:`afm.rl.knobs` (the trainer side) with :mod:`afm.launch.rl_overrides`. Standard
library only.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TextIO

from afm.launch.names import apply_aliases, misspelt
from afm.launch.settings import Check, help_rows, knob, knobs, one_of
from afm.launch.values import KnobError, is_int, is_number, is_posint, is_uint

__all__ = ["ORIGINAL_NAMES", "PATH_KNOBS", "TASKS", "RlSettings", "check", "known_names", "layers", "resolve",
           "usage"]

TASK_NAMES = ("web", "code", "mhqa")
ALGORITHMS = ("dapo", "ppo")
ENGINES = ("vllm", "sglang", "hf")
TRAINER_MODES = ("sync", "colocate_async", "separate_async")
DEVICES = ("gpu", "cpu")
REWARD_MANAGERS = ("dapo", "rate_limited", "naive")
REWARD_FNS = ("compute_score", "compute_score_async")
FORMAT_MODES = ("score_only", "multiply", "penalty")
FILTER_METRICS = ("acc", "score", "reward")
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
RESUME_MODES = ("auto", "disable", "resume_path")
# verl 0.9.1's tracking backends (verl/utils/tracking.py).
LOGGERS = ("console", "wandb", "swanlab", "tensorboard", "mlflow", "file", "clearml", "trackio")
ATTN_IMPLS = ("auto", "flash_attention_2", "sdpa", "eager")

# The original project's names (original -> afm knob), in the order the launch notes them.
ORIGINAL_NAMES = {"ACTOR_LR": "LR", "TRAIN_BS": "TRAIN_BATCH_SIZE", "PPO_MINI_BS": "MINI_BATCH_SIZE", "N": "ROLLOUT_N",
                  "GEN_TP": "TP", "BASE_MODEL": "MODEL_PATH", "TRAIN_DATASETS": "TRAIN_FILES",
                  "VAL_DATASETS": "VAL_FILES", "EPOCHS": "TOTAL_EPOCHS", "STEPS": "TOTAL_TRAINING_STEPS",
                  "PPO_MICRO_BSZ_PER_GPU": "MICRO_BATCH_SIZE", "LOG_PROB_MICRO_BSZ_PER_GPU": "LOGPROB_MICRO_BATCH_SIZE",
                  "max_prompt_length": "MAX_PROMPT_LENGTH", "max_response_length": "MAX_RESPONSE_LENGTH",
                  "use_dynamic_bsz": "USE_DYNAMIC_BSZ"}
# The original's generation batch: no counterpart (verl 0.9.1 refills filtered groups itself), warned about.
IGNORED_NAMES = ("GEN_BS",)
# Variables the scripts read that are no settings field: the interpreter's environment and SFT's model variable.
OTHER_NAMES = ("AFM_RL_VENV", "AFM_MODEL_PATH")
# Paths: a relative value the caller gives is taken from the caller's directory, a default from the repository.
PATH_KNOBS = ("MODEL_PATH", "TRAIN_FILES", "VAL_FILES", "CKPT_DIR", "SAVE_MODEL_FOLDER", "TOOL_CONFIG",
              "AGENT_LOOP_CONFIG", "VAL_DATA_DIR", "ROLLOUT_DATA_DIR", "RESUME_FROM_PATH")
# Set but empty is a value for these (no validation, no step cap, no validation dumps); unset takes the default.
EMPTY_IS_A_VALUE = ("VAL_FILES", "TOTAL_TRAINING_STEPS", "VAL_DATA_DIR")

_BOOL_WORDS = ("true", "1", "yes", "on", "false", "0", "no", "off")
_BOOL = Check(lambda v: v.lower() in _BOOL_WORDS, "true or false")
_NUMBER = Check(is_number, "a number")
_POSINT = Check(is_posint, "a positive integer")
_POSINT_OR_EMPTY = Check(lambda v: not v or is_posint(v), "a positive integer or empty")
_NUMBER_OR_EMPTY = Check(lambda v: not v or is_number(v), "a number or empty")
_OFF_INT = Check(is_int, "an integer, -1 = off")

# ---- per-task defaults (the paper's settings: Chain-of-Agents, arXiv 2508.13167, and the original's
# train_dapo_*_agent.sh; README "RL"). A knob a task does not name takes the field's default. --------------------
TASKS: dict[str, dict[str, str]] = {
    "web": {"MODEL_PATH": "saves/AFM-WebAgent-32B-sft", "TRAIN_FILES": "data/rl/web_train.parquet",
            "VAL_FILES": "data/rl/web_val.parquet", "TP": "8", "GPU_MEM_UTIL": "0.3", "TRAIN_BATCH_SIZE": "64",
            "MINI_BATCH_SIZE": "64", "LOGPROB_MICRO_BATCH_SIZE": "8", "USE_DYNAMIC_BSZ": "true", "WARMUP_STEPS": "3",
            "WEIGHT_DECAY": "0.1", "MAX_RESPONSE_LENGTH": "30720", "MAX_TURNS": "25", "CLIP_RATIO_C": "10.0",
            "MAX_OBS_CHARS": "8192", "TOTAL_EPOCHS": "2", "TOTAL_TRAINING_STEPS": "60",
            "EXPERIMENT_NAME": "dapo_web_agent", "REWARD_FN": "compute_score_async"},
    # Two-stage length schedule: STAGE=1 trains with 16k-token responses (prompt+response 20k), STAGE=2 continues
    # from the stage-1 policy with 28k (prompt+response 32k): CODE_STAGES.
    "code": {"MODEL_PATH": "saves/AFM-CodeAgent-32B-sft", "TRAIN_FILES": "data/rl/code_train.parquet",
             "VAL_FILES": "data/rl/code_val.parquet", "TRAIN_BATCH_SIZE": "256", "MINI_BATCH_SIZE": "32",
             "WARMUP_STEPS": "10", "MAX_PROMPT_LENGTH": "4096", "MAX_RESPONSE_LENGTH": "16384",
             "MAX_OBS_CHARS": "2048", "TOTAL_EPOCHS": "100", "TOTAL_TRAINING_STEPS": "2000",
             "EXPERIMENT_NAME": "dapo_code_agent"},
    # Search-R1 setting: NQ + HotpotQA training questions, wiki_search over a 2018 Wikipedia dump, EM reward.
    "mhqa": {"MODEL_PATH": "saves/AFM-MHQA-Agent-7B-sft", "TRAIN_FILES": "data/rl/mhqa_train.parquet",
             "VAL_FILES": "data/rl/mhqa_val.parquet", "ROLLOUT_N": "5", "TRAIN_BATCH_SIZE": "512",
             "MINI_BATCH_SIZE": "256", "WARMUP_STEPS": "-1", "WARMUP_RATIO": "0.285", "MAX_RESPONSE_LENGTH": "8192",
             "MAX_OBS_CHARS": "4096", "TEST_FREQ": "20", "SAVE_FREQ": "20", "TOTAL_EPOCHS": "15",
             "TOTAL_TRAINING_STEPS": "1005", "EXPERIMENT_NAME": "dapo_mhqa_agent"},
}
CODE_STAGES: dict[str, dict[str, str]] = {
    "1": {},
    "2": {"MAX_RESPONSE_LENGTH": "28672", "EXPERIMENT_NAME": "dapo_code_agent_stage2"},
}
# ALGORITHM=ppo: the original's MHQA recipe (GAE, a critic, KL 0.001) changes these (its own knobs are fields).
PPO: dict[str, str] = {"ROLLOUT_N": "1", "REWARD_MANAGER": "naive", "EXPERIMENT_NAME": "ppo_{task}_agent"}
# DEVICE=cpu: one logical "GPU" per trainer rank.
CPU: dict[str, str] = {"GPUS_PER_NODE": "1"}
# ROLLOUT_ENGINE=hf runs one model copy per trainer rank: the task's TP does not apply.
HF_ENGINE: dict[str, str] = {"TP": "1"}
# ROLLOUT_ENGINE=vllm with DEVICE=cpu: vLLM's CPU build serves one copy.
VLLM_CPU: dict[str, str] = {"TP": "1"}
# --local, the laptop profile (experiments/local.sh says what it is for): CPU, hf rollout, the toy code task and its
# tiny policy (built once under runs/rl_local/), 4 prompts x 4 rollouts, 128-token responses, 4 steps. {work} is
# AFM_LOCAL_DIR, else runs/rl_local/<task>. LR: 1e-4 suits the toy policy, trained from scratch; a pretrained
# MODEL_PATH collapses at that rate (Gemma 3 270M: entropy 3.09 -> 0.90 in 2 steps) and keeps LR's default, the
# original recipe's ACTOR_LR (LOCAL_TOY_LR is applied only when MODEL_PATH is not given).
LOCAL: dict[str, str] = {
    "DEVICE": "cpu", "ROLLOUT_ENGINE": "hf", "TRAIN_FILES": "{work}/toy_train.parquet", "VAL_FILES": "",
    "MODEL_PATH": "{work}/toy_policy", "TRAIN_BATCH_SIZE": "4", "MINI_BATCH_SIZE": "4", "ROLLOUT_N": "4",
    "USE_DYNAMIC_BSZ": "false", "MAX_PROMPT_LENGTH": "160", "MAX_RESPONSE_LENGTH": "128", "MAX_TURNS": "3",
    "MAX_OBS_CHARS": "512", "WARMUP_STEPS": "0", "TOTAL_EPOCHS": "100", "TOTAL_TRAINING_STEPS": "4",
    "SAVE_FREQ": "2", "TEST_FREQ": "-1", "LOGGER": "console", "EXPERIMENT_NAME": "local_{task}",
    "CKPT_DIR": "{work}/checkpoints", "AGENT_NUM_WORKERS": "1", "REWARD_NUM_WORKERS": "1",
    "MAX_INFLIGHT_GEN_BATCHES": "1", "SAVE_HF_MODEL": "true"}
LOCAL_TOY_LR = "1e-4"


# ---- the settings --------------------------------------------------------------------------------------------------
# Values stay strings as typed: the overrides carry them verbatim (LR=1e-6 is actor.optim.lr=1e-6). "task" in the
# table means the task's value (TASKS, listed by --help); an empty default is one derived from other knobs.
@dataclass
class RlSettings:
    """Every knob of the RL scripts, in the order of the --help table and of the checks."""

    algorithm: str = knob("ALGORITHM", "dapo", "dapo (configs/verl/dapo.sh) | ppo (the original's MHQA recipe: GAE,\n"
                          "a critic, KL 0.001, n=1; configs/verl/ppo.sh; train_ppo_mhqa_agent.sh)",
                          check=one_of(ALGORITHMS))
    stage: str = knob("STAGE", "1", "(code) 1: 16k-token responses | 2: 28k (32k context), from the stage-1 policy",
                      check=Check(CODE_STAGES.__contains__, "1 (16k responses) or 2 (32k context)"), stage="code")
    model_path: str = knob(
        "MODEL_PATH", "", "HF id or folder of the starting policy: the output of the task's SFT\n"
        "script (sft_scripts/); AFM_MODEL_PATH is not read here. Set\n"
        "in the environment (e.g. left over from an SFT run, where it is the base\n"
        "model), it replaces that default for the actor (and the ppo critic): a\nwarning says so", shown="task")
    train_files: str = knob("TRAIN_FILES", "", "RL parquet(s) from `afm data rl` / data/prepare_rl.sh, comma-separated",
                            shown="task")
    val_files: str = knob("VAL_FILES", "", 'validation parquet(s), comma-separated; "" = no validation', shown="task")
    nnodes: str = knob("NNODES", "1", "nodes in the Ray cluster (start it with experiments/ray_cluster.sh)",
                       check=_POSINT)
    gpus_per_node: str = knob("GPUS_PER_NODE", "8", "GPUs used on each node", check=_POSINT, shown="{} (cpu: 1)")
    join_timeout: str = knob("JOIN_TIMEOUT", "300", "(NNODES > 1) seconds to wait for NNODES Ray nodes with\n"
                             "GPUS_PER_NODE GPUs and this afm/verl; then one line says which node is\nmissing or "
                             "different", check=Check(is_posint, "a positive number of seconds"))
    ray_dashboard: str = knob("RAY_DASHBOARD", "auto", "(NNODES=1) Ray's dashboard: true | false | auto (off with\n"
                              "DEVICE=cpu, where its processes cost ~10 s of every launch on 2 cores;\n"
                              "Ray's default on GPU nodes); NNODES > 1: ray_cluster.sh's node",
                              check=one_of(("auto", "true", "false")))
    worker_zygote: str = knob("WORKER_ZYGOTE", "auto", "Ray's workers forked from one process that imported torch,\n"
                              "tensordict and transformers (afm/rl/local/zygote.py) instead\nof each importing them: "
                              "true | false | auto (on with DEVICE=cpu);\none node: the launch starts it; NNODES > 1: "
                              "each node's\nexperiments/ray_cluster.sh (its own WORKER_ZYGOTE)",
                              check=one_of(("auto", "true", "false")))
    rollout_engine: str = knob("ROLLOUT_ENGINE", "vllm", "vllm | sglang (verl's async server; install the engine in\n"
                               "the env) | hf (afm's transformers server, no vLLM needed: one GPU, or the\nCPU; "
                               "experiments/local.sh)", check=one_of(ENGINES))
    device: str = knob("DEVICE", "gpu", "gpu | cpu (verl's FSDP trainer on the CPU through afm's `cpu` platform)",
                       check=one_of(DEVICES))
    cpu_precision: str = knob("CPU_PRECISION", "fp32", "(DEVICE=cpu) fp32 | bf16: the FSDP actor computes in bfloat16\n"
                              "over float32 weights (verl's mixed precision) and the rollout samples in\n"
                              "bfloat16; 1.6x a Gemma 3 270M forward/backward on a CPU with AVX512-BF16\n"
                              "(slower on the toy policy and on CPUs without it)",
                              check=one_of(("fp32", "bf16")))
    trainer_mode: str = knob("TRAINER_MODE", "sync", "sync | colocate_async (one-step off-policy: the next batch\n"
                             "generates while the actor updates; trainer and rollout share the GPUs) |\n"
                             "separate_async (rollout on its own GPUs; needs an nccl/nixl/mooncake\ncheckpoint "
                             "engine)", check=one_of(TRAINER_MODES))
    tp: str = knob("TP", "4", "rollout tensor-parallel size (hf: 1)", check=_POSINT, shown="task")
    gpu_mem_util: str = knob("GPU_MEM_UTIL", "0.5", "rollout gpu_memory_utilization", check=_NUMBER, shown="task")
    rollout_n: str = knob("ROLLOUT_N", "8", "rollouts per prompt (the GRPO group; ppo 1)", check=_POSINT, shown="task")
    train_batch_size: str = knob("TRAIN_BATCH_SIZE", "", "prompts per step", check=_POSINT, shown="task")
    mini_batch_size: str = knob("MINI_BATCH_SIZE", "", "prompts per actor update", check=_POSINT, shown="task")
    micro_batch_size: str = knob("MICRO_BATCH_SIZE", "2", "ppo_micro_batch_size_per_gpu", check=_POSINT)
    logprob_micro_batch_size: str = knob("LOGPROB_MICRO_BATCH_SIZE", "16", "log_prob_micro_batch_size_per_gpu",
                                         check=_POSINT, shown="task")
    use_dynamic_bsz: str = knob("USE_DYNAMIC_BSZ", "false", "pack by tokens instead of micro batches", check=_BOOL,
                                shown="task")
    ppo_max_token_len: str = knob("PPO_MAX_TOKEN_LEN", "", "ppo_max_token_len_per_gpu (with USE_DYNAMIC_BSZ)",
                                  check=_POSINT_OR_EMPTY, shown="prompt+resp")
    sp_size: str = knob("SP_SIZE", "1", "Ulysses sequence parallel size of the actor", check=_POSINT)
    param_offload: str = knob("PARAM_OFFLOAD", "true", "FSDP parameter offload to CPU", check=_BOOL)
    optimizer_offload: str = knob("OPTIMIZER_OFFLOAD", "true", "FSDP optimizer offload to CPU", check=_BOOL)
    lr: str = knob("LR", "1e-6", "actor learning rate (--local: 1e-4 for the toy policy)", check=_NUMBER)
    warmup_steps: str = knob("WARMUP_STEPS", "", "lr warmup steps; -1 = use WARMUP_RATIO", check=_OFF_INT,
                             shown="task")
    warmup_ratio: str = knob("WARMUP_RATIO", "0.0", "lr warmup as a fraction of the steps", check=_NUMBER,
                             shown="task")
    weight_decay: str = knob("WEIGHT_DECAY", "0.01", "AdamW weight decay", check=_NUMBER, shown="task")
    adam_eps: str = knob("ADAM_EPS", "", "AdamW epsilon (empty: torch's 1e-8). Above the gradient's size per\n"
                         "weight, a weight's step follows its gradient instead of ~LR for each\n"
                         "(the quickstart's tiny policy: 1e-3, docs/rl.md)", check=_NUMBER_OR_EMPTY)
    max_prompt_length: str = knob("MAX_PROMPT_LENGTH", "2048", "data.max_prompt_length", check=_POSINT, shown="task")
    max_response_length: str = knob("MAX_RESPONSE_LENGTH", "", "tokens after the prompt, observations included",
                                    check=_POSINT, shown="task")
    temperature: str = knob("TEMPERATURE", "1.0", "rollout sampling temperature", check=_NUMBER)
    top_p: str = knob("TOP_P", "1.0", "rollout top_p (the original's RL used 1.0; its web inference used 0.9)",
                      check=_NUMBER)
    max_turns: str = knob("MAX_TURNS", "8", "multi_turn.max_assistant_turns", check=_POSINT, shown="task")
    max_tool_calls: str = knob("MAX_TOOL_CALLS", "", "multi_turn.max_user_turns (tool responses per trajectory)",
                               check=_POSINT_OR_EMPTY, shown="MAX_TURNS")
    max_obs_chars: str = knob(
        "MAX_OBS_CHARS", "", "multi_turn.max_tool_response_length: characters kept of one\n"
        "observation. The original set no cap (its verl fork had none; its code\ntool kept 512x3 = 1536 characters "
        "per output). verl 0.9.1 always cuts\n(default 256), so afm sets a cap that the original's observations "
        "fit:\nten search results or a page summary run a few thousand characters, a\ncrawl that fell back to raw "
        "text (8,000) is kept whole; code keeps the\ntool's 1536 per stream for stdout and stderr together; mhqa "
        "fits 3\npassages x a few queries. Larger values cost response tokens", check=_POSINT, shown="task")
    agent_loop: str = knob("AGENT_LOOP", "afm_agent", "rollout.agent.default_agent_loop (rows' agent_name column wins)")
    agent_loop_config: str = knob("AGENT_LOOP_CONFIG", "configs/verl/agent_loops.yaml", "where afm_agent is declared")
    tool_config: str = knob("TOOL_CONFIG", "", "verl tool yaml of the task", shown="configs/verl/tools/<task>.yaml")
    agent_num_workers: str = knob("AGENT_NUM_WORKERS", "8", "agent-loop worker actors (verl places them round-robin\n"
                                  "over the nodes; each calls the tool servers at its node's SERVER_HOST)",
                                  check=_POSINT)
    val_n: str = knob("VAL_N", "1", "validation samples per prompt", check=_POSINT)
    # Greedy validation, as the original (its scripts left verl's val_kwargs: temperature 0, top_p 1, do_sample
    # false): one deterministic score per question.
    val_temperature: str = knob("VAL_TEMPERATURE", "0", "validation temperature (greedy, as the original)",
                                check=_NUMBER)
    val_top_p: str = knob("VAL_TOP_P", "1.0", "validation top_p", check=_NUMBER)
    val_do_sample: str = knob("VAL_DO_SAMPLE", "false", "true = sampled validation (e.g. VAL_DO_SAMPLE=true\n"
                              "VAL_TEMPERATURE=0.6 VAL_TOP_P=0.95 VAL_N=16: the paper's avg@16)", check=_BOOL)
    val_before_train: str = knob("VAL_BEFORE_TRAIN", "true", "validate once before the first step", check=_BOOL)
    test_freq: str = knob("TEST_FREQ", "10", "validate every N steps (-1 = never)", check=_OFF_INT, shown="task")
    save_freq: str = knob("SAVE_FREQ", "5", "checkpoint every N steps (-1 = never; one is also saved at the end)",
                          check=_OFF_INT, shown="task")
    total_epochs: str = knob("TOTAL_EPOCHS", "", "epochs over TRAIN_FILES", check=_POSINT, shown="task")
    total_training_steps: str = knob("TOTAL_TRAINING_STEPS", "", 'stop after N steps ("" = run all epochs)',
                                     check=_POSINT_OR_EMPTY, shown="task")
    project_name: str = knob("PROJECT_NAME", "afm_rl", "tracker project")
    experiment_name: str = knob("EXPERIMENT_NAME", "", "run name (also the checkpoint folder)", shown="task")
    logger: str = knob("LOGGER", "console,tensorboard", "comma-separated: " + ", ".join(LOGGERS) + "\n"
                       "(wandb/swanlab read WANDB_API_KEY/SWANLAB_API_KEY from environment.sh;\nswanlab also "
                       "SWANLAB_MODE (cloud | local: offline, no account) and\nSWANLAB_LOG_DIR, default "
                       "$CKPT_DIR/swanlog; pip install -e .[swanlab])")
    ckpt_dir: str = knob("CKPT_DIR", "", "trainer.default_local_dir (Hydra logs in CKPT_DIR/hydra/)",
                         shown="checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME")
    save_model_folder: str = knob("SAVE_MODEL_FOLDER", "", "the original's name: CKPT_DIR=$SAVE_MODEL_FOLDER/\n"
                                  "$EXPERIMENT_NAME when CKPT_DIR is unset (a note says so; with CKPT_DIR set\n"
                                  "it is ignored, warned)", shown='""')
    resume_mode: str = knob("RESUME_MODE", "auto", "auto (latest checkpoint in CKPT_DIR, else start) | disable |\n"
                            "resume_path", check=one_of(RESUME_MODES))
    resume_from_path: str = knob("RESUME_FROM_PATH", "", ".../global_step_N folder (with RESUME_MODE=resume_path)",
                                 shown='""')
    max_ckpt_to_keep: str = knob("MAX_CKPT_TO_KEEP", "", 'keep only the newest N actor checkpoints ("" = all)',
                                 check=_POSINT_OR_EMPTY, shown='""')
    save_hf_model: str = knob("SAVE_HF_MODEL", "false", "also save each checkpoint's actor as a Hugging Face model\n"
                              "(--local: true)", check=_BOOL)
    val_data_dir: str | None = knob("VAL_DATA_DIR", None, 'JSONL dumps of validation generations ("" = off)',
                                    shown="$CKPT_DIR/validation")  # None: unset
    rollout_data_dir: str = knob("ROLLOUT_DATA_DIR", "", 'JSONL dumps of every training rollout ("" = off; large)',
                                 shown='""')
    reward_manager: str = knob("REWARD_MANAGER", "dapo", "dapo (overlong shaping) | rate_limited (judge API quotas) |\n"
                               "naive", check=one_of(REWARD_MANAGERS), shown="{} (ppo: naive)")
    reward_fn: str = knob("REWARD_FN", "compute_score", "compute_score | compute_score_async (web: async, awaits\n"
                          "the LLM judge)", check=one_of(REWARD_FNS), shown="task")
    reward_num_workers: str = knob("REWARD_NUM_WORKERS", "8", "reward-loop worker actors", check=_POSINT)
    format_mode: str = knob("FORMAT_MODE", "score_only", "CoA format rule in the reward: score_only | multiply |\n"
                            "penalty", check=one_of(FORMAT_MODES))
    infra_fail_limit: str = knob("INFRA_FAIL_LIMIT", "8", "stop the step after N infrastructure failures in a row\n"
                                 "(dead sandbox or judge) in a reward worker, instead of training on 0\nrewards; 0 = "
                                 "never", check=Check(is_uint, "a whole number >= 0"))
    overlong_buffer: str = knob("OVERLONG_BUFFER", "true", "(dapo) linear penalty over the last OVERLONG_BUFFER_LEN\n"
                                "response tokens", check=_BOOL)
    overlong_buffer_len: str = knob("OVERLONG_BUFFER_LEN", "", "(dapo) buffer length; resp/8 is the original's 7L/8\n"
                                    "threshold", shown="resp/8")  # checked against MAX_RESPONSE_LENGTH
    overlong_penalty_factor: str = knob("OVERLONG_PENALTY_FACTOR", "1.0", "(dapo) penalty at the full response length",
                                        check=_NUMBER)
    reward_max_concurrent: str = knob("REWARD_MAX_CONCURRENT", "64", "(rate_limited) reward calls in flight",
                                      check=_POSINT, stage="rate_limited")
    reward_max_rpm: str = knob("REWARD_MAX_RPM", "", '(rate_limited) requests per minute ("" = unlimited)',
                               check=_POSINT_OR_EMPTY, stage="rate_limited", shown='""')
    reward_max_tpm: str = knob("REWARD_MAX_TPM", "", '(rate_limited) tokens per minute ("" = unlimited)',
                               check=_POSINT_OR_EMPTY, stage="rate_limited", shown='""')
    reward_tokens_per_request: str = knob("REWARD_TOKENS_PER_REQUEST", "2000", "(rate_limited) token estimate per\n"
                                          "judge call, for REWARD_MAX_TPM", check=_POSINT, stage="rate_limited")
    reward_timeout: str = knob("REWARD_TIMEOUT", "300", "(rate_limited) seconds before a reward call scores 0",
                               check=Check(is_number, "a number of seconds"), stage="rate_limited")
    filter_groups: str = knob("FILTER_GROUPS", "true", "DAPO dynamic sampling (drop groups whose FILTER_METRIC is\n"
                              "constant)", check=_BOOL)
    filter_metric: str = knob("FILTER_METRIC", "acc", "acc | score | reward", check=one_of(FILTER_METRICS))
    max_inflight_gen_batches: str = knob("MAX_INFLIGHT_GEN_BATCHES", "2", "prompt batches generating at once while\n"
                                         "refilling filtered groups", check=_POSINT)
    max_num_gen_batches: str = knob(
        "MAX_NUM_GEN_BATCHES", "10", "DAPO paper's cap: a step that filters this many batches of groups\nstops the "
        "run with an error (afm's patch; verl 0.9.1 ignores it); 0 =\nrefill forever, the original's value "
        "(docs/original_mapping.md says why\nafm differs)", check=_OFF_INT)
    clip_ratio_low: str = knob("CLIP_RATIO_LOW", "0.2", "clip-higher: the lower clip", check=_NUMBER)
    clip_ratio_high: str = knob("CLIP_RATIO_HIGH", "0.28", "clip-higher: the upper clip", check=_NUMBER)
    clip_ratio_c: str = knob("CLIP_RATIO_C", "3.0", "dual-clip constant", check=_NUMBER, shown="task")
    loss_agg_mode: str = knob("LOSS_AGG_MODE", "token-mean", "", check=one_of(LOSS_AGG_MODES))
    kl_coef: str = knob("KL_COEF", "0.001", "(ppo) actor KL loss coefficient (low_var_kl)", check=_NUMBER, stage="ppo")
    critic_lr: str = knob("CRITIC_LR", "1e-5", "(ppo) critic learning rate", check=_NUMBER, stage="ppo")
    critic_warmup_ratio: str = knob("CRITIC_WARMUP_RATIO", "0.05", "(ppo) critic lr warmup ratio", check=_NUMBER,
                                    stage="ppo")
    critic_max_token_len: str = knob("CRITIC_MAX_TOKEN_LEN", "100000", "(ppo) critic ppo_max_token_len_per_gpu\n"
                                     "(dynamic batch)", check=_POSINT, stage="ppo")
    attn_impl: str = knob("ATTN_IMPL", "auto", "auto: flash_attention_2 when this machine sees a GPU and PYTHON\n"
                          "imports flash_attn, else sdpa (printed); or flash_attention_2 | sdpa |\neager",
                          check=one_of(ATTN_IMPLS))
    python: str = knob("PYTHON", "", "interpreter with verl and afm",
                       shown="$AFM_RL_VENV/bin/python (.venv-rl) if present, else python3")
    ray_address: str = knob("RAY_ADDRESS", "", "Ray cluster to join (verl's ray.init reads it)",
                            shown="(auto when NNODES > 1)")
    extra_args: str = knob("EXTRA_ARGS", "", "more Hydra overrides, split on whitespace (script arguments follow)",
                           shown='""')
    dry_run: str = knob("DRY_RUN", "0", "1 (or the --dry-run argument): print the command, run nothing", check=_BOOL)

    def get(self, env: str) -> str:
        """The value of the knob read from variable ``env``."""
        return getattr(self, _FIELD[env])


_FIELD = {k.env: f.name for f, k in knobs(RlSettings)}


def known_names() -> list[str]:
    """Every variable the RL scripts read (for the misspelling check): the knobs, the original's names, the rest."""
    return [*_FIELD, *ORIGINAL_NAMES, *IGNORED_NAMES, *OTHER_NAMES]


def layers(task: str, values: Mapping[str, str], *, local: bool, work: str) -> Iterator[dict[str, str]]:
    """The defaults over the declared ones, in the order they apply (the first to set a knob wins); each layer may
    look at the knobs the layers before it set (``values``, updated by the caller between layers). ALGORITHM and
    STAGE choose layers: a bad one stops the launch when it is read."""
    if local:
        model_given = bool(values.get("MODEL_PATH"))
        yield {k: v.format(work=work, task=task) for k, v in LOCAL.items()}
        if not model_given:
            yield {"LR": LOCAL_TOY_LR}
        yield local_batches(values)
    if values.get("ROLLOUT_ENGINE") == "hf":
        yield HF_ENGINE
    if values.get("ROLLOUT_ENGINE") == "vllm" and (values.get("DEVICE") or default("DEVICE")) == "cpu":
        yield VLLM_CPU
    if _chosen("ALGORITHM", values) == "ppo":
        yield {k: v.format(task=task) for k, v in PPO.items()}
    if task == "code":
        yield CODE_STAGES[_chosen("STAGE", values)]
    yield TASKS[task]
    if (values.get("DEVICE") or default("DEVICE")) == "cpu":
        yield CPU


def script_defaults(task: str, algorithm: str = "", stage: str = "") -> dict[str, str]:
    """The values a script of ``task`` gives its knobs (no --local), over the declared defaults."""
    out: dict[str, str] = {"ALGORITHM": algorithm} if algorithm else {}
    for layer in layers(task, {"ALGORITHM": algorithm, "STAGE": stage}, local=False, work=""):
        _fill(out, layer)
    return out


def _chosen(name: str, values: Mapping[str, str]) -> str:
    value = values.get(name) or default(name)
    k = next(k for _, k in knobs(RlSettings) if k.env == name)
    message = k.check.error(name, value) if k.check else None
    if message:
        raise KnobError(message)
    return value


def local_batches(values: Mapping[str, str]) -> dict[str, str]:
    """--local: one micro-batch per mini-batch on each trainer rank; verl needs a rank's samples of a step (the batch
    divided by NNODES x GPUS_PER_NODE ranks) to divide into micro-batches."""
    nodes, gpus = values.get("NNODES") or "1", values.get("GPUS_PER_NODE") or "1"
    if not (is_int(nodes) and is_int(gpus)) or int(nodes) * int(gpus) <= 0:
        raise KnobError(f"NNODES and GPUS_PER_NODE must be positive (got '{values.get('NNODES', '')}' and "
                        f"'{values.get('GPUS_PER_NODE', '')}')")
    world = int(nodes) * int(gpus)
    out = {}
    mini, train, n = values.get("MINI_BATCH_SIZE", ""), values.get("TRAIN_BATCH_SIZE", ""), values.get("ROLLOUT_N", "")
    if is_int(mini) and is_int(n):
        out["MICRO_BATCH_SIZE"] = str(int(mini) * int(n) // world)
    if is_int(train) and is_int(n):
        out["LOGPROB_MICRO_BATCH_SIZE"] = str(int(train) * int(n) // world)
    return out


def default(env: str) -> str:
    """The declared default of the knob read from ``env``."""
    return next(f.default for f, k in knobs(RlSettings) if k.env == env)


def resolve(env: MutableMapping[str, str], task: str, *, local: bool, work: str, caller_names: list[str] | None = None,
            out: TextIO | None = None) -> tuple[RlSettings, set[str]]:
    """The settings of one launch of ``task`` from the caller's knobs in ``env`` (the original's names applied into
    ``env``, misspelt names warned about on ``out``), and the path knobs the caller gave."""
    out = out or sys.stderr
    if task not in TASKS:
        raise KnobError(f"unknown task '{task}' ({', '.join(TASK_NAMES)})")
    apply_aliases(env, ORIGINAL_NAMES, out=out)
    if "GEN_BS" in env:
        print("[afm] warning: GEN_BS (the original's generation batch) is ignored: verl 0.9.1 generates "
              "TRAIN_BATCH_SIZE prompts per batch and refills filtered groups itself (MAX_INFLIGHT_GEN_BATCHES)",
              file=out, flush=True)
    for line in misspelt(env if caller_names is None else caller_names, known_names()):
        print(f"[afm] warning: {line}", file=out, flush=True)
    given = {name for name in PATH_KNOBS if env.get(name)}
    values = {name: env[name] for name in _FIELD if name in env}
    if local and task != "code" and not (values.get("MODEL_PATH") and values.get("TRAIN_FILES")):
        raise KnobError(f"--local for the {task} agent needs MODEL_PATH and TRAIN_FILES (a small policy that calls its "
                        "tools, and an RL parquet) and its tool servers running (server/start_servers.sh); the "
                        "built-in toy task is experiments/train_dapo_code_agent.sh --local")
    for layer in layers(task, values, local=local, work=work):
        _fill(values, layer)
    _fill(values, {k.env: f.default for f, k in knobs(RlSettings) if f.default is not None})
    settings = RlSettings(**{_FIELD[name]: value for name, value in values.items()})
    _warn_model_path(settings, task, given, env, local, out)
    return settings, given


def _fill(values: dict[str, str], layer: Mapping[str, str]) -> None:
    for name, value in layer.items():
        if name in EMPTY_IS_A_VALUE:
            values.setdefault(name, value)
        elif not values.get(name):
            values[name] = value


def _warn_model_path(settings: RlSettings, task: str, given: set[str], env: Mapping[str, str], local: bool,
                     out: TextIO) -> None:
    """MODEL_PATH from the caller's environment (not the original's BASE_MODEL, whose alias note already names it)
    silently replaced the task's starting policy, the SFT output; an SFT run exports MODEL_PATH for its base model,
    so one left in the shell would start RL from the base model. One line."""
    if "MODEL_PATH" not in given or env.get("BASE_MODEL") or local:
        return
    task_default = TASKS[task]["MODEL_PATH"]
    if settings.model_path == task_default:
        return
    who = "the actor and the critic" if settings.algorithm == "ppo" else "the actor"
    print(f"[afm] warning: MODEL_PATH={settings.model_path} from the environment replaces this script's starting "
          f"policy {task_default} (the SFT output) for {who}; unset MODEL_PATH to start from the SFT output",
          file=out, flush=True)


def check(settings: RlSettings, task: str) -> str | None:
    """The error of the first knob (in declaration order) whose value breaks its check, or None; a knob of one
    task, algorithm or reward manager (its ``stage``) is checked only when that one is chosen."""
    chosen = ("", task, settings.algorithm, settings.reward_manager)
    for f, k in knobs(RlSettings):
        value = getattr(settings, f.name)
        if k.check is not None and k.stage in chosen and value is not None:
            message = k.check.error(k.env, value)
            if message:
                return message
    return None


# ---- help ----------------------------------------------------------------------------------------------------------
def table(values: Mapping[str, str] | None = None) -> str:
    """The knob table: name, default, help; ``values`` (a script's own, :func:`script_defaults`) replace the
    defaults they name, and "task" stands for the value of a knob that depends on the task."""
    lines = []
    for f, k in knobs(RlSettings):
        if k.help is None:
            continue
        shown = k.shown.format(f.default) if k.shown is not None else f.default
        if values is not None and (k.env in values or k.shown == "task"):
            shown = values.get(k.env, f.default)
        lines += help_rows(k.env, shown, k.help)
    return "\n".join(lines) + "\n"


def usage(script: str, task: str, env: Mapping[str, str]) -> str:
    """``bash <script> --help``: how to call it, then every knob with this script's defaults (ALGORITHM and STAGE
    as ``env`` sets them)."""
    originals = textwrap.fill(
        "The original project's names are accepted as aliases (a note says so): "
        + ", ".join(f"{old} ({new})" for old, new in ORIGINAL_NAMES.items())
        + ". GEN_BS has no counterpart (verl 0.9.1 refills filtered groups itself) and is ignored with a warning; an "
        "exported variable spelt like a knob but not one (TRAIN_BATCHSIZE, ROLOUT_N) gets a warning.", width=116)
    algorithm = env.get("ALGORITHM") or default("ALGORITHM")
    own = script_defaults(task, env.get("ALGORITHM", ""), env.get("STAGE", ""))
    listed = "".join(f"  {name:<24} {own[name]}\n" for name in (k.env for _, k in knobs(RlSettings)) if name in own
                     and name != "ALGORITHM")
    return f"""usage: [VAR=value ...] bash {script} [--dry-run] [--local] [hydra.key=value ...]

defaults of this script (task '{task}', ALGORITHM={algorithm}):
{listed}
Multi-turn agentic RL on verl 0.9.1 (`python -m verl.trainer.main_ppo`, V1 trainer, FSDP actor, vLLM/SGLang async
rollout) with the afm_agent loop, afm's tools and afm's reward entry. Every knob is an environment variable; the
second column below is this script's default. Arguments are appended as extra Hydra overrides (the last value of a
key wins), e.g. trainer.total_epochs=1. Paths you give are taken from the current directory when relative; the
defaults are under the repo. The knobs are declared, checked and turned into the verl command by afm/launch/rl.py
(RlSettings) and afm/rl/knobs.py; docs/rl_knobs.md lists what each task, STAGE=2, ALGORITHM=ppo and --local change.

{table(script_defaults(task, env.get('ALGORITHM', ''), env.get('STAGE', '')))}  --local                 the laptop profile (CPU, hf rollout, toy code task, tiny policy, 4 steps):
                                        see experiments/local.sh

{originals}

Keys (GRM_*, SERPER, SWANLAB/WANDB ...) come from environment.sh, which is sourced first; they reach the Ray
workers through the environment of the process that started Ray, so on a multi-node cluster source it before
`ray start` on every node (experiments/ray_cluster.sh does). Nothing here prints a key.
"""


def task_table() -> str:
    """The docs' table of per-task values (docs/rl_knobs.md): one row per knob a task or profile changes."""
    columns = [("web", TASKS["web"]), ("code", TASKS["code"]), ("code STAGE=2", CODE_STAGES["2"]),
               ("mhqa", TASKS["mhqa"]), ("ALGORITHM=ppo", PPO), ("--local", {**LOCAL, "LR": LOCAL_TOY_LR})]
    names = [k.env for _, k in knobs(RlSettings) if any(k.env in values for _, values in columns)]
    rows = ["| knob | default | " + " | ".join(name for name, _ in columns) + " |",
            "|---|---|" + "---|" * len(columns)]
    for name in names:
        cells = [f"`{values[name]}`" if name in values else "" for _, values in columns]
        rows.append(f"| `{name}` | `{default(name) or ''}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


assert all(set(layer) <= set(_FIELD) for layer in (*TASKS.values(), *CODE_STAGES.values(), PPO, CPU, HF_ENGINE,
                                                   LOCAL)), "a layer names no knob"
