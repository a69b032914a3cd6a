"""Write the demo world's corpora (afm.demo_content.web) as JSONL files for the search and wiki servers.

    python -m afm.servers.demo_data OUT_DIR --site-url http://127.0.0.1:$AFM_DEMO_SITE_PORT

writes ``OUT_DIR/search_corpus.jsonl`` (``{id, title, url, text}``, URLs on the demo site) and
``OUT_DIR/wiki_corpus.jsonl`` (``{id, contents}``). Files are replaced atomically and only when their content
changes, so a server restarted on them does not re-index.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

from afm.common.env_defaults import port as env_port
from afm.demo_content.web import demo_search_corpus, demo_wiki_corpus

SEARCH_FILE = "search_corpus.jsonl"
WIKI_FILE = "wiki_corpus.jsonl"


@dataclass(frozen=True)
class DemoCorpora:
    """Paths of the written corpora."""

    search: Path
    wiki: Path


def _write_if_changed(path: Path, records: list[dict[str, str]]) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if path.exists() and path.read_text(encoding="utf-8") == data:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def write_demo_corpora(out_dir: str | os.PathLike, site_url: str) -> DemoCorpora:
    """Write both demo corpora into ``out_dir``; search results link to pages of the demo site at ``site_url``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = DemoCorpora(out / SEARCH_FILE, out / WIKI_FILE)
    _write_if_changed(paths.search, demo_search_corpus(site_url))
    _write_if_changed(paths.wiki, demo_wiki_corpus())
    return paths


def main(argv: list[str] | None = None) -> int:
    """CLI: write the demo corpora and print their paths."""
    p = argparse.ArgumentParser(prog="python -m afm.servers.demo_data", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--site-url", default=f"http://127.0.0.1:{env_port('AFM_DEMO_SITE_PORT')}",
                   help="base URL of the demo site (python -m afm.servers.demo_site) the search results link to")
    args = p.parse_args(argv)
    paths = write_demo_corpora(args.out_dir, args.site_url)
    print(f"search corpus: {paths.search}\nwiki corpus:   {paths.wiki}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
