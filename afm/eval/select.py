"""Best-of-N selection: pick one of a question's N sampled answers (the paper's Bo3 uses an LLM as selector).

- :func:`select_majority` votes over normalised answers (:func:`normalize_pred`); ties go to the answer seen
  first (lowest sample index), and the chosen index is the first sample that gave the winning answer. Samples
  without an answer do not vote; when none has one, sample 0 is chosen.
- :class:`JudgeSelector` asks an OpenAI-compatible model which candidate answer is most likely correct
  (candidates numbered from 1, in sample order; the prompt never shows gold answers). Replies are parsed by
  :func:`parse_choice` (JSON, fenced JSON, "Candidate 2", a plain number). 408/409/425/429/5xx, timeouts,
  connection errors, malformed bodies and unparsable replies are retried with exponential backoff and jitter;
  other 4xx fail at once. Choices are cached in :mod:`afm.common.kvcache` keyed by (model, prompt version, question,
  candidates). Without a configured model, or when it keeps failing, the majority vote decides and the
  :class:`Selection` says so (``method`` = ``"majority"`` / ``"majority_fallback"``, with the error).
  When every candidate normalises to the same answer (or only one has an answer) no request is sent
  (``method`` = ``"trivial"``).

Env: ``GRM_BASE_URL`` (selector configured only when set), ``GRM_API_KEY``, ``GRM_MODEL_NAME`` (default
``gpt-4.1-mini``), ``AFM_SELECTOR_CACHE`` (path or ``redis://`` URL; ``off`` disables; default
``$XDG_CACHE_HOME/afm/selector.sqlite``), ``AFM_SELECTOR_CONCURRENCY`` (32), ``AFM_SELECTOR_TIMEOUT`` (60 s).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from afm.common.chat_client import ChatClient, ChatError, counted_complete, holds_endpoint
from afm.common.kvcache import cache_key, cache_location
from afm.rewards.grm import (  # the selector calls the judge's endpoint (GRM_*)
    CallStats,
    LazyCache,
    ModelCallConfig,
)
from afm.rewards.qa import normalize_answer

logger = logging.getLogger(__name__)

PROMPT_VERSION = "afm-select-v1"
SYSTEM_PROMPT = "You compare candidate answers to a question and pick the one most likely to be correct."
PROMPT_TEMPLATE = """Question: {question}

Candidate answers (independent attempts by an agent that could search the web and run code):
{candidates}

Which candidate is most likely correct? Use your own knowledge and reasoning; agreement between candidates is
evidence but not proof. If several are equally good, pick the lowest number.

Reply with one JSON object and nothing else:
{{"rationale": "<one or two sentences>", "best": <candidate number from 1 to {n}>}}"""

_BOXED = "\\boxed{"
_CHOICE_KEYS = ("best", "choice", "chosen", "candidate", "index", "selected", "selection", "answer", "best_candidate")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_PLAIN = re.compile(r"^\W*(?:candidate\s*)?#?\s*(\d+)\W*$", re.IGNORECASE)
_LABELLED = re.compile(r"\b(?:best|chosen|choice|answer|select(?:ed|ion)?|pick(?:ed)?)\b[^0-9\n]{0,30}?(\d+)",
                       re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]{2,}")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_CANDIDATE = re.compile(r"\bcandidate\s*#?\s*(\d+)", re.IGNORECASE)


# -- normalisation and majority vote ---------------------------------------------------------------------------
def _unbox(text: str) -> str:
    """The body of the last ``\\boxed{...}`` (balanced braces), or the text unchanged."""
    start = text.rfind(_BOXED)
    if start < 0:
        return text
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return text


def normalize_pred(pred: Any) -> str | None:
    """The form answers are compared in for voting; None for a missing or empty answer.

    Math-like answers (no word of two or more letters once LaTeX commands are set aside, e.g. ``\\frac{1}{2}``,
    ``x^2``, ``B``) keep their symbols, so ``1/2`` and ``12`` stay different: ``\\boxed{}`` and ``$`` are
    removed, the text lowercased, whitespace and a trailing period dropped, and ``1,000`` becomes ``1000``.
    Other answers use the QA normalisation of :func:`afm.rewards.qa.normalize_answer` (case, punctuation,
    articles).
    """
    if pred is None:
        return None
    text = _unbox(str(pred)).replace("$", "").strip()
    if not _WORD.search(_LATEX_CMD.sub(" ", text)):
        text = re.sub(r"\s+", "", text).rstrip(".").lower()
        if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
            text = text.replace(",", "")
    else:
        text = normalize_answer(text) or " ".join(text.lower().split())
    return text or None


def select_majority(candidates: Sequence[Any]) -> int:
    """Index of the majority answer among ``candidates`` (see the module docstring for ties and blanks).

    >>> select_majority(["Paris", "paris.", "Lyon"])
    0
    >>> select_majority([None, "B", "A", "A", "B"])  # tie: "B" was seen first
    1
    """
    votes: dict[str, list[int]] = {}
    for i, cand in enumerate(candidates):
        norm = normalize_pred(cand)
        if norm is not None:
            votes.setdefault(norm, []).append(i)
    if not votes:
        return 0
    # dicts keep insertion order, so max() returns the first-seen answer among those with the most votes
    return max(votes.values(), key=len)[0]


@dataclass(frozen=True)
class Selection:
    """One best-of-N choice: ``index`` into the candidates and how it was made.

    ``method``: ``"judge"`` (the selector model chose), ``"trivial"`` (all answers agree, no request),
    ``"majority"`` (no selector model configured), ``"majority_fallback"`` (the model failed; ``error`` says why).
    """

    index: int
    method: str
    cached: bool = False
    error: str = ""
    rationale: str = ""


class MajoritySelector:
    """Best-of-N by majority vote (no model); same interface as :class:`JudgeSelector`."""

    name = "majority"

    def __call__(self, question: str, candidates: Sequence[Any]) -> int:
        return select_majority(candidates)

    def select_batch(self, items: Sequence[tuple[str, Sequence[Any]]]) -> list[Selection]:
        """One :class:`Selection` per ``(question, candidates)``."""
        return [Selection(select_majority(c), "majority") for _, c in items]


# -- parsing the selector model's reply ------------------------------------------------------------------------
def _json_choice(text: str) -> Any:
    """The choice field of the reply's last top-level JSON object that has one, else None.

    The last one, as in :mod:`afm.rewards.verdict`: the model may quote a candidate (an agent's answer, which can
    hold ``{"best": 2}``) before giving its own object, and only its own, final word decides.
    """
    decoder = json.JSONDecoder()
    chosen = None
    pos = text.find("{")
    while pos >= 0:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):  # RecursionError: a quoted answer nested deeper than Python allows
            obj, end = None, pos + 1
        if isinstance(obj, dict):
            lowered = {str(k).lower(): v for k, v in obj.items()}
            chosen = next((lowered[key] for key in _CHOICE_KEYS if key in lowered), chosen)
        pos = text.find("{", end)
    return chosen


def parse_choice(text: str, n: int) -> int | None:
    """The chosen candidate as a 0-based index, or None when the reply names no candidate in ``1..n``.

    Tried in order: the last JSON object (fenced or not) with a ``best``/``choice``/``index``/... field (a number,
    ``"2"`` or ``"Candidate 2"``); a reply that is just a number or ``Candidate N``; the last phrase like
    ``best: 2`` / ``I pick candidate 3``; the last ``Candidate N`` mentioned.
    """
    text = _THINK.sub(" ", text or "")
    value = _json_choice(text)
    if value is not None:
        if isinstance(value, bool):
            value = None
        elif isinstance(value, (int, float)) and float(value).is_integer():
            value = int(value)
        elif isinstance(value, str) and (m := _PLAIN.match(value)):
            value = int(m.group(1))
        else:
            value = None
        return value - 1 if value is not None and 1 <= value <= n else None
    for found in (_PLAIN.findall(text.strip()), _LABELLED.findall(text), _CANDIDATE.findall(text)):
        if found:
            value = int(found[-1])
            return value - 1 if 1 <= value <= n else None
    return None


def build_messages(question: str, candidates: Sequence[Any]) -> list[dict[str, str]]:
    """The chat messages sent to the selector model (candidates numbered from 1)."""
    lines = [f"Candidate {i}: {str(c).strip() if c is not None and str(c).strip() else '(no answer)'}"
             for i, c in enumerate(candidates, 1)]
    user = PROMPT_TEMPLATE.format(question=(question or "").strip() or "(not given)", candidates="\n".join(lines),
                                  n=len(candidates))
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


# -- the LLM selector -----------------------------------------------------------------------------------------
def default_cache_location() -> str:
    """``AFM_SELECTOR_CACHE``, else ``$XDG_CACHE_HOME/afm/selector.sqlite`` (``~/.cache`` by default)."""
    return cache_location("AFM_SELECTOR_CACHE", "selector.sqlite")


@holds_endpoint
@dataclass(frozen=True)
class SelectorConfig(ModelCallConfig):
    """Where the selector model is (``endpoint``) and how it is called; :meth:`from_env` reads ``GRM_*`` and
    ``AFM_SELECTOR_*``.

    The endpoint's fields may also be given flat (``SelectorConfig(base_url=..., max_retries=3)``).
    """

    env_prefix: ClassVar[str] = "AFM_SELECTOR_"
    cache_namespace: ClassVar[str] = "selector"

    concurrency: int = 32  # requests in flight per batch
    cache: str = field(default_factory=default_cache_location)  # path, redis:// URL, or "off"


def _trivial(candidates: Sequence[Any]) -> int | None:
    """The index to take without asking a model (one distinct answer, or none at all), else None."""
    distinct = {normalize_pred(c) for c in candidates} - {None}
    return select_majority(candidates) if len(distinct) <= 1 else None


class JudgeSelector:
    """Best-of-N with an LLM selector; see the module docstring. Async first; :meth:`select_batch` blocks."""

    name = "judge"

    def __init__(self, config: SelectorConfig | None = None, **overrides: Any) -> None:
        self.config = replace(config, **overrides) if config is not None else SelectorConfig.from_env(**overrides)
        self.stats = CallStats()
        self._cache = LazyCache(self.config)

    @property
    def configured(self) -> bool:
        """True when a selector model endpoint is set."""
        return self.config.configured

    def cache_key(self, question: str, candidates: Sequence[Any]) -> str:
        return cache_key(self.config.endpoint.model, PROMPT_VERSION, question,
                         json.dumps([None if c is None else str(c) for c in candidates], ensure_ascii=False))

    def close(self) -> None:
        self._cache.close()

    # -- public API ----------------------------------------------------------------------------------------
    async def aselect(self, question: str, candidates: Sequence[Any]) -> Selection:
        """Choose among ``candidates`` (awaitable)."""
        return (await self.aselect_batch([(question, candidates)]))[0]

    async def aselect_batch(self, items: Sequence[tuple[str, Sequence[Any]]]) -> list[Selection]:
        """One :class:`Selection` per ``(question, candidates)``, at most ``concurrency`` requests at a time."""
        if not self.configured:
            return [Selection(select_majority(c), "majority" if _trivial(c) is None else "trivial")
                    for _, c in items]
        cfg = self.config
        sem = asyncio.Semaphore(cfg.concurrency)
        client = ChatClient(replace(cfg.endpoint, max_connections=cfg.concurrency))
        try:
            return list(await asyncio.gather(*(self._select(client, sem, q, list(c)) for q, c in items)))
        finally:
            await client.aclose()

    def select_batch(self, items: Sequence[tuple[str, Sequence[Any]]]) -> list[Selection]:
        """Blocking form of :meth:`aselect_batch`; safe to call from inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aselect_batch(items))
        # A running loop in this thread cannot be blocked on: run the batch on a loop of its own thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self.aselect_batch(items)).result()

    def __call__(self, question: str, candidates: Sequence[Any]) -> int:
        return self.select_batch([(question, candidates)])[0].index

    # -- one selection -------------------------------------------------------------------------------------
    async def _select(self, client: ChatClient, sem: asyncio.Semaphore, question: str, candidates: list[Any]) -> Selection:
        trivial = _trivial(candidates)
        if trivial is not None:
            return Selection(trivial, "trivial")
        cache = self._cache.get()
        key = self.cache_key(question, candidates)
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                stored = json.loads(hit)
                if 0 <= int(stored["index"]) < len(candidates):
                    self.stats.cache_hits += 1
                    return Selection(int(stored["index"]), "judge", cached=True,
                                     rationale=stored.get("rationale", ""))
        index, rationale, error = await self._ask(client, sem, build_messages(question, candidates), len(candidates))
        if index is None:
            self.stats.failures += 1
            return Selection(select_majority(candidates), "majority_fallback", error=error)
        if cache is not None:
            cache.set(key, json.dumps({"index": index, "rationale": rationale[:2000]}))
        return Selection(index, "judge", rationale=rationale)

    async def _ask(self, client: ChatClient, sem: asyncio.Semaphore, messages: list[dict[str, str]],
                   n: int) -> tuple[int | None, str, str]:
        """``(index, rationale, last_error)`` after up to ``1 + endpoint.retries`` attempts."""
        cfg = self.config
        chosen: list[int] = []

        def check(content: str) -> str | None:
            index = parse_choice(content, n)
            if index is None:
                return f"no candidate number in selector reply: {content[:200]!r}"
            chosen.append(index)
            return None

        try:
            reply = await counted_complete(client, messages, stats=self.stats, limit=sem, check=check,
                                           temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        except ChatError as exc:
            logger.warning("selector gave up: %s", exc)
            return None, "", f"selector {exc}"
        rationale = ""
        try:
            content = reply.content
            obj = json.loads(content[content.find("{"): content.rfind("}") + 1])
            rationale = str(obj.get("rationale", "")) if isinstance(obj, dict) else ""
        except ValueError:
            pass  # the rationale is optional; the choice was already parsed
        return chosen[-1], rationale, ""


def get_selector(name: str | None, **overrides: Any) -> MajoritySelector | JudgeSelector | None:
    """``"none"``/None, ``"majority"`` or ``"judge"`` (config from the environment plus ``overrides``)."""
    if name is None or name == "none":
        return None
    if name == "majority":
        return MajoritySelector()
    if name == "judge":
        return JudgeSelector(**overrides)
    raise ValueError(f"unknown selector {name!r}; known: none, majority, judge")
