"""A JSON API on the loopback for the shape tests: one answer, replaced at will.

``JsonApi`` serves ``body`` (set with ``serve``) to every GET, whatever the path and
query (a source's ``since`` filter is read, and ignored); ``asked`` keeps the query
strings, so a test can see what a run asked for.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonApi:
    """One JSON answer for every GET, on 127.0.0.1 at a free port; ``close()`` it."""

    def __init__(self) -> None:
        self.body = b"{}"
        self.asked: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.asked.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(api.body)))
                self.end_headers()
                self.wfile.write(api.body)

            def log_message(self, *args: Any) -> None:
                del args  # quiet: the test's output is the runs'

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/products"

    def serve(self, data: Any) -> None:
        self.body = json.dumps(data, ensure_ascii=False).encode("utf-8")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
