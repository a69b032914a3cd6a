"""An HTTP server on 127.0.0.1 serving bodies under any ``Content-Encoding`` stack, compression bombs included.

``site.add(path, body, encoding, content_type)`` registers a body that is sent as given with that header;
:func:`encode` applies a stack of codings and :func:`gzip_bomb` builds a stacked gzip bomb without ever holding
its decoded size in memory.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def encode(data: bytes, codings: list[str]) -> bytes:
    """``data`` with ``codings`` applied in order (``raw-deflate``: deflate without the zlib header)."""
    for coding in codings:
        if coding in ("gzip", "x-gzip"):
            data = gzip.compress(data)
        elif coding == "deflate":
            data = zlib.compress(data)
        elif coding == "raw-deflate":
            packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
            data = packer.compress(data) + packer.flush()
        elif coding != "identity":
            raise ValueError(coding)
    return data


def gzip_bomb(decoded_mib: int, layers: int = 2, byte: bytes = b"a") -> bytes:
    """``decoded_mib`` MiB of ``byte`` gzipped ``layers`` times (the first layer streamed, 1 MiB at a time)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = byte * (1 << 20)
    data = b"".join(packer.compress(block) for _ in range(decoded_mib)) + packer.flush()
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


class EncodedSite:
    """A threaded HTTP/1.1 server; GET of a registered path answers its body with its headers, else 404."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[bytes, dict[str, str]]] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                body, headers = site.pages.get(self.path.split("?", 1)[0], (b"not found", {"Content-Type":
                                                                                          "text/plain"}))
                try:
                    self.send_response(200 if self.path.split("?", 1)[0] in site.pages else 404)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading at its cap

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, path: str, body: bytes, encoding: str = "", content_type: str = "text/plain; charset=utf-8") -> str:
        """Serve ``body`` at ``path`` with ``Content-Encoding: encoding`` (none when empty); returns the URL."""
        headers = {"Content-Type": content_type}
        if encoding:
            headers["Content-Encoding"] = encoding
        self.pages[path] = (body, headers)
        return self.url + path

    def __enter__(self) -> EncodedSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
