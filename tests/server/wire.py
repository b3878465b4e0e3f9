"""Clients that speak to the real server byte by byte: connections left in any state a client can
leave them in, from any loopback address, and the answers read off the wire."""

from __future__ import annotations

import http.client
import socket
import ssl

from tests.processes import GateServer

# Not a benchmark: the API server gives up on a status review after 3 s (timeoutSeconds in
# manifests/webhooks). A review that waits behind a misbehaving client waits for as long as that
# client stays (10 s or more); one that does not is answered in milliseconds.
ANSWER_WITHIN = 3.0


def raw_connect(server: GateServer, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection from ``source`` (any 127.x.y.z: another client address) with no TLS handshake."""
    return socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=(source, 0))


def tls_connect(server: GateServer, source: str = "127.0.0.1") -> ssl.SSLSocket:
    return server.tls().wrap_socket(raw_connect(server, source), server_hostname="localhost")


def connection(
    server: GateServer, source: str = "127.0.0.1", timeout: float = ANSWER_WITHIN
) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=server.tls(), timeout=timeout, source_address=(source, 0)
    )


def post(server: GateServer, path: str, body: bytes, source: str = "127.0.0.1") -> tuple[int, bytes]:
    """POST ``body`` on a new connection; the status and body of the answer, which must come
    before the API server's timeout (``ANSWER_WITHIN``), or socket.timeout is raised."""
    conn = connection(server, source)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get(server: GateServer, path: str) -> int:
    conn = connection(server)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def read_head(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """The bytes up to and including the first blank line (an answer's status line and headers)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)  # one byte at a time: nothing after the head is consumed
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def read_answer(sock: socket.socket, timeout: float = 5.0) -> tuple[bytes, bytes]:
    """One whole answer (head, body) with a Content-Length."""
    head = read_head(sock, timeout)
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        assert chunk, f"closed after {head + body!r}"
        body += chunk
    return head, body


def still_waiting(sock: socket.socket) -> bool:
    """Whether the server has neither answered nor closed ``sock`` (it is still stalled there)."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(10)
    return False  # an answer, or the end of the connection
