"""The docs site (mkdocs.yml over docs/) builds in strict mode, and strict mode really catches what it should: a
broken link between pages, a missing page and an anchor that no longer exists (docs/development.md)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs / mkdocs-material are not installed (the dev extra installs them: pip install -e '.[dev]')",
)


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_docs_build_strict(tmp_path: Path) -> None:
    result = _build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "rl" / "index.html").is_file()


def test_every_page_is_in_the_nav() -> None:
    text = (REPO / "mkdocs.yml").read_text()
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f": {page.name}" in text, f"docs/{page.name} is not in mkdocs.yml's nav"


def test_strict_mode_fails_on_broken_links_and_anchors(tmp_path: Path) -> None:
    """A copy of the site with one broken thing each must fail: the validation settings are really on."""
    for broken in ("[x](rl.md#no-such-anchor)", "[x](no_such_page.md)", "[x](#no-such-heading)"):
        root = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        root.mkdir()
        shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
        shutil.copytree(REPO / "docs", root / "docs")
        with open(root / "docs" / "index.md", "a") as f:
            f.write(f"\n{broken}\n")
        result = _build(root, root / "site")
        assert result.returncode != 0, f"strict build passed with {broken}"
        assert "Aborted" in result.stdout + result.stderr
