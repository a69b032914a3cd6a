"""A small static web site of the invented demo world, for the offline demo, tests and benchmarks.

``python -m afm.servers.demo_site [--port PORT]`` serves each :data:`afm.demo_content.web.DEMO_DOCUMENTS` entry at
``/<slug>.html`` as a realistic page: a header with navigation, breadcrumbs, a sidebar with related links and an
advertisement, a cookie banner and a footer around the article, so that main-text extraction has boilerplate to
drop (the marker strings are in :data:`BOILERPLATE_MARKERS`). ``/`` lists the pages.

Test pages: ``/redirect?to=URL`` (302), ``/redirect-chain?n=K`` (K redirects, then a page), ``/redirect-loop``
(two URLs redirecting to each other), ``/slow?s=SECONDS``, ``/huge?mb=N`` (N MB of HTML, default 20),
``/binary`` (octet-stream), ``/report.pdf``, ``/plain.txt``, ``/json``, ``/headers`` (the request path and headers
as JSON), ``/_stats`` (requests served per path, so a test can tell whether a page was fetched) and ``/health``.

Threat model: none; it binds 127.0.0.1 by default and serves only generated content.
"""

from __future__ import annotations

import argparse
import html
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from afm.common.env_defaults import default_port
from afm.common.procs import OwnsServer, ServerProcess, free_port
from afm.demo_content.web import DEMO_DOCUMENTS, DemoDocument

SITE_NAME = "Corvan Atlas"
# Strings that appear only in the page chrome; extraction must not return them.
BOILERPLATE_MARKERS = (
    "Corvan Atlas home", "Sign in to edit", "Advertisement: Visit the Veltrian salt flats",
    "We use cookies to remember your reading list", "All rights reserved by the Corvan Atlas Society",
    "Most read this week",
)
PLAIN_TEXT = ("Corvan Sea shipping notes (plain text).\n\nThe ferry from Marrowgate to Quillhaven leaves daily at "
              "07:40 and takes 55 minutes.\n")
JSON_DOC = {"city": "Marrowgate", "population": 212000, "observatory_opened": 1932}
PDF_BYTES = (b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [] "
             b"/Count 0 >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n")
_DOCS = {d.slug: d for d in DEMO_DOCUMENTS}


def add_documents(docs: list[dict[str, Any]]) -> int:
    """Serve more pages (``{slug, title, paragraphs}``) at ``/<slug>.html``; returns how many were added."""
    for d in docs:
        _DOCS[str(d["slug"])] = DemoDocument(str(d["slug"]), str(d["title"]), tuple(map(str, d["paragraphs"])))
    return len(docs)


def render_page(doc: DemoDocument) -> str:
    """The HTML page of one document, article surrounded by site chrome."""
    related = [d for d in DEMO_DOCUMENTS if d.slug != doc.slug][:5]
    related_items = "\n".join(f'        <li><a href="/{d.slug}.html">{html.escape(d.title)}</a></li>' for d in related)
    paragraphs = "\n".join(f"      <p>{html.escape(p)}</p>" for p in doc.paragraphs)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>{html.escape(doc.title)} - {SITE_NAME}</title>
  <meta name="description" content="{html.escape(doc.paragraphs[0][:150])}">
  <meta name="author" content="Corvan Atlas editors">
  <link rel="stylesheet" href="/static/site.css">
</head>
<body>
  <div class="cookie-banner">We use cookies to remember your reading list. <button>Accept</button></div>
  <header class="site-header">
    <a class="logo" href="/">Corvan Atlas home</a>
    <nav class="main-nav">
      <ul>
        <li><a href="/">Index</a></li><li><a href="/veltria.html">Countries</a></li>
        <li><a href="/marrowgate.html">Cities</a></li><li><a href="/login">Sign in to edit</a></li>
      </ul>
    </nav>
    <form class="search" action="/search"><input name="q" placeholder="Search the atlas"></form>
  </header>
  <nav class="breadcrumbs"><a href="/">Atlas</a> &rsaquo; <a href="/">Articles</a> &rsaquo; {html.escape(doc.title)}</nav>
  <main>
    <article>
      <h1>{html.escape(doc.title)}</h1>
      <p class="byline">By the Corvan Atlas editors, updated 3 March 2026</p>
{paragraphs}
    </article>
    <aside class="sidebar">
      <h2>Most read this week</h2>
      <ul>
{related_items}
      </ul>
      <div class="ad">Advertisement: Visit the Veltrian salt flats this summer, book now!</div>
    </aside>
  </main>
  <footer class="site-footer">
    <p>All rights reserved by the Corvan Atlas Society. <a href="/privacy">Privacy</a> | <a href="/terms">Terms</a></p>
  </footer>
</body>
</html>
"""


def render_index() -> str:
    """The index page linking every document."""
    items = "\n".join(f'    <li><a href="/{d.slug}.html">{html.escape(d.title)}</a></li>' for d in DEMO_DOCUMENTS)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{SITE_NAME}</title></head>\n<body>\n"
            f"  <h1>{SITE_NAME}</h1>\n  <p>Articles about the Corvan Sea and the republic of Veltria.</p>\n"
            f"  <ul>\n{items}\n  </ul>\n</body></html>\n")


MAX_DRAIN = 1 << 20


def _huge_paragraph(i: int) -> str:
    return (f"<p>Harbour ledger entry {i}: the salt barge Corvan {i % 97} unloaded {i % 400 + 20} barrels at "
            f"Marrowgate pier {i % 12 + 1} under a westerly wind, and the harbour master signed the ledger.</p>\n")


class DemoHandler(BaseHTTPRequestHandler):
    """Serves the demo pages and test endpoints (see the module docstring)."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, keep-alive clients wait ~40 ms for each page.
    disable_nagle_algorithm = True
    server_version = "CorvanAtlas/1.0"
    hits: ClassVar[Counter[str]] = Counter()  # shared by the handler threads of this process
    hits_lock: ClassVar[threading.Lock] = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        return None  # quiet: tests and benchmarks would drown in access logs

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        if path not in ("/_stats", "/health"):
            with self.hits_lock:
                self.hits[path] += 1
        try:
            self._route(path, query)
        except (BrokenPipeError, ConnectionResetError):
            # The crawler closes the connection once it has read enough (huge pages): not an error here.
            self.close_connection = True
        except ValueError as exc:  # a test endpoint's parameter that is not a number (/slow?s=abc)
            self._json(400, {"error": "bad query parameter", "detail": str(exc)[:200]})

    def _no_body_routes(self) -> None:
        """Every route is GET: a request with a body gets 405 (after its body is drained, up to a cap)."""
        length = self.headers.get("Content-Length", "0")
        size = int(length) if length.isdigit() else 0
        if 0 < size <= MAX_DRAIN:
            self.rfile.read(size)
        else:
            self.close_connection = True  # an unknown or huge body is not read: the connection closes instead
        self._send(405, "application/json", json.dumps({"error": "method not allowed", "detail": "the demo site "
                   "only serves GET"}).encode(), {"Allow": "GET"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _no_body_routes

    def _route(self, path: str, query: dict[str, str]) -> None:
        slug = path[1:-5] if path.endswith(".html") else None
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", render_index().encode())
        elif slug in _DOCS:
            self._send(200, "text/html; charset=utf-8", render_page(_DOCS[slug]).encode())
        elif path == "/health":
            self._json(200, {"status": "healthy", "service": "afm demo site"})
        elif path == "/_stats":
            with self.hits_lock:
                self._json(200, dict(self.hits))
        elif path == "/headers":
            self._json(200, {"_path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        elif path == "/redirect":
            self._redirect(query.get("to", "/"))
        elif path == "/redirect-chain":
            n = int(query.get("n", "1"))
            self._redirect(f"/redirect-chain?n={n - 1}" if n > 0 else "/veltria.html")
        elif path == "/redirect-loop":
            self._redirect("/redirect-loop-b")
        elif path == "/redirect-loop-b":
            self._redirect("/redirect-loop")
        elif path == "/slow":
            time.sleep(min(float(query.get("s", "5")), 120.0))
            self._send(200, "text/html; charset=utf-8", render_page(_DOCS["veltria"]).encode())
        elif path == "/huge":
            self._huge(int(float(query.get("mb", "20")) * 1_000_000))
        elif path == "/binary":
            self._send(200, "application/octet-stream", bytes(range(256)) * 256)
        elif path == "/report.pdf":
            self._send(200, "application/pdf", PDF_BYTES)
        elif path == "/plain.txt":
            self._send(200, "text/plain; charset=utf-8", PLAIN_TEXT.encode())
        elif path == "/json":
            self._json(200, JSON_DOC)
        else:
            self._send(404, "text/html; charset=utf-8",
                       b"<html><body><h1>Not found</h1><p>No such page in the atlas.</p></body></html>")

    def _send(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, "application/json", json.dumps(obj).encode())

    def _redirect(self, location: str) -> None:
        self._send(302, "text/html; charset=utf-8", b"", {"Location": location})

    def _huge(self, size: int) -> None:
        head = b"<!DOCTYPE html><html><head><title>Harbour ledger</title></head><body><article><h1>Ledger</h1>\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.write(head)
        sent, i = len(head), 0
        while sent < size:
            block = "".join(_huge_paragraph(i + k) for k in range(200)).encode()[: size - sent]
            self.wfile.write(block)
            sent += len(block)
            i += 200


def make_server(host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A threaded server for the demo site (``port=0`` picks a free one); call ``serve_forever``."""
    server = ThreadingHTTPServer((host, port), DemoHandler)
    server.daemon_threads = True
    return server


class DemoSite(OwnsServer):
    """The demo site as a real subprocess: ``with DemoSite() as site: site.url``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.server = ServerProcess(["-m", "afm.servers.demo_site", "--port", str(self.port)], self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def page_url(self, slug: str) -> str:
        return f"{self.url}/{slug}.html"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    port = default_port("AFM_DEMO_SITE_PORT")
    p.add_argument("--port", type=int, default=port, required=port is None,
                   help="port (default $AFM_DEMO_SITE_PORT, else environment.sh's default for it)")
    p.add_argument("--documents", default=None,
                   help="JSON list of extra pages {slug, title, paragraphs} to serve (e.g. afm.quickstart.world's towns)")
    args = p.parse_args(argv)
    if args.documents:
        add_documents(json.loads(Path(args.documents).read_text(encoding="utf-8")))
    server = make_server(args.host, args.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
