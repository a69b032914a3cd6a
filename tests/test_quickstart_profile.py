"""The quickstart's settings are written once, in afm/quickstart/profile.py (issue 29).

Before, its defaults disagreed: DAPO's lr 3e-5 in the profile and 1e-5 in the recipe's knobs, RL steps 4 / 12 / 24,
the student 128 wide in one place and 64 in another. Now no other module of the quickstart, nor the tiny model
builder or the CLI, gives one of those settings a number of its own: a function parameter, dataclass field,
argparse flag, keyword argument or dict entry named for a setting holds no literal number there.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from afm.model.tiny import ModelSize
from afm.quickstart import profile

ROOT = Path(__file__).resolve().parents[1]
# what a profile setting is called where it is passed on (recipe parameters, the tiny model's shape, script knobs)
PASSED_AS = {"rl_steps": ("steps", "TOTAL_TRAINING_STEPS"), "rl_lr": ("lr", "LR"), "rl_samples": "n", "sft_epochs": "epochs",
             "sft_lr": "learning_rate", "sft_batch_size": "batch_size", "student_width": "hidden_size",
             "student_layers": "num_layers", "student_kv_heads": "num_kv_heads", "STUDENT_VOCAB": "vocab_size",
             "STUDENT_HEADS": "num_heads", "TEACHER_MISTAKE_RATE": "mistake_rate",
             "TEACHER_MISS_RATE": "miss_rate", "rl_refill_cap": "MAX_NUM_GEN_BATCHES", "rl_save_every": "SAVE_FREQ",
             "rl_temperature": ("temperature", "TEMPERATURE")}


def setting_names() -> set[str]:
    """Every name a quickstart setting goes by: the profile's fields and constants, and their passed-on names."""
    names = {f.name for f in fields(profile.Profile)} | {f.name for f in fields(profile.SftSchedule)}
    names |= {f.name for f in fields(ModelSize)} | set(profile.RL_KNOBS)
    names |= {n for v in PASSED_AS.values() for n in ((v,) if isinstance(v, str) else v)}
    names |= {n for n in vars(profile) if n.isupper() and isinstance(getattr(profile, n), int | float)}
    assert set(PASSED_AS) <= names, sorted(set(PASSED_AS) - names)  # a renamed setting must be renamed here too
    return names - {"cutoff_len"}  # SftSchedule's one default of its own: no profile field sets it


def _number(node: ast.AST | None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, str):
        return value.replace(".", "", 1).replace("e-", "", 1).isdigit()
    return isinstance(value, int | float) and not isinstance(value, bool)


def literal_settings(path: Path, names: set[str]) -> list[str]:
    """``file:line name=value`` for each setting given a literal number in ``path``."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text())
    # other models' sizes declared by name (afm.model.tiny.TINY, the tests' model, and TINY_VLLM, its shape with heads
    # of 32 for vLLM and --local's toy policy): not the student
    declared = {id(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and [t.id for t in n.targets if isinstance(t, ast.Name)] in (["TINY"], ["TINY_VLLM"])}
    for node in ast.walk(tree):
        if id(node) in declared:
            continue
        pairs: list[tuple[str | None, ast.AST | None]] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs += [(p.arg, d) for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=True)]
            pairs += [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs.append((node.target.id, node.value))
        elif isinstance(node, ast.Dict):
            pairs += [(k.value, v) for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(node, ast.Call):
            pairs += [(k.arg, k.value) for k in node.keywords]
            flag = next((a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")),
                        None)
            if flag:  # add_argument("--rl-steps", default=4)
                pairs += [(flag.lstrip("-").replace("-", "_"), k.value) for k in node.keywords if k.arg == "default"]
        found += [(node.lineno, f"{name}={ast.unparse(value)}") for name, value in pairs
                  if name in names and _number(value)]
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{name}:{line} {what}" for line, what in sorted(set(found))]


def test_settings_are_written_only_in_the_profile():
    names = setting_names()
    files = [p for p in sorted((ROOT / "afm" / "quickstart").glob("*.py")) if p.name != "profile.py"]
    files += [ROOT / "afm" / "model" / "tiny.py", ROOT / "afm" / "cli.py"]
    found = [hit for path in files for hit in literal_settings(path, names)]
    assert not found, "quickstart settings written outside afm/quickstart/profile.py:\n" + "\n".join(found)


def test_the_checker_sees_a_second_literal(tmp_path):
    """The scan finds what the old tree had (a recipe parameter, a knob, a flag, a size field)."""
    src = tmp_path / "old.py"
    src.write_text("def train_rl(model, *, steps: int = 12): ...\n"
                   "RL_KNOBS = {'LR': 1e-5, 'MAX_NUM_GEN_BATCHES': '30'}\n"
                   "p.add_argument('--rl-steps', type=int, default=4)\n"
                   "class ModelSize:\n    hidden_size: int = 128\n"
                   "def fine(seed: int = 0, steps: int | None = None, width: int = 60): ...\n")
    hits = [h.split(" ", 1)[1] for h in literal_settings(src, setting_names())]
    assert hits == ["steps=12", "LR=1e-05", "MAX_NUM_GEN_BATCHES='30'", "rl_steps=4", "hidden_size=128"]


def test_the_student_and_dapo_take_the_profiles_values():
    """The student's shape follows the profile's fields (and --full's); DAPO's one learning rate is the profile's."""
    from dataclasses import replace

    p = replace(profile.DEFAULT, student_width=96, student_layers=3, student_kv_heads=2)
    assert p.student_size() == ModelSize(vocab_size=profile.STUDENT_VOCAB, hidden_size=96, intermediate_size=288,
                                         num_layers=3, num_heads=profile.STUDENT_HEADS, num_kv_heads=2)
    assert profile.FULL.student_size().num_layers == profile.FULL.student_layers != profile.DEFAULT.student_layers
    assert replace(p, sft_ranks=1).sft_schedule() == profile.SftSchedule(p.sft_epochs, p.sft_batch_size, p.sft_lr,
                                                                         precision="fp32")
    assert "LR" not in profile.RL_KNOBS  # train_rl takes the profile's rl_lr


def test_the_sft_step_runs_as_sorted_micro_batches():
    """The quickstart's SFT step of 16 rows runs as two length-sorted micro-batches of 8 (the same step, less
    padding: afm.sft.sorted_batches); a batch that does not split evenly is refused."""
    from dataclasses import replace

    import pytest

    from afm.quickstart.recipe import sft_config

    cfg = sft_config(Path("m"), Path("d"), Path("o"), replace(profile.DEFAULT, sft_ranks=1).sft_schedule())
    assert cfg["per_device_train_batch_size"] * cfg["gradient_accumulation_steps"] == profile.DEFAULT.sft_batch_size
    assert cfg["gradient_accumulation_steps"] == 2 and cfg["sort_micro_batches"] is True
    assert "ddp_backend" not in cfg
    assert cfg["trained_logits_only"] is True  # the same loss, the head only where a token is trained
    assert cfg["attention_chunks"] == 3 and cfg["share_prefix"] is True  # the same attention, computed in parts
    one = sft_config(Path("m"), Path("d"), Path("o"), profile.SftSchedule(1.0, 16, 1e-3, micro_batches=1))
    assert one["per_device_train_batch_size"] == 16 and one["sort_micro_batches"] is False
    with pytest.raises(ValueError, match="does not split"):
        profile.SftSchedule(1.0, 16, 1e-3, micro_batches=3)


def test_the_tiny_students_sft_runs_on_two_ranks_of_a_core_each():
    """sft_ranks 0 (auto): two torchrun ranks (gloo) for the tiny student on a CPU-only machine with 2+ cores, each
    taking 8 of a step's 16 rows as 4 sorted micro-batches of 2; one process for a pretrained student, on a GPU or
    on one core, and for a batch two ranks do not split."""
    from dataclasses import replace

    import pytest

    from afm.quickstart.recipe import sft_config

    assert profile.sft_ranks(0, "", cpus=2, cuda=False)[0] == 2
    assert profile.sft_ranks(0, "", cpus=64, cuda=False)[0] == 2
    assert [profile.sft_ranks(0, s, cpus=c, cuda=g)[0] for s, c, g in
            [("", 1, False), ("gemma", 8, False), ("", 8, True)]] == [1, 1, 1]
    assert profile.sft_ranks(3, "gemma") == (3, "the profile's sft_ranks")
    with pytest.raises(ValueError, match="sft_ranks -1"):
        profile.sft_ranks(-1, "")
    two = replace(profile.DEFAULT, sft_ranks=2).sft_schedule()
    assert (two.ranks, two.micro_batches) == (2, profile.SFT_MICRO_BATCHES[2]) == (2, 4)
    cfg = sft_config(Path("m"), Path("d"), Path("o"), two)
    assert (cfg["per_device_train_batch_size"], cfg["gradient_accumulation_steps"]) == (2, 4)
    assert cfg["ddp_backend"] == "gloo" and cfg["sort_micro_batches"] is True
    # a batch of 4 on 2 ranks: 2 micro-batches of 1 a rank; an odd batch with auto ranks: one process
    assert replace(profile.DEFAULT, sft_ranks=2, sft_batch_size=4).sft_schedule().micro_batches == 2
    odd = replace(profile.DEFAULT, sft_batch_size=5).sft_schedule()
    assert odd.ranks == 1
    with pytest.raises(ValueError, match="on each of 2 rank"):
        profile.SftSchedule(1.0, 5, 1e-3, micro_batches=1, ranks=2)
