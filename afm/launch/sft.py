"""The SFT/DPO launch: every knob of the sft_scripts declared once (:class:`SftSettings`: default, variable, help,
check), the original project's names, and the ``afm-sft`` command they make.

The scripts stay lists of values a user edits; sft_scripts/common.sh finds the launcher and runs this module with
the launcher's python. Everything else happens here, once: the original's names and the misspelling check, reading
and checking every knob (a bad one stops the launch with a message naming it, before anything starts), the
processes and GPUs, the attention kernel, the LLaMA-Factory flags, ``--help``, and the launch itself (or, with
``--dry-run`` / ``DRY_RUN=1``, the exact command printed). Standard library only, so any python 3.10+ can run it:
``python -m afm.launch.sft --help``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from afm.launch.command import bash_quote, format_command, run_logged, script_parser, shell_status
from afm.launch.multinode import (
    DEFAULT_HANG_TIMEOUT,
    DEFAULT_JOIN_TIMEOUT,
    failure_line,
    hang_env,
    rendezvous_env,
)
from afm.launch.names import apply_aliases, misspelt
from afm.launch.settings import (
    Check,
    check_fields,
    default_of,
    knob,
    knobs,
    number,
    one_of,
    positive_int,
    table,
    whole,
)
from afm.launch.values import KnobError, is_number, is_posint, is_uint, parse_bool, split_list

__all__ = ["ORIGINAL_NAMES", "Launch", "SftSettings", "absolute", "bash_quote", "format_command", "main", "plan", "run",
           "usage"]

STAGES = ("sft", "dpo")
PREF_LOSSES = ("sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo")
REPORTERS = ("none", "swanlab", "wandb", "tensorboard")
# SWANLAB_* variable -> the LLaMA-Factory flag it becomes (passed only when set).
SWANLAB_FLAGS = (("SWANLAB_PROJECT", "swanlab_project"), ("SWANLAB_WORKSPACE", "swanlab_workspace"),
                 ("SWANLAB_RUN_NAME", "swanlab_run_name"), ("SWANLAB_MODE", "swanlab_mode"),
                 ("SWANLAB_LOG_DIR", "swanlab_logdir"))
TORCHRUN_VARS = ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE")
# The original project's names (original -> afm knob), in the order the launch notes them.
ORIGINAL_NAMES = {"DATA_DATA": "DATASET", "TEMPALTE": "TEMPLATE", "LEARNING_RATES": "LEARNING_RATE",
                  "WARMUP_RATIOS": "WARMUP_RATIO", "GRADIENT_ACCUMULATIONS": "GRADIENT_ACCUMULATION",
                  "BATCH_SIZES": "BATCH_SIZE", "OUTPUT_DIR_BASE": "OUTPUT_DIR",
                  "ignore_observation": "IGNORE_OBSERVATION", "ignore_observation_token": "IGNORE_OBSERVATION_TOKEN",
                  "finetuning_type": "FINETUNING_TYPE"}
# Variables the scripts read that are no settings field: the original's RANK (NODE_RANK's fallback), the
# launcher's environment (sft_scripts/common.sh) and SwanLab's own.
OTHER_NAMES = ("RANK", "AFM_VENV", *(var for var, _ in SWANLAB_FLAGS), "SWANLAB_API_KEY")

_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_DATASET_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def absolute(path: str, cwd: str) -> str:
    """``path`` made absolute against ``cwd`` (the folder the script was started in), as the scripts always did."""
    if path.startswith("/"):
        return path
    return f"{cwd.rstrip('/')}/{path[2:] if path.startswith('./') else path}"


def visible_gpus(env: Mapping[str, str]) -> int:
    """GPUs this node would use: CUDA_VISIBLE_DEVICES when set (even empty), else ``nvidia-smi -L``, else 0."""
    if "CUDA_VISIBLE_DEVICES" in env:
        return len(split_list(re.sub(r"\s", "", env["CUDA_VISIBLE_DEVICES"])))
    if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def has_module(name: str) -> bool:
    """Whether this interpreter (the launcher's) can import ``name``; found, not imported (no CUDA start-up)."""
    return importlib.util.find_spec(name) is not None


# ---- the settings --------------------------------------------------------------------------------------------------
# Values stay strings as typed: the command carries them verbatim (EPOCHS=4.0 is --num_train_epochs 4.0).
@dataclass
class SftSettings:
    """Every knob of the SFT/DPO scripts, in the order of the --help table and of the checks. "script" in the table
    means the script's own default (``script_defaults``, or the script's model, output and dataset)."""

    stage: str
    script: str
    root: str  # the repository
    cwd: str  # where the script was started: relative paths the user gives are taken from here
    model_path: str = knob("MODEL_PATH", "", "HF hub id or local folder of the model to fine-tune", shown="script")
    output_dir: str = knob(
        "OUTPUT_DIR", "", "checkpoints, training.log, afm_mask_report_*.json; the default is under the\n"
        "repo root (saves/AFM-...-sft, what the RL scripts start from); a relative\n"
        "value you give is taken from the current directory", shown="script")
    dataset: str = knob("DATASET", "", "name(s) from $DATASET_DIR/dataset_info.json, comma-separated", shown="script")
    dataset_dir: str = knob("DATASET_DIR", "data", "folder holding dataset_info.json (see data/README.md)",
                            shown="<repo>/{}")  # under the repository
    template: str = knob("TEMPLATE", "qwen", "LLaMA-Factory chat template")
    learning_rate: str = knob("LEARNING_RATE", "1e-6", "the value in brackets applies where a script sets none",
                              check=number("1e-6"), shown="script ({})")
    batch_size: str = knob("BATCH_SIZE", "1", "per-device train batch size", check=positive_int())
    gradient_accumulation: str = knob(
        "GRADIENT_ACCUMULATION", "8", "global batch = BATCH_SIZE x GRADIENT_ACCUMULATION x GPUs x NNODES",
        check=positive_int(), shown="script ({})")
    epochs: str = knob("EPOCHS", "4.0", "", check=number("4.0"), shown="script ({})")
    lr_scheduler: str = knob("LR_SCHEDULER", "linear",
                             "transformers lr_scheduler_type (linear, cosine, constant_with_warmup, ...)")
    warmup_ratio: str = knob(
        "WARMUP_RATIO", "0", "warmup as a fraction of the optimizer steps (--warmup_ratio)",
        check=Check(lambda v: is_number(v) and float(v) < 1, "a fraction of the steps, 0 <= {name} < 1"),
        shown="script ({})")
    warmup_steps: str = knob("WARMUP_STEPS", "0", "warmup optimizer steps; > 0 wins over WARMUP_RATIO (transformers' rule)",
                             check=whole("a whole number of steps"))
    finetuning_type: str = knob("FINETUNING_TYPE", "full", "full | freeze | lora (LLaMA-Factory --finetuning_type)",
                                check=one_of(("full", "freeze", "lora")))
    precision: str = knob("PRECISION", "bf16", "bf16 | fp16 | fp32 (fp32 passes neither --bf16 nor --fp16)",
                          check=one_of(("bf16", "fp16", "fp32")))
    cutoff_len: str = knob(
        "CUTOFF_LEN", "32768", "max tokens per sample (prompt + response); longer ones are truncated and a\n"
        "sample cut inside an observation is dropped (see the mask report)", check=positive_int(),
        shown="script ({})")
    packing: bool = knob("PACKING", False, "(sft only) pack samples into cutoff_len rows; masking still applies")
    ignore_observation: bool = knob("IGNORE_OBSERVATION", True,
                                    "mask <observation>...</observation> (and the whitespace around it)")
    observation_token: str = knob(
        "IGNORE_OBSERVATION_TOKEN", "observation", "bare tag name of the masked span",
        check=Check(lambda v: bool(_TAG.match(v)), "a bare tag name such as observation, not <observation>"))
    observation_check: str = knob(
        "IGNORE_OBSERVATION_CHECK", "observation",
        "drop broken samples: observation (masked tag) | tags (any CoA tag, strict) | none",
        check=one_of(("tags", "observation", "none")))
    pref_beta: str = knob("PREF_BETA", "0.1", "(dpo only) DPO beta", check=number("0.1"), stage="dpo")
    pref_loss: str = knob("PREF_LOSS", "sigmoid", "(dpo only) " + " | ".join(PREF_LOSSES),
                          check=one_of(PREF_LOSSES, "one of " + ", ".join(PREF_LOSSES)), stage="dpo")
    deepspeed: str = knob(
        "DEEPSPEED_CONFIG", "configs/deepspeed/ds_z3_config.json",  # under the repository; "" = no DeepSpeed
        "\nZeRO-3; ds_z3_offload_config.json adds CPU offload; empty = no DeepSpeed.\n"
        "ZeRO-3 needs the `deepspeed` package (extra: pip install -e .[deepspeed]);\n"
        "the dry run and `afm doctor` say when it is missing", shown="<repo>/{}")
    attn_impl: str = knob(
        "ATTN_IMPL", "auto", "auto: fa2 (FlashAttention-2) when a GPU is visible and flash_attn imports,\n"
        "else sdpa; or fa2 | sdpa | eager (LLaMA-Factory --flash_attn); the\nchoice is printed",
        check=one_of(("auto", "fa2", "fa3", "sdpa", "eager")))
    save_strategy: str = knob("SAVE_STRATEGY", "epoch", "no | steps | epoch", check=one_of(("no", "steps", "epoch")))
    save_only_model: bool = knob("SAVE_ONLY_MODEL", True, "checkpoints without optimizer state (smaller, but not resumable)")
    logging_steps: str = knob("LOGGING_STEPS", "10", "", check=positive_int())
    num_workers: str = knob("PREPROCESSING_NUM_WORKERS", "16", "processes that tokenize and mask the dataset",
                            check=positive_int())
    ddp_timeout: str = knob("DDP_TIMEOUT", "180000000", "seconds; rank 0 preprocesses while the other ranks wait",
                            check=positive_int("a positive number of seconds"))
    report_to: str = knob(
        "REPORT_TO", "none", "none | swanlab | wandb | tensorboard (comma-separated for several);\n"
        "swanlab reads SWANLAB_API_KEY from the environment and gets\n"
        "--swanlab_project/--swanlab_workspace/--swanlab_run_name/--swanlab_mode/\n"
        "--swanlab_logdir only for those of SWANLAB_PROJECT/_WORKSPACE/_RUN_NAME/\n"
        "_MODE/_LOG_DIR that are set (SWANLAB_MODE=local: offline, no account;\n"
        "install it with the swanlab extra);\n"
        "wandb reads WANDB_API_KEY and WANDB_PROJECT itself. Keys are never printed.")
    visible_devices: str | None = knob("CUDA_VISIBLE_DEVICES", None,  # None: unset (every GPU of the node)
                                       "used as given when set; otherwise every GPU of the node", shown="(kept)")
    nnodes: str = knob("NNODES", "1", "nodes in the job; run the script once on every node", check=positive_int(),
                       shown="script ({})")
    node_rank: str = knob("NODE_RANK", "0", "0 .. NNODES-1 (schedulers that export RANK per node need nothing else)",
                          shown="$RANK or {}")  # checked against NNODES in check()
    master_addr: str = knob("MASTER_ADDR", "127.0.0.1",
                            "address of node 0, reachable from every node (set it when NNODES > 1)")
    master_port: str = knob("MASTER_PORT", "29500", "",
                            check=Check(lambda v: is_uint(v) and 0 < int(v) <= 65535, "a port number"))
    nproc_per_node: str = knob(
        "NPROC_PER_NODE", "", "processes per node: the GPUs in CUDA_VISIBLE_DEVICES, else nvidia-smi -L",
        shown="(GPUs seen)", check=Check(lambda v: not v or is_posint(v), "a positive integer"))
    join_timeout: str = knob(
        "JOIN_TIMEOUT", DEFAULT_JOIN_TIMEOUT, "(NNODES > 1) seconds a node waits for the others to join (torchrun's\n"
        "rendezvous); then it stops with one line saying which side is missing",
        check=positive_int("a positive number of seconds"))
    hang_timeout: str = knob(
        "HANG_TIMEOUT", DEFAULT_HANG_TIMEOUT, "(several processes) seconds a rank may stay at one point of a step (its\n"
        "batch, forward, backward, logging); then every rank stops and each node\n"
        "prints one line naming the rank that held the others up, what it was\n"
        "doing and what to check. Saving and evaluating are not judged; 0 = off\n"
        "(the others then wait DDP_TIMEOUT)", check=whole("a whole number of seconds, 0 = off"))
    extra_args: str = knob(
        "EXTRA_ARGS", "", "more LLaMA-Factory flags, split on whitespace and appended; arguments\n"
        "given to the script are appended after them (the last value of a flag wins)", shown="(empty)")
    afm_sft: str = knob(
        "AFM_SFT", "afm-sft", "the launcher command (falls back to <repo>/.venv/bin/afm-sft, or\n"
        "$AFM_VENV/bin/afm-sft, when afm-sft is not on PATH)")  # found by sft_scripts/common.sh
    dry_run: bool = knob("DRY_RUN", False, "1 (or the --dry-run argument): print the resolved environment and\n"
                         "command, run nothing", shown="0")
    mask_report: str = knob(
        "MASK_REPORT", "0", "N > 0: run `afm-sft mask-report --show N` on the same flags (tokenize and\n"
        "mask the data, print the counts and N samples, no model, no GPU) and stop",
        check=whole("a number of samples to show, 0 = off"))
    stage_knob: str = knob("STAGE", "")  # as the user set it: the script fixes the stage
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, stage: str, script: str, root: str, cwd: str, model_path: str,
                 output_dir: str, dataset: str, script_defaults: Mapping[str, str] | None = None) -> SftSettings:
        """The settings from the knobs in ``env`` over ``script_defaults`` (and the script's model, output and
        dataset) over the declared defaults. A knob set but empty takes its default."""
        env = dict(env)
        for name, value in (script_defaults or {}).items():
            if not env.get(name):  # a knob the user left unset or empty takes the script's default
                env[name] = value
        values: dict[str, object] = {}
        for f, k in knobs(cls):
            value = env.get(k.env) or f.default
            # The booleans read in declaration order: the first bad one is named.
            values[f.name] = parse_bool(k.env, value) if isinstance(f.default, bool) and isinstance(value, str) \
                else value
        model = env.get("MODEL_PATH") or model_path
        # A relative MODEL_PATH that exists here is a local folder; anything else is a hub id.
        if not model.startswith("/") and os.path.exists(os.path.join(cwd, model)):
            model = absolute(model, cwd)
        dataset_dir = env.get("DATASET_DIR") or f"{root}/{values['dataset_dir']}"
        values.update(
            model_path=model,
            output_dir=absolute(env["OUTPUT_DIR"], cwd) if env.get("OUTPUT_DIR") else f"{root}/{output_dir}",
            dataset=env.get("DATASET") or dataset,
            dataset_dir=dataset_dir if dataset_dir == "ONLINE" else absolute(dataset_dir, cwd),
            # Unset = the repository's ZeRO-3 config; set but empty switches DeepSpeed off.
            deepspeed=env.get("DEEPSPEED_CONFIG", f"{root}/{values['deepspeed']}"),
            visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            # The original read the node's rank from RANK (set by its scheduler); NODE_RANK wins when both are set.
            node_rank=env.get("NODE_RANK") or env.get("RANK") or values["node_rank"],
        )
        return cls(stage=stage, script=script, root=root, cwd=cwd, env=env, **values)

    # -- checks (before anything starts) -----------------------------------------------------------------------
    def check(self) -> None:
        """Raise :class:`KnobError` for the first knob that cannot work."""
        if self.stage not in STAGES:
            raise KnobError(f"stage must be sft or dpo (got '{self.stage}')")
        if self.stage_knob and self.stage_knob.lower() != self.stage:
            raise KnobError(f"STAGE={self.stage_knob}, but {self.script} trains stage {self.stage} (DPO: "
                            "sft_scripts/dpo_qwen2.5_32b.sh; SFT: the sft_scripts/<agent>/ scripts)")
        message = check_fields(self, self.stage)
        if message:
            raise KnobError(message)
        if not (is_uint(self.node_rank) and int(self.node_rank) < int(self.nnodes)):
            raise KnobError(f"NODE_RANK must be 0 .. NNODES-1 = {int(self.nnodes) - 1} (got '{self.node_rank}')")
        if not self.model_path:
            raise KnobError("MODEL_PATH is empty")
        if self.deepspeed and not os.path.isfile(os.path.join(self.cwd, self.deepspeed)):
            raise KnobError(f"DEEPSPEED_CONFIG file not found: {self.deepspeed} (set DEEPSPEED_CONFIG= to train "
                            "without DeepSpeed)")
        if self.dataset_dir != "ONLINE":
            self._check_datasets()

    def _check_datasets(self) -> None:
        info_path = Path(self.dataset_dir, "dataset_info.json")
        if not info_path.is_file():
            raise KnobError(f"no dataset_info.json in DATASET_DIR={self.dataset_dir} (see data/README.md)")
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise KnobError(f"{info_path} is not readable JSON ({exc}) (see data/README.md)") from None
        names = split_list(self.dataset)
        if not names:
            raise KnobError("DATASET is empty")
        for name in names:
            if not _DATASET_NAME.match(name):
                raise KnobError(f"DATASET has an invalid name '{name}' (comma-separated names)")
            if not isinstance(info, dict) or name not in info:
                raise KnobError(f"dataset '{name}' is not in {info_path} (see data/README.md)")

    # -- derived values ----------------------------------------------------------------------------------------
    def processes(self, gpus: int) -> int:
        """Processes on this node: NPROC_PER_NODE, else the GPUs seen, else one."""
        return int(self.nproc_per_node) if self.nproc_per_node else (gpus if gpus > 0 else 1)

    def tracking(self) -> tuple[str, list[str]]:
        """(--report_to value, SwanLab flags) from REPORT_TO."""
        reporters: list[str] = []
        flags: list[str] = []
        for item in split_list(self.report_to.replace(" ", "")):
            if item in ("none", ""):
                continue
            if item == "swanlab":
                # LLaMA-Factory's own SwanLab callback; swanlab reads SWANLAB_API_KEY from the environment.
                flags += ["--use_swanlab", "true"]
                for var, flag in SWANLAB_FLAGS:
                    if self.env.get(var):
                        value = self.env[var]
                        flags += [f"--{flag}", absolute(value, self.cwd) if var == "SWANLAB_LOG_DIR" else value]
                if (not self.env.get("SWANLAB_API_KEY") and (self.env.get("SWANLAB_MODE") or "cloud") != "local"
                        and not self.dry_run):
                    warn("REPORT_TO=swanlab without SWANLAB_API_KEY: swanlab needs a previous 'swanlab login'")
            elif item in REPORTERS:
                reporters.append(item)
            else:
                raise KnobError("REPORT_TO must be none, swanlab, wandb or tensorboard, comma-separated "
                                f"(got '{self.report_to}')")
        return ",".join(reporters) or "none", flags

    def attention(self, gpus: int) -> tuple[str, str]:
        """(implementation, why) for ATTN_IMPL; auto looks at this machine and the launcher's python."""
        if self.attn_impl != "auto":
            return self.attn_impl, f"ATTN_IMPL={self.attn_impl}"
        if gpus == 0:
            return "sdpa", "no GPU visible"
        if has_module("flash_attn"):
            return "fa2", "GPU and flash_attn found"
        return "sdpa", "flash_attn is not installed (pip install flash-attn for FlashAttention-2)"

    def flags(self) -> list[str]:
        """The LLaMA-Factory flags every run takes (a mask report too)."""
        flags = [
            "--model_name_or_path", self.model_path, "--trust_remote_code", "true", "--stage", self.stage,
            "--do_train", "true", "--finetuning_type", self.finetuning_type, "--dataset", self.dataset,
            "--dataset_dir", self.dataset_dir, "--template", self.template, "--cutoff_len", self.cutoff_len,
            "--output_dir", self.output_dir, "--per_device_train_batch_size", self.batch_size,
            "--gradient_accumulation_steps", self.gradient_accumulation, "--learning_rate", self.learning_rate,
            "--num_train_epochs", self.epochs, "--lr_scheduler_type", self.lr_scheduler,
            "--logging_steps", self.logging_steps, "--save_strategy", self.save_strategy,
            "--save_only_model", _word(self.save_only_model), "--plot_loss", "true",
            "--preprocessing_num_workers", self.num_workers, "--ddp_timeout", self.ddp_timeout,
        ]
        # transformers: a warmup_ratio overrides warmup_steps, so only one of them is passed.
        if int(self.warmup_steps) == 0 and float(self.warmup_ratio) > 0:
            flags += ["--warmup_ratio", self.warmup_ratio]
        else:
            flags += ["--warmup_steps", self.warmup_steps]
        flags += ["--ignore_observation", _word(self.ignore_observation)]
        if self.ignore_observation:
            flags += ["--ignore_observation_token", self.observation_token,
                      "--ignore_observation_check", self.observation_check]
        if self.stage == "sft":
            flags += ["--packing", _word(self.packing)]
        else:
            flags += ["--pref_beta", self.pref_beta, "--pref_loss", self.pref_loss]
        return flags


def _word(flag: bool) -> str:
    return "true" if flag else "false"


def known_names() -> list[str]:
    """Every variable the SFT scripts read (for the misspelling check): the knobs, the original's names, the rest."""
    return [*(k.env for _, k in knobs(SftSettings)), *ORIGINAL_NAMES, *OTHER_NAMES]


def usage(script: str, defaults: Mapping[str, str]) -> str:
    """``bash <script> --help``: how to call it, its own defaults, then every knob."""
    shown = "".join(f"  {name:<24} {value}\n" for name, value in defaults.items())
    originals = textwrap.fill(
        "The original project's names are accepted as aliases (a note says so): "
        + ", ".join(f"{old} ({new})" for old, new in ORIGINAL_NAMES.items())
        + " (OUTPUT_DIR_BASE without the original's grid-search subfolder); STAGE is the script's own (sft, or dpo in"
        " dpo_qwen2.5_32b.sh) and a different value is refused. An exported variable spelt like a knob but not one"
        " (LEARNNG_RATE) gets a warning.", width=116)
    return f"""usage: [VAR=value ...] bash {script} [extra LLaMA-Factory flags ...]

defaults of this script:
{shown}
Full fine-tuning (or DPO) with LLaMA-Factory through `afm-sft train`, <observation> spans masked from the loss.
Every knob is an environment variable; the value in the second column is the default. "script" means the
script's own default (listed above; the table in docs/original_mapping.md lists them all). The knobs are declared,
checked and turned into the afm-sft command by afm/launch/sft.py (SftSettings), which sft_scripts/common.sh runs
with the launcher's python; `python -m afm.launch.sft --help` shows how to call it directly.

{table(SftSettings)}
{originals}

The command is printed before it runs, OUTPUT_DIR is created and everything is appended to
$OUTPUT_DIR/training.log ($OUTPUT_DIR/training.node<R>.log on node R > 0).
With more than one process, more than one node or DeepSpeed, FORCE_TORCHRUN=1 and NNODES, NODE_RANK, MASTER_ADDR,
MASTER_PORT, NPROC_PER_NODE are exported: afm-sft then starts torchrun (LLaMA-Factory's flags, afm/sft/torchrun.py).
LLaMA-Factory re-joins the arguments with spaces for torchrun, so no value may contain whitespace.

"""


# ---- the launch ----------------------------------------------------------------------------------------------------
@dataclass
class Launch:
    """What a run does: the command, the environment it adds, and what it prints first."""

    command: list[str]
    env: dict[str, str]
    summary: str
    log_path: str
    deepspeed_missing: str  # why a real run cannot start ("" = it can)
    mask_report: bool


def plan(settings: SftSettings, launcher: Sequence[str], tail: Sequence[str], python: str) -> Launch:
    """Check ``settings`` and build the command (``tail``: script arguments, after EXTRA_ARGS; ``python``: the
    launcher's interpreter as the script named it). Warnings are printed as they are found."""
    s = settings
    s.check()
    gpus = visible_gpus(s.env)
    nproc = s.processes(gpus)
    mask_report = int(s.mask_report) > 0
    if not s.nproc_per_node and gpus == 0 and not s.dry_run and not mask_report:
        warn("no GPU found (CUDA_VISIBLE_DEVICES unset or empty, no nvidia-smi): starting 1 process")
    nnodes = int(s.nnodes)
    if nnodes > 1 and not s.env.get("MASTER_ADDR"):
        # 127.0.0.1 given on purpose is right for "nodes" on one machine; the default is a mistake on a cluster.
        warn(f"NNODES={nnodes} but MASTER_ADDR is unset ({s.master_addr}): set MASTER_ADDR to node 0's address on "
             "every node")
    torchrun = nnodes > 1 or nproc > 1 or bool(s.deepspeed)
    report_flag, tracking = s.tracking()
    attn, attn_why = s.attention(gpus)
    deepspeed_missing = ""
    if s.deepspeed and not has_module("deepspeed"):
        deepspeed_missing = (f"DeepSpeed ZeRO-3 is configured (DEEPSPEED_CONFIG) but the deepspeed package is not "
                             f"installed in {python}: pip install -e '.[deepspeed]' (or set "
                             "DEEPSPEED_CONFIG= to train without DeepSpeed)")
    flags = s.flags()
    train_only = {"bf16": ["--bf16", "true"], "fp16": ["--fp16", "true"]}.get(s.precision, [])
    train_only += ["--flash_attn", "disabled" if attn == "eager" else attn, "--report_to", report_flag, *tracking]
    if s.deepspeed:
        train_only += ["--deepspeed", s.deepspeed]
    tail = [*s.extra_args.split(), *tail]
    for arg in (*flags, *train_only, *tail):
        if not arg or re.search(r"\s", arg):
            raise KnobError(f"argument '{arg}' is empty or contains whitespace; LLaMA-Factory's torchrun launch "
                            "would split it")
    if mask_report:
        # One process, no DeepSpeed: only the tokenizer and the data pipeline run.
        command = [*launcher, "mask-report", "--show", s.mask_report, *flags, *tail]
        summary = f"[afm] mask report for {s.stage}: {s.dataset}\n{format_command(command)}"
        return Launch(command, {}, summary, "", "", True)

    added: dict[str, str] = {}
    env_lines = []
    if s.visible_devices is not None:
        env_lines.append(f"CUDA_VISIBLE_DEVICES={s.visible_devices}")
    if torchrun:
        added = dict(zip(TORCHRUN_VARS, ("1", s.nnodes, s.node_rank, s.master_addr, s.master_port, str(nproc)),
                         strict=True))
        if nnodes > 1:
            added.update(rendezvous_env(s.join_timeout))
        added.update(hang_env(s.hang_timeout))
        env_lines += [f"{k}={v}" for k, v in added.items()]
    command = [*launcher, "train", *flags, *train_only, *tail]
    lines = [f"[afm] {s.script}: stage={s.stage} nodes={nnodes} node_rank={s.node_rank} processes/node={nproc} "
             f"global batch={int(s.batch_size) * int(s.gradient_accumulation) * nproc * nnodes}",
             f"[afm] attention: {attn} ({attn_why})"]
    if env_lines:
        lines += ["[afm] environment:", *(f"  {line}" for line in env_lines)]
    lines += ["[afm] command:", format_command(command)]
    log_name = "training.log" if int(s.node_rank) == 0 else f"training.node{s.node_rank}.log"
    return Launch(command, added, "\n".join(lines), f"{s.output_dir}/{log_name}", deepspeed_missing, False)


def warn(message: str) -> None:
    print(f"[afm] warning: {message}", file=sys.stderr, flush=True)


def run(launch: Launch, settings: SftSettings, cwd: str) -> int:
    """Start the launch: the command's output goes to the terminal and is appended to the log."""
    env = dict(os.environ)
    if launch.mask_report:
        return shell_status(subprocess.run(launch.command, env=env, cwd=cwd).returncode)
    program = launch.command[0]
    if "/" in program:
        found = os.access(os.path.join(cwd, program), os.X_OK) and os.path.isfile(os.path.join(cwd, program))
    else:
        found = shutil.which(program) is not None
    if not found:
        raise KnobError(f"'{program}' not found: run 'bash scripts/install.sh', activate the environment or set "
                        "AFM_SFT")
    if launch.deepspeed_missing:
        raise KnobError(launch.deepspeed_missing)
    env.update(launch.env)
    # A launcher given by path brings its environment's torchrun (LLaMA-Factory runs `torchrun` from PATH).
    if "/" in program:
        env["PATH"] = f"{os.path.abspath(os.path.join(cwd, os.path.dirname(program)))}:{env.get('PATH', '')}"
    # SWANLAB_PROJECT went in as --swanlab_project; swanlab >= 0.10 would also parse the variable as its own nested
    # settings (JSON) and fail on a plain name.
    env.pop("SWANLAB_PROJECT", None)
    os.makedirs(settings.output_dir, exist_ok=True)
    start = os.path.getsize(launch.log_path) if os.path.exists(launch.log_path) else 0
    status = run_logged(launch.command, env=env, cwd=cwd, log_path=launch.log_path, summary=launch.summary)
    if status != 0 and int(settings.nnodes) > 1:
        # torchrun's failure is a page of tracebacks per node; say in one line which multi-node case it was.
        with open(launch.log_path, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
        line = failure_line(text, node_rank=settings.node_rank, nnodes=settings.nnodes,
                            master=f"{settings.master_addr}:{settings.master_port}",
                            join_timeout=settings.join_timeout)
        print(f"[afm] error: {line} (log: {launch.log_path})", file=sys.stderr, flush=True)
        with open(launch.log_path, "a", encoding="utf-8") as log:
            log.write(f"[afm] error: {line}\n")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    p = script_parser("python -m afm.launch.sft", __doc__)
    p.add_argument("--stage", required=True, choices=STAGES)
    p.add_argument("--model", required=True, help="the script's MODEL_PATH")
    p.add_argument("--output", required=True, help="the script's OUTPUT_DIR, under the repository")
    p.add_argument("--dataset", required=True, help="the script's DATASET")
    p.add_argument("--default", action="append", default=[], metavar="KNOB=VALUE", help="a script's own default")
    p.add_argument("--launcher", action="append", default=[], metavar="WORD", help="the launcher command, a word each")
    p.add_argument("--python", default=sys.executable, help="this interpreter as the script named it (messages)")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing (also DRY_RUN=1)")
    p.add_argument("--usage", action="store_true", help="print the script's help (its defaults, every knob) and stop")
    p.add_argument("tail", nargs="*", help="more LLaMA-Factory flags (after --)")
    args = p.parse_args(argv)
    defaults = dict(item.split("=", 1) for item in args.default)
    if args.usage:
        print(usage(args.script, {"MODEL_PATH": args.model, "OUTPUT_DIR": f"<repo>/{args.output}",
                                  "DATASET": args.dataset, **defaults}), end="", flush=True)
        return 0
    try:
        # Into this process's environment, as the scripts exported them: the launch inherits the knobs' names.
        apply_aliases(os.environ, ORIGINAL_NAMES)
        for line in misspelt(os.environ, known_names()):
            warn(line)
        settings = SftSettings.from_env(os.environ, stage=args.stage, script=args.script, root=args.root,
                                        cwd=args.cwd, model_path=args.model, output_dir=args.output,
                                        dataset=args.dataset, script_defaults=defaults)
        settings.dry_run = settings.dry_run or args.dry_run
        launch = plan(settings, args.launcher or [default_of(SftSettings, "AFM_SFT")], args.tail, args.python)
        if settings.dry_run:
            print(launch.summary, flush=True)
            if launch.deepspeed_missing and not launch.mask_report:
                warn(launch.deepspeed_missing)
            return 0
        if launch.mask_report:
            print(launch.summary, flush=True)
        return run(launch, settings, args.cwd)
    except KnobError as exc:
        print(f"[afm] error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
