"""``afm quickstart``: the recipe in miniature, offline on CPU, with measured gains (settings:
:mod:`afm.quickstart.profile`).

1. the demo world (:mod:`afm.quickstart.world`): four task families, disjoint train / RL / held-out splits, served by the
   real search, crawl and wiki servers and the code sandbox;
2. multi-agent distillation (``afm data distill`` driving a rule-based teacher model behind the OpenAI API), then
   ``afm data filter`` and ``afm data convert``;
3. the untrained student (tiny Qwen2, tokenizer trained on the SFT set), evaluated with ``afm eval run``;
4. masked SFT (``afm-sft train``, a real LLaMA-Factory run) with the observation-masking report of its own
   preprocessing (what ``afm-sft mask-report`` prints), evaluated (while DAPO trains, when it does);
5. RL selection: the SFT policy samples the RL split, ``afm data select`` keeps what it does not always solve;
6. DAPO through verl's real trainer on the local CPU backend (``experiments/train_dapo_code_agent.sh --local``),
   evaluated; in the teacher-shortcut world (:mod:`afm.quickstart.world`, the default) the RL set is the ``lookup``
   questions, where the SFT policy copied its teacher's shortcut, and DAPO is meant to fix them;
7. ``summary.json``, ``report.md`` and ``summary.png``: accuracy per stage and family with CIs, tool calls per task,
   tokens per solved task, paired differences.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from afm.quickstart.profile import DEFAULT, PRETRAINED_RL_KNOBS, RL_KNOBS, Profile, sft_precision, sft_ranks


def masking_report(sft_dir: Path, log: Path, out: Path) -> str:
    """The observation-masking report the SFT run wrote while tokenizing (``afm_mask_report_train.json``), saved
    as ``out`` in ``afm-sft mask-report --json``'s form (keyed by split), and its text from the run's ``log``. The
    run computes the report ``afm-sft mask-report`` would (one pipeline), so the quickstart does not tokenize the
    set twice (a separate mask-report process was ~11 s of the run); the quickstart never imports afm.sft (the
    LLaMA-Factory side runs in its own processes)."""
    totals = json.loads((sft_dir / "afm_mask_report_train.json").read_text())
    out.write_text(json.dumps({"train": totals}, indent=2) + "\n")
    lines = log.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("[afm] observation masking")), None)
    if start is None:
        return f"[afm] observation masking: {json.dumps(totals)}"
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return "\n".join(lines[start:end])


def losses(output_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) pairs from a finished run's trainer_state.json."""
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [(int(e["step"]), float(e["loss"])) for e in state["log_history"] if "loss" in e]


def ascii_curve(points: list[tuple[int, float]], width: int = 60, height: int = 8) -> str:
    """A small text plot of a curve (loss, reward)."""
    if not points:
        return "(nothing logged)"
    ys = [y for _, y in points]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    n = min(width, len(ys))
    cols = [ys[int(i * len(ys) / n)] for i in range(n - 1)] + [ys[-1]]
    rows = []
    for r in range(height, -1, -1):
        level = lo + span * r / height
        line = "".join("•" if abs((y - lo) / span * height - r) < 0.5 else " " for y in cols)
        rows.append(f"{level:8.3f} |{line}")
    rows.append(" " * 9 + "+" + "-" * len(cols))
    rows.append(" " * 10 + f"step {points[0][0]} .. {points[-1][0]}   first {ys[0]:.3f}  last {ys[-1]:.3f}")
    return "\n".join(rows)


def _fmt(acc: dict[str, float]) -> str:
    return "  ".join(f"{k} {100 * v:.0f}%" for k, v in acc.items())


def run(workdir: str | Path, profile: Profile = DEFAULT, seed: int = 0,
        rl: bool = True) -> dict[str, Any]:
    """Run the miniature recipe in ``workdir``; returns the summary (also written to ``summary.json``)."""
    from afm.common import exit_signals
    from afm.quickstart.engine import choose as choose_engine
    from afm.quickstart.engine import serving
    from afm.quickstart.recipe import (
        build_or_find,
        distill_sft_data,
        evaluate,
        make_world,
        select_rl_data,
        sft_config,
        start_rl,
        train_questions,
        train_sft,
    )
    from afm.quickstart.rl import GroupsFiltered, rl_precision, rl_threads, rollout_engine, stopped_dapo
    from afm.quickstart.servers import DemoServers, seed_site_port
    from afm.quickstart.student import lf_template, pretrained_dir
    from afm.quickstart.summary import rename_families, stage_summary, table, write_report
    from afm.quickstart.world import SHORTCUT_FAMILY, SHORTCUT_RATE, SHORTCUT_WHY

    t0 = time.monotonic()
    seconds: dict[str, float] = {}
    work = Path(workdir).absolute()
    work.mkdir(parents=True, exist_ok=True)
    (work / "profile.json").write_text(json.dumps(asdict(profile), indent=1) + "\n")
    if profile.student:  # a wrong name or folder fails here, not after the distillation
        print(f"[0/7] the pretrained student: {profile.student} -> {pretrained_dir(profile.student)}", flush=True)
    target, target_why = (SHORTCUT_FAMILY, SHORTCUT_WHY) if profile.teacher_shortcut else ("", "")
    train = profile.train_counts(target)
    more = {f: n for f, n in train.items() if n != profile.train_per_family}
    print(f"[1/7] the demo world: {profile.train_per_family} train / {profile.rl_per_family} RL / "
          f"{profile.heldout_per_family} held-out tasks per family (arith, lookup, multihop, calc)"
          + "".join(f"; {n} train {f} tasks" for f, n in more.items()), flush=True)
    world, root = make_world(work, seed, {"train": max(train.values()), "rl": profile.rl_per_family,
                                          "heldout": profile.heldout_per_family}, shortcut=profile.teacher_shortcut)
    runs: dict[str, Path] = {}
    turn_end: dict[str, dict[str, Any]] = {}
    site_port = seed_site_port(seed)
    if site_port is None:
        print(f"      the demo site's port for seed {seed} is taken on 127.0.0.1: a random port, so this run's SFT rows "
              "(their page URLs) differ from another run of the seed", flush=True)
    with DemoServers(work / "servers", world=world, site_port=site_port) as servers:
        exit_signals.check()
        print("[2/7] distillation: the multi-agent teacher (planner, tool agents, reflector, verifier, answerer) "
              "solves the train split with the real tools; afm data filter; afm data convert", flush=True)
        t = time.monotonic()
        questions = train_questions(root, train, work / "distill" / "questions.jsonl") if more else None
        distilled = distill_sft_data(root, servers, work / "distill", seed=seed, questions=questions,
                                     shortcut_rate=SHORTCUT_RATE if profile.teacher_shortcut else 0.0)
        seconds["distill"] = time.monotonic() - t
        data = distilled["data"]
        print(f"      kept {distilled['filter_report'].get('records_out')} SFT samples -> {data}", flush=True)

        model = build_or_find(work / "student", data, profile.student, profile.student_size(), seed=seed)
        template = lf_template(model)
        engine = choose_engine(profile.student)
        schedule = profile.sft_schedule()
        sft_prec = sft_precision(profile.sft_precision, profile.student)
        chosen = sft_ranks(profile.sft_ranks, profile.student)
        ranks_why = chosen[1] if chosen[0] == schedule.ranks else f"a batch of {schedule.batch_size}: one process"
        sft_yaml = work / "sft.yaml"
        sft_yaml.write_text(yaml.safe_dump(sft_config(model, data, work / "sft", schedule, seed, template)))
        exit_signals.check()
        print(f"[3/7] the untrained student ({student_name(profile)}, {model}) on held-out questions (afm eval run, "
              f"real tools; engine {engine.name}: {engine.why})", flush=True)
        # Not beside SFT's start: two processes of two OpenMP threads each on two cores made the evaluation 2.3 ->
        # 20 s and SFT slower (RESULTS.md, twenty-seventh session)
        t = time.monotonic()
        runs["untrained"] = work / "eval" / "untrained"
        with serving(engine, model, work / "engine" / "untrained") as backend:
            print("      " + _fmt(evaluate(model, root, servers, runs["untrained"], limit=profile.untrained_limit,
                                           backend=backend)), flush=True)
        seconds["eval_untrained"] = time.monotonic() - t

        exit_signals.check()
        print("[4/7] masked SFT (afm-sft train: LLaMA-Factory, observation tokens masked; below, the masking report "
              f"of its preprocessing); {sft_prec[0]}: {sft_prec[1]}; {schedule.ranks} rank(s): {ranks_why}", flush=True)
        t = time.monotonic()
        sft = train_sft(model, data, work / "sft", schedule, seed, template)
        seconds["sft"] = time.monotonic() - t
        print(masking_report(sft, work / "sft.log", work / "mask_report.json"), flush=True)
        curve = losses(sft)
        print(ascii_curve(curve), flush=True)
        runs["sft"] = work / "eval" / "sft"

        def evaluate_sft(beside: str = "") -> None:
            t = time.monotonic()
            with serving(engine, sft, work / "engine" / "sft") as backend:
                acc = evaluate(sft, root, servers, runs["sft"], backend=backend)
            print(f"      SFT{beside}: " + _fmt(acc), flush=True)
            turn_end["sft"] = _turn_end(sft, runs["sft"])
            seconds["eval_sft"] = time.monotonic() - t

        if not rl:
            evaluate_sft()

        def evaluate_rl(policy: Path) -> tuple[Path, str]:
            t = time.monotonic()
            runs["rl"] = work / "eval" / "rl"
            with serving(engine, policy, work / "engine" / "rl") as backend:
                acc = _fmt(evaluate(policy, root, servers, runs["rl"], backend=backend))
            turn_end["rl"] = _turn_end(policy, runs["rl"], echo=False)  # printed with the accuracy, after the curve
            seconds["eval_rl"] = time.monotonic() - t
            return policy, acc

        dapo, rl_skipped, rl_stopped = None, "", ""
        rl_eval: tuple[Path, str] | None = None
        rollout = precision = threads = ("", "")
        if rl:
            meant = f" The RL set is the {target} questions: RL is meant to fix them: {target_why}" if target else ""
            exit_signals.check()
            print(f"[5/7] RL selection: the SFT policy samples each RL question {profile.rl_samples} times; afm data "
                  f"select drops the ones it always solves.{meant}", flush=True)
            t = time.monotonic()
            n = profile.rl_samples
            # one server (and export) for every round: afm infer resumes, adding only the new samples
            with serving(engine, sft, work / "engine" / "rl_select") as backend:
                while True:
                    sel = select_rl_data(sft, root, servers, work / "rl_data", n=n, seed=seed,
                                         temperature=profile.rl_temperature, families=[target] if target else None,
                                         backend=backend)
                    rl_skipped = why_no_rl(sel["report"])
                    # With few RL questions, a policy sure of its route on each solves every one in all or none of 4
                    # samples now and then (seen in 1 of 5 runs of the default: {0/4: 3, 4/4: 5}) though it is not
                    # sure of the answer's source: more samples (afm infer resumes, adding only the new ones) tell
                    # the questions DAPO can learn from apart; up to 4x.
                    if not rl_skipped or n >= MAX_SELECTION_GROWTH * profile.rl_samples:
                        break
                    n *= 2
                    print(f"      no question solved in some but not all samples "
                          f"({sel['report'].get('solved_count_histogram')}): {n} samples per question", flush=True)
            seconds["rl_select"] = time.monotonic() - t
            print(f"      kept {sel['report'].get('kept')} of {sel['report'].get('questions')} questions "
                  f"(mean pass rate {sel['report'].get('mean_pass_rate', 0):.2f}) -> {sel['parquet']}", flush=True)
        if rl and rl_skipped:
            exit_signals.check()
            evaluate_sft()
            print(f"[6/7] DAPO skipped: {rl_skipped}", flush=True)
        elif rl:
            exit_signals.check()
            rollout = rollout_engine(profile.student)
            precision, threads = rl_precision(profile.student), rl_threads(profile.student)
            print(f"[6/7] DAPO for {profile.rl_steps} steps through verl's trainer (CPU, {rollout[0]} rollout: "
                  f"{rollout[1]}; {precision[0]}: {precision[1]}; {threads[0]} thread(s) a process: {threads[1]}; "
                  "afm_agent loop, the same tools)", flush=True)
            t = time.monotonic()
            # DAPO runs in its own processes (~1.3 of 2 cores here) while the SFT policy is evaluated in this one
            # (~1.2): the evaluation needs nothing DAPO makes, and beside it the two take ~10 s less than one after
            # the other (benchmarks/RESULTS.md, twenty-seventh session)
            job = start_rl(sft, sel["parquet"], servers, work / "rl", steps=profile.rl_steps, lr=profile.rl_lr,
                           knobs={"MAX_NUM_GEN_BATCHES": rl_refill_cap(profile=profile), "TEMPERATURE": profile.rl_temperature,
                                  "ROLLOUT_ENGINE": rollout[0], "CPU_PRECISION": precision[0],
                                  "OMP_NUM_THREADS": threads[0],
                                  # 0: none set here (torch's 1e-8, or the caller's ADAM_EPS)
                                  **({"ADAM_EPS": f"{profile.rl_adam_eps:g}"} if profile.rl_adam_eps else {}),
                                  # verl's dump of every rollout, for the trajectory viewer (view.html)
                                  "ROLLOUT_DATA_DIR": str(work / "rl" / "rollouts"),
                                  **rl_batch_knobs(int(sel["report"].get("kept") or 0), profile.rl_mini_batch),
                                  **rl_checkpoint_knobs(profile),
                                  **(PRETRAINED_RL_KNOBS if profile.student else {})})
            try:
                evaluate_sft(" (evaluated while DAPO trains)")
                exit_signals.check()
                # the last step's policy is evaluated while verl and Ray shut down (~6 s of the stage)
                final = job.final_policy(profile.rl_steps)
                seconds["rl"] = time.monotonic() - t
                if final is not None:
                    rl_eval = evaluate_rl(final)
                dapo = job.wait()
            except GroupsFiltered as exc:  # a property of this SFT policy, not a broken pipeline: report it
                dapo = stopped_dapo(work / "rl", exc)
                if dapo is None:
                    rl_skipped = f"DAPO stopped: {exc} (log {exc.log})"
                    print(f"      {rl_skipped}", flush=True)
                else:
                    rl_stopped = (f"DAPO stopped after step {dapo.steps[-1]['step']:.0f} of {profile.rl_steps}: {exc} "
                                  f"(log {exc.log}); the RL policy is that step's checkpoint")
                    print(f"      {rl_stopped}", flush=True)
            finally:
                job.stop()  # a no-op after it ended; an interrupted quickstart ends its DAPO run too
            seconds.setdefault("rl", time.monotonic() - t)
        if dapo is not None:
            reward = dapo.curve("critic/score/mean")
            print("      reward per step (critic/score/mean):\n" + ascii_curve(reward), flush=True)
            if rl_eval is None or rl_eval[0] != dapo.model:  # a run the refill cap stopped: its newest checkpoint
                rl_eval = evaluate_rl(dapo.model)
            print("      RL: " + rl_eval[1] + "\n" + _turn_end_line(turn_end["rl"]), end="", flush=True)

    exit_signals.check()
    print("[7/7] summary", flush=True)
    compare = [("sft", "untrained")] + ([("rl", "sft")] if "rl" in runs else [])
    summary = rename_families(stage_summary({k: str(v) for k, v in runs.items()}, compare=compare), "world_")
    seconds["total"] = time.monotonic() - t0
    summary["seconds"] = {k: round(v, 1) for k, v in seconds.items()}
    summary["profile"] = asdict(profile)
    summary["sft_loss"] = curve
    notes = [f"the student: {student_name(profile)} ({model}); SFT: {schedule.finetuning_type} fine-tuning "
             f"in {schedule.precision} ({sft_prec[1]}), LLaMA-Factory template `{template}`; evaluations on `{engine.name}` ({engine.why})",
             *(f"{k}: {v:.0f} s" for k, v in seconds.items())]
    notes += [f"{stage}: after `</answer>`, `{probe['token']}` (the chat format's end of turn) is the most likely "
              f"next token in {probe['top']} of {probe['checked']} answered trajectories (median p "
              f"{probe['p_median']:.3f})" for stage, probe in turn_end.items() if probe.get("checked")]
    if rl and target:
        summary["rl_target"] = {"family": target, "why": target_why}
    summary["models"] = {"untrained": str(model), "sft": str(sft)}
    summary["turn_end"] = turn_end
    summary["student"] = {"name": student_name(profile), "sft_template": template,
                          "sft_finetuning": schedule.finetuning_type, "sft_precision": schedule.precision,
                          "sft_precision_why": sft_prec[1], "sft_ranks": schedule.ranks, "sft_ranks_why": ranks_why,
                          "eval_engine": engine.name,
                          "eval_engine_why": engine.why}
    if rollout[0]:
        summary["student"].update(rl_rollout=rollout[0], rl_rollout_why=rollout[1], rl_precision=precision[0],
                                  rl_precision_why=precision[1], rl_threads=threads[0], rl_threads_why=threads[1])
        notes.append(f"DAPO's rollouts on `{rollout[0]}` ({rollout[1]}); actor and rollout in {precision[0]} "
                     f"({precision[1]}), {threads[0]} thread(s) a process ({threads[1]})")
    if dapo is not None:
        summary["rl_reward"] = dapo.curve("critic/score/mean")
        summary["models"]["rl"] = str(dapo.model)
    if rl_stopped:
        summary["rl_stopped"] = rl_stopped
        notes.append(rl_stopped)
    if rl_skipped:
        summary["rl_skipped"] = rl_skipped
        notes.append(f"RL skipped: {rl_skipped}")
    summary_path, report = write_report(summary, work, notes=notes)
    view = write_viewer(work, runs)
    print(table(summary))
    print(f"\nDone in {seconds['total']:.0f}s. {summary_path}, {report}, {work / 'summary.png'}; eval runs in "
          f"{work / 'eval'} (afm eval report {work / 'eval' / 'sft'} ...)", flush=True)
    if view is not None:
        print(f"Every trajectory (the SFT set, each evaluation, the RL rollouts), in one page for any browser: {view}",
              flush=True)
    return summary


def _turn_end(model: Path, run_dir: Path, echo: bool = True) -> dict[str, Any]:
    """The end-of-turn probe (:mod:`afm.quickstart.turn_end`) of a trained stage's policy, printed (``echo``)."""
    from afm.eval.datasets import WORLD_PROMPT
    from afm.quickstart.profile import TURN_END_PROBES
    from afm.quickstart.turn_end import turn_end_probe

    probe = turn_end_probe(model, run_dir, WORLD_PROMPT, TURN_END_PROBES)
    if echo:
        print(_turn_end_line(probe), end="", flush=True)
    return probe


def _turn_end_line(probe: dict[str, Any]) -> str:
    if not probe["checked"]:
        return ""
    return (f"      after </answer>, {probe['token']} is the most likely next token in {probe['top']} of "
            f"{probe['checked']} answered trajectories (median p {probe['p_median']:.3f})\n")


def student_name(profile: Profile) -> str:
    """What the report calls the student: the pretrained model's name, or the tiny Qwen2's shape."""
    if profile.student:
        return profile.student
    size = profile.student_size()
    return f"tiny Qwen2 ({size.num_layers} layers, {size.hidden_size} wide, built for the world)"


def write_viewer(work: Path, runs: dict[str, Path]) -> Path | None:
    """``work/view.html`` (``afm view``) of the quickstart's SFT set, evaluations, RL selection samples and DAPO
    dumps; None, with a warning, when it cannot be written: the viewer never fails a finished quickstart."""
    from afm.view import write_view

    paths = [work / "distill" / "sft_data", work / "mask_report.json", *runs.values(),
             work / "rl_data" / "samples.jsonl", work / "rl" / "rollouts", work / "rl" / "checkpoints" / "validation"]
    compare = ("sft", "rl") if "rl" in runs else ("untrained", "sft")
    try:
        return write_view([p for p in paths if p.exists()], work / "view.html", title="afm quickstart",
                          compare=compare).path
    except Exception as exc:  # any failure of the page is the page's, never the quickstart's
        print(f"warning: the trajectory viewer was not written ({type(exc).__name__}: {exc})", flush=True)
        return None


def rl_batch_knobs(kept: int, mini_batch: int) -> dict[str, int]:
    """``TRAIN_BATCH_SIZE`` / ``MINI_BATCH_SIZE`` for the quickstart's DAPO: 4 prompts a step, fewer when selection
    kept fewer questions (verl's dataloader drops an incomplete batch, so 3 rows at batch 4 made an epoch of no
    steps and the trainer divided by zero)."""
    batch = max(1, min(int(RL_KNOBS["TRAIN_BATCH_SIZE"]), kept))
    return {"TRAIN_BATCH_SIZE": batch, "MINI_BATCH_SIZE": max(1, min(mini_batch, batch))}


def rl_refill_cap(env: dict[str, str] | None = None, profile: Profile = DEFAULT) -> str:
    """``MAX_NUM_GEN_BATCHES`` for the quickstart's DAPO: the environment's, else the profile's ``rl_refill_cap``
    (why it is not the RL scripts' default: there)."""
    import os

    env = os.environ if env is None else env
    return str(env.get("MAX_NUM_GEN_BATCHES") or profile.rl_refill_cap)


def rl_checkpoint_knobs(profile: Profile) -> dict[str, int]:
    """``SAVE_FREQ`` / ``MAX_CKPT_TO_KEEP`` of the quickstart's DAPO: a checkpoint every ``rl_save_every`` steps, only
    the newest kept, so that a run the refill cap stops still leaves a policy (``{}``: verl's save at the last step,
    :func:`afm.quickstart.rl.run_dapo`'s default)."""
    if profile.rl_save_every <= 0:
        return {}
    return {"SAVE_FREQ": profile.rl_save_every, "MAX_CKPT_TO_KEEP": 1}


MAX_SELECTION_GROWTH = 4  # RL selection samples at most this many times profile.rl_samples per question


def why_no_rl(select_report: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """Why DAPO cannot learn from the selected RL set ("" when it can).

    With DAPO's group filter on (``FILTER_GROUPS``, the default), only groups whose answers differ carry a gradient:
    a policy that never solves (or always solves) every selected question would refill filtered groups until afm's
    cap (``MAX_NUM_GEN_BATCHES`` batches, :mod:`afm.rl.local.patches`) stops the run with an error, minutes later.
    The selection's samples show it beforehand: some question must be solved in some but not all of its samples.
    """
    import os

    # the spellings the RL scripts accept (afm.rl.knobs reads FILTER_GROUPS with it too)
    from afm.launch.values import parse_bool

    env = os.environ if env is None else env
    if select_report.get("kept") == 0:
        return (f"the SFT policy solved each of the {select_report.get('questions')} RL questions in every sample: "
                "nothing is left for RL to learn (a larger RL split, --rl-per-family, holds harder ones)")
    if not parse_bool("FILTER_GROUPS", str(env.get("FILTER_GROUPS") or "true")):
        return ""
    counts = select_report.get("solved_count_histogram") or {}
    mixed = 0
    for key, count in counts.items():
        solved, _, n = str(key).partition("/")
        if solved.isdigit() and n.isdigit() and 0 < int(solved) < int(n):
            mixed += int(count)
    if mixed or not counts:
        return ""
    return (f"the SFT policy solved each kept RL question in all or none of its samples ({dict(counts)}): DAPO's "
            "group filter would drop every group (set FILTER_GROUPS=false to train on them anyway)")
