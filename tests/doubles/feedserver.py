"""A real HTTPS server on loopback for calendar feeds, started by a test, with certificates from
admission.pki: each path answers as the test says (a feed, an error, a hang, a flood, a
redirect), and every request it got is recorded.

It stands in for the hosts a GateKeeper's calendars are fetched from (a calendar service's ICS
export, a hub's /calendar.ics), for tests/ical/test_fetch.py, tests/kube/test_calendarsync.py
and the benches. ``SilentListener`` stands in for a host that accepts and never answers.

Proven against the real one: no test fetches from a third-party calendar host (tests make no
outside connections); tests/e2e/test_fleet.py fetches from a real one of ours, a hub's
`gate-admission serve`."""

from __future__ import annotations

import http.server
import socket
import ssl
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from admission.clock import utcnow
from admission.pki.certs import make_ca, make_serving_cert

Handler = http.server.BaseHTTPRequestHandler


def pem_pair(directory: Path, names: list[str]) -> tuple[bytes, Path, Path]:
    """A CA (its PEM) and a serving certificate and key for ``names``, written to ``directory``."""
    now = utcnow()
    ca_key, ca_cert = make_ca(now - timedelta(minutes=1))
    key, cert = make_serving_cert(ca_key, ca_cert, names, now)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_cert.public_bytes(serialization.Encoding.PEM), cert_path, key_path


class FeedServer:
    """``routes[path](handler)`` answers GET ``path``; unknown paths are 404."""

    def __init__(self, directory: Path, tls: bool = True):
        self.routes: dict[str, Callable[[Handler], None]] = {}
        self.requests: list[tuple[str, dict]] = []  # (path with query, headers)
        self.stopping = threading.Event()  # handlers that hang wait on this
        self.sent: dict[str, int] = {}  # bytes a flood managed to write, per path
        server = self

        class Answer(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 (http.server's name)
                server.requests.append((self.path, dict(self.headers)))
                route = server.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self.send_error(404)
                    return
                route(self)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self.httpd.daemon_threads = True
        self.ca_pem = None
        if tls:
            self.ca_pem, cert, key = pem_pair(directory, ["localhost", "127.0.0.1"])
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{'https' if self.ca_pem else 'http'}://{host}:{self.port}{path}"

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- answers ------------------------------------------------------------------------------
    @staticmethod
    def body(data: bytes, status: int = 200, headers: dict | None = None) -> Callable[[Handler], None]:
        def answer(handler: Handler) -> None:
            handler.send_response(status)
            for key, value in {
                "Content-Type": "text/calendar",
                "Content-Length": str(len(data)),
                **(headers or {}),
            }.items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(data)

        return answer

    def hang(self, handler: Handler) -> None:
        """Read the request, then say nothing until the server stops."""
        self.stopping.wait(60)

    def trickle(self, handler: Handler) -> None:
        """Headers, then one byte of body every 0.2 s: each read succeeds, the whole never ends."""
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        while not self.stopping.wait(0.2):
            try:
                handler.wfile.write(b"B")
                handler.wfile.flush()
            except OSError:
                return

    def flood(self, size: int, declare: bool) -> Callable[[Handler], None]:
        """``size`` bytes of body, with or without Content-Length; counts what got written."""

        def answer(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/calendar")
            if declare:
                handler.send_header("Content-Length", str(size))
            else:
                handler.send_header("Connection", "close")
            handler.end_headers()
            chunk, written = b"X" * 65536, 0
            path = handler.path.split("?", 1)[0]
            try:
                while written < size:
                    handler.wfile.write(chunk)
                    written += len(chunk)
                    self.sent[path] = written
            except OSError:
                pass
            handler.close_connection = True

        return answer

    def etagged(self, data: bytes, etag: str) -> Callable[[Handler], None]:
        """``data`` with an ETag; 304 to a request that sends it back."""

        def answer(handler: Handler) -> None:
            if handler.headers.get("If-None-Match") == etag:
                handler.send_response(304)
                handler.send_header("ETag", etag)
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return
            self.body(data, headers={"ETag": etag})(handler)

        return answer


class SilentListener:
    """A TCP listener on loopback that accepts connections and never says a word (not even TLS)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def stop(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()
