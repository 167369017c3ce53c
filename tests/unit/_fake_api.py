"""A recording HTTP server on loopback standing in for the API server, for tests that check
the requests our Kubernetes calls really send (method, path, content type, query, body)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from raytrain_operator import k8s


class Recorder(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    taken = False  # answer creates with 409 AlreadyExists
    patch_status = 200

    def _answer(self, status: int) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        url = urlsplit(self.path)
        Recorder.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query),
                "content_type": self.headers.get("Content-Type"),
                "body": body,
            }
        )
        out = json.dumps(body if status < 400 else {"kind": "Status", "code": status}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_PATCH(self) -> None:
        self._answer(Recorder.patch_status)

    def do_POST(self) -> None:
        self._answer(409 if Recorder.taken else 201)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    Recorder.requests = []
    Recorder.taken = False
    Recorder.patch_status = 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    server = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setattr(k8s.client, "endpoint", lambda: k8s.Endpoint(server=server))
    try:
        yield Recorder.requests
    finally:
        httpd.shutdown()
        httpd.server_close()
