"""Plain-HTTP /healthz, /readyz and /metrics for a process that serves no reviews (the controller).

One thread answers every connection through a selector, whatever their number: a connection
costs a socket, never a thread. A connection that has not sent its request head within
READ_TIMEOUT is closed, and at most MAX_CONNECTIONS are open at once; one more closes the one
that has waited longest, so idle connections (a port scan, a client that never writes) cannot
keep the kubelet's probe from an answer. An answer the socket does not take at once (a scrape
larger than its send buffer) is sent as the client reads it, on the same thread, within the
same READ_TIMEOUT.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

LOOPBACK = "127.0.0.1"  # probes from this host only, unless given the address they come to (the Pod IP)
READ_TIMEOUT = 5.0  # seconds a connection may take to send its request head
MAX_CONNECTIONS = 64  # open at once; the kubelet's probes need one or two
MAX_HEAD = 8192  # bytes of request head read; more is a 431 and the connection closed
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class HealthServer:
    """The listening socket and the thread that answers on it."""

    def __init__(
        self,
        listener: socket.socket,
        readiness: Callable[[], tuple[bool, dict[str, Any]]],
        read_timeout: float,
        max_connections: int,
        metrics: Callable[[], tuple[bytes, str]] | None = None,
    ):
        self.listener, self.readiness, self.metrics = listener, readiness, metrics
        self.read_timeout, self.max_connections = read_timeout, max(1, max_connections)
        self.selector = selectors.DefaultSelector()
        self.open: dict[socket.socket, tuple[float, bytearray]] = {}  # since when, what it sent
        self.unsent: dict[socket.socket, bytes] = {}  # answers the client has not taken yet
        self._stopped = threading.Event()
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._loop, name="health", daemon=True)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def shutdown(self) -> None:
        self._stopped.set()
        self.thread.join(5)
        for conn in list(self.open):
            self._close(conn)
        self.selector.close()
        self.listener.close()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            for key, _ in self.selector.select(timeout=0.5):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj in self.unsent:
                    self._send(key.fileobj)
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            deadline = time.monotonic() - self.read_timeout
            for conn, (since, _) in list(self.open.items()):
                if since < deadline:
                    self._close(conn)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:  # gone before it was accepted, or out of descriptors: the next one
            return
        if len(self.open) >= self.max_connections:
            self._close(min(self.open, key=lambda c: self.open[c][0]))  # the one waiting longest
        conn.setblocking(False)
        self.open[conn] = (time.monotonic(), bytearray())
        self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        head = self.open[conn][1]
        head += data
        if b"\r\n\r\n" in head or b"\n\n" in head:
            if self.metrics is not None and head.split(b"\n", 1)[0].split()[:2] == [b"GET", b"/metrics"]:
                self._scrape(conn)
            else:
                self._answer(conn, *self._response(bytes(head)))
        elif len(head) > MAX_HEAD:
            self._answer(conn, 431, {"error": "request head too large"})

    def _scrape(self, conn: socket.socket) -> None:
        assert self.metrics is not None
        try:
            payload, content_type = self.metrics()
        except Exception as err:  # noqa: BLE001 (the one answering thread must outlive a failing collector)
            self._answer(conn, 503, {"error": f"{type(err).__name__}: {err}"})
            return
        self._write(conn, 200, content_type, payload)

    def _response(self, head: bytes) -> tuple[int, dict[str, object]]:
        parts = head.split(b"\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, {"error": "bad request line"}
        if parts[0] != b"GET":
            return 405, {"error": "GET only"}
        if parts[1] == b"/healthz":
            return 200, {"status": "ok"}
        if parts[1] == b"/readyz":
            try:
                ready, detail = self.readiness()
            except Exception as err:  # noqa: BLE001 (the one answering thread must outlive a failing check)
                return 503, {"ready": False, "error": f"{type(err).__name__}: {err}"}
            return (200 if ready else 503), {"ready": ready, **detail}
        return 404, {"error": "not found"}

    def _answer(self, conn: socket.socket, code: int, body: dict[str, object]) -> None:
        self._write(conn, code, "application/json", orjson.dumps(body))

    def _write(self, conn: socket.socket, code: int, content_type: str, payload: bytes) -> None:
        head = (
            f"HTTP/1.1 {code} {_REASONS[code]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        )
        self.unsent[conn] = head.encode() + payload
        self.selector.modify(conn, selectors.EVENT_WRITE)
        self._send(conn)

    def _send(self, conn: socket.socket) -> None:
        """Send what the socket takes now; close once all is sent (or the client is gone). A client
        that reads none of it is closed at its deadline, and never holds this thread."""
        rest = self.unsent[conn]
        try:
            rest = rest[conn.send(rest) :]
        except BlockingIOError:
            return
        except OSError:
            rest = b""
        if rest:
            self.unsent[conn] = rest
        else:
            self._close(conn)

    def _close(self, conn: socket.socket) -> None:
        self.unsent.pop(conn, None)
        self.open.pop(conn, None)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()


def serve_health(
    port: int,
    readiness: Callable[[], tuple[bool, dict[str, Any]]],
    address: str = LOOPBACK,
    *,
    read_timeout: float = READ_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
) -> HealthServer:
    """Answer probes on ``address`` (IPv4 or IPv6) and ``port`` in one daemon thread; /readyz is 503
    until ``readiness`` says ready; /metrics answers ``metrics`` (its body and content type) when
    given. Raises OSError when it cannot listen there."""
    # An IPv6-only cluster's Pod IP needs AF_INET6: the family is the address's own.
    family, kind, proto, _, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(sockaddr)
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    server = HealthServer(listener, readiness, read_timeout, max_connections, metrics)
    server.thread.start()
    return server
