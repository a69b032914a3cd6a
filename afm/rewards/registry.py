"""Which scorer grades which ``data_source``: a plain dict, extensible in code or by a YAML file.

Names are matched case- and punctuation-insensitively (``MATH500`` = ``math500`` = ``math_500``; ``lcb_v5`` =
``lcbv5``; :func:`afm.common.names.canonical`, the rule benchmarks and prompts follow too). A scorer is a callable (sync or ``async def``) or a ``"module:function"`` path imported on first use,
so code scorers need the sandbox only when a code sample is scored. Each entry also names its ground-truth kind
(``qa``, ``judge``, ``math``, ``code``; see :mod:`afm.rewards.ground_truth`).

Scorer contract: ``fn(solution_str: str, gt: GroundTruth, *, data_source: str, extra_info: dict, **options) ->
dict`` with ``acc`` (bool or 0/1) and optionally ``score`` (defaults to ``acc``), ``pred``, ``method``, ``error``
and ``details`` (a JSON-able dict). ``options`` are compute_score's keyword arguments; ignore the unknown ones.
A scorer raises :class:`~afm.rewards.errors.RewardConfigError` for the caller's or the data's mistakes (a malformed
ground truth, a bad option); anything else it raises on the policy's text, ``compute_score`` turns into a 0
(``method`` ``grader_error``). Registry mistakes (an unknown data source, a taken name, a bad YAML entry) raise
RewardConfigError too.

YAML (``load_registry_yaml`` or the ``AFM_REWARD_REGISTRY`` variable, paths separated by ``:``)::

    scorers:
      my_qa: nq                          # reuse a registered source's scorer
      my_web: {scorer: gaia, aliases: [my_web_dev]}
      my_custom: {scorer: "mypkg.rewards:score", kind: qa, async_scorer: "mypkg.rewards:ascore"}
      hotpotqa: {scorer: gaia, overwrite: true}   # grade an existing source differently
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from afm.common.names import canonical
from afm.rewards import judge, math, qa
from afm.rewards.errors import RewardConfigError
from afm.rewards.ground_truth import GT_KINDS

Scorer = Callable[..., Any]
CODE_SCORER = "afm.rewards.code:score"


@dataclass(frozen=True)
class ScorerSpec:
    """A registered data source: its scorer (callable or import path), ground-truth kind and aliases."""

    name: str
    scorer: Scorer | str
    kind: str
    async_scorer: Scorer | str | None = None
    aliases: tuple[str, ...] = ()

    def resolve(self) -> Scorer:
        """The scorer callable (imported on first use)."""
        return _resolve(self.scorer, self.name)

    def resolve_async(self) -> Scorer | None:
        """The ``async def`` scorer: ``async_scorer``, or the scorer itself when it is a coroutine function."""
        if self.async_scorer is not None:
            return _resolve(self.async_scorer, self.name)
        fn = self.resolve()
        return fn if inspect.iscoroutinefunction(fn) else None


_lock = threading.RLock()
_specs: dict[str, ScorerSpec] = {}  # canonical key -> spec (aliases point to the same spec)
_resolved: dict[str, Scorer] = {}
_env_loaded = False


def _resolve(target: Scorer | str, name: str) -> Scorer:
    if callable(target):
        return target
    with _lock:
        fn = _resolved.get(target)
    if fn is not None:
        return fn
    module_name, sep, attr = target.partition(":")
    if not sep:
        module_name, _, attr = target.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"scorer {target!r} for data source {name!r} cannot be loaded: {exc}") from exc
    if not callable(fn):
        raise RewardConfigError(f"scorer {target!r} for data source {name!r} is a {type(fn).__name__}, "
                                "not a callable")
    with _lock:
        _resolved[target] = fn
    return fn


def register_scorer(name: str, scorer: Scorer | str, *, kind: str = "qa", aliases: Iterable[str] = (),
                    async_scorer: Scorer | str | None = None, overwrite: bool = False) -> ScorerSpec:
    """Register ``scorer`` for data source ``name`` (and ``aliases``); a taken name raises unless ``overwrite``."""
    if kind not in GT_KINDS:
        raise RewardConfigError(f"kind must be one of {GT_KINDS}, got {kind!r}")
    if not (callable(scorer) or (isinstance(scorer, str) and scorer.strip())):
        raise TypeError(f"scorer for {name!r} must be a callable or a 'module:function' string, got {scorer!r}")
    spec = ScorerSpec(str(name), scorer, kind, async_scorer, tuple(str(a) for a in aliases))
    keys = [canonical(n) for n in (spec.name, *spec.aliases)]
    if not all(keys):
        raise RewardConfigError(f"data-source names need letters or digits: {[spec.name, *spec.aliases]}")
    with _lock:
        taken = [n for n, k in zip((spec.name, *spec.aliases), keys, strict=True) if k in _specs]
        if taken and not overwrite:
            owners = sorted({_specs[canonical(n)].name for n in taken})
            raise RewardConfigError(f"data source name(s) {taken} already registered (by {owners}); pass overwrite=True")
        for key in keys:
            _specs[key] = spec
    return spec


def unregister_scorer(name: str) -> None:
    """Remove a data source and its aliases (tests, overlays)."""
    with _lock:
        spec = _specs.get(canonical(name))
        if spec is None:
            raise KeyError(f"data source {name!r} is not registered")
        for key in [k for k, s in _specs.items() if s is spec]:
            del _specs[key]


def _load_env_registry() -> None:
    global _env_loaded
    with _lock:
        if _env_loaded:
            return
        _env_loaded = True
    for path in filter(None, os.environ.get("AFM_REWARD_REGISTRY", "").split(os.pathsep)):
        load_registry_yaml(path)


def get_scorer(data_source: str) -> ScorerSpec:
    """The spec for ``data_source``; RewardConfigError listing the known names when there is none."""
    _load_env_registry()
    with _lock:
        spec = _specs.get(canonical(data_source))
    if spec is None:
        raise RewardConfigError(f"unknown data_source {data_source!r}; known: {', '.join(known_data_sources())}. "
                         "Register it with afm.rewards.register_scorer or a YAML file in AFM_REWARD_REGISTRY.")
    return spec


def known_data_sources(kind: str | None = None, *, aliases: bool = False) -> list[str]:
    """Registered names (optionally of one ground-truth ``kind``), aliases included when asked, sorted."""
    with _lock:
        specs = {id(s): s for s in _specs.values()}.values()
    names = []
    for spec in specs:
        if kind is None or spec.kind == kind:
            names.append(spec.name)
            if aliases:
                names.extend(spec.aliases)
    return sorted(names, key=str.lower)


_YAML_KEYS = frozenset({"scorer", "kind", "aliases", "async_scorer", "overwrite"})


def load_registry_yaml(path: str | os.PathLike) -> list[str]:
    """Register the data sources of a YAML file (format in the module docstring); returns their names."""
    import yaml

    text = Path(path).read_text()
    doc = yaml.safe_load(text) or {}
    if not isinstance(doc, dict) or set(doc) - {"scorers"}:
        raise RewardConfigError(f"{path}: expected a mapping with a single 'scorers' key, got {list(doc)[:5]}")
    entries = doc.get("scorers") or {}
    if not isinstance(entries, dict):
        raise RewardConfigError(f"{path}: 'scorers' must map data-source names to scorers")
    names = []
    for name, entry in entries.items():
        if isinstance(entry, str):
            entry = {"scorer": entry}
        if not isinstance(entry, dict) or "scorer" not in entry or set(entry) - _YAML_KEYS:
            raise RewardConfigError(f"{path}: entry {name!r} must be a name/path or a mapping with 'scorer' and "
                             f"optionally {sorted(_YAML_KEYS - {'scorer'})}; got {entry!r}")
        target = str(entry["scorer"])
        base = None
        if ":" not in target:
            with _lock:
                base = _specs.get(canonical(target))
            if base is None and "." not in target:
                raise RewardConfigError(f"{path}: entry {name!r} names scorer {target!r}, which is neither a registered "
                                 f"data source nor a 'module:function' path")
        if base is not None:
            scorer, kind, async_scorer = base.scorer, entry.get("kind", base.kind), base.async_scorer
        else:
            if "kind" not in entry:
                raise RewardConfigError(f"{path}: entry {name!r} uses a custom scorer and must give its kind {GT_KINDS}")
            scorer, kind, async_scorer = target, entry["kind"], None
        register_scorer(str(name), scorer, kind=kind, aliases=entry.get("aliases") or (),
                        async_scorer=entry.get("async_scorer", async_scorer), overwrite=bool(entry.get("overwrite")))
        names.append(str(name))
    return names


def _register_builtins() -> None:
    qa_sources = {"nq": ("natural_questions",), "triviaqa": ("tq",), "popqa": (), "hotpotqa": (),
                  "2wikimultihopqa": ("2wiki",), "musique": (), "bamboogle": (),
                  "afm_demo": ()}  # the quickstart's demo world (afm.quickstart.world): short exact answers
    for name, aliases in qa_sources.items():
        register_scorer(name, qa.score, kind="qa", aliases=aliases)
    math_sources = {"aime24": (), "aime25": (), "MATH500": (), "MATH": ("hendrycks_math",), "amc23": (),
                    "OlympiadBench": (), "math_dapo": ("dapo_math",), "gsm8k": ("gms8k",), "skywork_math": ()}
    for name, aliases in math_sources.items():
        register_scorer(name, math.score, kind="math", aliases=aliases)
    web_sources = {"gaia": ("gaia_dev_103", "gaia_text"), "browsecomp": (), "hle": ("hle_500",),
                   "webwalker": ("webwalkerqa",), "search": ()}
    for name, aliases in web_sources.items():
        register_scorer(name, judge.score, kind="judge", aliases=aliases, async_scorer=judge.score_async)
    code_sources = {
        "livecodebench": ("lcb",),
        "livecodebench_v4": ("lcb_v4", "skywork_livecodebench_v4"),
        "livecodebench_v5": ("lcb_v5", "skywork_livecodebench_v5"),
        "livecodebench_v6": ("lcb_v6", "skywork_livecodebench_v6"),
        "skywork_livecodebench_v1_to_v3": (),
        "codecontests": ("codecontest", "codecontests_hf_test", "codecontests_hf_train", "codecontests_areal_test"),
        "codeforces": ("codeforces_areal_test",),
    }
    for name, aliases in code_sources.items():
        register_scorer(name, CODE_SCORER, kind="code", aliases=aliases)


_register_builtins()


def describe() -> list[dict[str, Any]]:
    """One row per registered data source: name, kind, scorer (path or qualified name), aliases."""
    rows = []
    for name in known_data_sources():
        spec = get_scorer(name)
        target = spec.scorer if isinstance(spec.scorer, str) else f"{spec.scorer.__module__}:{spec.scorer.__qualname__}"
        rows.append({"name": spec.name, "kind": spec.kind, "scorer": target, "aliases": list(spec.aliases)})
    return rows
