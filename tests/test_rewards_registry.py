"""The data_source registry: every built-in name, aliases, extension in code and by YAML, lazy import paths."""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap

import pytest

from afm.rewards import (
    RESULT_KEYS,
    compute_score,
    compute_score_async,
    describe,
    get_scorer,
    known_data_sources,
    load_registry_yaml,
    register_scorer,
    unregister_scorer,
)
from afm.rewards import registry as registry_module

ORIGINAL_NAMES = ["nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "aime24",
                  "aime25", "MATH500", "math500", "amc23", "OlympiadBench", "math_dapo", "livecodebench", "lcbv4",
                  "lcbv5", "lcb_v5", "skywork_livecodebench_v5", "codecontests", "codecontests_hf_test", "gaia",
                  "browsecomp", "hle", "webwalker", "search", "MATH", "gms8k", "tq"]


def test_original_names_are_registered():
    for name in ORIGINAL_NAMES:
        assert get_scorer(name).name  # raises if unknown


@pytest.mark.parametrize(("alias", "name"), [
    ("MATH-500", "MATH500"), ("math_500", "MATH500"), ("olympiadbench", "OlympiadBench"),
    ("LCB_V5", "livecodebench_v5"), ("skywork_livecodebench_v4", "livecodebench_v4"),
    ("2WikiMultihopQA", "2wikimultihopqa"), ("GAIA", "gaia"), ("WebWalkerQA", "webwalker"),
])
def test_case_and_alias_tolerant(alias, name):
    assert get_scorer(alias).name == name


def test_code_sources_point_at_the_lazy_code_scorer():
    code = known_data_sources("code")
    assert {"livecodebench", "livecodebench_v4", "livecodebench_v5", "codecontests"} <= set(code)
    for name in code:
        spec = get_scorer(name)
        assert spec.scorer == "afm.rewards.code:score" and spec.kind == "code"
    rows = {row["name"]: row for row in describe()}
    assert rows["codecontests"]["scorer"] == "afm.rewards.code:score"
    assert rows["nq"]["scorer"] == "afm.rewards.qa:score"


def sample_for(kind: str) -> tuple[str, object, float]:
    """(solution, ground truth, expected acc) per kind: a math answer, a QA answer, a web answer."""
    if kind == "math":
        return "<think>1/2</think>\n<answer>\\boxed{0.5}</answer>", "\\frac{1}{2}", 1.0
    return "<think>recall</think>\n<answer>the Paris</answer>", {"target": ["Paris"], "question": "Capital?"}, 1.0


def test_every_non_code_name_scores_once(monkeypatch):
    monkeypatch.delenv("GRM_BASE_URL", raising=False)  # web names use the EM/F1 fallback here
    names = [n for n in known_data_sources(aliases=True) if get_scorer(n).kind != "code"]
    assert len(names) >= 25
    methods = {}
    for name in names:
        spec = get_scorer(name)
        solution, gt, acc = sample_for(spec.kind)
        result = compute_score(data_source=name, solution_str=solution, ground_truth=gt, extra_info={"index": 0})
        assert tuple(result) == RESULT_KEYS, name
        assert (result["acc"], result["score"], result["error"]) == (acc, acc, ""), (name, result)
        assert result["data_source"] == spec.name
        methods.setdefault(spec.kind, set()).add(result["method"])
    assert methods == {"qa": {"em"}, "math": {"math_verify"}, "judge": {"em_f1_fallback"}}


def test_unknown_data_source_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown data_source 'imagenet'; known: .*gaia.*nq"):
        compute_score("imagenet", "<answer>x</answer>", "x")
    with pytest.raises(ValueError, match="non-empty string"):
        compute_score("", "<answer>x</answer>", "x")


def test_bad_solution_and_extra_info_types():
    with pytest.raises(ValueError, match="nq: solution_str must be a str"):
        compute_score("nq", None, "x")
    with pytest.raises(ValueError, match="nq: extra_info must be a dict"):
        compute_score("nq", "<answer>x</answer>", "x", ["not", "a", "dict"])


@pytest.fixture
def cleanup():
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(KeyError):
            unregister_scorer(name)


def length_scorer(solution_str, gt, *, data_source, extra_info, **options):
    """A custom scorer: full marks for answers as long as the gold's."""
    ok = len(solution_str) >= len(gt.targets[0])
    return {"acc": ok, "score": 0.5 if ok else 0.0, "pred": solution_str[:10], "method": "length",
            "details": {"seen": data_source}}


def test_register_custom_scorer(cleanup):
    cleanup.append("my_dataset")
    register_scorer("my_dataset", length_scorer, kind="qa", aliases=["my-ds-dev"])
    result = compute_score("MY_DS_DEV", "<answer>abc</answer>", ["abc"])
    assert (result["acc"], result["score"], result["method"]) == (1.0, 0.5, "length")
    assert json.loads(result["details"]) == {"seen": "my_dataset"}
    with pytest.raises(ValueError, match="already registered"):
        register_scorer("my_dataset", length_scorer)
    with pytest.raises(ValueError, match="already registered"):
        register_scorer("other", length_scorer, aliases=["nq"])  # an alias may not steal a name
    register_scorer("my_dataset", lambda s, gt, **kw: {"acc": 0}, overwrite=True)
    assert compute_score("my_dataset", "<answer>abc</answer>", ["abc"])["acc"] == 0.0
    with pytest.raises(ValueError, match="kind must be one of"):
        register_scorer("x_kind", length_scorer, kind="vision")


def test_async_scorer_runs_in_sync_and_async_paths(cleanup):
    async def slow_scorer(solution_str, gt, **kw):
        await asyncio.sleep(0.01)
        return {"acc": solution_str.endswith("</answer>"), "method": "async"}

    cleanup.append("async_ds")
    register_scorer("async_ds", slow_scorer, kind="qa")
    assert compute_score("async_ds", "<answer>a</answer>", "a")["method"] == "async"

    async def inside_a_loop():
        sync_result = compute_score("async_ds", "<answer>a</answer>", "a")  # sync call inside a running loop
        async_result = await compute_score_async("async_ds", "<answer>a</answer>", "a")
        return sync_result, async_result

    sync_result, async_result = asyncio.run(inside_a_loop())
    assert sync_result["acc"] == async_result["acc"] == 1.0


def test_scorer_crash_is_a_named_grader_error(cleanup):
    # A scorer that raises on the policy's text must not crash the training step (issue 39): the result says so.
    def broken(solution_str, gt, **kw):
        raise RuntimeError("scorer bug")

    cleanup.append("broken_ds")
    register_scorer("broken_ds", broken, kind="qa")
    result = compute_score("broken_ds", "<answer>a</answer>", "a")
    assert (result["method"], result["error"], result["acc"]) == ("grader_error", "RuntimeError: scorer bug", 0.0)


def test_dotted_path_is_imported_on_first_use(tmp_path, monkeypatch, cleanup):
    module = tmp_path / "my_rewards_mod.py"
    module.write_text(textwrap.dedent("""
        CALLS = []
        def score(solution_str, gt, *, data_source, extra_info, **options):
            CALLS.append(data_source)
            return {"acc": 1.0, "method": "plugin"}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cleanup.extend(["plugin_ds", "missing_ds"])
    register_scorer("plugin_ds", "my_rewards_mod:score", kind="code")
    import sys

    assert "my_rewards_mod" not in sys.modules  # registration does not import
    assert compute_score("plugin_ds", "anything", '{"question_id": "q1"}')["method"] == "plugin"
    assert sys.modules["my_rewards_mod"].CALLS == ["plugin_ds"]
    register_scorer("missing_ds", "no_such_module_xyz:score", kind="qa")  # fine until used
    with pytest.raises(ImportError, match="'missing_ds' cannot be loaded"):
        compute_score("missing_ds", "<answer>a</answer>", "a")


def test_yaml_registry(tmp_path, cleanup, monkeypatch):
    monkeypatch.delenv("GRM_BASE_URL", raising=False)
    (tmp_path / "yaml_scorers_mod.py").write_text(
        "def length_scorer(solution_str, gt, **options):\n"
        "    return {'acc': len(solution_str) >= len(gt.targets[0]), 'method': 'length'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "scorers.yaml"
    path.write_text(textwrap.dedent("""
        scorers:
          my_qa: nq
          my_web: {scorer: gaia, aliases: [my_web_dev]}
          my_len: {scorer: "yaml_scorers_mod:length_scorer", kind: qa}
    """))
    cleanup.extend(["my_qa", "my_web", "my_len"])
    assert load_registry_yaml(path) == ["my_qa", "my_web", "my_len"]
    assert get_scorer("my_qa").kind == "qa" and get_scorer("my_web_dev").kind == "judge"
    assert compute_score("my_web_dev", "<answer>Paris</answer>", ["Paris"])["method"] == "em_f1_fallback"
    assert compute_score("my_qa", "<answer>Paris</answer>", ["Paris"])["method"] == "em"
    assert compute_score("my_len", "<answer>Paris</answer>", ["Paris"])["method"] == "length"


@pytest.mark.parametrize(("text", "message"), [
    ("scorers:\n  a_x: not_a_source\n", "neither a registered data source"),
    ("scorers:\n  a_x: {scorer: 'pkg.mod:fn'}\n", "must give its kind"),
    ("scorers:\n  a_x: {scorer: nq, weight: 2}\n", "must be a name/path or a mapping"),
    ("rewards:\n  a_x: nq\n", "single 'scorers' key"),
    ("scorers:\n  nq: gaia\n", "already registered"),
])
def test_yaml_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_registry_yaml(path)


def test_registry_from_environment(tmp_path, monkeypatch, cleanup):
    path = tmp_path / "env.yaml"
    path.write_text("scorers:\n  env_ds: {scorer: aime24, aliases: [env_ds_alias]}\n")
    monkeypatch.setenv("AFM_REWARD_REGISTRY", str(path))
    monkeypatch.setattr(registry_module, "_env_loaded", False)
    cleanup.append("env_ds")
    assert get_scorer("env_ds_alias").kind == "math"
    assert compute_score("env_ds", "<answer>\\frac{1}{2}</answer>", "0.5")["acc"] == 1.0


def test_loadable_like_verl_custom_reward_function():
    # verl imports reward.custom_reward_function.path as a file (some releases without registering it in
    # sys.modules) and calls .name with keyword arguments.
    import importlib.util

    import afm.rewards.score as score_module

    spec = importlib.util.spec_from_file_location("custom_module", score_module.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("compute_score", "compute_score_async"):
        fn = getattr(module, name)
        result = fn(data_source="nq", solution_str="<answer>Paris</answer>",
                    ground_truth=json.dumps({"target": ["Paris"]}), extra_info={"index": 3, "num_turns": 2})
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        assert (result["score"], result["acc"]) == (1.0, 1.0)
