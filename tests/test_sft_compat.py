"""The overlay's hold on LLaMA-Factory: every upstream name it touches exists in the installed release (one test
each, so a rename upstream fails by name), afm/sft uses no upstream name the list misses, and an unsupported
release is refused with one clear line before anything is patched."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from afm.sft.compat import SUPPORTED, UPSTREAM, UpstreamSymbol, require_supported, resolve

REPO = Path(__file__).resolve().parents[1]
SFT = REPO / "afm" / "sft"


@pytest.mark.parametrize("symbol", UPSTREAM, ids=lambda s: s.qualname)
def test_upstream_symbol_exists(symbol: UpstreamSymbol):
    try:
        obj = resolve(symbol)
    except AttributeError:
        if symbol.optional:
            pytest.skip(f"{symbol.qualname} is absent in this release (optional: the overlay skips it)")
        raise
    if symbol.use == "wrapped":
        assert callable(obj)
    if symbol.use == "subclassed":
        assert isinstance(obj, type)
    if symbol.attr.startswith("_") and symbol.attr.endswith("_ARGS"):
        assert isinstance(obj, list)  # the overlay swaps DataArguments inside the list


def _upstream_names(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every LLaMA-Factory name a file imports or reads off an imported LLaMA-Factory module."""
    tree = ast.parse(path.read_text())
    modules: dict[str, str] = {}  # local alias -> llamafactory module
    names: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llamafactory"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _is_module(full):
                    modules[alias.asname or alias.name] = full
                else:
                    names.add((node.module, alias.name))
    for node in ast.walk(tree):
        # (afm's own markers set on upstream modules, _afm_*, are not upstream names)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and not node.attr.startswith("_afm")):
            names.add((modules[node.value.id], node.attr))
    return names


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_every_upstream_name_afm_sft_uses_is_listed():
    listed = {(s.module, s.attr.split(".")[0]) for s in UPSTREAM}
    used = {(str(p.relative_to(REPO)), mod, name) for p in sorted(SFT.glob("*.py")) for mod, name in _upstream_names(p)}
    assert used, "the scan found no LLaMA-Factory names at all"
    missing = sorted(u for u in used if u[1:] not in listed)
    assert not missing, f"add these to afm.sft.compat.UPSTREAM: {missing}"


def test_the_installed_release_is_supported():
    assert require_supported() == importlib.metadata.version("llamafactory")


def test_an_unsupported_release_is_refused_before_patching(tmp_path):
    """A llamafactory 0.8.0 distribution first on the path: apply() and afm-sft stop with the range and the fix."""
    dist = tmp_path / "site" / "llamafactory-0.8.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: llamafactory\nVersion: 0.8.0\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    expected = f"llamafactory 0.8.0 is not supported by afm.sft (needs {SUPPORTED})"
    code = ("from afm.sft import overlay\nimport llamafactory.data.loader as l\n"
            "try:\n    overlay.apply()\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
            "print('patched' if getattr(l, '_afm_patched', False) else 'untouched')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0].startswith(f"UnsupportedLlamaFactory {expected}")
    assert proc.stdout.splitlines()[-1] == "untouched"
    cfg = tmp_path / "train.yaml"
    cfg.write_text("stage: sft\n")
    proc = subprocess.run([sys.executable, "-m", "afm.sft.cli", "train", str(cfg)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"afm-sft: error: {expected}") and proc.stderr.count("\n") == 1


def test_symbols_resolve_after_the_overlay_is_applied():
    """The checks must hold in a process where the overlay already wrapped upstream (tests, torchrun ranks): the
    wrappers keep upstream's signatures, so a parameter check never reports afm's own wrapper."""
    code = (
        "from afm.sft import overlay\n"
        "overlay.apply()\n"
        "from afm.sft.compat import UPSTREAM, resolve\n"
        "import llamafactory.data.processor.supervised as s\n"
        "assert getattr(s.SupervisedDatasetProcessor, '_afm_patched', False)\n"
        "for sym in UPSTREAM:\n"
        "    if not sym.optional:\n"
        "        resolve(sym)\n"
        "print('ok', len(UPSTREAM))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok ")
