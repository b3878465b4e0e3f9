"""Plain-HTTP /healthz and /readyz for a process that serves no reviews (the controller)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import orjson


LOOPBACK = "127.0.0.1"  # probes from this host only, unless given the address they come to (the Pod IP)


def serve_health(
    port: int, readiness: Callable[[], tuple[bool, dict[str, Any]]], address: str = LOOPBACK
) -> ThreadingHTTPServer:
    """Answer probes on ``address`` (IPv4 or IPv6) and ``port`` in a daemon thread; /readyz is 503
    until ``readiness`` says ready. Raises OSError when it cannot listen there."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server naming
            body: dict[str, object]
            if self.path == "/healthz":
                code, body = 200, {"status": "ok"}
            elif self.path == "/readyz":
                ready, detail = readiness()
                code, body = (200 if ready else 503), {"ready": ready, **detail}
            else:
                code, body = 404, {"error": "not found"}
            payload = orjson.dumps(body)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:  # probes are not worth a log line each
            pass

    # http.server listens on IPv4 only unless told: an IPv6-only cluster's Pod IP needs AF_INET6.
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    server = type("HealthServer", (ThreadingHTTPServer,), {"address_family": family})(
        (address, port), Handler
    )
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
