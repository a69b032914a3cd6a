"""The one source of the quickstart's settings: how much each run does (:class:`Profile`, ``DEFAULT``, ``FULL``, the
teacher-shortcut world's own values), the student's fixed shape, the teacher's noise and DAPO's script knobs.

Every other place of the quickstart (the CLI's flags and their help, the recipe's functions, ``python -m
afm.quickstart.recipe`` and ``python -m afm.quickstart.rl``) takes its value from here or has none of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from afm.eval.benchmark_specs import WORLD_SAMPLING
from afm.model.tiny import ModelSize
from afm.quickstart.world import FAMILIES

# The student's vocabulary and query heads (its layers, width and key/value heads are Profile fields). Two layers by
# default: copying the question's digits into the program (an induction-style attention pattern) is what the student
# learns last, and the 2-layer model leaves the loss plateau before it (loss 0.44 at step 185 where the 4-layer one
# is still at 0.52) at 1.35x the steps per second. Given ~1000+ steps (--full), four layers (128 wide, 2 key/value
# heads) learn every family of the numbered world: SFT macro 99.6% (benchmarks/RESULTS.md, 2026-11-25 night). A
# key/value head per query head (4, not Qwen's grouped 2): on the three worlds where the 2-key/value student stalled
# or left a family at 0-16% (SFT macro 0%, 75%, 79%) it learned every family (100%, 96%, 99%) in the same 520 steps
# (RESULTS.md, 2026-11-26 afternoon).
STUDENT_VOCAB = 1024
STUDENT_HEADS = 4

# The rule-based teacher's noise: the code agent copies an operand wrongly, the verifier accepts a wrong answer.
TEACHER_MISTAKE_RATE = 0.15
TEACHER_MISS_RATE = 0.3


SFT_PRECISIONS = ("fp32", "cpu_bf16")


def sft_precision(choice: str, student: str, *, native_bf16: bool | None = None,
                  cuda: bool | None = None) -> tuple[str, str]:
    """The SFT run's precision (an :attr:`SftSchedule.precision`) for a profile's ``sft_precision``, and why.
    ``auto``: ``cpu_bf16`` for the tiny student on a CPU-only machine whose CPU multiplies bfloat16 natively, float32
    otherwise (a pretrained student's quickstart results were measured in float32; a GPU's SFT is LLaMA-Factory's
    own choice to make)."""
    if choice in SFT_PRECISIONS:
        return choice, "the profile's sft_precision"
    if choice != "auto":
        raise ValueError(f"sft_precision {choice!r}: auto or one of {', '.join(SFT_PRECISIONS)}")
    if student:
        return "fp32", "a pretrained student: its quickstart results were measured in float32"
    import torch

    if torch.cuda.is_available() if cuda is None else cuda:
        return "fp32", "a GPU is visible: the CPU's bf16 setting does not apply"
    from afm.common.cpu_features import cpu_bf16

    if cpu_bf16() if native_bf16 is None else native_bf16:
        return "cpu_bf16", ("this CPU computes bfloat16 natively: bf16 matrix products, float32 weights and attention "
                            "(1.18x the steps/s)")
    return "fp32", "this CPU has no native bfloat16 (no AVX512-BF16/AMX): float32 is faster"


# Micro-batches a rank makes of its share of a step, by ranks: one process takes the 16 rows as 2 sorted micro-batches
# of 8; two ranks take 8 each as 4 of 2 (rows dealt to the ranks in turn, afm.sft.sorted_batches), the fastest of
# 1 x 8, 2 x 4 and 4 x 2 a rank (bench_quickstart_sft.py --compare rank_micro, RESULTS.md twenty-ninth session)
SFT_MICRO_BATCHES = {1: 2, 2: 4}


def sft_ranks(choice: int, student: str, *, cpus: int | None = None, cuda: bool | None = None) -> tuple[int, str]:
    """The SFT run's torchrun ranks (an :attr:`SftSchedule.ranks`) for a profile's ``sft_ranks``, and why. 0
    (auto): for the tiny student on a CPU-only machine one rank of one thread a core, up to 2; else one process
    (a pretrained student's results were measured so, and holds its weights once; a GPU's SFT is LLaMA-Factory's)."""
    if choice < 0:
        raise ValueError(f"sft_ranks {choice}: 0 (auto) or a number of ranks")
    if choice:
        return choice, "the profile's sft_ranks"
    if student:
        return 1, "a pretrained student: one process (its results were measured so)"
    import torch

    if torch.cuda.is_available() if cuda is None else cuda:
        return 1, "a GPU is visible: one process"
    from afm.common.cpu_features import usable_cores

    n = max(1, min(2, cpus if cpus is not None else usable_cores()))
    if n == 1:
        return 1, "one core: one process"
    return n, (f"{n} torchrun ranks of one thread each (gloo), one a core: 1.07-1.10x the steps/s of one process "
               "with a thread a core")


@dataclass(frozen=True)
class SftSchedule:
    """The masked SFT run (LLaMA-Factory); epochs, batch size and learning rate come from a :class:`Profile`."""

    epochs: float
    batch_size: int  # rows per optimizer step
    learning_rate: float
    cutoff_len: int = 768
    # Each step's rows go through the model in this many micro-batches (gradient accumulation), longest rows first
    # (sort_micro_batches, afm.sft.sorted_batches): the same rows and gradient per step as one batch, with less
    # padding. The lookup rows are ~500 tokens and the rest 210-400, and nearly every shuffled batch of 16 holds one
    # lookup row, so one batch pads to ~500; two sorted micro-batches of 8 cut the padded tokens 13% and the SFT
    # step time 1.35x (benchmarks/bench_quickstart_sft.py --compare sorting, RESULTS.md 2026-11-27 tenth session)
    micro_batches: int = 2
    # "full": every weight; "freeze": every decoder layer, the (tied) embedding frozen (LLaMA-Factory's freeze
    # fine-tuning over all layers): for a pretrained student whose 262k-entry embedding is most of its weights
    finetuning_type: str = "full"
    # "fp32": float32 throughout; "cpu_bf16": on the CPU, bf16 autocast over float32 weights with the attention kernel
    # in float32 (LLaMA-Factory's bf16 + use_cpu, afm's attention_fp32): 1.18x the tiny student's steps/s on a
    # CPU with native bf16 (bench_quickstart_sft.py --compare mixed, RESULTS.md twenty-eighth session)
    precision: str = "fp32"
    # each attention call as this many query chunks over the keys up to them (afm.sft.causal_chunks): PyTorch's CPU
    # flash kernel computes the masked upper triangle whenever a mask is given (padding, the shared prefix); the same
    # attention, 1.05x the steps/s with 3 (bench_quickstart_sft.py --compare chunks, RESULTS.md twenty-eighth session)
    attention_chunks: int = 3
    # torchrun ranks of one thread each on this machine (gloo); each takes batch_size / ranks rows of a step as
    # micro_batches micro-batches. The same steps as one process, the gradient summed in another order.
    ranks: int = 1

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.micro_batches < 1 or self.batch_size % (self.micro_batches * self.ranks):
            raise ValueError(f"the SFT batch of {self.batch_size} rows does not split into {self.micro_batches} "
                             f"equal micro-batches on each of {self.ranks} rank(s)")
        if self.finetuning_type not in ("full", "freeze"):
            raise ValueError(f"finetuning_type {self.finetuning_type!r}: 'full' or 'freeze'")
        if self.precision not in SFT_PRECISIONS:
            raise ValueError(f"SFT precision {self.precision!r}: one of {', '.join(SFT_PRECISIONS)}")


@dataclass(frozen=True)
class Profile:
    """How much of everything one quickstart run does (tasks per family and split, SFT schedule, RL steps)."""

    train_per_family: int = 500
    # the RL family's (the shortcut world's lookup) train questions, in train_per_family: its minority route must be
    # in the SFT set, which a pretrained student's few demonstrations may miss (PRETRAINED_SETTINGS)
    rl_family_train_factor: int = 1
    rl_per_family: int = 8
    heldout_per_family: int = 25
    untrained_limit: int = 10  # held-out questions per family for the untrained model (it solves none)
    # 6 epochs at 1e-3 (the plain world's: 4 at 2e-3): the shortcut world's minority route needs the steps, and at
    # 2e-3 one SFT policy of four ended a worse copier (own-page address right on 13 of 25 towns, calc 0%) where at
    # 1e-3 it copied 24 of 25 and calc 96% (RESULTS.md, 2026-11-27 ninth session)
    sft_epochs: float = 6.0
    sft_lr: float = 1e-3
    sft_batch_size: int = 16
    student_layers: int = 2  # 2 leave the plateau sooner; 4 learn every family given ~1000+ steps (RESULTS.md)
    # The student's width and key/value heads. Copying digits from the context is learned last, after a loss plateau
    # whose length varies from run to run; with 2 key/value heads one world in five never left it in 520 steps and
    # others left a family at 0-16%; with 4 (one per query head) the same three worlds learned every family
    # (RESULTS.md, 2026-11-26 afternoon). 256 wide left the plateau sooner but at half the speed a step.
    student_width: int = 128  # hidden size; the feed-forward is 3x it (student_size)
    student_kv_heads: int = 4  # of STUDENT_HEADS query heads
    rl_samples: int = 4  # samples per RL question for the pass-rate selection
    # 8 DAPO steps at 5e-5 on the shortcut world's lookup questions: 4 at 1e-4 moved the route as far but broke digit
    # copies on the way (calc -24 on one seed), half the rate over twice the steps kept them (RESULTS.md, 2026-11-27
    # ninth session). The plain world's: 4 at 3e-5 (1e-4 made a family forget there, RESULTS.md 2026-11-25 night)
    rl_steps: int = 8
    rl_lr: float = 5e-5
    # AdamW's epsilon in DAPO (ADAM_EPS; 0: torch's 1e-8). With 1e-8 Adam's first updates move every weight by ~lr
    # along the sign of its gradient, including the many whose gradient on the lookup rollouts is noise; on about
    # half of the runs that broke digit copies elsewhere (calc or arith -16 to -20 beyond their CIs). At 1e-3, about
    # the gradient's size per weight (its norm ~0.7 over 0.56M weights), a weight's step follows its gradient (as
    # SGD at lr / eps) and the largest are still capped at lr: the route moved as far, the other families stayed
    # (RESULTS.md, twenty-third session)
    rl_adam_eps: float = 1e-3
    # prompts per PPO update (MINI_BATCH_SIZE) of the 4 a step samples: 1 = four updates a step; with one update a
    # step, 32 steps at 3e-5 left the weakest family where it was, with four they raised it +12 (RESULTS.md, 11-26)
    rl_mini_batch: int = 1
    # the sampling temperature of the RL selection and of DAPO's rollouts (the evaluations are greedy): 0.7 in the
    # shortcut world (see SHORTCUT_SETTINGS), 1.0 in the plain one
    rl_temperature: float = 0.7
    # MAX_NUM_GEN_BATCHES of the quickstart's DAPO (the environment's wins): batches of groups the filter may drop in
    # one step before the run stops. A tiny SFT policy solves most selected questions in all or none of its samples,
    # so a step may need many refills to find 4 groups that carry a gradient; the RL scripts' own default
    # (afm.launch.rl) stopped such runs (RESULTS.md). A pretrained student's: PRETRAINED_SETTINGS
    rl_refill_cap: int = 30
    # a DAPO checkpoint every N steps, only the newest kept (0: at the last step only); when the refill cap stops the
    # run, the quickstart evaluates the newest one (afm.quickstart.rl.stopped_dapo) instead of no RL policy at all
    rl_save_every: int = 0
    # the teacher-shortcut world (afm.quickstart.world): the teacher reads a stale census page for lookup, SFT copies
    # the habit, the RL set is the lookup questions and DAPO removes it (RESULTS.md, 2026-11-27); --no-teacher-shortcut
    # is the plain world, where every family reaches ~100% after SFT and RL has nothing to fix
    teacher_shortcut: bool = True
    # a pretrained student instead of the tiny Qwen2 built for the world: a name ``afm model prepare`` knows
    # (gemma3-270m) or a Hugging Face folder; "" = the tiny one (afm.quickstart.student)
    student: str = ""
    sft_finetuning: str = "full"  # SftSchedule.finetuning_type
    # SftSchedule.precision, or auto (sft_precision()). float32: cpu_bf16 ran the SFT 1.18x faster (seeds 0 and 2 at
    # 341 and 318 s with the RL lesson, +60 and +36), but seed 1's bf16 SFT policy kept the census route through DAPO
    # (lookup +0, twice; +56 from its float32 policy) (RESULTS.md, twenty-eighth session)
    sft_precision: str = "fp32"
    # SftSchedule.ranks, or 0: auto (sft_ranks(): 2 on a 2-core CPU-only machine for the tiny student)
    sft_ranks: int = 0
    sft_cutoff_len: int = 768  # tokens of a training row (a pretrained student's vocabulary: PRETRAINED_SETTINGS)

    def student_size(self) -> ModelSize:
        """The tiny student's shape: Qwen2 with this profile's layers, width and key/value heads."""
        return ModelSize(vocab_size=STUDENT_VOCAB, hidden_size=self.student_width,
                         intermediate_size=3 * self.student_width, num_layers=self.student_layers,
                         num_heads=STUDENT_HEADS, num_kv_heads=self.student_kv_heads)

    def train_counts(self, rl_family: str) -> dict[str, int]:
        """Train questions of each family: ``train_per_family``, times ``rl_family_train_factor`` for
        ``rl_family`` ("": the plain world, no RL family)."""
        counts = dict.fromkeys(FAMILIES, self.train_per_family)
        if rl_family:
            counts[rl_family] *= self.rl_family_train_factor
        return counts

    def sft_schedule(self) -> SftSchedule:
        """The masked SFT run's schedule (epochs, batch size, learning rate, ranks)."""
        ranks = sft_ranks(self.sft_ranks, self.student)[0]
        if not self.sft_ranks and self.sft_batch_size % ranks:  # auto: an odd batch stays in one process
            ranks = 1
        micro = SFT_MICRO_BATCHES.get(ranks, 2)
        while micro > 1 and self.sft_batch_size % (micro * ranks):  # a batch the usual split does not divide
            micro -= 1
        return SftSchedule(epochs=self.sft_epochs, batch_size=self.sft_batch_size, learning_rate=self.sft_lr,
                           cutoff_len=self.sft_cutoff_len, finetuning_type=self.sft_finetuning,
                           precision=sft_precision(self.sft_precision, self.student)[0], ranks=ranks,
                           micro_batches=micro)


DEFAULT = Profile()
# Each world's settings, for --teacher-shortcut / --no-teacher-shortcut on top of a profile of the other.
# The teacher-shortcut world (the default): rollouts (and the selection's samples) at temperature 0.7: at 1.0 the
# 2-layer student slips a digit in about a third of its lookup samples, rewards that are noise to the route, and the
# update they drive (0.22 nats a token of choices unrelated to the route) broke other copies before it moved the
# route; at 0.7 the route is still sampled and the rest is 0.02-0.05 nats a token. 8 DAPO steps at 5e-5 (4 at 1e-4
# moved the route as far and cost one seed calc -24; 8 at 1e-4 overshot: calc -28). SFT for 6 epochs, not 4: the town
# page's route is 1 in 3 of the lookup demonstrations, and after 4 epochs two SFT policies of three wrote its address
# right on 4 and 5 of 25 towns (the census page's on 20 and 24), so DAPO's reward favoured the census page (lookup
# -4, -40); at 1e-3, not 2e-3: at 2e-3 one policy of four stayed a poor copier after 6 or 8 epochs (own page 13-14
# of 25, calc 0%) (RESULTS.md, 2026-11-27). These keys are the ones that differ between the worlds; --full keeps its
# own SFT schedule and DAPO steps (FULL_OWN).
SHORTCUT_SETTINGS = {"rl_lr": DEFAULT.rl_lr, "rl_temperature": DEFAULT.rl_temperature, "sft_epochs": DEFAULT.sft_epochs,
                     "sft_lr": DEFAULT.sft_lr, "rl_steps": DEFAULT.rl_steps, "rl_adam_eps": DEFAULT.rl_adam_eps}
# The plain world: every family at ~100% after 4 epochs at 2e-3 (RESULTS.md, 2026-11-26 afternoon); 4 DAPO steps at
# 3e-5 at temperature 1.0 show the stage (1e-4 made a family forget, RESULTS.md 2026-11-25 night), with torch's Adam
# epsilon, as measured there
PLAIN_SETTINGS = {"rl_lr": 3e-5, "rl_temperature": 1.0, "sft_epochs": 4.0, "sft_lr": 2e-3, "rl_steps": 4,
                  "rl_adam_eps": 0.0}
FULL_OWN = ("sft_epochs", "sft_lr", "rl_steps")
# --full: the plain world at the size its SFT 99.6% was measured with (3x the data, 4 layers, 2 key/value heads);
# --full --teacher-shortcut takes the shortcut world's DAPO lr, temperature and Adam epsilon, not yet measured at this size
FULL = Profile(train_per_family=1500, rl_per_family=40, heldout_per_family=60, rl_samples=8, student_layers=4,
               student_kv_heads=2, teacher_shortcut=False,
               **{**PLAIN_SETTINGS, "sft_epochs": 3.0, "rl_steps": 30})


# A pretrained student (``--model``, afm.quickstart.student): the world's settings for it, measured on Gemma 3 270M
# (RESULTS.md, 2026-11-29 fourteenth session). SFT trains every decoder layer with the tied 262k x 640 embedding
# (168M of its 268M weights) frozen: the same losses step by step as a full fine-tune over the first steps (2.11,
# 1.65, 0.96, 0.63 vs 2.11, 1.64, 0.94, 0.61) at 1.35x the steps per second and 37% of the trainable weights (their
# gradients and Adam state). Its rows are up to ~560 Gemma tokens, so the cutoff is 1024.
# RL: greedy, the SFT'd Gemma reads the census page on every held-out lookup question (right where the census is
# current: 40-56%). Seed 0's 12 lookup teacher runs all took the shortcut (0.8 a run; 0.8^12 = 7% of seeds), so its
# SFT set held no read of the town's own page and DAPO had no route to reinforce: twice the lookup train questions
# (rl_family_train_factor; 24, the other families 12) leave none in 0.5% of seeds (0.8^24), and seed 0's set then
# holds 6 own-page reads of 16 lookup demonstrations (~1 in 3, as the tiny student's), 50 SFT rows, ~2 minutes more.
# The RL selection samples 32 RL questions at temperature 1.0 with the whole distribution (recipe.selection_sampling:
# DAPO's top_p 1, no top-k): 89 of 128 samples read the own page, 25 questions kept. DAPO's rate (RESULTS.md, 2026-11-29
# seventeenth session): 4 steps of one update each (rl_mini_batch 4: the step's whole batch of groups) at 1e-6 moved
# the greedy route to the own page on 22 of 25 held-out towns, lookup 56% -> 84% [+8, +48], the other families
# unchanged. Adam's first steps move every weight by ~lr along the sign of the gradient, and for Gemma that direction
# is what breaks: one update at 1e-5 moved the route on all 25 towns but broke the closing tags (P('crawl' | '</')
# 1.00 -> 0.00: it wrote `</44405>`), lookup 0%, where random signs of 1e-5 leave the tags at 1.00; 16 one-group
# updates at 2e-5 collapsed every family onto web_search (macro 4%). Refills: 4 batches a step (a group of Gemma
# rollouts costs about a minute on 2 cores; after the 1e-5 step every group scored 0 and the tiny student's cap of 30
# refilled for 35 minutes); a checkpoint every step, so a run the cap stops is still evaluated (rl.stopped_dapo).
PRETRAINED_SETTINGS: dict[str, Any] = {
    "train_per_family": 12, "rl_family_train_factor": 2, "heldout_per_family": 25, "untrained_limit": 5,
    "sft_epochs": 3.0, "sft_lr": 5e-5, "sft_batch_size": 4, "sft_finetuning": "freeze", "sft_cutoff_len": 1024,
    "rl_per_family": 32, "rl_temperature": 1.0, "rl_lr": 1e-6, "rl_mini_batch": 4, "rl_steps": 4,
    "rl_refill_cap": 4, "rl_save_every": 1,
    # torch's Adam epsilon, as Gemma's DAPO was measured (its 268M weights' gradient is far below 1e-3 a weight)
    "rl_adam_eps": 0.0,
}
# DAPO's micro-batches for a pretrained student: 2 rows a forward pass. Gemma's logits are 262k wide in float32, and
# with --local's micro-batch of the whole step (16 rows) the actor's update process held 16.4 GB and Ray's memory
# monitor killed it on a 23.6 GB machine (RESULTS.md, 2026-11-26 late evening)
PRETRAINED_RL_KNOBS = {"MICRO_BATCH_SIZE": 2, "LOGPROB_MICRO_BATCH_SIZE": 2}


# The evaluations' and RL selection's engine (afm.quickstart.engine): sequences a batch on `hf`; llama-server's slots
# (requests decoded together) and tokens a slot (the world's 1024-token responses after a ~100-token prompt)
EVAL_BATCH = 32
EVAL_SLOTS = 16
EVAL_SLOT_TOKENS = 2048
# answered held-out trajectories the end-of-turn probe replays after each trained stage (afm.quickstart.turn_end)
TURN_END_PROBES = 8


# DAPO on CPU for the world: 4 prompts x 4 rollouts a step, with the eval's turn and token limits (world_* specs);
# the learning rate is the profile's (rl_lr)
RL_KNOBS = {"TRAIN_BATCH_SIZE": 4, "MINI_BATCH_SIZE": 4, "ROLLOUT_N": 4, "MAX_PROMPT_LENGTH": 192,
            "MAX_RESPONSE_LENGTH": WORLD_SAMPLING["max_response_tokens"], "MAX_TURNS": WORLD_SAMPLING["max_turns"],
            "MAX_OBS_CHARS": 1024}


def profile_from_args(full: bool = False, **overrides: Any) -> Profile:
    """The default (or ``--full``) profile with the given fields replaced (``None`` keeps the profile's). Switching
    the world (``teacher_shortcut``) also takes that world's settings (:data:`SHORTCUT_SETTINGS`,
    :data:`PLAIN_SETTINGS`; ``--full`` keeps its own SFT schedule and DAPO steps), unless the overrides give them.
    A pretrained ``student`` takes :data:`PRETRAINED_SETTINGS` (the world's tiny-student settings do not apply to
    it); ``--full`` sizes the tiny student and is refused with one."""
    student = overrides.get("student")
    if student and full:
        raise ValueError("--full sizes the tiny student (layers, data, steps); with --model, set --train-per-family "
                         "and --sft-epochs instead")
    base = FULL if full else DEFAULT
    world = overrides.get("teacher_shortcut")
    if world is not None and world != base.teacher_shortcut:
        settings = dict(SHORTCUT_SETTINGS if world else PLAIN_SETTINGS)
        if full:
            for key in FULL_OWN:  # --full's 3 epochs over 3x the data (9 of the default's) and 30 DAPO steps
                settings.pop(key)
        base = replace(base, teacher_shortcut=world, **settings)
    if student:
        base = replace(base, **PRETRAINED_SETTINGS)
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
