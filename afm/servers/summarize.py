"""Goal-aware page summaries with an OpenAI-compatible chat model, in four modes, never failing a crawl.

Modes (``summary_type``):

- ``none``: no model; the extracted text, cut to ``text_chars``;
- ``once``: one call per page over the text cut to the model budget (``input_chars``);
- ``chunk``: the text split into ``chunk_size``-character parts (paragraph boundaries where possible, at most
  ``max_chunks``), each summarised for the goal, then one call merges the notes;
- ``page``: one call per page over the full extracted text (bounded only by the fetch size cap), like the original
  server; the model must have a context large enough for whole pages.

The goal is the agent's task, its latest web search query and its latest ``<think>`` content. A page with nothing
relevant is summarised as exactly ``No relevant information``. Without a configured model, or when it fails
(HTTP errors, timeouts, garbage), the result is the extracted text cut to ``text_chars`` with a note that says
why it is not a summary.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from afm.common.chat_client import ChatClient as SharedChatClient
from afm.common.chat_client import ChatEndpoint, ChatError, holds_endpoint
from afm.servers.common import EnvReader

log = logging.getLogger(__name__)

SummaryMode = Literal["none", "once", "chunk", "page"]
SUMMARY_MODES: tuple[str, ...] = ("none", "once", "chunk", "page")
NO_RELEVANT = "No relevant information"
PROMPT_VERSION = "1"  # part of the summary cache key: bump when the prompts change
DEFAULT_MODEL = "qwen2.5-72b-instruct"
GOAL_FIELD_CHARS = 4000  # each goal field is cut to this many characters in a prompt

SYSTEM_PROMPT = ("You read web pages for a research agent and report what they say that serves the agent's "
                 "current goal. You report only what the page states; you never add knowledge of your own.")


@dataclass(frozen=True)
class Goal:
    """What the agent is after: its task, its latest search query and its latest reasoning."""

    task: str = ""
    web_search_query: str = ""
    think_content: str = ""


# SUMMARY_MODEL and SUMMARY_TIMEOUT follow ChatEndpoint.from_env's names; these are the ones users set today.
ENV_NAMES: dict[str, str | None] = {"base_url": "SUMMARY_OPENAI_API_BASE_URL", "api_key": "SUMMARY_OPENAI_API_KEY",
                                    "retries": "SUMMARY_MAX_RETRIES", "backoff": "SUMMARY_BACKOFF"}


def default_endpoint() -> ChatEndpoint:
    """The summary model before the environment is read: none configured, 120 s per request, 2 retries."""
    return ChatEndpoint(model=DEFAULT_MODEL, timeout_s=120.0, retries=2)


@holds_endpoint
@dataclass(frozen=True)
class LLMSettings:
    """How to reach the summary model (``endpoint``) and sample from it (environment: ``SUMMARY_*``)."""

    endpoint: ChatEndpoint = field(default_factory=default_endpoint)  # no base_url = no summaries
    max_tokens: int = 2048
    temperature: float = 0.2

    @classmethod
    def from_env(cls) -> LLMSettings:
        env = os.environ
        endpoint = ChatEndpoint.from_env("SUMMARY_", env, names=ENV_NAMES, **asdict(default_endpoint()))
        base_url, api_key = summary_endpoint(env)
        return cls(endpoint=replace(endpoint, base_url=base_url, api_key=api_key),
                   max_tokens=EnvReader(env).integer("SUMMARY_MAX_TOKENS", cls.max_tokens))


def summary_endpoint(env: Mapping[str, str]) -> tuple[str, str]:
    """(base URL, key) of the summary model: ``SUMMARY_OPENAI_API_*``, else the original project's ``UNI_API_*``.

    The original crawl server read its summary model from ``UNI_API_KEY`` and a fixed uniapi URL (``keys.py``),
    and its environment.sh named ``UNI_API_URLS`` (``|``-separated; the first is used here).
    """
    base = env.get("SUMMARY_OPENAI_API_BASE_URL", "").strip()
    key = env.get("SUMMARY_OPENAI_API_KEY", "")
    if not base:
        base = next((u.strip() for u in env.get("UNI_API_URLS", "").split("|") if u.strip()), "")
        # The uniapi key goes only to a uniapi URL, never to an endpoint configured with afm's names.
        if base and not key:
            key = env.get("UNI_API_KEY", "")
    return base, key


def alias_notes(env: Mapping[str, str]) -> list[str]:
    """One line per original-project variable that stands in for (or is ignored in favour of) an afm one."""
    notes = []
    if not env.get("SUMMARY_OPENAI_API_BASE_URL", "").strip() and env.get("UNI_API_URLS", "").strip():
        urls = [u.strip() for u in env["UNI_API_URLS"].split("|") if u.strip()]
        more = f" (the first of {len(urls)})" if len(urls) > 1 else ""
        notes.append(f"summary model URL from UNI_API_URLS{more}: SUMMARY_OPENAI_API_BASE_URL is unset")
    if (not env.get("SUMMARY_OPENAI_API_BASE_URL", "").strip() and not env.get("SUMMARY_OPENAI_API_KEY")
            and env.get("UNI_API_KEY") and summary_endpoint(env)[0]):
        notes.append("summary model key from UNI_API_KEY: SUMMARY_OPENAI_API_KEY is unset")
    if env.get("JINA_BASE_URL", "").strip():
        notes.append("JINA_BASE_URL is ignored (unused by the original server too; its s.jina.ai is Jina's search "
                     "API): the reader is JINA_READER_BASE_URL, default https://r.jina.ai")
    return notes


@dataclass(frozen=True)
class SummaryBudget:
    """Character budgets of the modes (environment: ``CRAWL_TEXT_CHARS``, ``SUMMARY_MAX_INPUT_CHARS``, ...)."""

    text_chars: int = 8000
    input_chars: int = 48_000
    chunk_size: int = 8000
    max_chunks: int = 16
    concurrency: int = 8

    @classmethod
    def from_env(cls) -> SummaryBudget:
        env = EnvReader()
        return cls(text_chars=env.integer("CRAWL_TEXT_CHARS", cls.text_chars),
                   input_chars=env.integer("SUMMARY_MAX_INPUT_CHARS", cls.input_chars),
                   chunk_size=env.integer("CRAWL_CHUNK_SIZE", cls.chunk_size),
                   max_chunks=env.integer("SUMMARY_MAX_CHUNKS", cls.max_chunks),
                   concurrency=env.integer("SUMMARY_CONCURRENCY", cls.concurrency))


@dataclass
class Summary:
    """The text to show for a page and how it was made.

    ``kind``: ``summary`` (the model's), ``text`` (mode ``none``), ``no_llm`` (no model configured) or
    ``fallback`` (the model failed; ``note`` says how).
    """

    text: str
    kind: Literal["summary", "text", "no_llm", "fallback"]
    note: str = ""
    llm_calls: int = 0


class LLMError(Exception):
    """The summary model gave no usable answer (after retries)."""


# (separator, least fraction of the limit the cut must keep): shown text keeps as much as it can, while
# summary chunks prefer whole paragraphs, so a fact is less often split between two summaries.
_CUT_NEAR_LIMIT = (("\n\n", 0.8), ("\n", 0.8), (" ", 0.8))
_CUT_AT_PARAGRAPHS = (("\n\n", 0.5), ("\n", 0.7), (" ", 0.8))


def cut_text(text: str, limit: int, rules: tuple[tuple[str, float], ...] = _CUT_NEAR_LIMIT) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters, at a paragraph, line or word end when one is near."""
    if len(text) <= limit:
        return text, False
    head = text[:limit]
    for sep, fraction in rules:
        pos = head.rfind(sep)
        if pos >= limit * fraction:
            return head[:pos].rstrip(), True
    return head, True


def split_chunks(text: str, size: int) -> list[str]:
    """Consecutive parts of at most ``size`` characters, split at paragraph, line or word ends where possible."""
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        piece, was_cut = cut_text(rest, size, _CUT_AT_PARAGRAPHS)
        chunks.append(piece)
        rest = rest[len(piece):].strip() if was_cut else ""
    return chunks


def is_no_relevant(text: str) -> bool:
    """Whether a model answer means "nothing relevant" (case, quotes and final period ignored)."""
    return text.strip().strip("\"'*. ").lower() == NO_RELEVANT.lower()


def _field(text: str) -> str:
    text = (text or "").strip()
    return cut_text(text, GOAL_FIELD_CHARS)[0] if text else "(not given)"


def page_prompt(goal: Goal, url: str, text: str, part: tuple[int, int] | None = None) -> list[dict[str, str]]:
    """Chat messages asking for the goal-relevant content of one page (or of part ``(i, n)`` of it)."""
    where = f"part {part[0]} of {part[1]} of the page" if part else "the page"
    user = (
        f"The agent's task:\n{_field(goal.task)}\n\n"
        f"Its latest web search query:\n{_field(goal.web_search_query)}\n\n"
        f"What it was thinking when it opened this page:\n{_field(goal.think_content)}\n\n"
        f"Page address: {url}\nText of {where}:\n<<<PAGE\n{text}\nPAGE>>>\n\n"
        "Write down what this text says that helps with the task, answers the query or bears on the agent's "
        "thinking above:\n"
        "- facts, numbers, names, dates and definitions, worded as the page words them; rows of tables and items "
        "of lists that matter, kept as rows and items;\n"
        "- links in the text that look worth opening next, as [link text](url);\n"
        "- nothing the page does not say: no background knowledge, no guesses, no advice.\n"
        "Be brief and complete. If the text holds nothing relevant, reply with exactly: " + NO_RELEVANT
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def merge_prompt(goal: Goal, url: str, notes: list[tuple[int, str]], total: int) -> list[dict[str, str]]:
    """Chat messages merging notes taken from parts of one page into one goal-focused summary."""
    body = "\n\n".join(f"Notes on part {i} of {total}:\n{note}" for i, note in notes)
    user = (
        f"The agent's task:\n{_field(goal.task)}\n\n"
        f"Its latest web search query:\n{_field(goal.web_search_query)}\n\n"
        f"What it was thinking when it opened this page:\n{_field(goal.think_content)}\n\n"
        f"Page address: {url}\nThe page was read in {total} parts; these notes were taken on the parts that held "
        f"something relevant:\n<<<NOTES\n{body}\nNOTES>>>\n\n"
        "Merge the notes into one summary for the agent: keep every relevant fact, number, name, date and link "
        "([link text](url)); drop repetitions; add nothing the notes do not say. If none of it is relevant, reply "
        "with exactly: " + NO_RELEVANT
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _nonempty(content: str) -> str | None:
    return None if content.strip() else "answered with an empty message"


class ChatClient:
    """The summary model's client: :class:`afm.common.chat_client.ChatClient` with :class:`LLMSettings`."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._chat = SharedChatClient(settings.endpoint)

    async def aclose(self) -> None:
        await self._chat.aclose()

    async def complete(self, messages: list[dict[str, str]]) -> str:
        """The reply text; raises :class:`LLMError` when every attempt failed."""
        s = self.settings
        try:
            reply = await self._chat.complete(messages, check=_nonempty, max_tokens=s.max_tokens,
                                              temperature=s.temperature)
        except ChatError as exc:
            raise LLMError(str(exc)) from exc
        return reply.content.strip()


class Summarizer:
    """Turns a page's extracted text into what the agent sees, in one of :data:`SUMMARY_MODES`."""

    def __init__(self, client: ChatClient | None, budget: SummaryBudget | None = None) -> None:
        self.client = client
        self.budget = budget or SummaryBudget()
        self._limit = asyncio.Semaphore(max(1, self.budget.concurrency))

    @property
    def model_key(self) -> str:
        """Identifies the model and prompts in cache keys."""
        if self.client is None:
            return "none"
        endpoint = self.client.settings.endpoint
        return json.dumps([endpoint.base_url, endpoint.model, PROMPT_VERSION])

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    def plain(self, text: str, kind: Literal["text", "no_llm", "fallback"], reason: str = "") -> Summary:
        """The extracted text cut to the budget, with a note when it was cut or is not the summary asked for."""
        shown, was_cut = cut_text(text, self.budget.text_chars)
        size = f"first {len(shown)} of {len(text)} characters" if was_cut else f"{len(text)} characters"
        if kind == "no_llm":
            note = f"Not summarised: the crawl server has no summary model configured. Extracted page text, {size}."
        elif kind == "fallback":
            note = f"Not summarised: the summary model failed ({reason}). Extracted page text, {size}."
        else:
            note = f"Extracted page text, {size}." if was_cut else ""
        return Summary(shown, kind, note)

    async def summarize(self, text: str, url: str, goal: Goal, mode: str, chunk_size: int | None = None) -> Summary:
        """Summary of one page; falls back to the extracted text (with a note) instead of raising."""
        if mode == "none":
            return self.plain(text, "text")
        if self.client is None:
            return self.plain(text, "no_llm")
        try:
            if mode == "chunk":
                return await self._chunked(text, url, goal, chunk_size or self.budget.chunk_size)
            if mode == "once":
                body, was_cut = cut_text(text, self.budget.input_chars)
                summary = await self._call(page_prompt(goal, url, body))
                note = f"Summary of the first {len(body)} of {len(text)} characters." if was_cut else ""
                return Summary(summary, "summary", note, 1)
            if mode == "page":
                return Summary(await self._call(page_prompt(goal, url, text)), "summary", "", 1)
        except LLMError as exc:
            log.warning("summary model failed for %s: %s", url, exc)
            return self.plain(text, "fallback", str(exc))
        raise ValueError(f"unknown summary mode {mode!r}; expected one of {', '.join(SUMMARY_MODES)}")

    async def _call(self, messages: list[dict[str, str]]) -> str:
        if self.client is None:
            raise LLMError("no summary model is configured")
        async with self._limit:
            return await self.client.complete(messages)

    async def _chunked(self, text: str, url: str, goal: Goal, size: int) -> Summary:
        chunks = split_chunks(text, max(200, size)) or [""]
        total = len(chunks)
        used = chunks[: self.budget.max_chunks]
        results = await asyncio.gather(*(self._call(page_prompt(goal, url, c, (i + 1, total)))
                                         for i, c in enumerate(used)), return_exceptions=True)
        calls = len(used)
        failed = [r for r in results if isinstance(r, BaseException)]
        for r in failed:
            if not isinstance(r, LLMError):
                raise r
        notes = [(i + 1, r) for i, r in enumerate(results) if isinstance(r, str)]
        if not notes:
            raise LLMError(str(failed[0]))
        remarks = []
        if total > len(used):
            remarks.append(f"only the first {len(used)} of {total} parts were read")
        if failed:
            remarks.append(f"{len(failed)} of {len(used)} parts could not be summarised ({failed[0]})")
        relevant = [(i, n) for i, n in notes if not is_no_relevant(n)]
        if not relevant:
            return Summary(NO_RELEVANT, "summary", "; ".join(remarks), calls)
        if len(notes) == 1 and len(used) == 1:
            return Summary(relevant[0][1], "summary", "; ".join(remarks), calls)
        try:
            merged = await self._call(merge_prompt(goal, url, relevant, total))
            calls += 1
        except LLMError as exc:
            # The per-part notes are still better than raw text.
            remarks.append(f"merging the notes failed ({exc}); notes per part follow")
            merged = "\n\n".join(f"Part {i} of {total}:\n{n}" for i, n in relevant)
        return Summary(merged, "summary", "; ".join(remarks), calls)
