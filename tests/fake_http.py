"""A scriptable HTTP server on 127.0.0.1 for tests: a fake Serper, or a tool server that misbehaves on demand.

Each POST takes the next behaviour from the queue (or ``default`` when it is empty) and is recorded with its
headers and JSON body. Behaviours: ``("json", status, obj)``, ``("raw", status, text)``, ``("sleep", seconds)``
(then answers 200 ``{}``), ``("close",)`` (drops the connection without answering).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Behaviour = tuple[Any, ...]


class FakeHTTP:
    def __init__(self, default: Behaviour = ("json", 200, {})) -> None:
        self.default = default
        self.queue: deque[Behaviour] = deque()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                with fake._lock:
                    behaviour = fake.queue.popleft() if fake.queue else fake.default
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = raw.decode(errors="replace")
                    fake.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
                kind = behaviour[0]
                if kind == "close":
                    self.close_connection = True
                    self.connection.close()
                    return
                if kind == "sleep":
                    time.sleep(behaviour[1])
                    status, text = 200, "{}"
                elif kind == "json":
                    status, text = behaviour[1], json.dumps(behaviour[2])
                else:
                    status, text = behaviour[1], behaviour[2]
                data = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self.queue.clear()
            self.queue.extend(behaviours)
            self.requests.clear()

    def __enter__(self) -> FakeHTTP:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
