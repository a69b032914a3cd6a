"""One rule for the names users type: data sources, benchmarks and prompts match spellings the same way
(afm.common.names.canonical), refuse two entries that are one name, and suggest close names when one is unknown."""

from __future__ import annotations

import dataclasses

import pytest

from afm.common import names
from afm.eval.datasets import get_benchmark
from afm.prompts import get_prompt, list_prompts, register_prompt, unregister_prompt
from afm.rewards import registry
from afm.rewards.registry import get_scorer


def test_canonical_and_close_names():
    assert names.canonical("LCB-v5") == names.canonical("lcb_v5") == names.canonical("LCB v5") == "lcbv5"
    assert names.close_names("web-agnt", ["web_agent", "mhqa", "code_agent"]) == ["web_agent", "code_agent"]
    assert names.close_names("web-agnt", ["web_agent", "mhqa", "code_agent"], n=1) == ["web_agent"]
    assert names.close_names("zzz", ["web_agent"]) == []


def test_every_registry_uses_the_one_rule():
    assert registry.canonical is names.canonical
    for spelling in ("LCB-v5", "lcb_v5", "LCB v5", "Lcb.V5"):
        assert get_benchmark(spelling).name == "livecodebench_v5"
        assert get_scorer(spelling).name == get_scorer("livecodebench_v5").name
    for spelling in ("Web-Agent", "web_agent", "WEB AGENT", "web_agent@" + get_prompt("web_agent").version):
        assert get_prompt(spelling) is get_prompt("web_agent")
    assert list_prompts() == sorted(list_prompts()) and "web_agent" in list_prompts()


def test_prompts_refuse_a_second_spelling_and_suggest_close_keys():
    web = get_prompt("web_agent")
    with pytest.raises(ValueError, match="'Web-Agent' is the same name as the registered 'web_agent'"):
        register_prompt(dataclasses.replace(web, key="Web-Agent"))
    copy = register_prompt(dataclasses.replace(web, key="web_agent_copy"))
    try:
        assert get_prompt("WEB-AGENT-COPY") is copy
    finally:
        assert unregister_prompt("Web_Agent_Copy") is copy
    with pytest.raises(KeyError, match=r"unknown prompt 'web_agnt' \(did you mean web_agent or code_agent\?\)"):
        get_prompt("web_agnt")
