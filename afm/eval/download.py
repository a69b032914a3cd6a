"""Download the evaluation benchmarks (when online) into the layout :mod:`afm.eval.datasets` reads.

    python -m afm.eval.download gaia hle nq --out data/eval
    python -m afm.eval.download math code --out data/eval --allow-pickle   # families: all their benchmarks

Each benchmark is fetched with Hugging Face ``datasets`` (LiveCodeBench: ``huggingface_hub`` file downloads;
BrowseComp: OpenAI's published CSV), converted to the field names of the original's shipped files, checked by
the benchmark's loader, and written atomically to ``<out>/<default_file>``. Offline (``HF_HUB_OFFLINE``,
``HF_DATASETS_OFFLINE`` or ``AFM_OFFLINE`` set, or no network) it fails with a message that says where to put
the file by hand.

Sources (:data:`HF_SOURCES`; every one can be overridden with ``repo_id``/``config``/``split``). The ids are
the public copies we know of; the ones marked *unverified* were not checked against the hub while writing
this, so check the first download:

- MHQA: FlashRAG's copies ``RUC-NLPIR/FlashRAG_datasets`` (config = benchmark; NQ, TriviaQA, PopQA, Bamboogle
  ``test``; HotpotQA, 2Wiki, MuSiQue ``dev``), the splits behind the paper's counts (3610/11313/14267/7405/
  12576/2417/125).
- GAIA: ``gaia-benchmark/GAIA`` (gated; ``2023_all``/``validation``); rows with an attached file are dropped.
  The paper's 103-question text-only list came from WebThinker and is not exactly this filter: pass the
  original's ``gaia_dev_103.json`` to reproduce its numbers.
- HLE: ``cais/hle`` (gated; ``test``); rows with an image are dropped. The paper used a 500-question text-only
  sample that cannot be rebuilt from the hub; use ``limit`` or the original's ``hle_test.json``.
- WebWalker: ``callanwu/WebWalkerQA`` split ``main`` (*unverified* split name).
- BrowseComp: not on the hub; :data:`BROWSECOMP_URL` (or ``source=`` a local copy of that CSV), decrypted.
- Math: ``HuggingFaceH4/aime_2024`` (``train``), ``math-ai/aime25`` (*unverified*),
  ``HuggingFaceH4/MATH-500``, ``math-ai/amc23`` (*unverified*), ``Hothan/OlympiadBench`` config
  ``OE_TO_maths_en_COMP`` (*unverified*).
- Code: ``deepmind/code_contests`` ``test`` (165 problems; public + private tests kept, generated ones
  dropped);
  LiveCodeBench ``livecodebench/code_generation_lite`` files :data:`LCB_FILES`, filtered to the contest-date
  windows of the original's parquet files (:data:`LCB_WINDOWS`; the counts may differ from its 100/167). Their
  private tests are written to ``testcases_dir`` by :mod:`afm.eval.lcb_testcases` (pickled ones only with
  ``allow_pickle``) and left out of the benchmark file.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from afm.eval.datasets import (
    BENCHMARKS,
    FAMILIES,
    LOADERS,
    BenchmarkSpec,
    browsecomp_decrypt,
    default_data_root,
    get_benchmark,
    list_benchmarks,
)
from afm.eval.lcb_testcases import ProcessReport, process_rows
from afm.eval.records import write_records

logger = logging.getLogger(__name__)

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "AFM_OFFLINE")
BROWSECOMP_URL = "https://openaipublic.blob.core.windows.net/simple-evals/browse_comp_test_set.csv"
LCB_REPO = "livecodebench/code_generation_lite"
LCB_FILES = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl")
LCB_WINDOWS = {"livecodebench_v4": ("2024-08-04", "2024-10-05"),
               "livecodebench_v5": ("2024-09-22", "2025-01-04")}
NETWORK_TIMEOUT_S = 120


@dataclass(frozen=True)
class HFSource:
    """Where a benchmark lives on the Hugging Face hub."""

    repo_id: str
    config: str | None = None
    split: str = "test"


_FLASHRAG = "RUC-NLPIR/FlashRAG_datasets"
HF_SOURCES: dict[str, HFSource] = {
    "nq": HFSource(_FLASHRAG, "nq", "test"),
    "triviaqa": HFSource(_FLASHRAG, "triviaqa", "test"),
    "popqa": HFSource(_FLASHRAG, "popqa", "test"),
    "hotpotqa": HFSource(_FLASHRAG, "hotpotqa", "dev"),
    "2wikimultihopqa": HFSource(_FLASHRAG, "2wikimultihopqa", "dev"),
    "musique": HFSource(_FLASHRAG, "musique", "dev"),
    "bamboogle": HFSource(_FLASHRAG, "bamboogle", "test"),
    "gaia": HFSource("gaia-benchmark/GAIA", "2023_all", "validation"),
    "hle": HFSource("cais/hle", None, "test"),
    "webwalker": HFSource("callanwu/WebWalkerQA", None, "main"),
    "aime24": HFSource("HuggingFaceH4/aime_2024", None, "train"),
    "aime25": HFSource("math-ai/aime25", None, "test"),
    "math500": HFSource("HuggingFaceH4/MATH-500", None, "test"),
    "amc23": HFSource("math-ai/amc23", None, "test"),
    "olympiadbench": HFSource("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
    "codecontests": HFSource("deepmind/code_contests", None, "test"),
}


class DownloadError(RuntimeError):
    """A benchmark could not be fetched (offline, no access, unknown source)."""


def is_offline() -> bool:
    """True when one of :data:`OFFLINE_ENV` is set to a true value."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_ENV)


# -- conversion to the original's field names ----------------------------------------------------------------
def _get(row: Mapping[str, Any], *names: str) -> Any:
    return next((row[n] for n in names if row.get(n) not in (None, "")), None)


_MATH_KEEP = ("id", "unique_id", "ID", "problem", "Problem", "question", "answer", "Answer", "final_answer",
              "solution", "subject", "level", "type", "url", "year", "unit", "answer_type",
              "is_multiple_answer")
_CC_KEEP = ("name", "description", "public_tests", "private_tests", "source", "difficulty", "cf_rating")

Converted = dict[str, Any] | str
"""A converted row in the original's field names, or (a ``str``) the reason the row is dropped."""


def _mhqa_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    return {"id": row.get("id", str(k)), "question": _get(row, "question"),
            "answer": _get(row, "golden_answers", "answer"), "data_source": spec.data_source}


def _gaia_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    if row.get("file_name"):
        return "has an attached file"
    level = _get(row, "Level", "level")
    return {"id": kept, "task_id": row.get("task_id"), "question": _get(row, "Question", "question"),
            "answer": _get(row, "Final answer", "answer"), "Level": None if level is None else str(level),
            "Annotator_Metadata": row.get("Annotator Metadata", row.get("Annotator_Metadata"))}


def _hle_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    if row.get("image"):
        return "has an image"
    return {key: row.get(key) for key in ("id", "question", "answer", "answer_type", "rationale", "raw_subject",
                                          "category")}


def _browsecomp_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    if row.get("canary"):
        row = {**row, "problem": browsecomp_decrypt(row["problem"], row["canary"]),
               "answer": browsecomp_decrypt(row["answer"], row["canary"])}
    return {"question": _get(row, "question", "problem"), "answer": row.get("answer"),
            "topic": _get(row, "topic", "problem_topic")}


def _webwalker_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    return {key: row.get(key) for key in ("question", "answer", "root_url", "info") if key in row}


def _math_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    return {key: row[key] for key in _MATH_KEEP if key in row}


def _codecontests_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    return {key: row[key] for key in _CC_KEEP if key in row}


def _livecodebench_row(row: dict[str, Any], spec: BenchmarkSpec, k: int, kept: int) -> Converted:
    # The private tests go to the test-case folder (afm.eval.lcb_testcases), not into the benchmark file.
    return {key: v for key, v in row.items() if key != "private_test_cases"}


@dataclass(frozen=True)
class Converter:
    """How a public release becomes a benchmark file (named by :attr:`BenchmarkSpec.converter`).

    ``row(row, spec, k, kept)`` converts the k-th fetched row (``kept`` rows were kept before it). ``fetch``
    says where the rows come from: ``"hf"`` (:data:`HF_SOURCES` of the benchmark), ``"lcb"`` (LiveCodeBench's
    files, filtered to the benchmark's :data:`LCB_WINDOWS`, private tests written apart) or ``"csv"``
    (BrowseComp's CSV, a URL or a local file).
    """

    row: Callable[[dict[str, Any], BenchmarkSpec, int, int], Converted]
    fetch: str = "hf"


CONVERTERS: dict[str, Converter] = {
    "mhqa": Converter(_mhqa_row), "gaia": Converter(_gaia_row), "hle": Converter(_hle_row),
    "browsecomp": Converter(_browsecomp_row, fetch="csv"), "webwalker": Converter(_webwalker_row),
    "math": Converter(_math_row), "codecontests": Converter(_codecontests_row),
    "livecodebench": Converter(_livecodebench_row, fetch="lcb"),
}


def _spec_of(name: str | BenchmarkSpec) -> BenchmarkSpec:
    return name if isinstance(name, BenchmarkSpec) else get_benchmark(name)


def converter_of(spec: BenchmarkSpec) -> Converter:
    """The spec's :class:`Converter`; DownloadError when it has none (demo sets) or names an unknown one."""
    conv = CONVERTERS.get(spec.converter or "")
    if conv is None:
        raise DownloadError(f"benchmark {spec.name!r} has no converter" + (
            f" ({spec.converter!r} is not one of {', '.join(CONVERTERS)})" if spec.converter else ""))
    return conv


def convert_rows(name: str | BenchmarkSpec, rows: Iterable[Mapping[str, Any]]
                 ) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Rows of a public release in the original's field names, and the count of rows dropped per reason."""
    spec = _spec_of(name)
    convert = converter_of(spec).row
    out: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    for k, row in enumerate(rows):
        converted = convert(dict(row), spec, k, len(out))
        if isinstance(converted, str):
            dropped[converted] += 1
        else:
            out.append(converted)
    return out, dropped


def write_benchmark(name: str | BenchmarkSpec, rows: Iterable[Mapping[str, Any]],
                    out_dir: str | Path | None = None, *, limit: int | None = None, testcases_dir: str | Path | None = None,
                    allow_pickle: bool = False) -> Path:
    """Convert ``rows`` (a list or a ``datasets.Dataset``), check them with the loader, write the file.

    For LiveCodeBench, rows are first filtered to :data:`LCB_WINDOWS` and their tests written to
    ``testcases_dir`` (default ``<out_dir>/../livecodebench_testcases``). Returns the written path.
    """
    spec = _spec_of(name)
    root = Path(out_dir) if out_dir is not None else default_data_root()
    rows = [dict(r) for r in rows]
    if converter_of(spec).fetch == "lcb":
        if spec.name not in LCB_WINDOWS:
            raise DownloadError(f"{spec.name}: no contest-date window in LCB_WINDOWS")
        start, end = LCB_WINDOWS[spec.name]
        rows = [r for r in rows if start <= str(r.get("contest_date") or "")[:10] <= end]
        tests_dir = Path(testcases_dir) if testcases_dir is not None else \
            root.parent / "livecodebench_testcases"
        report: ProcessReport = process_rows(rows, tests_dir, allow_pickle=allow_pickle)
        logger.info("%s: %s", spec.name, report.summary())
    converted, dropped = convert_rows(spec, rows)
    if limit is not None:
        converted = converted[:limit]
    if dropped:
        logger.info("%s: dropped %s", spec.name, dict(dropped))
    if not converted:
        raise DownloadError(f"{spec.name}: no rows left to write (dropped: {dict(dropped) or 'none'})")
    target = root / str(spec.default_file)
    LOADERS[spec.loader](converted, spec, f"<{spec.name} download>")  # raises before anything is written
    return write_records(converted, target)


# -- fetching ------------------------------------------------------------------------------------------------
def _fetch_hf(source: HFSource, token: str | None) -> Any:
    from datasets import load_dataset

    return load_dataset(source.repo_id, source.config, split=source.split, token=token)


def _fetch_lcb(repo_id: str, files: Iterable[str], token: str | None) -> list[dict[str, Any]]:
    from huggingface_hub import hf_hub_download

    rows = []
    for name in files:
        path = hf_hub_download(repo_id, name, repo_type="dataset", token=token)
        with open(path, encoding="utf-8") as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def _fetch_browsecomp(source: str) -> list[dict[str, Any]]:
    if "://" in source:
        import urllib.request

        with urllib.request.urlopen(source, timeout=NETWORK_TIMEOUT_S) as resp:
            text = resp.read().decode("utf-8")
    else:
        text = Path(source).read_text(encoding="utf-8")
    return [dict(r) for r in csv.DictReader(io.StringIO(text))]


def download(name: str | BenchmarkSpec, out_dir: str | Path | None = None, *, repo_id: str | None = None,
             config: str | None = None, split: str | None = None, source: str | None = None,
             limit: int | None = None, allow_pickle: bool = False, testcases_dir: str | Path | None = None,
             token: str | None = None) -> Path:
    """Fetch benchmark ``name`` and write it under ``out_dir`` (default: the data root); returns the file.

    Args:
        name: a benchmark of :data:`afm.eval.datasets.BENCHMARKS` (demo sets are written, not fetched).
        out_dir: the data root to write into.
        repo_id, config, split: override :data:`HF_SOURCES` (for LiveCodeBench, ``repo_id`` only).
        source: BrowseComp's CSV, a URL or a local file (default :data:`BROWSECOMP_URL`).
        limit: keep the first N rows.
        allow_pickle: decode LiveCodeBench's pickled private tests (see :mod:`afm.eval.lcb_testcases`).
        testcases_dir: where LiveCodeBench's test files go.
        token: a Hugging Face token for gated sets (GAIA, HLE); default: the logged-in one.

    Raises:
        DownloadError: offline, or the source could not be read.
    """
    spec = _spec_of(name)
    root = Path(out_dir) if out_dir is not None else default_data_root()
    target = root / str(spec.default_file)
    if spec.family == "demo":
        from afm.eval.demo_sets import write_demo_sets

        return write_demo_sets(root, names=(spec.name,))[spec.name]
    fetch = converter_of(spec).fetch
    local = fetch == "csv" and source is not None and "://" not in source
    if is_offline() and not local:
        raise DownloadError(f"cannot download {spec.name!r}: offline ({'/'.join(OFFLINE_ENV)} is set). Put "
                            f"the file at {target} yourself (or anywhere, passed as --file {spec.name}=PATH) "
                            f"in the original's format, or download it on a machine with network access")
    if fetch == "csv":
        where = source or BROWSECOMP_URL
    else:
        where = repo_id or (LCB_REPO if fetch == "lcb" else HF_SOURCES[spec.name].repo_id)
    try:
        if fetch == "csv":
            rows: Any = _fetch_browsecomp(source or BROWSECOMP_URL)
        elif fetch == "lcb":
            rows = _fetch_lcb(repo_id or LCB_REPO, LCB_FILES, token)
        else:
            base = HF_SOURCES[spec.name]
            chosen = HFSource(repo_id or base.repo_id, config or base.config, split or base.split)
            rows = _fetch_hf(chosen, token)
    except Exception as exc:  # network, auth and hub errors come in many types; all mean "could not fetch"
        raise DownloadError(f"cannot download {spec.name!r} from {where}: {type(exc).__name__}: {exc}. "
                            f"Offline, or a gated dataset without access? Put the file at {target} yourself "
                            f"instead") from exc
    return write_benchmark(spec, rows, root, limit=limit, testcases_dir=testcases_dir,
                           allow_pickle=allow_pickle)


def main(argv: list[str] | None = None) -> int:
    """CLI: download benchmarks (names or families) and print where each went."""
    p = argparse.ArgumentParser(prog="python -m afm.eval.download", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="+", help=f"benchmarks ({', '.join(BENCHMARKS)}) or families {FAMILIES}")
    p.add_argument("--out", default=None, help="data root (default $AFM_EVAL_DATA or data/eval)")
    p.add_argument("--repo-id", default=None)
    p.add_argument("--config", default=None)
    p.add_argument("--split", default=None)
    p.add_argument("--source", default=None, help="BrowseComp CSV (URL or local file)")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--allow-pickle", action="store_true", help="decode LiveCodeBench's pickled private tests")
    p.add_argument("--testcases-dir", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        names = [b for n in args.names
                 for b in (list_benchmarks(n) if n in FAMILIES else [get_benchmark(n).name])]
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        try:
            path = download(name, args.out, repo_id=args.repo_id, config=args.config, split=args.split,
                            source=args.source, limit=args.limit, allow_pickle=args.allow_pickle,
                            testcases_dir=args.testcases_dir)
            print(f"{name}: {path}")
        except (DownloadError, ValueError) as exc:
            failed += 1
            print(f"{name}: FAILED: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
