"""The SFT/DPO scripts' knobs (sft_scripts/common.sh): typed settings with their defaults, the checks, and the
``afm-sft`` command they make.

The scripts stay lists of knobs a user edits; sft_scripts/common.sh applies the original project's names, the
script's own defaults and the misspelling check, finds the launcher, then runs this module with the launcher's
python. Everything else happens here, once: reading and checking every knob (a bad one stops the launch with a
message naming it, before anything starts), the processes and GPUs, the attention kernel, the LLaMA-Factory flags,
and the launch itself (or, with ``--dry-run`` / ``DRY_RUN=1``, the exact command printed). Standard library only, so
any python 3.10+ can run it: ``python -m afm.sft.knobs --help``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from afm.launch_knobs import (
    KnobError,
    is_number,
    is_posint,
    is_uint,
    parse_bool,
    run_logged,
    shell_status,
    split_list,
)
from afm.sft.multinode import (
    DEFAULT_HANG_TIMEOUT,
    DEFAULT_JOIN_TIMEOUT,
    failure_line,
    hang_env,
    rendezvous_env,
)

STAGES = ("sft", "dpo")
FINETUNING_TYPES = ("full", "freeze", "lora")
PRECISIONS = ("bf16", "fp16", "fp32")
ATTN_IMPLS = ("auto", "fa2", "fa3", "sdpa", "eager")
SAVE_STRATEGIES = ("no", "steps", "epoch")
OBSERVATION_CHECKS = ("tags", "observation", "none")
PREF_LOSSES = ("sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo")
REPORTERS = ("none", "swanlab", "wandb", "tensorboard")
# SWANLAB_* variable -> the LLaMA-Factory flag it becomes (passed only when set).
SWANLAB_FLAGS = (("SWANLAB_PROJECT", "swanlab_project"), ("SWANLAB_WORKSPACE", "swanlab_workspace"),
                 ("SWANLAB_RUN_NAME", "swanlab_run_name"), ("SWANLAB_MODE", "swanlab_mode"),
                 ("SWANLAB_LOG_DIR", "swanlab_logdir"))
TORCHRUN_VARS = ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE")

_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_DATASET_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def absolute(path: str, cwd: str) -> str:
    """``path`` made absolute against ``cwd`` (the folder the script was started in), as the scripts always did."""
    if path.startswith("/"):
        return path
    return f"{cwd.rstrip('/')}/{path[2:] if path.startswith('./') else path}"


def bash_quote(word: str) -> str:
    """``word`` as bash's ``printf %q`` writes it (C locale), so the printed command is the one bash would print."""
    if word == "":
        return "''"
    if any(not (32 <= ord(c) < 127) for c in word):
        out = []
        for byte in word.encode():
            char = chr(byte)
            escapes = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
                       "\x1b": "\\E", "'": "\\'", "\\": "\\\\"}
            out.append(escapes.get(char) or (char if 32 <= byte < 127 else f"\\{byte:03o}"))
        return "$'" + "".join(out) + "'"
    out = []
    for i, char in enumerate(word):
        special = char in " \t\n'\"\\|&;()<>!{}*[?]^$`,"
        leading = (char == "#" and i == 0) or (char == "~" and (i == 0 or word[i - 1] in "=:"))
        out.append("\\" + char if special or leading else char)
    return "".join(out)


def format_command(argv: Sequence[str]) -> str:
    """A command one ``--flag value`` per line, shell-quoted, as a copy-pasteable block."""
    out = ""
    for arg in argv:
        if out and arg.startswith("--"):
            out += " \\\n    "
        elif out:
            out += " "
        out += bash_quote(arg)
    return out


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
@dataclass
class SftSettings:
    """Every knob of sft_scripts/common.sh with its default (a script's own defaults come in ``script_defaults``)."""

    stage: str
    script: str
    root: str  # the repository
    cwd: str  # where the script was started: relative paths the user gives are taken from here
    model_path: str
    output_dir: str
    dataset: str
    dataset_dir: str = ""  # default <root>/data
    template: str = "qwen"
    learning_rate: str = "1e-6"
    batch_size: str = "1"
    gradient_accumulation: str = "8"
    epochs: str = "4.0"
    lr_scheduler: str = "linear"
    warmup_steps: str = "0"
    warmup_ratio: str = "0"
    attn_impl: str = "auto"
    precision: str = "bf16"
    finetuning_type: str = "full"
    cutoff_len: str = "32768"
    packing: bool = False
    ignore_observation: bool = True
    save_only_model: bool = True
    observation_token: str = "observation"
    observation_check: str = "observation"
    pref_beta: str = "0.1"
    pref_loss: str = "sigmoid"
    deepspeed: str = ""  # default <root>/configs/deepspeed/ds_z3_config.json; "" = no DeepSpeed
    save_strategy: str = "epoch"
    logging_steps: str = "10"
    num_workers: str = "16"
    ddp_timeout: str = "180000000"
    report_to: str = "none"
    nnodes: str = "1"
    node_rank: str = "0"
    master_addr: str = "127.0.0.1"
    master_port: str = "29500"
    nproc_per_node: str = ""  # "" = the GPUs seen
    join_timeout: str = DEFAULT_JOIN_TIMEOUT  # seconds a node waits for the others (torchrun's rendezvous)
    hang_timeout: str = DEFAULT_HANG_TIMEOUT  # seconds a rank may stay at one point of a step (afm/sft/watchdog.py)
    extra_args: list[str] = field(default_factory=list)
    dry_run: bool = False
    mask_report: str = "0"
    stage_knob: str = ""  # STAGE as the user set it (the script fixes the stage)
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, stage: str, script: str, root: str, cwd: str, model_path: str,
                 output_dir: str, dataset: str, script_defaults: Mapping[str, str] | None = None) -> SftSettings:
        """The settings from the knobs in ``env`` over ``script_defaults`` over the defaults above."""
        env = dict(env)
        for name, value in (script_defaults or {}).items():
            if not env.get(name):  # a knob the user left unset or empty takes the script's default
                env[name] = value

        def knob(name: str, default: str) -> str:
            return env.get(name) or default

        model = knob("MODEL_PATH", model_path)
        # A relative MODEL_PATH that exists here is a local folder; anything else is a hub id.
        if not model.startswith("/") and os.path.exists(os.path.join(cwd, model)):
            model = absolute(model, cwd)
        dataset_dir = knob("DATASET_DIR", f"{root}/data")
        if dataset_dir != "ONLINE":
            dataset_dir = absolute(dataset_dir, cwd)
        # PACKING, IGNORE_OBSERVATION, SAVE_ONLY_MODEL and DRY_RUN are read in this order (the first bad one is named).
        packing = parse_bool("PACKING", knob("PACKING", "false"))
        ignore_observation = parse_bool("IGNORE_OBSERVATION", knob("IGNORE_OBSERVATION", "true"))
        save_only_model = parse_bool("SAVE_ONLY_MODEL", knob("SAVE_ONLY_MODEL", "true"))
        dry_run = parse_bool("DRY_RUN", knob("DRY_RUN", "0"))
        return cls(
            stage=stage, script=script, root=root, cwd=cwd, model_path=model,
            output_dir=absolute(env["OUTPUT_DIR"], cwd) if env.get("OUTPUT_DIR") else f"{root}/{output_dir}",
            dataset=knob("DATASET", dataset), dataset_dir=dataset_dir, template=knob("TEMPLATE", "qwen"),
            learning_rate=knob("LEARNING_RATE", "1e-6"), batch_size=knob("BATCH_SIZE", "1"),
            gradient_accumulation=knob("GRADIENT_ACCUMULATION", "8"), epochs=knob("EPOCHS", "4.0"),
            lr_scheduler=knob("LR_SCHEDULER", "linear"), warmup_steps=knob("WARMUP_STEPS", "0"),
            warmup_ratio=knob("WARMUP_RATIO", "0"), attn_impl=knob("ATTN_IMPL", "auto"),
            precision=knob("PRECISION", "bf16"), finetuning_type=knob("FINETUNING_TYPE", "full"),
            cutoff_len=knob("CUTOFF_LEN", "32768"), packing=packing, ignore_observation=ignore_observation,
            save_only_model=save_only_model, observation_token=knob("IGNORE_OBSERVATION_TOKEN", "observation"),
            observation_check=knob("IGNORE_OBSERVATION_CHECK", "observation"), pref_beta=knob("PREF_BETA", "0.1"),
            pref_loss=knob("PREF_LOSS", "sigmoid"),
            # Unset = ZeRO-3; set but empty switches DeepSpeed off.
            deepspeed=env.get("DEEPSPEED_CONFIG", f"{root}/configs/deepspeed/ds_z3_config.json"),
            save_strategy=knob("SAVE_STRATEGY", "epoch"), logging_steps=knob("LOGGING_STEPS", "10"),
            num_workers=knob("PREPROCESSING_NUM_WORKERS", "16"), ddp_timeout=knob("DDP_TIMEOUT", "180000000"),
            report_to=knob("REPORT_TO", "none"), nnodes=knob("NNODES", "1"),
            # The original read the node's rank from RANK (set by its scheduler); NODE_RANK wins when both are set.
            node_rank=knob("NODE_RANK", knob("RANK", "0")), master_addr=knob("MASTER_ADDR", "127.0.0.1"),
            master_port=knob("MASTER_PORT", "29500"), nproc_per_node=knob("NPROC_PER_NODE", ""),
            join_timeout=knob("JOIN_TIMEOUT", DEFAULT_JOIN_TIMEOUT), hang_timeout=knob("HANG_TIMEOUT", DEFAULT_HANG_TIMEOUT),
            extra_args=(env.get("EXTRA_ARGS") or "").split(), dry_run=dry_run, mask_report=knob("MASK_REPORT", "0"),
            stage_knob=knob("STAGE", ""), env=env,
        )

    # -- checks (before anything starts) -----------------------------------------------------------------------
    def check(self) -> None:
        """Raise :class:`KnobError` for the first knob that cannot work."""

        def one_of(name: str, value: str, options: Sequence[str], words: str) -> None:
            if value not in options:
                raise KnobError(f"{name} must be {words} (got '{value}')")

        def need(ok: bool, message: str) -> None:
            if not ok:
                raise KnobError(message)

        if self.stage not in STAGES:
            raise KnobError(f"stage must be sft or dpo (got '{self.stage}')")
        if self.stage_knob and self.stage_knob.lower() != self.stage:
            raise KnobError(f"STAGE={self.stage_knob}, but {self.script} trains stage {self.stage} (DPO: "
                            "sft_scripts/dpo_qwen2.5_32b.sh; SFT: the sft_scripts/<agent>/ scripts)")
        one_of("FINETUNING_TYPE", self.finetuning_type, FINETUNING_TYPES, "full, freeze or lora")
        one_of("PRECISION", self.precision, PRECISIONS, "bf16, fp16 or fp32")
        need(is_number(self.learning_rate), f"LEARNING_RATE must be a number such as 1e-6 (got '{self.learning_rate}')")
        need(is_number(self.epochs), f"EPOCHS must be a number such as 4.0 (got '{self.epochs}')")
        for name, value in (("BATCH_SIZE", self.batch_size), ("GRADIENT_ACCUMULATION", self.gradient_accumulation),
                            ("CUTOFF_LEN", self.cutoff_len)):
            need(is_posint(value), f"{name} must be a positive integer (got '{value}')")
        need(is_uint(self.warmup_steps), f"WARMUP_STEPS must be a whole number of steps (got '{self.warmup_steps}')")
        need(is_number(self.warmup_ratio) and float(self.warmup_ratio) < 1,
             f"WARMUP_RATIO must be a fraction of the steps, 0 <= WARMUP_RATIO < 1 (got '{self.warmup_ratio}')")
        one_of("ATTN_IMPL", self.attn_impl, ATTN_IMPLS, "auto, fa2, fa3, sdpa or eager")
        need(is_posint(self.logging_steps), f"LOGGING_STEPS must be a positive integer (got '{self.logging_steps}')")
        need(is_posint(self.num_workers),
             f"PREPROCESSING_NUM_WORKERS must be a positive integer (got '{self.num_workers}')")
        need(is_posint(self.ddp_timeout),
             f"DDP_TIMEOUT must be a positive number of seconds (got '{self.ddp_timeout}')")
        need(is_uint(self.mask_report),
             f"MASK_REPORT must be a number of samples to show, 0 = off (got '{self.mask_report}')")
        one_of("SAVE_STRATEGY", self.save_strategy, SAVE_STRATEGIES, "no, steps or epoch")
        one_of("IGNORE_OBSERVATION_CHECK", self.observation_check, OBSERVATION_CHECKS, "tags, observation or none")
        need(bool(_TAG.match(self.observation_token)), "IGNORE_OBSERVATION_TOKEN must be a bare tag name such as "
             f"observation, not <observation> (got '{self.observation_token}')")
        if self.stage == "dpo":
            need(is_number(self.pref_beta), f"PREF_BETA must be a number such as 0.1 (got '{self.pref_beta}')")
            one_of("PREF_LOSS", self.pref_loss, PREF_LOSSES, "one of " + ", ".join(PREF_LOSSES))
        need(is_posint(self.nnodes), f"NNODES must be a positive integer (got '{self.nnodes}')")
        need(is_uint(self.node_rank) and int(self.node_rank) < int(self.nnodes),
             f"NODE_RANK must be 0 .. NNODES-1 = {int(self.nnodes) - 1} (got '{self.node_rank}')")
        need(is_posint(self.master_port) and int(self.master_port) <= 65535,
             f"MASTER_PORT must be a port number (got '{self.master_port}')")
        need(is_posint(self.join_timeout),
             f"JOIN_TIMEOUT must be a positive number of seconds (got '{self.join_timeout}')")
        need(is_uint(self.hang_timeout),
             f"HANG_TIMEOUT must be a whole number of seconds, 0 = off (got '{self.hang_timeout}')")
        need(bool(self.model_path), "MODEL_PATH is empty")
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
        if self.nproc_per_node:
            if not is_posint(self.nproc_per_node):
                raise KnobError(f"NPROC_PER_NODE must be a positive integer (got '{self.nproc_per_node}')")
            return int(self.nproc_per_node)
        return gpus if gpus > 0 else 1

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
            elif item in ("wandb", "tensorboard"):
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
    tail = [*s.extra_args, *tail]
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
    if "CUDA_VISIBLE_DEVICES" in s.env:
        env_lines.append(f"CUDA_VISIBLE_DEVICES={s.env['CUDA_VISIBLE_DEVICES']}")
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
    p = argparse.ArgumentParser(prog="python -m afm.sft.knobs", description=__doc__.splitlines()[0])
    p.add_argument("--stage", required=True, choices=STAGES)
    p.add_argument("--script", required=True, help="the script's name, for messages")
    p.add_argument("--root", required=True, help="the repository")
    p.add_argument("--cwd", default=os.getcwd(), help="where the script was started (relative knobs)")
    p.add_argument("--model", required=True, help="the script's MODEL_PATH")
    p.add_argument("--output", required=True, help="the script's OUTPUT_DIR, under the repository")
    p.add_argument("--dataset", required=True, help="the script's DATASET")
    p.add_argument("--default", action="append", default=[], metavar="KNOB=VALUE", help="a script's own default")
    p.add_argument("--launcher", action="append", default=[], metavar="WORD", help="the launcher command, a word each")
    p.add_argument("--python", default=sys.executable, help="this interpreter as the script named it (messages)")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing (also DRY_RUN=1)")
    p.add_argument("tail", nargs="*", help="more LLaMA-Factory flags (after --)")
    args = p.parse_args(argv)
    defaults = dict(item.split("=", 1) for item in args.default)
    try:
        settings = SftSettings.from_env(os.environ, stage=args.stage, script=args.script, root=args.root,
                                        cwd=args.cwd, model_path=args.model, output_dir=args.output,
                                        dataset=args.dataset, script_defaults=defaults)
        settings.dry_run = settings.dry_run or args.dry_run
        launch = plan(settings, args.launcher or ["afm-sft"], args.tail, args.python)
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
