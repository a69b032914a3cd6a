"""One ChatEndpoint behind every LLM config: the judge, the selector, the summary model and the teacher roles.

Each config holds one endpoint, reads the environment variables users set today, and still takes the endpoint's
settings flat under their older names (``timeout``, ``max_retries``) as its constructor and ``replace`` do.
"""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from afm.common.chat_client import ChatEndpoint
from afm.data.teacher.config import RoleConfig, load_teacher_config, teacher_config_from_dict
from afm.eval.select import SelectorConfig
from afm.rewards.grm import ModelCallConfig
from afm.rewards.judge import JudgeConfig, config_summary, judge_overrides
from afm.servers.summarize import LLMSettings

CONFIGS = (JudgeConfig, SelectorConfig, LLMSettings, RoleConfig)
ENDPOINT_FIELDS = {f.name for f in fields(ChatEndpoint)}


@pytest.mark.parametrize("cls", CONFIGS)
def test_each_config_holds_one_endpoint_and_restates_none_of_its_fields(cls):
    names = {f.name for f in fields(cls)}
    assert "endpoint" in names
    assert not names & (ENDPOINT_FIELDS | {"timeout", "max_retries", "backoff_s"})
    assert isinstance(cls().endpoint, ChatEndpoint)


def test_defaults_per_config_are_the_ones_before_the_merge():
    judge, selector, summary, role = (cls().endpoint for cls in CONFIGS)
    assert (judge.model, judge.timeout_s, judge.retries, judge.base_url) == ("gpt-4.1-mini", 60.0, 4, "")
    assert (selector.model, selector.timeout_s, selector.retries) == ("gpt-4.1-mini", 60.0, 4)
    assert (summary.model, summary.timeout_s, summary.retries) == ("qwen2.5-72b-instruct", 120.0, 2)
    assert (role.base_url, role.model, role.timeout_s, role.retries) == ("http://127.0.0.1:8000/v1", "teacher",
                                                                          180.0, 4)


def test_from_env_reads_prefix_names_renames_and_defaults():
    env = {"X_BASE_URL": " http://h/v1 ", "X_API_KEY": "k ", "X_MODEL": "", "X_TIMEOUT": "7", "MY_RETRIES": "2"}
    ep = ChatEndpoint.from_env("X_", env, names={"retries": "MY_RETRIES"}, model="dflt", timeout=1.0)
    assert ep == ChatEndpoint("http://h/v1", "dflt", api_key="k ", timeout_s=7.0, retries=2)
    assert ChatEndpoint.from_env("X_", env, names={"timeout_s": None}).timeout_s == 120.0
    with pytest.raises(ValueError, match="X_TIMEOUT='soon': expected a number"):
        ChatEndpoint.from_env("X_", {"X_TIMEOUT": "soon"})
    with pytest.raises(ValueError, match="retries=-1"):
        ChatEndpoint(retries=-1)


def test_judge_and_selector_read_the_variables_users_set(monkeypatch):
    env = {"GRM_BASE_URL": "http://judge/v1", "GRM_API_KEY": "sk-1", "GRM_MODEL_NAME": "grader",
           "AFM_JUDGE_TIMEOUT": "9", "AFM_SELECTOR_TIMEOUT": "11", "AFM_JUDGE_CACHE": "off"}
    judge = JudgeConfig.from_env(env, max_retries=1)
    assert judge.endpoint == ChatEndpoint("http://judge/v1", "grader", api_key="sk-1", timeout_s=9.0, retries=1)
    assert judge.configured and judge.cache == "off"
    selector = SelectorConfig.from_env(env)
    assert selector.endpoint == ChatEndpoint("http://judge/v1", "grader", api_key="sk-1", timeout_s=11.0, retries=4)
    assert not JudgeConfig.from_env({}).configured
    assert config_summary(judge)["endpoint"]["api_key"] == "***"
    assert "sk-1" not in repr(judge) and "sk-1" not in str(judge.endpoint)


def test_judge_and_selector_share_one_config_and_each_reads_only_its_own_knobs(tmp_path):
    env = {"AFM_JUDGE_CONCURRENCY": "5", "AFM_JUDGE_K": "3", "AFM_JUDGE_CACHE": str(tmp_path / "j.sqlite"),
           "AFM_SELECTOR_CONCURRENCY": "7", "AFM_SELECTOR_CACHE": "off"}
    judge, selector = JudgeConfig.from_env(env), SelectorConfig.from_env(env)
    assert isinstance(judge, ModelCallConfig) and isinstance(selector, ModelCallConfig)
    assert (judge.concurrency, judge.k, judge.cache) == (5, 3, str(tmp_path / "j.sqlite"))
    assert (selector.concurrency, selector.cache) == (7, "off") and not hasattr(selector, "k")
    assert (JudgeConfig.from_env({}).concurrency, SelectorConfig.from_env({}).concurrency) == (64, 32)
    assert selector.open_cache() is None
    cache = judge.open_cache()
    assert cache is not None
    cache.close()
    with pytest.raises(ValueError, match=r"invalid JudgeConfig values: k=0"):
        JudgeConfig(k=0)
    with pytest.raises(ValueError, match=r"invalid SelectorConfig values: concurrency=0"):
        SelectorConfig(concurrency=0)


def test_summary_model_reads_summary_and_original_names(monkeypatch):
    for name in ("SUMMARY_OPENAI_API_BASE_URL", "SUMMARY_OPENAI_API_KEY", "UNI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UNI_API_URLS", "http://uni/v1|http://other/v1")
    monkeypatch.setenv("UNI_API_KEY", "sk-uni")
    monkeypatch.setenv("SUMMARY_MODEL", "summ")
    monkeypatch.setenv("SUMMARY_TIMEOUT", "30")
    monkeypatch.setenv("SUMMARY_MAX_RETRIES", "0")
    monkeypatch.setenv("SUMMARY_BACKOFF", "0.5")
    ep = LLMSettings.from_env().endpoint
    assert ep == ChatEndpoint("http://uni/v1", "summ", api_key="sk-uni", timeout_s=30.0, retries=0, backoff=0.5)
    monkeypatch.setenv("SUMMARY_MAX_RETRIES", "two")
    with pytest.raises(ValueError, match="SUMMARY_MAX_RETRIES='two'"):
        LLMSettings.from_env()


def test_flat_and_older_keyword_names_reach_the_endpoint():
    cfg = JudgeConfig(base_url="http://j/v1", api_key=None, timeout=5.0, max_retries=1, backoff=0.01, k=3)
    assert cfg.endpoint == ChatEndpoint("http://j/v1", "gpt-4.1-mini", timeout_s=5.0, retries=1, backoff=0.01)
    assert cfg.k == 3
    moved = replace(cfg, model="other", timeout_s=2.0)
    assert (moved.endpoint.model, moved.endpoint.timeout_s, moved.endpoint.base_url) == ("other", 2.0, "http://j/v1")
    assert SelectorConfig(base_url=None, cache="off").endpoint.base_url == ""
    with pytest.raises(TypeError, match="timeout and timeout_s name the same endpoint setting"):
        JudgeConfig(timeout=1.0, timeout_s=2.0)
    assert judge_overrides({"judge_max_retries": 1, "judge_model": "m", "judge_k": 2}) == {
        "max_retries": 1, "model": "m", "k": 2}
    with pytest.raises(ValueError, match="unknown judge option 'judge_modle'"):
        judge_overrides({"judge_modle": "m"})


def test_teacher_roles_take_flat_endpoint_keys_and_the_older_retry_name(tmp_path):
    cfg = teacher_config_from_dict({"default": {"base_url": "http://t/v1", "max_retries": 1, "timeout_s": 20},
                                    "roles": {"verifier": {"model": "big", "retries": 0}}})
    assert cfg.role("planner").endpoint == replace(RoleConfig().endpoint, base_url="http://t/v1", retries=1,
                                                   timeout_s=20.0)
    verifier = cfg.role("verifier").endpoint
    assert (verifier.model, verifier.retries, verifier.base_url) == ("big", 0, "http://t/v1")
    with pytest.raises(ValueError, match=r"default: unknown keys \['api_key'\]"):
        teacher_config_from_dict({"default": {"api_key": "sk-in-a-file"}})
    with pytest.raises(ValueError, match=r"roles\.planner: invalid ChatEndpoint values: retries=-1"):
        teacher_config_from_dict({"roles": {"planner": {"retries": -1}}})
    shipped = load_teacher_config("configs/data/teacher.yaml").default.endpoint
    assert (shipped.timeout_s, shipped.retries) == (180.0, 4)


def test_set_with_the_older_name_replaces_the_files_retries():
    cfg = load_teacher_config("configs/data/teacher.yaml", ["default.max_retries=0", "roles.planner.timeout=5"])
    assert (cfg.role("planner").endpoint.retries, cfg.role("planner").endpoint.timeout_s) == (0, 5.0)
