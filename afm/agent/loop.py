"""The multi-turn CoA loop: generate until a stop, run the tool, append the observation tokens, repeat.

Token-in-token-out: the context of every turn is ``prompt_ids`` + the ids sampled so far + the ids of the
observations inserted so far; sampled ids are never re-encoded from text. Observations are encoded once, from
``\\n\\n<observation>\\n…\\n</observation>\\n\\n`` less the leading newlines the model's last token already
wrote (:func:`after_model_text`), and carry loss mask 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from afm.agent.backend import EngineRefused, Generation, ModelBackend, SamplingParams
from afm.agent.record import FinishReason, Segment, ToolCallRecord, Trajectory
from afm.agent.tokens import TokenizerAdapter
from afm.tools.base import Tool, ToolContext, ToolResult
from afm.trajectory import format_observation, last_tool_call, stop_strings
from afm.trajectory.parse import ToolCall

# The notes the original rollout returned for repeated calls (models were trained on them).
DUPLICATE_SEARCH_NOTE = ("I have performed a web search with the same query before. To find new information, "
                         "I should try a more diverse or specific search query.")
DUPLICATE_CRAWL_NOTE = ("I have crawled this URL before. Re-crawling the same page is unlikely to yield new "
                        "information. I should look for other URLs or synthesize the information I already have.")
DEDUPED_TOOLS = {"web_search": DUPLICATE_SEARCH_NOTE, "wiki_search": DUPLICATE_SEARCH_NOTE,
                 "crawl_page": DUPLICATE_CRAWL_NOTE}


@dataclass
class AgentConfig:
    """Limits and settings of the loop (defaults follow the paper's web-agent setting)."""

    tools: tuple[str, ...] = ("web_search", "crawl_page")
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int = 25  # generations per trajectory
    max_tokens_per_turn: int = 4096
    max_response_tokens: int = 30720  # model + observation tokens after the prompt
    max_model_len: int = 32768  # prompt + response
    min_turn_tokens: int = 16  # do not start a turn with less room than this
    tool_timeout_s: float = 120.0
    # Seconds a tool call that failed for infrastructure reasons (server down, 5xx, timeout, sandbox failure) is
    # retried for, with backoff 1, 2, 4, 8, 8... s, so a tool server restarted a few seconds later loses nothing;
    # 0 = never retry. Counted from the first attempt: a call that waited out a long timeout is not run again (an
    # expensive crawl). A call still failing after that is recorded with ``infra=True``.
    tool_infra_retry_s: float = 30.0
    max_observation_chars: int = 30_000
    trajectory_timeout_s: float | None = 3600.0
    dedupe: bool = True
    tool_concurrency: Mapping[str, int] = field(default_factory=dict)  # per tool name; 0/absent = unbounded

    def stops(self) -> tuple[str, ...]:
        return tuple(stop_strings(list(self.tools)))

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of field ``name``: the one place the CLI (``afm infer``), the scripts and the verl loop read
        a rollout limit from, so none of them restates it."""
        for f in fields(cls):
            if f.name == name:
                return f.default_factory() if f.default is MISSING else f.default
        raise AttributeError(f"AgentConfig has no field {name!r}")


def truncate_text(text: str, limit: int) -> tuple[str, bool]:
    """Head and tail of ``text`` around a marker, at most ``limit`` characters."""
    if len(text) <= limit:
        return text, False
    marker = f"\n...[observation truncated to {limit} characters]...\n"
    keep = max(0, limit - len(marker))
    return text[: keep - keep // 3] + marker + text[len(text) - keep // 3:], True


class ToolRunner:
    """Runs tool calls with timeouts, per-tool concurrency limits, duplicate suppression and, for calls that failed
    for infrastructure reasons, bounded retries (``AgentConfig.tool_infra_retry_s``)."""

    RETRY_BACKOFF_S = (1.0, 2.0, 4.0, 8.0)  # then 8 s per retry until the budget is spent

    def __init__(self, tools: Mapping[str, Tool], config: AgentConfig) -> None:
        self.tools = dict(tools)
        self.config = config
        self._sems = {name: asyncio.Semaphore(n) for name, n in config.tool_concurrency.items() if n and n > 0}

    async def call(self, name: str, argument: str, ctx: ToolContext, seen: set[tuple[str, str]],
                   deadline: float | None) -> tuple[str, ToolCallRecord]:
        """Observation text and call record for one call (never raises for tool failures).

        A result with ``infra=True`` is retried while ``tool_infra_retry_s`` (counted from the first attempt) and the
        trajectory's ``deadline`` allow; only the last attempt is recorded, with ``meta["infra_retries"]``."""
        t0 = time.monotonic()
        rec = ToolCallRecord(turn=0, name=name, argument=argument, status="ok")
        tool = self.tools.get(name)
        if tool is None:
            rec.status = "invalid"
            return (f"There is no tool named {name!r} here. Available tools: "
                    f"{', '.join(sorted(self.tools)) or 'none'}."), rec
        if not argument.strip():
            rec.status = "invalid"
            return f"The <{name}> call was empty. Put the {name} argument between <{name}> and </{name}>.", rec
        key = (name, " ".join(argument.split()).lower())
        if self.config.dedupe and name in DEDUPED_TOOLS and key in seen:
            rec.status = "duplicate"
            return DEDUPED_TOOLS[name], rec
        seen.add(key)
        result, error = await self._attempt(tool, name, argument, ctx, deadline)
        retries = 0
        while result.infra and result.meta.get("retryable", True) is not False:
            delay = self.RETRY_BACKOFF_S[min(retries, len(self.RETRY_BACKOFF_S) - 1)]
            now = time.monotonic()
            if now - t0 + delay > self.config.tool_infra_retry_s or (deadline is not None and now + delay >= deadline):
                break
            await asyncio.sleep(delay)
            retries += 1
            result, error = await self._attempt(tool, name, argument, ctx, deadline)
        rec.status = result.status
        rec.latency_s = time.monotonic() - t0
        rec.meta = dict(result.meta)
        if retries:
            rec.meta["infra_retries"] = retries
        rec.infra = result.infra
        rec.error = error
        if result.status != "ok" and rec.error is None:
            rec.error = result.text[:500]
        if result.infra:  # the model may ask again later: that is a real attempt, not a duplicate
            seen.discard(key)
        return result.text, rec

    async def _attempt(self, tool: Tool, name: str, argument: str, ctx: ToolContext,
                       deadline: float | None) -> tuple[ToolResult, str | None]:
        """One call of ``tool`` under the tool timeout; ``(result, error)`` where ``error`` names an exception."""
        timeout = self.config.tool_timeout_s
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline - time.monotonic()))
        sem = self._sems.get(name)
        try:
            if sem is not None:
                async with sem:
                    return await asyncio.wait_for(tool.call(argument, ctx), timeout), None
            return await asyncio.wait_for(tool.call(argument, ctx), timeout), None
        except TimeoutError:
            # A server-backed tool past its own limit: its server hung (infrastructure). Not so when the
            # trajectory's deadline cut it short (the trajectory's time ran out) or when the time may be the
            # model's own (a program running long in the code tool).
            infra = tool.infra_on_timeout and timeout >= self.config.tool_timeout_s
            return ToolResult(f"The {name} tool did not answer within {timeout:.0f} seconds. Try again later or "
                              "take another approach.", "timeout", infra=infra), None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # An OSError (connection refused or reset, ...) escaping a tool is the environment's; other exceptions
            # are a tool's bug, reported to the model as before.
            error = f"{type(exc).__name__}: {exc}"
            return ToolResult(f"The {name} tool failed ({error}).", "error", infra=isinstance(exc, OSError)), error


@dataclass
class _RunState:
    """What one trajectory carries from turn to turn."""

    traj: Trajectory
    context: list[int]
    base: SamplingParams
    deadline: float | None
    question: str
    tool_kwargs: dict[str, Any]
    seen: set[tuple[str, str]] = field(default_factory=set)
    response_len: int = 0

    def room(self, config: AgentConfig) -> int:
        """Tokens the next piece of the response may still take."""
        return min(config.max_model_len - len(self.context), config.max_response_tokens - self.response_len)

    def append(self, segment: Segment) -> None:
        self.traj.segments.append(segment)
        self.context.extend(segment.ids)
        self.response_len += len(segment.ids)


class AgentLoop:
    """The CoA rollout loop. Subclass it and override the hooks to use another tool protocol without forking:

    - :meth:`stop_strings`: what ends a generation that may hold a tool call;
    - :meth:`parse_tool_call`: the call at the end of a generation (or None);
    - :meth:`should_stop`: whether a generation ends the trajectory, and with which finish reason;
    - :meth:`on_observation`: the tool's output as the model will read it (before budgets are applied);
    - :meth:`format_observation`: the text inserted after the call around that output (loss mask 0).

    The loop keeps what the hooks cannot break: token-in-token-out, the token budgets, timeouts, and one
    finish reason per trajectory (set in :meth:`run` only).
    """

    def __init__(self, backend: ModelBackend, tokenizer: TokenizerAdapter, tools: ToolRunner,
                 config: AgentConfig) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.tools = tools
        self.config = config

    # -- hooks ---------------------------------------------------------------------------------------------------
    def stop_strings(self) -> tuple[str, ...]:
        """Stop strings of every generation: the enabled tools' closing tags and ``</answer>``."""
        return self.config.stops()

    def parse_tool_call(self, text: str, gen: Generation) -> ToolCall | None:
        """The tool call that ends ``text`` (a generation that stopped on a stop string), or None."""
        return last_tool_call(text)

    def should_stop(self, gen: Generation, text: str, cut: bool) -> FinishReason | None:
        """The finish reason when this generation ends the trajectory, else None (a tool call follows).

        ``cut``: the generation was cut to the token budget."""
        if gen.finish == "eos":
            return "eos"
        if gen.finish == "length" or cut:
            return "max_tokens"
        if gen.stop_str == "</answer>":
            return "answer"
        return None

    def on_observation(self, call: ToolCallRecord, content: str) -> str:
        """The tool's output (or the error note) for ``call`` as the model will read it."""
        return content

    def format_observation(self, content: str) -> str:
        """The exact text inserted after a tool call (``\\n\\n<observation>\\n…\\n</observation>\\n\\n``)."""
        return format_observation(content)

    # -- the loop ------------------------------------------------------------------------------------------------
    async def run(self, prompt_ids: list[int], *, question: str = "", tool_kwargs: Mapping[str, Any] | None = None,
                  sampling: SamplingParams | None = None, meta: dict[str, Any] | None = None) -> Trajectory:
        """Run one CoA trajectory to its end; every limit and failure ends in a :class:`Trajectory` record."""
        t0 = time.monotonic()
        config = self.config
        state = _RunState(
            traj=Trajectory(prompt_ids=list(prompt_ids), meta=dict(meta or {})), context=list(prompt_ids),
            base=(sampling or config.sampling).with_(stop=self.stop_strings()),
            deadline=t0 + config.trajectory_timeout_s if config.trajectory_timeout_s else None,
            question=question, tool_kwargs=dict(tool_kwargs or {}))
        reason: FinishReason | None = None
        try:
            while reason is None:
                reason = await self._turn(state)
        except TimeoutError:
            reason = "timeout"
        except (asyncio.CancelledError, EngineRefused):  # a refused request stops the run, not one trajectory
            raise
        except Exception as exc:
            reason = "error"
            state.traj.error = f"{type(exc).__name__}: {exc}"
        state.traj.finish_reason = reason
        state.traj.wall_s = time.monotonic() - t0
        return state.traj

    async def _turn(self, state: _RunState) -> FinishReason | None:
        """One generation and, when it calls a tool, its observation; the finish reason once the trajectory ends."""
        config, traj = self.config, state.traj
        if traj.turns >= config.max_turns:
            return "max_turns"
        room = state.room(config)
        if room < config.min_turn_tokens:
            return "max_tokens"
        params = state.base.with_(max_new_tokens=min(config.max_tokens_per_turn, room))
        remaining = None if state.deadline is None else state.deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError
        gen = await asyncio.wait_for(self.backend.generate(state.context, params), remaining)
        traj.turns += 1
        if gen.ids_source != "sampled":
            traj.ids_source = gen.ids_source
        ids = gen.ids[:room]  # a backend may overshoot; the context must never exceed the budget
        cut = len(ids) < len(gen.ids)
        text = self.tokenizer.decode(ids) if cut else gen.text
        logprobs = gen.meta.get("logprobs")
        if logprobs is not None and len(logprobs) >= len(ids):
            logprobs = [float(x) for x in logprobs[: len(ids)]]
        else:  # a backend that reports none (or too few) for these ids
            logprobs = None
        state.append(Segment("model", ids, text, logprobs))
        reason = self.should_stop(gen, text, cut)
        if reason is not None:
            return reason
        obs, rec = await self._call_tool(state, gen, text)
        obs, truncated = truncate_text(self.on_observation(rec, obs), config.max_observation_chars)
        obs_ids, obs_text, shrunk = self._fit_observation(obs, state.room(config) - config.min_turn_tokens, text)
        rec.truncated = truncated or shrunk
        rec.observation_chars = len(obs_text)
        rec.observation_tokens = len(obs_ids) if obs_ids is not None else 0
        traj.tool_calls.append(rec)
        if obs_ids is None:
            return "max_tokens"
        state.append(Segment("observation", obs_ids, obs_text))
        return None

    async def _call_tool(self, state: _RunState, gen: Generation, text: str) -> tuple[str, ToolCallRecord]:
        """The observation text and call record for the call that ends ``text`` (a note when there is none)."""
        traj = state.traj
        call = self.parse_tool_call(text, gen)
        if call is None or call.name not in self.config.tools:
            obs = (f"Could not read a complete tool call at the end of your output (it stopped at "
                   f"{gen.stop_str!r}). Write <tool_name>argument</tool_name> with one of: "
                   f"{', '.join(self.config.tools)}.")
            return obs, ToolCallRecord(turn=traj.turns, name=call.name if call else "",
                                       argument=call.argument if call else "", status="invalid")
        ctx = ToolContext(question=state.question, text=traj.response_text(), kwargs=dict(state.tool_kwargs))
        obs, rec = await self.tools.call(call.name, call.argument.strip(), ctx, state.seen, state.deadline)
        rec.turn = traj.turns
        return obs, rec

    def _fit_observation(self, content: str, room: int, before: str = "") -> tuple[list[int] | None, str, bool]:
        """Encode the observation in at most ``room`` tokens, shrinking its content, or give up (None). ``before``
        is the model text it follows (see :func:`after_model_text`)."""
        tokenizer = self.tokenizer

        def framed(body: str) -> str:
            return after_model_text(before, self.format_observation(body))

        text = framed(content)
        ids = tokenizer.encode(text)
        if len(ids) <= room:
            return ids, text, False
        shell = len(tokenizer.encode(framed("")))
        if room - shell < 8:
            return None, text, True
        limit = len(content)
        for _ in range(8):
            limit = max(1, int(limit * (room - shell) / max(1, len(ids) - shell) * 0.9))
            short, _ = truncate_text(content, limit)
            text = framed(short)
            ids = tokenizer.encode(text)
            if len(ids) <= room:
                return ids, text, True
        return None, text, True


def after_model_text(model_text: str, observation: str) -> str:
    """``observation`` without the leading newlines the model already wrote.

    Qwen-style tokenizers merge ``>`` with the newlines after it, so a model trained on ``</code>\n\n<observation>``
    samples the token ``>\n\n`` and stops there. Appending the environment's ``\n\n<observation>`` as is would
    give ``</code>\n\n\n\n<observation>``, a text the model never saw in training, at every tool call; the
    original re-encoded the stop-trimmed text, and token-in-token-out keeps the sampled token, so the observation
    gives up its newlines instead. The context then reads exactly as the SFT data does."""
    written = len(model_text) - len(model_text.rstrip("\n"))
    leading = len(observation) - len(observation.lstrip("\n"))
    return observation[min(written, leading):]


async def run_trajectory(backend: ModelBackend, tokenizer: TokenizerAdapter, tools: ToolRunner,
                         config: AgentConfig, prompt_ids: list[int], *, question: str = "",
                         tool_kwargs: Mapping[str, Any] | None = None, sampling: SamplingParams | None = None,
                         meta: dict[str, Any] | None = None) -> Trajectory:
    """Run one CoA trajectory with the default :class:`AgentLoop`; see :meth:`AgentLoop.run`."""
    return await AgentLoop(backend, tokenizer, tools, config).run(prompt_ids, question=question,
                                                                  tool_kwargs=tool_kwargs, sampling=sampling,
                                                                  meta=meta)
