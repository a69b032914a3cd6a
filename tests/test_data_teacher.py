"""The multi-agent teacher against a real OpenAI-compatible stand-in and the real sandboxed code tool."""

from __future__ import annotations

import asyncio

import pytest
from teacher_replies import (
    ANSWERER,
    PLANNER,
    REFLECTOR,
    VERIFIER,
    agent,
    answer_reply,
    code_reply,
    code_run_rules,
    plan_reply,
    reflect_reply,
    rule,
    verify_reply,
)

from afm.data.teacher import ChatClient, Teacher, TeacherTask, load_teacher_config, teacher_config_from_dict
from afm.data.teacher import roles as R
from afm.offline.openai_standin import StandIn
from afm.tools.code import CodeTool
from afm.trajectory import validate

TASK = TeacherTask(question_id="q1", question="What is six times seven, computed in parts?", gold="42",
                   tools=("code",), prompt_key="afm_all_tools")


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply="(no rule matched)") as server:
        yield server


@pytest.fixture
def fresh(llm):
    llm.reset()
    return llm


def config(llm, **sections):
    data = {"default": {"base_url": llm.base_url, "model": "teacher-m", "max_retries": 1, "timeout_s": 20},
            "controller": {"reflect_every": 2}}
    for k, v in sections.items():
        data.setdefault(k, {}).update(v)
    return teacher_config_from_dict(data)


def run(cfg, task=TASK, tools=None):
    async def go():
        tool = CodeTool({"timeout": 10})
        try:
            async with ChatClient(backoff_s=0.01) as chat:
                return await Teacher(cfg, tools or {"code": tool}, chat).run(task, f"{task.question_id}#0")
        finally:
            await tool.aclose()
    return asyncio.run(go())


def test_normal_run_follows_the_protocol(fresh):
    fresh.rules(*code_run_rules(n_code=5))
    rec = run(config(fresh))
    assert rec.status == "ok", rec.error
    assert rec.n_tool_calls == 5 and all(c["status"] == "ok" for c in rec.tool_calls)
    assert rec.final_answer == "42" and rec.double_checks == [{"score": 4, "answer": "42"}]
    assert [r["rating"] for r in rec.reflections] == ["good", "good"]  # after calls 2 and 4 (reflect_every=2)
    text = rec.trajectory
    assert text.startswith("<think>I will split") and "\n<plan>1. Compute" in text
    assert text.count("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]") == 5
    assert "<code>\n```py\nprint(6 * 7)\n```\n</code>\n\n<observation>\n[EXECUTED]" in text
    assert "<double_check>The code printed the value and it fits the question. Score: 4</double_check>" in text
    assert text.endswith("<answer>42</answer>")
    assert validate(text, ["think", "plan", "code", "observation", "reflection", "suggested_answer",
                           "double_check", "answer"]) == []
    # the log holds every role call and tool step, enough to replay the run
    roles = [s["role"] for s in rec.meta["steps"]]
    assert roles.count("tool") == 5 and roles.count("code_agent") == 5 and roles[0] == "planner"
    assert roles[-2:] == ["answerer", "verifier"]
    tool_steps = [s for s in rec.meta["steps"] if s["role"] == "tool"]
    assert all(s["observation"].startswith("[EXECUTED]") and s["latency_s"] >= 0 for s in tool_steps)
    assert rec.usage["code_agent"]["calls"] == 5 and rec.usage["planner"]["model"] == "teacher-m"


def test_low_double_check_leads_to_replanning_and_self_correction(fresh):
    fresh.rules(*code_run_rules(n_code=3, scores=(2, 4)))
    rec = run(config(fresh))
    assert rec.status == "ok", rec.error
    assert [d["score"] for d in rec.double_checks] == [2, 4] and rec.self_corrected
    assert rec.meta["replans"] == 1 and rec.trajectory.count("<plan>") == 2
    assert "Score: 2</double_check>\n<think>I will split" in rec.trajectory
    replan = [r for r in fresh.requests() if PLANNER in r["body"]["messages"][0]["content"]][1]
    assert "The double check scored 2 (of 4)" in replan["body"]["messages"][1]["content"]


def test_poor_reflection_triggers_a_new_plan(fresh):
    fresh.rules(rule(REFLECTOR, reflect_reply("poor"), times=1), *code_run_rules(n_code=2))
    rec = run(config(fresh))
    assert rec.status == "ok", rec.error
    assert next(r["rating"] for r in rec.reflections) == "poor" and rec.meta["replans"] == 1
    assert "</reflection>\n<think>I will split" in rec.trajectory


def test_unparsable_reply_is_corrected_then_accepted(fresh):
    fresh.rules(rule(PLANNER, "Sure! I would search first.", times=1), *code_run_rules(n_code=1))
    rec = run(config(fresh))
    assert rec.status == "ok", rec.error
    bad = [s for s in rec.meta["steps"] if s.get("protocol_error")]
    assert len(bad) == 1 and "<think>...</think> is missing" in bad[0]["protocol_error"]
    second = [r for r in fresh.requests() if PLANNER in r["body"]["messages"][0]["content"]][1]["body"]["messages"]
    assert second[-2] == {"role": "assistant", "content": "Sure! I would search first."}
    assert second[-1]["content"].startswith("Your reply does not follow the format")


@pytest.mark.parametrize("bad, expected", [
    (plan_reply(["web_search: look it up", "answer: done"]), "names 'web_search'"),  # tool not allowed
    ("<think>x</think><plan>1. go</plan>", "<steps>...</steps> is missing"),
    (plan_reply(["code: a"]).replace("<plan>", "<plan><answer>7</answer>"), "reserved"),
])
def test_off_protocol_teacher_fails_the_run_with_a_clear_error(fresh, bad, expected):
    fresh.rules(rule(PLANNER, bad), *code_run_rules(n_code=1))
    rec = run(config(fresh, budgets={"max_format_retries": 2}))
    assert rec.status == "failed" and rec.trajectory == "" and rec.final_answer is None
    assert rec.error.startswith("off-protocol reply from planner after 3 attempts") and expected in rec.error
    assert rec.usage["planner"]["calls"] == 3


def test_bad_verifier_and_tool_agent_outputs(fresh):
    fresh.rules(rule(VERIFIER, verify_reply(4).replace("<score>4", "<score>5")), *code_run_rules(n_code=1))
    rec = run(config(fresh, budgets={"max_format_retries": 0}))
    assert rec.status == "failed" and "<score> must be one of 1, 2, 3, 4" in rec.error
    fresh.reset()
    fresh.rules(rule(agent("code"), "<think>t</think><argument>print(1)</argument>"), *code_run_rules(n_code=1))
    rec = run(config(fresh, budgets={"max_format_retries": 0}))
    assert rec.status == "failed" and "```py" in rec.error and rec.tool_calls == []


@pytest.mark.parametrize("budget, expected", [
    ({"max_tool_calls": 2}, "budget: max_tool_calls (2)"),
    ({"max_steps": 4}, "budget: max_steps (4 role calls)"),
    ({"max_total_tokens": 600}, "budget: max_total_tokens (600)"),
    ({"max_answer_attempts": 1}, "budget: max_answer_attempts (1)"),
])
def test_budgets_end_runs(fresh, budget, expected):
    fresh.rules(*code_run_rules(n_code=3, scores=(1,)))  # the verifier never accepts
    rec = run(config(fresh, budgets=budget))
    assert rec.status == "failed" and rec.error.startswith(expected), rec.error
    assert rec.trajectory == ""
    if "max_tool_calls" in budget:
        assert rec.n_tool_calls == 2


def test_endpoint_failure_is_a_clear_failed_record(fresh):
    fresh.rules(rule(PLANNER, "", times=-1) | {"status": 503})
    rec = run(config(fresh))
    assert rec.status == "failed" and rec.error.startswith("teacher endpoint:") and "HTTP 503" in rec.error


def test_role_config_merging_and_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TEACHER_MODEL", "big")
    monkeypatch.setenv("VERIFIER_MODEL", "judge")
    cfg = load_teacher_config("configs/data/teacher.yaml", ["roles.reflector.temperature=0.1"])
    assert cfg.role("planner").endpoint.model == "big" and cfg.role("verifier").endpoint.model == "judge"
    assert cfg.role("crawl_page_agent").endpoint.model == "big" and cfg.role("code_agent").max_tokens == 4096
    assert cfg.role("reflector").temperature == 0.1
    bad = tmp_path / "bad.yaml"
    bad.write_text("budgets: {max_tool_cals: 3}\n")
    with pytest.raises(ValueError, match="max_tool_cals"):
        load_teacher_config(bad)


def test_parsers_are_strict():
    assert R.parse_reflector(reflect_reply("average"))["rating"] == "average"
    with pytest.raises(R.ProtocolError, match="good, average or poor"):
        R.parse_reflector(reflect_reply("great"))
    with pytest.raises(R.ProtocolError, match="appears 2 times"):
        R.parse_answerer(answer_reply() + answer_reply())
    assert R.parse_tool_agent(code_reply(), "code")["argument"] == "\n```py\nprint(6 * 7)\n```\n"
    assert R.normalize_argument("crawl_page", "https://a.example/x |https://b.example") == \
        "https://a.example/x | https://b.example"
    with pytest.raises(R.ProtocolError, match="not a URL"):
        R.normalize_argument("crawl_page", "a.example")
    with pytest.raises(R.ProtocolError, match="Score: 3 but <score> is 4"):
        R.parse_verifier("<think>t</think><check>fine. Score: 3</check><score>4</score>")
    out = R.parse_verifier("<think>t</think><check>fine. Score: 4</check><score>4</score>")
    assert out["check"] == "fine." and out["score"] == 4
    with pytest.raises(R.ProtocolError, match="'answer' must be the last step"):
        R.parse_planner(plan_reply(["answer: x", "code: y"]), ("code",))
    assert ANSWERER and VERIFIER  # imported for the rules above


def test_code_agent_protocol_reflects_after_every_call_and_answers_a_program(fresh):
    from afm.data.convert import trajectory_problems
    from afm.prompts import get_prompt

    program = "<think>Submit the tested program.</think>\n<answer>\n```py\nprint(6 * 7)\n```\n</answer>"
    fresh.rules(rule(ANSWERER, program), *code_run_rules(n_code=3))
    task = TeacherTask(question_id="c1", question="Print six times seven.", task="code")
    rec = run(config(fresh, controller={"reflect_every": 0}), task=task)
    assert rec.status == "ok", rec.error
    assert rec.prompt_key == "code_agent" and rec.double_checks == [] and len(rec.reflections) == 3
    assert "<suggested_answer>" not in rec.trajectory and rec.trajectory.endswith("```\n</answer>")
    assert trajectory_problems(rec.trajectory, get_prompt("code_agent"), rec.final_answer) == []
