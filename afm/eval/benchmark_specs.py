"""The benchmark table: what each benchmark is (prompt, tools, data source, the paper's sampling, default file,
loader and converter keys) and how its names are spelt. Stdlib and :mod:`afm.common.names` only, so that the loaders
(:mod:`afm.eval.datasets`), the demo sets (:mod:`afm.eval.demo_sets`) and the download code all read it from
below without importing one another.

>>> from afm.eval.benchmark_specs import get_benchmark
>>> spec = get_benchmark("gaia")
>>> spec.prompt, spec.tools, spec.sampling["temperature"], spec.sampling["top_k"]
('web_agent', ('web_search', 'crawl_page'), 1.0, 20)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afm.common.names import canonical, close_names

FAMILIES = ("mhqa", "web", "math", "code", "demo")


@dataclass(frozen=True)
class BenchmarkSpec:
    """A benchmark: how to run it (prompt, tools, the paper's sampling) and how to load and score it.

    ``sampling`` holds ``temperature``, ``top_p``, ``top_k``, ``max_turns`` (generations per trajectory),
    ``max_tokens_per_turn``, ``max_response_tokens`` and ``n`` (samples per question); copy it before changing
    it.
    """

    name: str
    family: str  # "mhqa" | "web" | "math" | "code" | "demo"
    data_source: str
    prompt: str
    tools: tuple[str, ...]
    sampling: dict
    default_file: str | None  # relative to a data root, e.g. "web_agent/gaia_dev_103.json"
    loader: str  # a key of LOADERS
    # How ``afm.eval.download`` turns the public release into this file: a key of its CONVERTERS (None: not
    # downloadable, e.g. the demo sets, which are written instead). A key, as for the loader, so that this table
    # does not import the download code.
    converter: str | None = None


# -- the paper's sampling settings (anchors §1.6; upstream fact sheet §6) ------------------------------------
# Web: 32k context, temperature 1.0, top_p 0.9, top_k 20; 4096 tokens and 36 steps per trajectory as in the
# original's web inference; 3 samples give Pass@1 (avg@3), Bo3 and Pass@3 as in the paper's Table 13.
WEB_SAMPLING = {"temperature": 1.0, "top_p": 0.9, "top_k": 20, "max_turns": 36, "max_tokens_per_turn": 4096,
                "max_response_tokens": 30720, "n": 3}
# MHQA: the original evaluated greedily with 8 turns and an 8192-token response.
MHQA_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_turns": 8, "max_tokens_per_turn": 8192,
                 "max_response_tokens": 8192, "n": 1}
# Code and math agents: temperature 0.6 for the 32B model (0.8 for 7B: CODE_TEMPERATURE), at most 12 tool
# calls (13 generations: 12 with a tool call plus the answer), 28672 response tokens; 16 samples for the
# avg@16 numbers (AIME24/25, AMC23, LiveCodeBench, CodeContests), one for the pass@1 ones (MATH500,
# OlympiadBench).
CODE_TEMPERATURE = {"7b": 0.8, "32b": 0.6}
CODE_SAMPLING = {"temperature": CODE_TEMPERATURE["32b"], "top_p": 1.0, "top_k": -1, "max_turns": 13,
                 "max_tokens_per_turn": 28672, "max_response_tokens": 28672, "n": 16}
# Demo subsets run the tiny CPU model: short trajectories, two samples so that pass@k differs from avg@k.
DEMO_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_turns": 4, "max_tokens_per_turn": 128,
                 "max_response_tokens": 512, "n": 2}

# The quickstart's demo world (afm.quickstart.world; files written by `python -m afm.quickstart.recipe`): one benchmark per
# task family, all four tools offered, greedy decoding, short trajectories. Names kept here so that the eval layer
# does not import the demo package.
WORLD_FAMILIES = ("arith", "lookup", "multihop", "calc")
WORLD_PROMPT = "afm.quickstart.world:PROMPT"
WORLD_TOOLS = ("web_search", "crawl_page", "wiki_search", "code")
WORLD_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_turns": 6, "max_tokens_per_turn": 160,
                  "max_response_tokens": 1024, "n": 1}

_FAMILY = {  # prompt, tools, loader, sampling
    "mhqa": ("mhqa", ("wiki_search",), "load_mhqa", MHQA_SAMPLING),
    "web": ("web_agent", ("web_search", "crawl_page"), "load_web", WEB_SAMPLING),
    "math": ("math_agent", ("code",), "load_math", CODE_SAMPLING),
    "code": ("code_agent", ("code",), "load_code", CODE_SAMPLING),
}


def _spec(name: str, family: str, data_source: str, default_file: str, *, like: str | None = None,
          converter: str | None = None, **sampling: Any) -> BenchmarkSpec:
    prompt, tools, loader, base = _FAMILY[like or family]
    return BenchmarkSpec(name, family, data_source, prompt, tools, {**base, **sampling}, default_file, loader,
                         converter)


BENCHMARKS: dict[str, BenchmarkSpec] = {s.name: s for s in (
    _spec("nq", "mhqa", "nq", "mhqa_agent/nq_full.jsonl", converter="mhqa"),
    _spec("triviaqa", "mhqa", "triviaqa", "mhqa_agent/triviaqa.jsonl", converter="mhqa"),
    _spec("popqa", "mhqa", "popqa", "mhqa_agent/popqa.jsonl", converter="mhqa"),
    _spec("hotpotqa", "mhqa", "hotpotqa", "mhqa_agent/hotpotqa.jsonl", converter="mhqa"),
    _spec("2wikimultihopqa", "mhqa", "2wikimultihopqa", "mhqa_agent/2wikimultihopqa.jsonl",
          converter="mhqa"),
    _spec("musique", "mhqa", "musique", "mhqa_agent/musique.jsonl", converter="mhqa"),
    _spec("bamboogle", "mhqa", "bamboogle", "mhqa_agent/bamboogle.jsonl", converter="mhqa"),
    _spec("gaia", "web", "gaia", "web_agent/gaia_dev_103.json", converter="gaia"),
    _spec("browsecomp", "web", "browsecomp", "web_agent/browsecomp.json", converter="browsecomp"),
    _spec("hle", "web", "hle", "web_agent/hle_test.json", converter="hle"),
    _spec("webwalker", "web", "webwalker", "web_agent/webwalker_main.json", converter="webwalker"),
    _spec("aime24", "math", "aime24", "code_agent/aime24.parquet", converter="math"),
    _spec("aime25", "math", "aime25", "code_agent/aime25.parquet", converter="math"),
    _spec("math500", "math", "MATH500", "code_agent/math500.parquet", converter="math", n=1),
    _spec("amc23", "math", "amc23", "code_agent/amc23.parquet", converter="math"),
    _spec("olympiadbench", "math", "OlympiadBench", "code_agent/OlympiadBench.parquet", converter="math",
          n=1),
    _spec("livecodebench_v4", "code", "livecodebench_v4", "code_agent/livecodebench_v4.parquet",
          converter="livecodebench"),
    _spec("livecodebench_v5", "code", "livecodebench_v5", "code_agent/livecodebench_v5.parquet",
          converter="livecodebench"),
    _spec("codecontests", "code", "codecontests", "code_agent/codecontest.parquet", converter="codecontests"),
    _spec("demo_mhqa", "demo", "hotpotqa", "demo/demo_mhqa.jsonl", like="mhqa", **DEMO_SAMPLING),
    _spec("demo_web", "demo", "search", "demo/demo_web.json", like="web", **DEMO_SAMPLING),
    _spec("demo_math", "demo", "MATH500", "demo/demo_math.jsonl", like="math", **DEMO_SAMPLING),
    _spec("demo_code", "demo", "livecodebench", "demo/demo_code.jsonl", like="code", **DEMO_SAMPLING),
    *(BenchmarkSpec(f"world_{fam}", "demo", "afm_demo", WORLD_PROMPT, WORLD_TOOLS, WORLD_SAMPLING,
                    f"world/heldout_{fam}.jsonl", "load_mhqa") for fam in WORLD_FAMILIES),
)}

# Other spellings, including the original project's file stems (``hle_test`` for ``web_agent/hle_test.json``), so
# that a name copied from its data folder or scripts works.
_ALIASES = {"2wiki": "2wikimultihopqa", "natural_questions": "nq", "tq": "triviaqa", "gaia_dev_103": "gaia",
            "hle_500": "hle", "webwalkerqa": "webwalker", "lcb_v4": "livecodebench_v4",
            "lcb_v5": "livecodebench_v5", "codecontest": "codecontests", "olympiad": "olympiadbench",
            "hle_test": "hle", "webwalker_main": "webwalker", "nq_full": "nq"}


class UnknownBenchmarkError(KeyError):
    """A benchmark name that is neither a benchmark nor an alias; the message suggests close names."""

    def __str__(self) -> str:  # KeyError's str() would show the message quoted
        return str(self.args[0]) if self.args else ""


def _lookup_table() -> dict[str, str]:
    """canonical spelling -> benchmark name, for the names and the aliases; two entries may not share one."""
    table: dict[str, str] = {}
    for spelling, target in [*((n, n) for n in BENCHMARKS), *_ALIASES.items()]:
        key = canonical(spelling)
        if table.setdefault(key, target) != target:
            raise ValueError(f"benchmark names {spelling!r} and {table[key]!r} are the same name to afm.common.names")
    return table


_BY_KEY = _lookup_table()


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec of benchmark ``name`` (spelt any way :func:`afm.common.names.canonical` equates, e.g. ``LCB-v5``; aliases
    such as ``lcb_v5`` or the original's file stems such as ``hle_test``); :class:`UnknownBenchmarkError` (a
    KeyError) suggesting close names otherwise."""
    target = _BY_KEY.get(canonical(name))
    if target is None:
        hint = " or ".join(dict.fromkeys(_ALIASES.get(n, n) for n in close_names(name, [*BENCHMARKS, *_ALIASES], 4)))
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}" + (f" (did you mean {hint}?)" if hint else "")
                                    + f"; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[target]


def list_benchmarks(family: str | None = None) -> list[str]:
    """Benchmark names, optionally of one family (:data:`FAMILIES`)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return [n for n, s in BENCHMARKS.items() if family is None or s.family == family]


def describe_benchmarks() -> list[dict[str, Any]]:
    """One row per benchmark: name, family, data_source, prompt, tools, sampling, default_file, loader,
    converter."""
    return [{"name": s.name, "family": s.family, "data_source": s.data_source, "prompt": s.prompt,
             "tools": list(s.tools), "sampling": dict(s.sampling), "default_file": s.default_file,
             "loader": s.loader, "converter": s.converter}
            for s in BENCHMARKS.values()]
