"""The pre-read worker's connections: what the loop knows of each, and how one ends (refused, lingering, closed)."""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from admission.transport.gthread_seam import GthreadSeam, SeamConn

LINGER_SECONDS = 2.0  # after refusing a request, read and drop what the client still sends, then close
_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    411: "Length Required",
    413: "Request Entity Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class Conn(SeamConn):
    """A connection, and what the loop knows of the request being read on it."""

    def __init__(self, worker: GthreadSeam, sock: Any, address: Any, listener: Any, gone: Any) -> None:
        super().__init__(worker, sock, address, listener, gone)
        self.watching = 0
        self.handshaken = False
        self.buf: bytearray | None = None
        self.held = 0  # bytes of buf counted in the worker's BUFFERED_AT_MOST
        self.scanned = 0  # how far buf has been searched for the end of the head
        self.need: int | None = None  # head + body, once the head is read
        self.wants_large = self.large = False
        self.deadline = 0.0


class ConnectionEnds:
    """How PreReadWorker ends a connection: refuse it with a status, linger, close."""

    lingering: dict[Any, None]  # refused connections, draining until their deadline
    flushing: dict[Any, None]  # connections whose answer (from the loop) is still being written

    if TYPE_CHECKING:  # the worker's, and its gthread seam's

        def _forget(self, conn: Conn) -> None: ...
        def _unwatch(self, conn: Conn) -> None: ...
        def count_connection(self, delta: int) -> None: ...
        def watch(self, sock: Any, events: int, callback: Callable[..., object]) -> None: ...

    def _close(self, conn: Conn) -> None:
        self._forget(conn)
        self.lingering.pop(conn, None)
        self.flushing.pop(conn, None)
        self.count_connection(-1)
        conn.close()

    def _refuse(self, conn: Conn, status: int, why: str) -> None:
        """Answer ``status`` from the loop and close, reading (and dropping) what the client still
        sends for a moment, so that closing does not reset the connection before it reads the answer."""
        body = orjson.dumps({"error": why})
        answer = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self._forget(conn)
        try:
            conn.sock.send(answer)
        except (OSError, ValueError):
            pass
        self._linger(conn)

    def _linger(self, conn: Conn) -> None:
        """Half-close, then read and drop what the client still sends until it closes or
        ``LINGER_SECONDS`` pass, so that closing does not reset an answer it has not read."""
        try:
            conn.sock.setblocking(
                False
            )  # a thread's answer leaves it blocking: the loop must never wait on it
            conn.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            self._close(conn)
            return
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self.lingering[conn] = None
        self._unwatch(conn)
        conn.watching = selectors.EVENT_READ
        self.watch(conn.sock, selectors.EVENT_READ, partial(self._drop_input, conn))

    def _drop_input(self, conn: Conn, _fileobj: object = None) -> None:
        try:
            while conn.sock.recv(65536):
                pass
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return
        except (OSError, ValueError):
            pass
        self._close(conn)
