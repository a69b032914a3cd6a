"""Question/answer files -> the verl RL parquet (``afm data rl``).

One row per question, in the layout verl's ``RLHFDataset`` and reward managers read::

    data_source     str    picks the scorer in afm.rewards (and groups validation metrics)
    prompt          list   chat messages: the agent's system prompt + the question (afm.prompts.build_messages)
    ability         str    qa | math | code | ... (informational)
    reward_model    {style: "rule", ground_truth: str}
    extra_info      {index, id, question, answer, split, data_source, prompt_key, need_tools_kwargs,
                     tools_kwargs?, agent_name?}
    agent_name      str    the verl agent loop that runs the row (omitted when agent_name is None)

**Ground truth is always a string**, because a parquet column has one type and verl hands the value to
``compute_score`` as read: a plain answer stays as it is (``"Paris"``); several aliases become a JSON list
(``'["Paris", "City of Paris"]'``); a dict (code tests, ``{"target": ..., "question": ...}``) becomes a JSON object;
a number becomes its text. A string that already is such JSON (a JSON object, or a JSON list of strings) is kept;
any other string starting with ``{`` or ``[`` (an interval ``[0, 1)``, a set ``{1, 2}``) is wrapped as
``{"target": [s]}`` so that no scorer mistakes it for JSON. :func:`afm.rewards.ground_truth.normalize_ground_truth`
reads every one of these forms, and each row is checked with it (for data sources afm.rewards knows).

**``extra_info.index`` is unique per row** (``<data_source>-<position>-<8 hex of question+answer>``) whatever the
input ids are: the original's converter wrote an index that, when absent, defaulted to 0 and silently merged
every prompt into one GRPO group. :func:`write_rl_parquet` refuses rows whose indices repeat.

Rows of an existing verl RL parquet (the original project's ``prepare_data.py`` output: the question and answer in
``extra_info``, the ground truth a ``{"target": [...]}`` JSON string) are read as items too (:func:`from_verl_row`)
and rebuilt with afm's prompt, index and ground-truth encoding.

Rows that cannot be trained on are dropped and counted in an :class:`RLBuildReport` (reason -> count, with
examples): missing, empty or non-string question, missing/empty/unusable answer, ground truth the scorer rejects,
over-long question, and repeated questions (the first is kept; repeats with a different answer are flagged).
The CLI prints the report and writes it as ``<output>.report.json`` next to the parquet.

    afm data rl --input nq_train.jsonl --output data/rl/mhqa_train.parquet --data-source nq --prompt-key mhqa
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from afm.common.table_io import iter_rows
from afm.prompts import build_messages, get_prompt

MAX_QUESTION_CHARS = 50_000
"""Questions longer than this (characters) are dropped as ``question_too_long``; the token limit that training
applies (``data.max_prompt_length``) is checked by the CLI's ``--max-prompt-tokens`` with a tokenizer."""
EXAMPLES_PER_REASON = 3
SOURCE_KEY = "_afm_source"
"""Items may carry ``{SOURCE_KEY: "file:line"}``; reports then name that place instead of the item number."""
TOOL_NAMES = ("web_search", "crawl_page", "wiki_search", "code", "visual_inspector")
"""Tools a row may name in ``tools_kwargs`` (plus any tool of the row's prompt, e.g. search_r1's ``search``)."""
_TARGET_KEYS = ("target", "targets", "answer", "answers", "ground_truth")
REQUIRED_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")

DROP_REASONS = {
    "not_a_mapping": "the item is not a JSON object",
    "missing_question": "no question field",
    "non_string_question": "the question is not a string",
    "empty_question": "the question is empty or whitespace",
    "question_too_long": f"the question is longer than {MAX_QUESTION_CHARS} characters",
    "missing_answer": "no answer field (or null)",
    "empty_answer": "the answer is empty (empty string, list or dict)",
    "bad_answer": "the answer has a type no scorer accepts (bool, nested lists, non-JSON values)",
    "bad_ground_truth": "the scorer of this data source rejects the ground truth",
    "bad_prompt_extra": "the prompt's per-question options (e.g. stdin/starter_code) are invalid",
    "duplicate_question": "the same question (case and spacing ignored) appeared earlier; the first is kept",
    "prompt_too_long": "the chat prompt is longer than --max-prompt-tokens tokens",
}


@dataclass
class RLBuildReport:
    """What :func:`build_rl_rows` kept and dropped, and why.

    ``dropped`` maps a reason (see :data:`DROP_REASONS`) to a count and ``examples`` to a few
    ``{"where", "id", "detail"}`` records. ``duplicate_ids`` counts kept rows whose input id had been seen before
    (their ``index`` is still unique); ``conflicting_duplicates`` counts dropped repeats whose answer differed
    from the kept one. ``warnings`` are notes that dropped nothing.
    """

    data_source: str
    prompt_key: str
    prompt_ref: str = ""
    split: str = "train"
    total: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    duplicate_ids: int = 0
    conflicting_duplicates: int = 0
    warnings: list[str] = field(default_factory=list)
    outputs: dict[str, int] = field(default_factory=dict)  # path -> rows written

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())

    def drop(self, reason: str, where: str, item_id: Any, detail: str = "") -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < EXAMPLES_PER_REASON:
            ex.append({"where": where, "id": None if item_id is None else str(item_id), "detail": detail[:200]})

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def merge(self, other: RLBuildReport) -> None:
        """Add ``other``'s counts to this report (for several builds written together)."""
        self.total += other.total
        self.kept += other.kept
        self.duplicate_ids += other.duplicate_ids
        self.conflicting_duplicates += other.conflicting_duplicates
        for reason, n in other.dropped.items():
            self.dropped[reason] = self.dropped.get(reason, 0) + n
            room = EXAMPLES_PER_REASON - len(self.examples.setdefault(reason, []))
            self.examples[reason] += other.examples.get(reason, [])[:max(room, 0)]
        for w in other.warnings:
            self.warn(w)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["n_dropped"] = self.n_dropped
        d["reasons"] = {r: DROP_REASONS.get(r, r) for r in self.dropped}
        return d

    def summary(self) -> str:
        lines = [f"[afm data rl] {self.data_source} ({self.prompt_ref or self.prompt_key}, split {self.split}): "
                 f"{self.total} items, kept {self.kept}, dropped {self.n_dropped}"]
        for reason, n in sorted(self.dropped.items(), key=lambda kv: -kv[1]):
            lines.append(f"  dropped {n:>6}  {reason}: {DROP_REASONS.get(reason, reason)}")
            for ex in self.examples.get(reason, []):
                tail = f" - {ex['detail']}" if ex["detail"] else ""
                lines.append(f"           e.g. {ex['where']} (id {ex['id']}){tail}")
        if self.duplicate_ids:
            lines.append(f"  note: {self.duplicate_ids} kept rows reuse an earlier id (their index is unique)")
        if self.conflicting_duplicates:
            lines.append(f"  note: {self.conflicting_duplicates} dropped repeats had a different answer than "
                         "the kept row")
        lines += [f"  warning: {w}" for w in self.warnings]
        lines += [f"  wrote {n} rows to {p}" for p, n in self.outputs.items()]
        return "\n".join(lines)

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


# ---- ground truth ------------------------------------------------------------------------------------------------

class _BadAnswer(ValueError):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _plain(value: Any) -> Any:
    """numpy arrays/scalars (pandas-read parquet) as plain Python objects."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return value


def _is_encoded(text: str) -> bool:
    """A string that already is an encoded ground truth: a JSON object or a JSON list of strings."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return False
    return isinstance(decoded, dict) or (isinstance(decoded, list) and all(isinstance(x, str) for x in decoded))


def encode_ground_truth(answer: Any) -> str:
    """The ground-truth string stored in ``reward_model.ground_truth`` (see the module docstring).

    Raises ``_BadAnswer`` (a ValueError) with reason ``missing_answer``, ``empty_answer`` or ``bad_answer``.
    """
    answer = _plain(answer)
    if answer is None:
        raise _BadAnswer("missing_answer", "answer is null")
    if isinstance(answer, bool):
        raise _BadAnswer("bad_answer", f"answer is a bool ({answer})")
    if isinstance(answer, (int, float)):
        return str(answer)
    if isinstance(answer, str):
        text = answer.strip()
        if not text:
            raise _BadAnswer("empty_answer", "answer is an empty string")
        if text.startswith(("{", "[")) and not _is_encoded(text):
            return json.dumps({"target": [text]}, ensure_ascii=False)
        return text
    if isinstance(answer, (list, tuple)):
        out = []
        for item in answer:
            item = _plain(item)
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise _BadAnswer("bad_answer", f"answer list holds a {type(item).__name__}: {item!r:.60}")
            if str(item).strip():
                out.append(str(item).strip())
        if not out:
            raise _BadAnswer("empty_answer", "answer is an empty list")
        return json.dumps(out, ensure_ascii=False)
    if isinstance(answer, Mapping):
        if not answer:
            raise _BadAnswer("empty_answer", "answer is an empty dict")
        try:
            return json.dumps({str(k): _plain(v) for k, v in answer.items()}, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise _BadAnswer("bad_answer", f"answer dict is not JSON-serialisable: {exc}") from None
    raise _BadAnswer("bad_answer", f"answer has type {type(answer).__name__}")


def _answer_text(ground_truth: str) -> str:
    """``extra_info.answer``: the ground truth, except a JSON object without gold answers (code tests), which
    would only duplicate ``reward_model.ground_truth`` (``""``)."""
    if ground_truth.startswith("{"):
        try:
            decoded = json.loads(ground_truth)
        except ValueError:
            return ground_truth
        if isinstance(decoded, dict) and not any(k in decoded for k in _TARGET_KEYS):
            return ""
    return ground_truth


def _scorer_kind(data_source: str) -> str | None:
    """The ground-truth kind afm.rewards uses for ``data_source``, or None when no scorer is registered."""
    from afm.rewards.registry import get_scorer

    try:
        return get_scorer(data_source).kind
    except ValueError:
        return None


# ---- rows --------------------------------------------------------------------------------------------------------

def _norm_question(q: str) -> str:
    return " ".join(q.lower().split())


def _row_index(data_source: str, position: int, question: str, ground_truth: str) -> str:
    digest = hashlib.sha1(f"{question}\0{ground_truth}".encode()).hexdigest()[:8]
    return f"{data_source}-{position:06d}-{digest}"


def _tools_kwargs(tools: Sequence[str], data_source: str, item_id: str | None,
                  overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per-tool kwargs (verl's ``create_kwargs``/``execute_kwargs``/...): never an empty dict (parquet cannot
    store an empty struct), and the same keys on every row (so files concatenate)."""
    out: dict[str, Any] = {}
    for name in tools:
        create = {"data_source": data_source, "question_id": item_id or ""}
        entry: dict[str, Any] = {"create_kwargs": create}
        extra = dict((overrides or {}).get(name) or {})
        for key, value in extra.items():
            if key == "create_kwargs" and isinstance(value, Mapping):
                create.update(value)
            else:
                entry[key] = value
        out[name] = entry
    return out


def from_verl_row(item: Mapping[str, Any], q_key: str = "question", a_key: str = "answer",
                  id_key: str | None = "id") -> Mapping[str, Any]:
    """A row of an existing verl RL parquet as a question/answer item; any other item unchanged.

    The original project's ``prepare_data.py`` (and afm's own output) keep the question in ``extra_info`` and the
    prompt already built: ``{data_source, prompt, reward_model: {ground_truth: '{"target": [...], "question":
    ...}'}, extra_info: {question, answer, index, tools_kwargs, ...}}``. The item gets ``q_key`` from
    ``extra_info``, ``a_key`` from ``extra_info`` or else ``reward_model.ground_truth``, and ``id_key`` from
    ``extra_info`` (``id``, else ``index``), so that the row is rebuilt with afm's prompt. Fields the item has at
    its top level win.
    """
    info, reward = item.get("extra_info"), item.get("reward_model")
    if q_key in item or not isinstance(info, Mapping) or not isinstance(reward, Mapping) or "prompt" not in item:
        return item
    flat = dict(item)
    if info.get(q_key) is not None:
        flat[q_key] = info[q_key]
    if a_key not in flat:
        if info.get(a_key) is not None:
            flat[a_key] = info[a_key]
        elif reward.get("ground_truth") is not None:
            flat[a_key] = reward["ground_truth"]
    if id_key and id_key not in flat:
        given = info.get(id_key, info.get("index"))
        if given is not None:
            flat[id_key] = given
    return flat


class _Drop(Exception):
    """An item that cannot be trained on: its reason (a key of :data:`DROP_REASONS`) and a detail for the
    report."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _keys(item: Mapping[str, Any]) -> list[str]:
    return sorted(map(str, item))[:8]


# ---- the checks an item goes through, in order; each returns what it checked or raises _Drop ---------------------

def _question(item: Mapping[str, Any], q_key: str) -> str:
    """The question, stripped: present, a string, not blank, not over :data:`MAX_QUESTION_CHARS`."""
    if q_key not in item or item[q_key] is None:
        verl = f" (nor extra_info.{q_key} of this verl row)" if isinstance(item.get("extra_info"), Mapping) else ""
        raise _Drop("missing_question", f"no {q_key!r}{verl}; keys: {_keys(item)}")
    question = item[q_key]
    if not isinstance(question, str):
        raise _Drop("non_string_question", f"{q_key!r} is a {type(question).__name__}")
    question = question.strip()
    if not question:
        raise _Drop("empty_question")
    if len(question) > MAX_QUESTION_CHARS:
        raise _Drop("question_too_long", f"{len(question)} characters")
    return question


def _ground_truth(item: Mapping[str, Any], a_key: str, data_source: str, kind: str | None) -> str:
    """The encoded ground truth (:func:`encode_ground_truth`), accepted by the data source's scorer when it has
    one."""
    from afm.rewards.ground_truth import normalize_ground_truth

    if a_key not in item:
        raise _Drop("missing_answer", f"no {a_key!r}; keys: {_keys(item)}")
    try:
        ground_truth = encode_ground_truth(item[a_key])
    except _BadAnswer as exc:
        raise _Drop(exc.reason, str(exc)) from None
    if kind is not None:
        try:
            normalize_ground_truth(ground_truth, data_source, kind)
        except ValueError as exc:
            raise _Drop("bad_ground_truth", str(exc)) from None
    return ground_truth


def _messages(item: Mapping[str, Any], prompt: Any, question: str) -> list[dict[str, str]]:
    """The chat prompt, with the item's per-question options for the prompt (e.g. stdin / starter_code)."""
    extra = {k: _plain(item[k]) for k in prompt.extra_keys if item.get(k) is not None}
    try:
        return build_messages(prompt, question, extra=extra)
    except ValueError as exc:
        raise _Drop("bad_prompt_extra", str(exc)) from None


@dataclass
class _Seen:
    """Questions (normalised) and ids kept so far: a repeated question is dropped, a repeated id only counted."""

    report: RLBuildReport
    questions: dict[str, str] = field(default_factory=dict)  # normalised question -> its ground truth
    ids: set[str] = field(default_factory=set)

    def keep(self, question: str, ground_truth: str, item_id: str | None) -> None:
        qnorm = _norm_question(question)
        if qnorm in self.questions:
            if self.questions[qnorm] != ground_truth:
                self.report.conflicting_duplicates += 1
            raise _Drop("duplicate_question", question[:80])
        self.questions[qnorm] = ground_truth
        if item_id is not None:
            if item_id in self.ids:
                self.report.duplicate_ids += 1
            self.ids.add(item_id)


def _check_arguments(data_source: str, prompt_key: str, tools: Sequence[str] | None,
                     tools_kwargs: Mapping[str, Any] | None, agent_name: str | None) -> tuple[Any, list[str]]:
    """``(prompt, tool names)`` of a build; ValueError for an empty data source, an unknown prompt or tool,
    kwargs for a tool the rows do not have, or a blank agent name."""
    if not isinstance(data_source, str) or not data_source.strip():
        raise ValueError(f"data_source must be a non-empty string, got {data_source!r}")
    try:
        prompt = get_prompt(prompt_key)
    except KeyError as exc:
        raise ValueError(str(exc.args[0]) if exc.args else str(exc)) from None
    tool_list = list(prompt.tools if tools is None else tools)
    known_tools = dict.fromkeys([*TOOL_NAMES, *prompt.tools])
    bad_tools = [t for t in tool_list if t not in known_tools]
    if bad_tools:
        raise ValueError(f"unknown tools {bad_tools}; known: {', '.join(known_tools)}")
    unknown_kw = sorted(set(tools_kwargs or {}) - set(tool_list))
    if unknown_kw:
        raise ValueError(f"tools_kwargs names tools {unknown_kw} that are not among the row's tools {tool_list}")
    if agent_name is not None and not str(agent_name).strip():
        raise ValueError("agent_name must be a non-empty string or None")
    return prompt, tool_list


def build_rl_rows(items: Iterable[Mapping[str, Any]], *, data_source: str, prompt_key: str, ability: str = "qa",
                  q_key: str = "question", a_key: str = "answer", id_key: str | None = "id",
                  tools: Sequence[str] | None = None, agent_name: str | None = "afm_agent", split: str = "train",
                  tools_kwargs: Mapping[str, Any] | None = None) -> tuple[list[dict[str, Any]], RLBuildReport]:
    """Turn question/answer items into verl RL rows; returns ``(rows, report)``.

    Args:
        items: mappings with the question under ``q_key``, the gold answer(s) under ``a_key`` (a string, a list of
            aliases, a number, or a dict such as code tests) and optionally an id under ``id_key``. Keys the
            prompt understands as per-question options (the code agent's ``stdin`` / ``starter_code``) are passed
            to :func:`afm.prompts.build_messages`.
        data_source: the ``data_source`` of every row (the reward registry's name: ``nq``, ``hotpotqa``, ``gaia``,
            ``aime24``, ``livecodebench_v5``, ...).
        prompt_key: the system prompt (:func:`afm.prompts.get_prompt`: a key, ``key@version`` or a file).
        ability: the ``ability`` column.
        tools: the tools whose kwargs go into ``extra_info.tools_kwargs`` (default: the prompt's tools).
        agent_name: the verl agent loop for these rows (``None``: no ``agent_name`` column, verl's
            ``default_agent_loop`` runs them).
        split: ``extra_info.split``.
        tools_kwargs: ``{tool: {"create_kwargs": {...}, "execute_kwargs": {...}}}`` merged into every row's
            defaults (``create_kwargs`` = ``{data_source, question_id}``).

    Raises ValueError for bad arguments (unknown prompt, tools, empty data_source); bad items never raise, they
    are dropped and reported.
    """
    prompt, tool_list = _check_arguments(data_source, prompt_key, tools, tools_kwargs, agent_name)
    report = RLBuildReport(data_source=data_source, prompt_key=prompt_key, prompt_ref=prompt.ref, split=split)
    missing = [t for t in tool_list if t not in prompt.tools]
    if missing:
        report.warn(f"tools {missing} are not enabled by prompt {prompt.key!r} (its tools: {list(prompt.tools)})")
    kind = _scorer_kind(data_source)
    if kind is None:
        report.warn(f"data_source {data_source!r} has no scorer in afm.rewards: afm's compute_score will raise "
                    "for these rows unless you register one (AFM_REWARD_REGISTRY) or use your own reward function")

    rows: list[dict[str, Any]] = []
    seen = _Seen(report)
    for n, item in enumerate(items, 1):
        report.total += 1
        where, item_id = f"item {n}", None
        try:
            if not isinstance(item, Mapping):
                raise _Drop("not_a_mapping", f"got {type(item).__name__}")
            where = str(item.get(SOURCE_KEY) or where)
            item = from_verl_row(item, q_key, a_key, id_key)
            raw_id = _plain(item.get(id_key)) if id_key else None
            item_id = None if raw_id is None else str(raw_id)
            question = _question(item, q_key)
            ground_truth = _ground_truth(item, a_key, data_source, kind)
            messages = _messages(item, prompt, question)
            seen.keep(question, ground_truth, item_id)
        except _Drop as drop:
            report.drop(drop.reason, where, item_id, drop.detail)
            continue
        index = _row_index(data_source, len(rows), question, ground_truth)
        extra_info: dict[str, Any] = {
            "index": index,
            "id": item_id if item_id is not None else index,
            "question": question,
            "answer": _answer_text(ground_truth),
            "split": split,
            "data_source": data_source,
            "prompt_key": prompt.ref,
            "need_tools_kwargs": bool(tool_list),
        }
        if tool_list:
            extra_info["tools_kwargs"] = _tools_kwargs(tool_list, data_source, item_id, tools_kwargs)
        if agent_name is not None:
            extra_info["agent_name"] = agent_name
        row: dict[str, Any] = {
            "data_source": data_source,
            "prompt": messages,
            "ability": ability,
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": extra_info,
        }
        if agent_name is not None:
            row["agent_name"] = agent_name
        rows.append(row)
    report.kept = len(rows)
    if report.total and not rows:
        report.warn("no row was kept")
    return rows, report


def check_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """ValueError unless the rows can be written as one parquet verl reads: required columns, a unique non-empty
    ``extra_info.index`` per row, string ground truths, and the same ``agent_name`` presence on every row."""
    seen: dict[str, int] = {}
    has_agent = None
    for i, row in enumerate(rows):
        missing = [c for c in REQUIRED_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"row {i}: missing columns {missing}")
        index = (row.get("extra_info") or {}).get("index")
        if index is None or index == "":
            raise ValueError(f"row {i}: extra_info.index is missing; every row needs a unique index")
        key = str(index)
        if key in seen:
            raise ValueError(f"rows {seen[key]} and {i} share extra_info.index {key!r}; indices must be unique "
                             "(build all files in one call, or give them different data sources)")
        seen[key] = i
        gt = (row.get("reward_model") or {}).get("ground_truth")
        if not isinstance(gt, str):
            raise ValueError(f"row {i}: reward_model.ground_truth must be a string (see encode_ground_truth), "
                             f"got {type(gt).__name__}")
        if has_agent is None:
            has_agent = "agent_name" in row
        elif has_agent != ("agent_name" in row):
            raise ValueError(f"row {i}: agent_name is present on some rows and absent on others")


def write_rl_parquet(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` (from :func:`build_rl_rows`) as parquet, atomically; returns the path.

    Checks them first (:func:`check_rows`); an empty list is an error (verl cannot train on it).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError("no rows to write")
    check_rows(rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        table = pa.Table.from_pylist([dict(r) for r in rows])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"rows do not share one schema (mixed types in a column?): {exc}") from None
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# ---- input files -------------------------------------------------------------------------------------------------

def read_items(path: str | Path) -> Iterator[dict[str, Any]]:
    """Items of a ``.jsonl``, ``.json`` (a list, or an object with a ``data`` list) or ``.parquet`` file, each
    tagged with ``{SOURCE_KEY: location}``; a malformed JSON line raises ValueError with its number."""
    for where, obj in iter_rows(path):
        yield {**obj, SOURCE_KEY: where} if isinstance(obj, dict) else obj


def filter_prompt_length(rows: list[dict[str, Any]], report: RLBuildReport, tokenizer: Any,
                         max_tokens: int) -> list[dict[str, Any]]:
    """Drop rows whose chat prompt (the tokenizer's chat template, generation prompt added) exceeds
    ``max_tokens``, as verl's ``data.max_prompt_length`` would reject them; the report counts them."""
    kept = []
    for row in rows:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys") and "input_ids" in ids:  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        if len(ids) > max_tokens:
            info = row["extra_info"]
            report.drop("prompt_too_long", info["index"], info["id"], f"{len(ids)} tokens > {max_tokens}")
        else:
            kept.append(row)
    report.kept = len(kept)
    return kept


def split_rows(rows: list[dict[str, Any]], fraction: float, seed: int, val_split: str = "val"
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, val)``: a seeded random ``fraction`` of the rows (at least one when fraction > 0) becomes
    validation, with ``extra_info.split`` set to ``val_split``. Indices are unchanged, so stay unique."""
    if not 0 < fraction < 1:
        raise ValueError(f"val fraction must be in (0, 1), got {fraction}")
    if len(rows) < 2:
        raise ValueError(f"cannot split {len(rows)} row(s) into train and validation")
    n_val = min(len(rows) - 1, max(1, round(len(rows) * fraction)))
    picked = set(random.Random(seed).sample(range(len(rows)), n_val))
    train, val = [], []
    for i, row in enumerate(rows):
        if i in picked:
            row = {**row, "extra_info": {**row["extra_info"], "split": val_split}}
            val.append(row)
        else:
            train.append(row)
    return train, val


# ---- CLI ---------------------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="afm data rl",
        description="Question/answer files (JSONL, JSON, parquet) -> verl RL parquet with a unique extra_info.index "
                    "per row; prints what was dropped and why and writes <output>.report.json.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  afm data rl --input nq.jsonl --input hotpot.jsonl --data-source nq --data-source hotpotqa \\\n"
               "      --prompt-key mhqa --output data/rl/mhqa_train.parquet --val-fraction 0.01\n"
               "  afm data rl --input lcb.jsonl --data-source livecodebench --prompt-key code_agent --ability code \\\n"
               "      --a-key tests --output data/rl/code_train.parquet",
    )
    p.add_argument("--input", action="append", required=True, metavar="FILE",
                   help="input file (.jsonl, .json or .parquet); repeat for several")
    p.add_argument("--output", required=True, help="output parquet")
    p.add_argument("--data-source", action="append", required=True, metavar="NAME",
                   help="data_source of the rows (the reward registry's name); once for all inputs, or once per "
                        "--input in the same order")
    p.add_argument("--prompt-key", required=True, help="system prompt key (afm.prompts), key@version, or a file")
    p.add_argument("--ability", default="qa", help="the ability column (default: qa)")
    p.add_argument("--tools", default=None,
                   help="comma-separated tools for extra_info.tools_kwargs (default: the prompt's tools; '' = none)")
    p.add_argument("--tools-kwargs", default=None, metavar="JSON",
                   help='per-tool kwargs merged into every row, e.g. \'{"code": {"execute_kwargs": {"timeout": 10}}}\'')
    p.add_argument("--agent-name", default="afm_agent",
                   help="verl agent loop of the rows (default: afm_agent; 'none' = no agent_name column)")
    p.add_argument("--split", default="train", help="extra_info.split (default: train)")
    p.add_argument("--q-key", default="question", help="question field (default: question)")
    p.add_argument("--a-key", default="answer", help="answer field (default: answer)")
    p.add_argument("--id-key", default="id", help="id field (default: id; 'none' = no ids)")
    p.add_argument("--val-fraction", type=float, default=0.0,
                   help="move this random fraction of the kept rows to --val-output (default: 0)")
    p.add_argument("--val-output", default=None, help="validation parquet (default: <output stem>_val.parquet)")
    p.add_argument("--seed", type=int, default=0, help="seed of the validation split (default: 0)")
    p.add_argument("--max-prompt-tokens", type=int, default=0,
                   help="drop rows whose chat prompt exceeds this many tokens (needs --tokenizer; match "
                        "data.max_prompt_length of the training script)")
    p.add_argument("--tokenizer", default=None, help="tokenizer (HF id or folder) for --max-prompt-tokens")
    p.add_argument("--limit", type=int, default=0, help="read at most this many items per input (0 = all)")
    return p


def _limited(it: Iterable[Any], limit: int) -> Iterator[Any]:
    for n, x in enumerate(it):
        if limit and n >= limit:
            return
        yield x


def main(argv: list[str] | None = None) -> int:
    """``afm data rl``: returns 0 on success, 1 when no row was kept, 2 on bad arguments or input."""
    args = _parser().parse_args(argv)
    sources = args.data_source
    if len(sources) not in (1, len(args.input)):
        print(f"afm data rl: give --data-source once, or once per --input ({len(args.input)} inputs, "
              f"{len(sources)} data sources)", file=sys.stderr)
        return 2
    if len(sources) == 1:
        sources = sources * len(args.input)
    if args.max_prompt_tokens and not args.tokenizer:
        print("afm data rl: --max-prompt-tokens needs --tokenizer", file=sys.stderr)
        return 2
    tools = None if args.tools is None else [t.strip() for t in args.tools.split(",") if t.strip()]
    try:
        tools_kwargs = json.loads(args.tools_kwargs) if args.tools_kwargs else None
        if tools_kwargs is not None and not isinstance(tools_kwargs, dict):
            raise ValueError("--tools-kwargs must be a JSON object")
    except ValueError as exc:
        print(f"afm data rl: --tools-kwargs: {exc}", file=sys.stderr)
        return 2
    agent_name = None if args.agent_name.lower() in ("none", "") else args.agent_name
    id_key = None if args.id_key.lower() in ("none", "") else args.id_key

    # Inputs with the same data source are built in one call, so their positions (and indices) never collide.
    groups: dict[str, list[str]] = {}
    for path, source in zip(args.input, sources, strict=True):
        groups.setdefault(source, []).append(path)
    rows: list[dict[str, Any]] = []
    report: RLBuildReport | None = None
    try:
        for source, paths in groups.items():
            items = (it for path in paths for it in _limited(read_items(path), args.limit))
            part_rows, part = build_rl_rows(items, data_source=source, prompt_key=args.prompt_key,
                                            ability=args.ability, q_key=args.q_key, a_key=args.a_key,
                                            id_key=id_key, tools=tools, agent_name=agent_name, split=args.split,
                                            tools_kwargs=tools_kwargs)
            rows += part_rows
            if report is None:
                report = part
            else:
                report.data_source += f",{source}"
                report.merge(part)
    except (ValueError, FileNotFoundError) as exc:
        print(f"afm data rl: {exc}", file=sys.stderr)
        return 2
    assert report is not None
    if args.max_prompt_tokens:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.tokenizer)
        rows = filter_prompt_length(rows, report, tok, args.max_prompt_tokens)
        report.kept = len(rows)

    out = Path(args.output)
    report_path = out.with_name(out.stem + ".report.json")
    if not rows:
        print(report.summary())
        report.write_json(report_path)
        print(f"afm data rl: no row kept; nothing written (report: {report_path})", file=sys.stderr)
        return 1
    outputs = [(out, rows)]
    if args.val_fraction:
        try:
            train, val = split_rows(rows, args.val_fraction, args.seed)
        except ValueError as exc:
            print(f"afm data rl: {exc}", file=sys.stderr)
            return 2
        val_out = Path(args.val_output) if args.val_output else out.with_name(out.stem + "_val.parquet")
        outputs = [(out, train), (val_out, val)]
    for path, part_rows in outputs:
        write_rl_parquet(part_rows, path)
        report.outputs[str(path)] = len(part_rows)
    print(report.summary())
    report.write_json(report_path)
    print(f"[afm data rl] report: {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
