"""The multi-turn CoA loop: generate until a stop, run the tool, append the observation tokens, repeat.

Token-in-token-out: the context of every turn is ``prompt_ids`` + the ids sampled so far + the ids of the
observations inserted so far; sampled ids are never re-encoded from text. Observations are encoded once, from
``\\n\\n<observation>\\n…\\n</observation>\\n\\n``, and carry loss mask 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from afm.agent.backend import ModelBackend, SamplingParams
from afm.agent.record import Segment, ToolCallRecord, Trajectory
from afm.agent.tokens import TokenizerAdapter
from afm.tools.base import Tool, ToolContext, ToolResult
from afm.trajectory import format_observation, last_tool_call, stop_strings

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
    """Runs tool calls with timeouts, per-tool concurrency limits and duplicate suppression."""

    def __init__(self, tools: Mapping[str, Tool], config: AgentConfig) -> None:
        self.tools = dict(tools)
        self.config = config
        self._sems = {name: asyncio.Semaphore(n) for name, n in config.tool_concurrency.items() if n and n > 0}

    async def call(self, name: str, argument: str, ctx: ToolContext, seen: set[tuple[str, str]],
                   deadline: float | None) -> tuple[str, ToolCallRecord]:
        """Observation text and call record for one call (never raises for tool failures)."""
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
        timeout = self.config.tool_timeout_s
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline - time.monotonic()))
        sem = self._sems.get(name)
        try:
            if sem is not None:
                async with sem:
                    result = await asyncio.wait_for(tool.call(argument, ctx), timeout)
            else:
                result = await asyncio.wait_for(tool.call(argument, ctx), timeout)
        except TimeoutError:
            result = ToolResult(f"The {name} tool did not answer within {timeout:.0f} seconds. Try again later or "
                                "take another approach.", "timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = ToolResult(f"The {name} tool failed ({type(exc).__name__}: {exc}).", "error")
            rec.error = f"{type(exc).__name__}: {exc}"
        rec.status = result.status
        rec.latency_s = time.monotonic() - t0
        rec.meta = dict(result.meta)
        if result.status != "ok" and rec.error is None:
            rec.error = result.text[:500]
        return result.text, rec


async def run_trajectory(backend: ModelBackend, tokenizer: TokenizerAdapter, tools: ToolRunner,
                         config: AgentConfig, prompt_ids: list[int], *, question: str = "",
                         tool_kwargs: Mapping[str, Any] | None = None, sampling: SamplingParams | None = None,
                         meta: dict[str, Any] | None = None) -> Trajectory:
    """Run one CoA trajectory to its end; every limit and failure ends in a :class:`Trajectory` record."""
    t0 = time.monotonic()
    deadline = t0 + config.trajectory_timeout_s if config.trajectory_timeout_s else None
    traj = Trajectory(prompt_ids=list(prompt_ids), meta=dict(meta or {}))
    base = (sampling or config.sampling).with_(stop=config.stops())
    context = list(prompt_ids)
    seen: set[tuple[str, str]] = set()
    response_len = 0
    try:
        while True:
            if traj.turns >= config.max_turns:
                traj.finish_reason = "max_turns"
                break
            room = min(config.max_model_len - len(context), config.max_response_tokens - response_len)
            if room < config.min_turn_tokens:
                traj.finish_reason = "max_tokens"
                break
            params = base.with_(max_new_tokens=min(config.max_tokens_per_turn, room))
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            gen = await asyncio.wait_for(backend.generate(context, params), remaining)
            traj.turns += 1
            if gen.ids_source != "sampled":
                traj.ids_source = gen.ids_source
            ids = gen.ids[:room]  # a backend may overshoot; the context must never exceed the budget
            text = gen.text if len(ids) == len(gen.ids) else tokenizer.decode(ids)
            logprobs = gen.meta.get("logprobs")
            if logprobs is not None and len(logprobs) >= len(ids):
                logprobs = [float(x) for x in logprobs[: len(ids)]]
            else:  # a backend that reports none (or too few) for these ids
                logprobs = None
            traj.segments.append(Segment("model", ids, text, logprobs))
            context.extend(ids)
            response_len += len(ids)
            if gen.finish == "eos":
                traj.finish_reason = "eos"
                break
            if gen.finish == "length" or len(ids) < len(gen.ids):
                traj.finish_reason = "max_tokens"
                break
            if gen.stop_str == "</answer>":
                traj.finish_reason = "answer"
                break
            call = last_tool_call(text)
            ctx = ToolContext(question=question, text=traj.response_text(), kwargs=dict(tool_kwargs or {}))
            if call is None or call.name not in config.tools:
                obs = (f"Could not read a complete tool call at the end of your output (it stopped at "
                       f"{gen.stop_str!r}). Write <tool_name>argument</tool_name> with one of: "
                       f"{', '.join(config.tools)}.")
                rec = ToolCallRecord(turn=traj.turns, name=call.name if call else "", argument=call.argument
                                     if call else "", status="invalid")
            else:
                obs, rec = await tools.call(call.name, call.argument.strip(), ctx, seen, deadline)
                rec.turn = traj.turns
            obs, truncated = truncate_text(obs, config.max_observation_chars)
            obs_ids, obs_text, shrunk = _fit_observation(tokenizer, obs, config, len(context), response_len)
            rec.truncated = truncated or shrunk
            rec.observation_chars = len(obs_text)
            rec.observation_tokens = len(obs_ids) if obs_ids is not None else 0
            traj.tool_calls.append(rec)
            if obs_ids is None:
                traj.finish_reason = "max_tokens"
                break
            traj.segments.append(Segment("observation", obs_ids, obs_text))
            context.extend(obs_ids)
            response_len += len(obs_ids)
    except TimeoutError:
        traj.finish_reason = "timeout"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        traj.finish_reason = "error"
        traj.error = f"{type(exc).__name__}: {exc}"
    traj.wall_s = time.monotonic() - t0
    return traj


def _fit_observation(tokenizer: TokenizerAdapter, content: str, config: AgentConfig, context_len: int,
                     response_len: int) -> tuple[list[int] | None, str, bool]:
    """Encode the observation; shrink its content so that a next turn still fits, or give up (None)."""
    room = min(config.max_model_len - context_len, config.max_response_tokens - response_len) - config.min_turn_tokens
    text = format_observation(content)
    ids = tokenizer.encode(text)
    if len(ids) <= room:
        return ids, text, False
    shell = len(tokenizer.encode(format_observation("")))
    if room - shell < 8:
        return None, text, True
    limit = len(content)
    for _ in range(8):
        limit = max(1, int(limit * (room - shell) / max(1, len(ids) - shell) * 0.9))
        short, _ = truncate_text(content, limit)
        text = format_observation(short)
        ids = tokenizer.encode(text)
        if len(ids) <= room:
            return ids, text, True
    return None, text, True
