"""The controller: coordinates planner, tool agents, reflector, answerer and verifier into one teacher run.

A run follows the protocol of a student prompt (``afm.prompts``): every role's contribution becomes CoA blocks
(``<think>`` + the function), tools run through :class:`afm.agent.loop.ToolRunner` (same timeouts, duplicate
notes and observation cap as the rollout engine), so ``render(blocks)`` is the trajectory the student is trained
on. Loop: plan -> for each planned step, the tool agent writes the call and the tool runs -> the reflector
rates progress (after every ``reflect_every`` calls, or after every call where the prompt requires it; poor =>
re-plan) -> at the ``answer`` step the answerer suggests an answer and the verifier scores it (>= accept_score
ends the run with ``<answer>``, lower re-plans). Budgets and off-protocol replies end a run ``failed``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from afm.agent.loop import AgentConfig, ToolRunner, truncate_text
from afm.data.records import RunRecord
from afm.data.teacher import roles as R
from afm.data.teacher.chat import ChatClient, ChatError
from afm.data.teacher.config import TeacherConfig, tool_agent_role
from afm.prompts import Prompt, get_prompt
from afm.prompts.registry import START
from afm.tools.base import Tool, ToolContext
from afm.trajectory import render


class RunFailed(Exception):
    """Ends a run with ``status="failed"``; the message becomes the record's ``error``."""


@dataclass
class TeacherTask:
    """One question for the teacher (``tools`` empty = the config's or the prompt's tools)."""

    question_id: str
    question: str
    gold: Any = None
    task: str = "qa"
    data_source: str | None = None
    tools: tuple[str, ...] = ()
    prompt_key: str | None = None
    prompt_extra: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def auto_prompt_key(task: str, tools: tuple[str, ...]) -> str:
    """The student prompt for a task kind and tool set (code -> code_agent, math -> math_agent, ...)."""
    if task == "code":
        return "code_agent"
    if task == "math":
        return "math_agent"
    if "wiki_search" in tools:
        return "mhqa"
    if "code" in tools:
        return "afm_all_tools"
    return "web_agent"


def resolve_protocol(task: TeacherTask, config: TeacherConfig) -> tuple[Prompt, tuple[str, ...]]:
    """The prompt a run follows and the tools it may use; raise ValueError when they do not fit together."""
    tools = tuple(task.tools) or tuple(config.controller.tools)
    key = task.prompt_key or config.controller.prompt_key
    if not key or key == "auto":
        key = auto_prompt_key(task.task, tools)
    prompt = get_prompt(key)
    tools = tools or prompt.tools
    outside = [t for t in tools if t not in prompt.tools]
    if outside:
        raise ValueError(f"question {task.question_id}: tools {outside} are not part of prompt {prompt.key!r} "
                         f"(its tools: {', '.join(prompt.tools)}); choose another prompt_key")
    return prompt, tools


class _Grammar:
    """Which function may follow which, from the prompt's ``successors`` (none = anything goes)."""

    def __init__(self, prompt: Prompt) -> None:
        self.rules = dict(prompt.successors)
        self.tags = set(prompt.tags)

    def allows(self, prev: str, nxt: str) -> bool:
        if nxt not in self.tags:
            return False
        return not self.rules or nxt in self.rules.get(prev, ())

    def reflection_required_after(self, tool: str) -> bool:
        """True when, after ``tool``, the prompt allows nothing but a reflection (the code agent)."""
        return bool(self.rules) and tuple(self.rules.get(tool, ())) == ("reflection",)


class _Run:
    """Mutable state of one run."""

    def __init__(self, task: TeacherTask, prompt: Prompt, tools: tuple[str, ...], deadline: float) -> None:
        self.task, self.prompt, self.tools, self.deadline = task, prompt, tools, deadline
        self.blocks: list[tuple[str, str]] = []
        self.last = START  # last function written (think and observations are transparent)
        self.plan = ""
        self.steps: list[R.Step] = []
        self.log: list[dict[str, Any]] = []
        self.usage: dict[str, dict[str, Any]] = {}
        self.tool_calls: list[dict[str, Any]] = []
        self.double_checks: list[dict[str, Any]] = []
        self.reflections: list[dict[str, Any]] = []
        self.role_calls = 0
        self.total_tokens = 0
        self.replans = 0
        self.answers = 0
        self.since_reflection = 0
        self.seen: set[tuple[str, str]] = set()
        self.final_answer: str | None = None

    def emit(self, tag: str, body: str) -> None:
        self.blocks.append((tag, body))
        if tag not in ("think", self.prompt.observation_tag):
            self.last = tag

    def text(self) -> str:
        return render(self.blocks)


class Teacher:
    """Runs the multi-agent teacher on tasks; one instance serves many concurrent runs."""

    def __init__(self, config: TeacherConfig, tools: Mapping[str, Tool], chat: ChatClient) -> None:
        self.config = config
        self.tools = dict(tools)
        self.chat = chat
        c = config.controller
        self.runner = ToolRunner(self.tools, AgentConfig(tools=tuple(self.tools), tool_timeout_s=c.tool_timeout_s,
                                                         max_observation_chars=c.max_observation_chars,
                                                         dedupe=c.dedupe))

    async def run(self, task: TeacherTask, run_id: str) -> RunRecord:
        """One complete run; every failure (budget, protocol, endpoint) ends in a ``failed`` record."""
        prompt, tools = resolve_protocol(task, self.config)
        missing = [t for t in tools if t not in self.tools]
        if missing:
            raise ValueError(f"question {task.question_id}: tools {missing} are not configured "
                             f"(configured: {', '.join(sorted(self.tools)) or 'none'})")
        t0 = time.monotonic()
        run = _Run(task, prompt, tools, t0 + self.config.budgets.run_timeout_s)
        status, error = "ok", None
        try:
            await asyncio.wait_for(self._drive(run), self.config.budgets.run_timeout_s)
        except RunFailed as exc:
            status, error = "failed", str(exc)
        except TimeoutError:
            status, error = "failed", f"budget: run_timeout_s ({self.config.budgets.run_timeout_s:g}s) exceeded"
        except ChatError as exc:
            status, error = "failed", f"teacher endpoint: {exc}"
        return self._record(run, run_id, status, error, time.monotonic() - t0)

    # ------------------------------------------------------------------------------------------ the loop

    async def _drive(self, run: _Run) -> None:
        b, c = self.config.budgets, self.config.controller
        grammar = _Grammar(run.prompt)
        entry = "suggested_answer" if "suggested_answer" in run.prompt.tags else "answer"
        await self._plan(run, "")
        while True:
            out_of_calls = len(run.tool_calls) >= b.max_tool_calls
            if not run.steps or run.steps[0].tool == R.ANSWER_STEP or out_of_calls:
                if not grammar.allows(run.last, entry):
                    raise RunFailed(f"protocol: prompt {run.prompt.key!r} does not allow <{entry}> after "
                                    f"<{run.last}>; the plan must call a tool first")
                if await self._answer(run, grammar, c.accept_score):
                    return
                if len(run.tool_calls) >= b.max_tool_calls:
                    raise RunFailed(f"budget: max_tool_calls ({b.max_tool_calls}) reached and the answer was "
                                    "rejected")
                continue
            step = run.steps.pop(0)
            if not grammar.allows(run.last, step.tool):
                raise RunFailed(f"protocol: prompt {run.prompt.key!r} does not allow <{step.tool}> after "
                                f"<{run.last}>")
            await self._tool_step(run, step)
            more_tools = bool(run.steps) and run.steps[0].tool != R.ANSWER_STEP
            due = c.reflect_every > 0 and run.since_reflection >= c.reflect_every
            if grammar.reflection_required_after(step.tool) or (
                    due and grammar.allows(step.tool, "reflection")
                    and (more_tools or grammar.allows("reflection", entry))):
                rating = await self._reflect(run)
                if rating == "poor" and grammar.allows("reflection", "plan"):
                    await self._plan(run, "The reflector rated the progress poor: "
                                     f"{run.reflections[-1]['text']}")

    async def _plan(self, run: _Run, reason: str) -> None:
        if reason:
            if run.replans >= self.config.budgets.max_replans:
                raise RunFailed(f"budget: max_replans ({self.config.budgets.max_replans}) reached; last reason: "
                                f"{reason[:200]}")
            run.replans += 1
        out = await self._ask(run, "planner", {"reason": f"{reason}\n\n" if reason else ""},
                              lambda text: R.parse_planner(text, run.tools))
        run.plan, run.steps = out["plan"], list(out["steps"])
        run.emit("think", out["think"])
        run.emit("plan", out["plan"])

    async def _tool_step(self, run: _Run, step: R.Step) -> None:
        role = tool_agent_role(step.tool)
        out = await self._ask(run, role, {"tool": step.tool, "goal": step.goal},
                              lambda text: R.parse_tool_agent(text, step.tool))
        run.emit("think", out["think"])
        run.emit(step.tool, self._spaced(out["argument"]))
        ctx = ToolContext(question=run.task.question, text=run.text(),
                          kwargs=dict(run.task.meta.get("tools_kwargs", {}).get(step.tool, {})))
        t0 = time.monotonic()
        obs, rec = await self.runner.call(step.tool, out["argument"].strip(), ctx, run.seen, run.deadline)
        obs, truncated = truncate_text(obs, self.config.controller.max_observation_chars)
        run.emit(run.prompt.observation_tag, obs)
        run.since_reflection += 1
        run.tool_calls.append({"name": step.tool, "argument": out["argument"], "status": rec.status,
                               "latency_s": round(time.monotonic() - t0, 4), "observation_chars": len(obs),
                               "truncated": truncated})
        run.log.append({"role": "tool", "name": step.tool, "argument": out["argument"], "observation": obs,
                        "status": rec.status, "error": rec.error, "latency_s": round(rec.latency_s, 4),
                        "truncated": truncated})

    def _spaced(self, body: str) -> str:
        """``body`` with a leading space when ``controller.space_after_tag`` asks for it (one-line bodies only:
        programs keep their fenced block layout)."""
        if self.config.controller.space_after_tag and "\n" not in body and not body.startswith(" "):
            return " " + body
        return body

    async def _reflect(self, run: _Run) -> str:
        out = await self._ask(run, "reflector", {}, R.parse_reflector)
        run.emit("think", out["think"])
        run.emit("reflection", out["reflection"])
        run.reflections.append({"rating": out["rating"], "text": out["reflection"]})
        run.since_reflection = 0
        return out["rating"]

    async def _answer(self, run: _Run, grammar: _Grammar, accept: int) -> bool:
        b = self.config.budgets
        if run.answers >= b.max_answer_attempts:
            raise RunFailed(f"budget: max_answer_attempts ({b.max_answer_attempts}) reached without an accepted "
                            "answer")
        run.answers += 1
        require_py = "```py" in run.prompt.answer_format
        out = await self._ask(run, "answerer", {}, lambda text: R.parse_answerer(text, require_py))
        run.emit("think", out["think"])
        if "double_check" not in run.prompt.tags:
            run.emit("answer", self._spaced(out["answer"]))
            run.final_answer = out["answer"].strip()
            return True
        run.emit("suggested_answer", self._spaced(out["answer"]))
        check = await self._ask(run, "verifier", {"answer": out["answer"]}, R.parse_verifier)
        score = check["score"]
        run.emit("think", check["think"])
        run.emit("double_check", f"{check['check']} Score: {score}")
        run.double_checks.append({"score": score, "answer": out["answer"].strip()})
        if score >= accept:
            run.emit("think", R.fill(self.config.controller.answer_think, {"score": score}))
            run.emit("answer", self._spaced(out["answer"]))
            run.final_answer = out["answer"].strip()
            return True
        if not grammar.allows("double_check", "plan"):
            raise RunFailed(f"protocol: prompt {run.prompt.key!r} cannot re-plan after a rejected answer")
        await self._plan(run, f"The double check scored {score} (of 4) for the suggested answer "
                              f"{out['answer'].strip()!r}: {check['check']}")
        return False

    # ------------------------------------------------------------------------------------------ role calls

    def _messages(self, run: _Run, role: str, values: dict[str, Any]) -> list[dict[str, str]]:
        rc = self.config.role(role)
        kind = R.role_kind(role)
        history = run.text()
        limit = self.config.controller.history_chars
        if len(history) > limit:
            history = "[...earlier work omitted...]\n" + history[-limit:]
        tool = values.get("tool", "")
        fields = {
            "question": run.task.question, "history": history or "(nothing yet)", "plan": run.plan or "(none)",
            "tools": ", ".join(run.tools), "tool_descriptions": "; ".join(
                R.TOOL_DESCRIPTIONS.get(t, t) for t in run.tools),
            "argument_format": R.ARGUMENT_FORMATS.get(tool, "the tool's argument."),
            "answer_format": run.prompt.answer_format or "a concise, definite answer",
            "coa_tags": R.coa_tag_names(), "reason": "", **values,
        }
        system = R.fill(rc.system or R.SYSTEMS[kind], fields)
        user = R.fill(rc.user or R.USERS[kind], fields)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _check_budget(self, run: _Run) -> None:
        b = self.config.budgets
        if run.role_calls >= b.max_steps:
            raise RunFailed(f"budget: max_steps ({b.max_steps} role calls) reached before an accepted answer")
        if run.total_tokens >= b.max_total_tokens:
            raise RunFailed(f"budget: max_total_tokens ({b.max_total_tokens}) reached after {run.total_tokens} "
                            "tokens")

    async def _ask(self, run: _Run, role: str, values: dict[str, Any], parse: Any) -> dict[str, Any]:
        """Call ``role`` and parse its reply, re-asking with a correction up to ``max_format_retries`` times."""
        rc = self.config.role(role)
        messages = self._messages(run, role, values)
        retries = self.config.budgets.max_format_retries
        for attempt in range(retries + 1):
            self._check_budget(run)
            reply = await self.chat.complete(rc, messages)
            run.role_calls += 1
            run.total_tokens += reply.prompt_tokens + reply.completion_tokens
            u = run.usage.setdefault(role, {"model": rc.endpoint.model, "prompt_tokens": 0, "completion_tokens": 0,
                                            "calls": 0})
            u["prompt_tokens"] += reply.prompt_tokens
            u["completion_tokens"] += reply.completion_tokens
            u["calls"] += 1
            if reply.usage_estimated:
                u["estimated"] = True
            entry: dict[str, Any] = {
                "role": role, "model": rc.endpoint.model, "attempt": attempt,
                "request": {"messages": len(messages), "prompt_chars": sum(len(m["content"]) for m in messages),
                            "history_blocks": len(run.blocks), "values": {k: v for k, v in values.items()}},
                "reply": reply.content, "latency_s": round(reply.latency_s, 4),
                "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            }
            run.log.append(entry)
            try:
                out = parse(reply.content)
            except R.ProtocolError as exc:
                entry["protocol_error"] = str(exc)
                if attempt >= retries:
                    raise RunFailed(f"off-protocol reply from {role} after {attempt + 1} attempts: {exc}") from None
                messages = [*messages, {"role": "assistant", "content": reply.content},
                            {"role": "user", "content": f"Your reply does not follow the format: {exc}. "
                                                        f"{R.format_instructions(role)}"}]
                continue
            entry["parsed"] = {k: ([s.__dict__ for s in v] if k == "steps" else v) for k, v in out.items()}
            return out
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------------------------------ the record

    def _record(self, run: _Run, run_id: str, status: str, error: str | None, wall_s: float) -> RunRecord:
        task = run.task
        meta = {**task.meta, "prompt_ref": run.prompt.ref, "tools": list(run.tools), "steps": run.log,
                "wall_s": round(wall_s, 3), "role_calls": run.role_calls, "total_tokens": run.total_tokens,
                "replans": run.replans, "answer_attempts": run.answers}
        if task.prompt_extra:
            meta["prompt_extra"] = dict(task.prompt_extra)
        if status != "ok":
            meta["partial_blocks"] = len(run.blocks)
        return RunRecord(
            run_id=run_id, question_id=task.question_id, question=task.question, gold=task.gold, task=task.task,
            data_source=task.data_source or task.task, prompt_key=run.prompt.key,
            trajectory=run.text() if status == "ok" else "", final_answer=run.final_answer if status == "ok" else None,
            tool_calls=run.tool_calls, double_checks=run.double_checks, reflections=run.reflections,
            status=status, error=error, source="teacher", usage=run.usage, meta=meta,
        )
