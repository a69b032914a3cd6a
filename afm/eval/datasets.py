"""Benchmarks of the evaluation: loaders that turn a benchmark's local file, in the original field names, into
:class:`EvalItem` records. What each benchmark is (prompt, tools, data source, the paper's sampling) is the table
in :mod:`afm.eval.benchmark_specs`, importable from here too.

>>> from afm.eval.datasets import get_benchmark
>>> spec = get_benchmark("gaia")
>>> spec.prompt, spec.tools, spec.sampling["temperature"], spec.sampling["top_k"]
('web_agent', ('web_search', 'crawl_page'), 1.0, 20)

Files are found under a data root (``data_root=``, else ``$AFM_EVAL_DATA``, else ``data/eval``) at the
spec's ``default_file`` (the original's names: ``web_agent/gaia_dev_103.json``, ``mhqa_agent/nq_full.jsonl``,
``code_agent/aime24.parquet``, ...; the same stem with another of .json/.jsonl/.parquet/.csv also works), or
at an explicit path. ``python -m afm.eval.download NAME`` writes them; ``afm.eval.demo_sets`` writes the demo
subsets.

Accepted rows, per family (field names as the original and the public releases spell them):

- **mhqa**: ``question`` + ``golden_answers`` (FlashRAG/Search-R1) or ``answer`` (a string or list: the
  original's ``nq_full.jsonl``). Gold: the list of answer aliases.
- **web**: ``question`` (or GAIA's ``Question``) + ``answer`` (or ``Final answer``); GAIA's ``Level`` becomes
  :attr:`EvalItem.level`; ids from ``task_id``/``id``. BrowseComp's encrypted rows (``problem``, ``answer``,
  ``canary``) are decrypted. Gold: a one-element list.
- **math**: ``problem``/``question`` + ``answer`` (or OlympiadBench's ``final_answer`` list, joined with
  ", "), else the last ``\\boxed{}`` of ``solution``. Gold: the answer string.
- **code**: LiveCodeBench rows (``question_content``, ``public_test_cases``, ``starter_code``, ``metadata``),
  CodeContests rows (``description``, ``public_tests``/``private_tests``), APPS rows (``input_output``) or a
  ground truth dict. Gold: a dict :mod:`afm.rewards.code` grades (``stdin``/``expected_output`` or
  ``inputs``/``outputs``/``fn_name``, plus ``question_id`` so that LiveCodeBench's processed private tests
  are used).
  ``prompt_extra`` is ``{"stdin": True}`` or ``{"starter_code": ...}``.
- any family: verl RL parquet rows (``prompt``, ``reward_model.ground_truth``, ``extra_info``; the original's
  ``code_agent/*.parquet``). The question is ``extra_info.question``, else the text after the last
  ``Question:``/``Task:``/``Problem:`` marker of the user message (a warning counts those rows).

Bad files raise ValueError naming the file and row: a missing or empty field (with the fields the row has), an
empty file, invalid JSON (with the line), duplicate ids.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The benchmark table lives below the loaders (the demo sets read it too); its names are kept importable here.
from afm.eval.benchmark_specs import (  # noqa: F401 (re-exported)
    BENCHMARKS,
    CODE_SAMPLING,
    CODE_TEMPERATURE,
    DEMO_SAMPLING,
    FAMILIES,
    MHQA_SAMPLING,
    WEB_SAMPLING,
    WORLD_FAMILIES,
    WORLD_PROMPT,
    WORLD_SAMPLING,
    WORLD_TOOLS,
    BenchmarkSpec,
    UnknownBenchmarkError,
    describe_benchmarks,
    get_benchmark,
    list_benchmarks,
)
from afm.eval.records import FORMATS, read_records

logger = logging.getLogger(__name__)

DATA_ENV = "AFM_EVAL_DATA"
DEFAULT_DATA_ROOT = Path("data") / "eval"


@dataclass
class EvalItem:
    """One question of a benchmark, ready for the agent (``question``, ``prompt_extra``) and the scorer."""

    benchmark: str  # e.g. "gaia", "nq", "aime24", "livecodebench_v5", "demo_web"
    qid: str  # stable id (dataset id field, else row index as str)
    question: str
    gold: Any  # what afm.rewards.compute_score takes as ground_truth for this data_source
    data_source: str  # a name afm.rewards knows
    level: str | None = None  # GAIA level
    extra_info: dict = field(default_factory=dict)  # for compute_score: {"question": ..., "split": "test"}
    prompt_extra: dict = field(default_factory=dict)  # passed to afm.prompts.build_messages(extra=...)


def default_data_root() -> Path:
    """``$AFM_EVAL_DATA``, else ``data/eval`` (relative to the working directory)."""
    return Path(os.environ.get(DATA_ENV) or DEFAULT_DATA_ROOT)


# -- row helpers ---------------------------------------------------------------------------------------------
_TARGET_KEYS = ("target", "targets", "answer", "answers", "golden_answers", "ground_truth")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (
        isinstance(value, (list, tuple, dict)) and not value)


def _pick(row: Mapping[str, Any], names: Sequence[str]) -> tuple[str | None, Any]:
    """The first of ``names`` with a non-blank value (exact spelling first, then ignoring case)."""
    for name in names:
        if not _blank(row.get(name)):
            return name, row[name]
    lower = {str(k).lower(): k for k in row}
    for name in names:
        key = lower.get(name.lower())
        if key is not None and not _blank(row[key]):
            return key, row[key]
    return None, None


def _require(row: Mapping[str, Any], names: Sequence[str], where: str) -> tuple[str, Any]:
    key, value = _pick(row, names)
    if key is not None:
        return key, value
    lower = {str(k).lower() for k in row}
    empty = next((n for n in names if n.lower() in lower), None)
    if empty is not None:
        raise ValueError(f"{where}: field {empty!r} is empty")
    also = f" (or {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
    raise ValueError(f"{where}: missing field {names[0]!r}{also} (fields: {_fields(row)})")


def _fields(row: Mapping[str, Any]) -> str:
    return ", ".join(sorted(map(str, row))[:25])


def _text(value: Any, where: str, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: field {name!r} must be text, got a {type(value).__name__}")
    return str(value).strip()


def _field_text(row: Mapping[str, Any], names: Sequence[str], where: str) -> str:
    key, value = _require(row, names, where)
    return _text(value, where, key)


def _answer_list(value: Any, where: str, name: str, *, decode_lists: bool = True) -> list[str]:
    """Gold answers from a string, number, list, ``{"target": [...]}`` dict or a JSON string of those."""
    if value is None:
        return []
    if isinstance(value, bool):
        raise ValueError(f"{where}: field {name!r} is a bool; expected answer text")
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{") or (decode_lists and text.startswith("[")):
            try:
                decoded = json.loads(text)
            except ValueError:
                return [text]
            if isinstance(decoded, (dict, list)):
                return _answer_list(decoded, where, name, decode_lists=decode_lists)
        return [text] if text else []
    if isinstance(value, Mapping):
        key, inner = _pick(value, _TARGET_KEYS)
        return _answer_list(inner, where, f"{name}.{key}", decode_lists=decode_lists) if key else []
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise ValueError(f"{where}: field {name!r} holds a {type(item).__name__}; "
                                 "expected answer strings")
            if str(item).strip():
                out.append(str(item).strip())
        return out
    raise ValueError(f"{where}: field {name!r} has type {type(value).__name__}; expected a string or a list")


def _golds(row: Mapping[str, Any], names: Sequence[str], where: str) -> list[str]:
    key, value = _require(row, names, where)
    answers = _answer_list(value, where, key)
    if not answers:
        raise ValueError(f"{where}: field {key!r} holds no answer ({value!r:.80})")
    return answers


def last_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (or ``\fbox{...}``) in ``text`` (braces balanced), or None.

    >>> last_boxed(r"so $x = \boxed{\frac{1}{2}}$.")
    '\\frac{1}{2}'
    """
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def browsecomp_decrypt(ciphertext_b64: str, password: str) -> str:
    """Decrypt a BrowseComp field: base64 text XORed with SHA-256(canary) repeated to the text's length."""
    data = base64.b64decode(ciphertext_b64)
    digest = hashlib.sha256(password.encode()).digest()
    key = (digest * (len(data) // len(digest) + 1))[: len(data)]
    return bytes(a ^ b for a, b in zip(data, key, strict=True)).decode()


_MARKER = re.compile(r"(?:^|\n)[ \t]*(?:Question|Task|Problem)[ \t]*:[ \t]*")


def _question_from_prompt(prompt: Any) -> str:
    if isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)
        except ValueError:
            prompt = [{"role": "user", "content": prompt}]
    messages = [m for m in (prompt if isinstance(prompt, (list, tuple)) else []) if isinstance(m, Mapping)]
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    text = users[-1] if users else ""
    marks = list(_MARKER.finditer(text))
    return (text[marks[-1].end():] if marks else text).strip()


def _flatten_rl(row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A verl RL row as one flat dict (extra_info fields + ``ground_truth``); True when the question came from
    the prompt text."""
    if not (isinstance(row.get("reward_model"), Mapping) and "prompt" in row):
        return row, False
    info = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    flat = {k: v for k, v in info.items() if k not in ("tools_kwargs", "need_tools_kwargs")}
    flat.update({k: v for k, v in row.items() if k not in ("prompt", "reward_model", "extra_info")})
    flat["ground_truth"] = row["reward_model"].get("ground_truth")
    if "id" not in flat and info.get("index") is not None:
        flat["id"] = info["index"]
    from_prompt = _blank(flat.get("question"))
    if from_prompt:
        flat["question"] = _question_from_prompt(row["prompt"])
    return flat, from_prompt


def _qid(row: Mapping[str, Any], names: Sequence[str], index: int) -> str:
    key, value = _pick(row, names)
    return str(value).strip() if key is not None else str(index)


def _base_extra(question: str) -> dict[str, Any]:
    return {"question": question, "split": "test"}


# -- per-family row parsers ----------------------------------------------------------------------------------
_QUESTION = ("question", "problem", "Question")
_WEB_GOLD = ("answer", "Final answer", "golden_answers", "answers", "ground_truth", "target")
_IDS = ("id", "question_id", "task_id", "unique_id", "index", "name")


def _mhqa_row(row: Mapping[str, Any], spec: BenchmarkSpec, where: str, index: int) -> EvalItem:
    question = _field_text(row, _QUESTION, where)
    golds = _golds(row, ("golden_answers", "answer", "answers", "ground_truth", "target"), where)
    return EvalItem(spec.name, _qid(row, _IDS, index), question, golds, spec.data_source,
                    extra_info=_base_extra(question))


def _web_row(row: Mapping[str, Any], spec: BenchmarkSpec, where: str, index: int) -> EvalItem:
    if not _blank(row.get("canary")) and "problem" in row:  # BrowseComp's published (encrypted) rows
        try:
            row = {**row, "question": browsecomp_decrypt(str(row["problem"]), str(row["canary"])),
                   "answer": browsecomp_decrypt(str(row["answer"]), str(row["canary"]))}
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: cannot decrypt the BrowseComp row with its canary ({exc})") from None
    question = _field_text(row, _QUESTION, where)
    golds = _golds(row, _WEB_GOLD, where)
    _, level = _pick(row, ("Level", "level"))
    if isinstance(level, float) and level.is_integer():
        level = int(level)
    return EvalItem(spec.name, _qid(row, ("task_id", *_IDS), index), question, golds, spec.data_source,
                    level=None if level is None else str(level).strip(), extra_info=_base_extra(question))


def _math_row(row: Mapping[str, Any], spec: BenchmarkSpec, where: str, index: int) -> EvalItem:
    question = _field_text(row, _QUESTION, where)
    key, value = _pick(row, ("answer", "final_answer", "ground_truth", "target", "expected_answer"))
    if key is not None:
        answers = _answer_list(value, where, key, decode_lists=False)
        if not answers:
            raise ValueError(f"{where}: field {key!r} holds no answer ({value!r:.80})")
        # OlympiadBench lists the parts of one answer; other lists are alternatives.
        gold: Any = ", ".join(answers) if key.lower() == "final_answer" else answers[0] if len(answers) == 1 \
            else answers
    else:
        skey, solution = _pick(row, ("solution",))
        gold = last_boxed(_text(solution, where, skey)) if skey else None
        if not gold:
            what = "has no \\boxed{} answer" if skey else "is missing too"
            raise ValueError(f"{where}: missing field 'answer' (or 'final_answer'), and field 'solution' "
                             f"{what} (fields: {_fields(row)})")
    return EvalItem(spec.name, _qid(row, _IDS, index), question, gold, spec.data_source,
                    extra_info=_base_extra(question))


def _json_field(value: Any, where: str, name: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{where}: field {name!r} is not valid JSON ({exc})") from None
    return value


def _code_gold(row: Mapping[str, Any], where: str) -> dict[str, Any]:
    from afm.eval.lcb_testcases import decode_test_cases, func_name

    if not _blank(row.get("ground_truth")):
        gold = _json_field(row["ground_truth"], where, "ground_truth")
        if not isinstance(gold, Mapping):
            raise ValueError(f"{where}: code ground_truth must be an object, got a {type(gold).__name__}")
        gold = dict(gold)
    elif not _blank(row.get("public_test_cases")):  # LiveCodeBench's HF rows
        try:
            tests = decode_test_cases(row["public_test_cases"])
        except ValueError as exc:
            raise ValueError(f"{where}: public_test_cases: {exc}") from None
        if not tests:
            raise ValueError(f"{where}: public_test_cases holds no tests")
        ins, outs = [t["input"] for t in tests], [t["output"] for t in tests]
        if tests[0]["testtype"] == "functional":
            fn = func_name(row.get("metadata"))
            if not fn:
                raise ValueError(f"{where}: functional tests but no func_name in 'metadata'")
            gold = {"inputs": ins, "outputs": outs, "fn_name": fn}
        else:
            gold = {"stdin": ins, "expected_output": outs}
    elif not _blank(row.get("public_tests")):  # CodeContests: public + private tests, not generated ones
        ins, outs = [], []
        for name in ("public_tests", "private_tests"):
            tests = _json_field(row.get(name) or {}, where, name)
            if not isinstance(tests, Mapping) or len(tests.get("input") or []) != len(
                    tests.get("output") or []):
                raise ValueError(f"{where}: field {name!r} must be {{'input': [...], 'output': [...]}} "
                                 "of equal length")
            ins += list(tests.get("input") or [])
            outs += list(tests.get("output") or [])
        gold = {"stdin": ins, "expected_output": outs}
    elif not _blank(row.get("input_output")):  # APPS
        gold = _json_field(row["input_output"], where, "input_output")
        if not isinstance(gold, Mapping):
            raise ValueError(f"{where}: field 'input_output' must be an object")
        gold = dict(gold)
    else:
        raise ValueError(f"{where}: no tests: expected 'ground_truth' (verl parquet), 'public_test_cases' "
                         f"(LiveCodeBench), 'public_tests' (CodeContests) or 'input_output' (APPS) "
                         f"(fields: {_fields(row)})")
    if not any(k in gold for k in ("stdin", "expected_output", "functional", "inputs", "test")):
        raise ValueError(f"{where}: code ground truth has none of stdin/expected_output, functional, "
                         f"inputs/outputs or test (keys: {sorted(gold)})")
    return gold


# The instructions that the original's code rows carry after the problem text; the code prompt's own notes
# (afm.prompts.code_agent.render_extra) say the same, so the row's copies are cut instead of said twice.
_ROW_ANSWER_FORMAT = re.compile(r"\n[ \t]*Answer format:.*\Z", re.DOTALL)
_ROW_STDIN_NOTE = re.compile(r"\n[ \t]*In your? final answer code s?nippet, read the inputs from stdin.*\Z", re.DOTALL)
_ROW_STARTER = re.compile(r"\n[ \t]*You will use the following starter code to write the solution to the problem\."
                          r"\s*```[a-z]*\n.*?```\s*\Z", re.DOTALL)


def _without_row_instructions(question: str, extra: Mapping[str, Any]) -> str:
    text = _ROW_ANSWER_FORMAT.sub("", question).rstrip()
    if extra.get("stdin"):
        text = _ROW_STDIN_NOTE.sub("", text).rstrip()
    if extra.get("starter_code"):
        text = _ROW_STARTER.sub("", text).rstrip()
    return text or question


def _code_row(row: Mapping[str, Any], spec: BenchmarkSpec, where: str, index: int) -> EvalItem:
    question = _field_text(row, ("question", "question_content", "description", "problem"), where)
    gold = _code_gold(row, where)
    ids = {**row, "question_id": gold.get("question_id") or row.get("question_id")}
    qid = _qid(ids, ("question_id", *_IDS), index)
    if "question_id" not in gold and not _blank(row.get("public_test_cases")):
        gold["question_id"] = qid  # LiveCodeBench: the processed private tests are found by this id
    functional = "functional" in gold or bool(gold.get("fn_name")) or "test" in gold
    starter = row.get("starter_code")
    extra: dict[str, Any] = {"stdin": True}
    if functional:
        extra = {"starter_code": str(starter)} if not _blank(starter) else {}
    question = _without_row_instructions(question, extra)
    return EvalItem(spec.name, qid, question, gold, spec.data_source, extra_info=_base_extra(question),
                    prompt_extra=extra)


RowParser = Callable[[Mapping[str, Any], BenchmarkSpec, str, int], EvalItem]


def _load_rows(rows: Sequence[Mapping[str, Any]], spec: BenchmarkSpec, source: str,
               parse: RowParser) -> list[EvalItem]:
    items: list[EvalItem] = []
    first_row: dict[str, int] = {}
    from_prompt = 0
    for i, raw in enumerate(rows):
        where = f"{source}: row {i + 1}"
        row, guessed = _flatten_rl(dict(raw))
        from_prompt += guessed
        item = parse(row, spec, where, i)
        if item.qid in first_row:
            raise ValueError(f"{where}: duplicate id {item.qid!r} (first at row {first_row[item.qid]})")
        first_row[item.qid] = i + 1
        items.append(item)
    if from_prompt:
        logger.warning("%s: %d of %d rows have no extra_info.question; their question is the text after the "
                       "last 'Question:'/'Task:' marker of the prompt", source, from_prompt, len(rows))
    return items


def load_mhqa(rows: Sequence[Mapping[str, Any]], spec: BenchmarkSpec, source: str) -> list[EvalItem]:
    """Multi-hop QA rows (``question`` + ``golden_answers``/``answer``) as items."""
    return _load_rows(rows, spec, source, _mhqa_row)


def load_web(rows: Sequence[Mapping[str, Any]], spec: BenchmarkSpec, source: str) -> list[EvalItem]:
    """Web-agent rows (GAIA, BrowseComp, HLE, WebWalker) as items."""
    return _load_rows(rows, spec, source, _web_row)


def load_math(rows: Sequence[Mapping[str, Any]], spec: BenchmarkSpec, source: str) -> list[EvalItem]:
    """Math rows (``problem``/``question`` + ``answer``, ``final_answer`` or a boxed ``solution``)."""
    return _load_rows(rows, spec, source, _math_row)


def load_code(rows: Sequence[Mapping[str, Any]], spec: BenchmarkSpec, source: str) -> list[EvalItem]:
    """Code rows (LiveCodeBench, CodeContests, APPS, verl parquet) as items."""
    return _load_rows(rows, spec, source, _code_row)


LOADERS: dict[str, Callable[[Sequence[Mapping[str, Any]], BenchmarkSpec, str], list[EvalItem]]] = {
    "load_mhqa": load_mhqa, "load_web": load_web, "load_math": load_math, "load_code": load_code}


# -- files ---------------------------------------------------------------------------------------------------
# The original project's data folder (``AFM/data``) keeps the same file names one folder deeper:
# ``code_agent/code_math_benchmarks/aime24.parquet``, ``web_agent/test_benchmarks/gaia_dev_103.json``,
# ``mhqa_agent/test_benchmarks/nq_full.jsonl``. A data root in either layout works.
ORIGINAL_SUBDIRS = {"code_agent": "code_math_benchmarks", "web_agent": "test_benchmarks",
                    "mhqa_agent": "test_benchmarks"}


def _layouts(root: Path, default_file: str) -> list[Path]:
    """Where ``default_file`` may lie under ``root``: afm's layout, then the original's."""
    target = root / default_file
    parts = Path(default_file).parts
    sub = ORIGINAL_SUBDIRS.get(parts[0]) if len(parts) == 2 else None
    return [target] if sub is None else [target, root / parts[0] / sub / parts[1]]


def resolve_data_file(name: str, path: str | Path | None = None, *,
                      data_root: str | Path | None = None) -> Path:
    """The file of benchmark ``name``: ``path`` (a file, or a data root folder), else the spec's default file
    under ``data_root`` (default :func:`default_data_root`; afm's layout or the original's ``AFM/data`` one, see
    :data:`ORIGINAL_SUBDIRS`), also with another supported suffix. FileNotFoundError says where it looked."""
    spec = get_benchmark(name)
    if path is not None and not Path(path).is_dir():
        if not Path(path).is_file():
            raise FileNotFoundError(f"data file of benchmark {spec.name!r} not found: {path}")
        return Path(path)
    root = Path(path if path is not None else data_root if data_root is not None else default_data_root())
    if spec.default_file is None:
        raise FileNotFoundError(f"benchmark {spec.name!r} has no default file; pass its path")
    targets = _layouts(root, spec.default_file)
    for target in targets:
        for candidate in (target, *(target.with_suffix(s) for s in FORMATS if s != target.suffix)):
            if candidate.is_file():
                return candidate
    if not root.is_dir():
        where = f"the data root {root} does not exist"
    else:
        where = f"looked for {' and '.join(map(str, targets))} (or the same name with another of {', '.join(FORMATS)})"
    raise FileNotFoundError(
        f"no data file for benchmark {spec.name!r}: {where}. Download it (python -m afm.eval.download "
        f"{spec.name} --out {root}), pass its path (afm eval run --file {spec.name}=PATH), or point --data-root "
        f"(${DATA_ENV}) at the folder that holds it (afm's data/eval or the original's AFM/data).")


def load_benchmark(name: str, path: str | Path | None = None, *, data_root: str | Path | None = None,
                   limit: int | None = None) -> list[EvalItem]:
    """Load benchmark ``name`` from ``path`` or its default file (see :func:`resolve_data_file`).

    Demo benchmarks without a file are written to a temporary folder by
    :func:`afm.eval.demo_sets.write_demo_sets` and loaded from there, through the same loaders. ``limit``
    keeps the first N items (all rows are checked).
    """
    spec = get_benchmark(name)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    try:
        file = resolve_data_file(spec.name, path, data_root=data_root)
    except FileNotFoundError:
        if spec.family != "demo" or path is not None:
            raise
        from afm.eval.demo_sets import write_demo_sets

        with tempfile.TemporaryDirectory(prefix="afm-demo-sets-") as tmp:
            written = write_demo_sets(tmp, names=(spec.name,))
            items = LOADERS[spec.loader](read_records(written[spec.name]), spec, f"<demo set {spec.name}>")
        return items if limit is None else items[:limit]
    items = LOADERS[spec.loader](read_records(file), spec, str(file))
    return items if limit is None else items[:limit]
