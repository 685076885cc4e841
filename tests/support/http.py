"""HTTP as the tests speak it to a sidecar: plain requests, JSON bodies, admin writes."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class HttpResult:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    body: str | None = None,
    timeout: float = 30,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> HttpResult:
    """One request; an HTTP error status is a result, not an exception. ``context``: the
    TLS client context of an ``https://`` URL (its trusted CAs, its certificate)."""
    data = None if body is None else body.encode()
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - loopback test URLs
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310
            return HttpResult(resp.status, resp.read().decode())
    except urllib.error.HTTPError as err:
        return HttpResult(err.code, err.read().decode())


def request_json(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """``body`` sent as JSON; the status and the decoded answer (None: an empty one)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 - test-local URL
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def create_topic(url: str, topic: str) -> None:
    """Create ``persistent://tenant/ns/local`` through a sidecar's Pulsar admin API, with its
    tenant and namespace (each may already exist): Pulsar keeps policies only for topics."""
    tenant_ns, _, local = topic.removeprefix("persistent://").rpartition("/")
    tenant = tenant_ns.partition("/")[0]
    for path in (
        f"/admin/v2/tenants/{tenant}",
        f"/admin/v2/namespaces/{tenant_ns}",
        f"/admin/v2/persistent/{tenant_ns}/{local}",
    ):
        result = http("PUT", url + path, "{}" if "tenants" in path else None)
        assert result.status in (204, 409), (path, result.status, result.body)


class JsonRoutes:
    """A loopback HTTP server answering GETs of fixed paths with fixed JSON bodies (404 and
    ``{}`` elsewhere): a stand-in for a sidecar's read endpoints."""

    def __init__(self, routes: dict[str, Any]) -> None:
        bodies = {path: json.dumps(body).encode() for path, body in routes.items()}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                payload = bodies.get(self.path)
                self.send_response(404 if payload is None else 200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}" if payload is None else payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
