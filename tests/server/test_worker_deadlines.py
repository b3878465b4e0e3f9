"""A thread of the worker reads a request within one deadline for the whole request, never a
timeout per read that every byte restarts (real TLS sockets, in process).

The server's loop reads whole requests before a thread sees one (tests/server/test_slow_clients.py,
test_request_framing.py), so no client can make a thread read: this is the bound that holds if
gunicorn ever reads more than the loop framed."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from admission.clock import utcnow
from admission.pki import certs
from admission.transport.tls import server_context
from admission.transport.worker import BoundedSSLSocket

TRICKLE_BYTES = 100_000


@pytest.fixture
def tls_pair(tmp_path):
    """(ours, theirs): a BoundedSSLSocket as a thread of the worker uses it (blocking), and its client."""
    files, _ = certs.ensure(tmp_path, ["localhost"], utcnow())
    ours_context = server_context(str(files.cert), str(files.key))
    ours_context.sslsocket_class = BoundedSSLSocket
    theirs_context = ssl.create_default_context(cafile=str(files.ca_cert))
    ours_raw, theirs_raw = socket.socketpair()
    theirs: list[ssl.SSLSocket] = []
    handshake = threading.Thread(
        target=lambda: theirs.append(theirs_context.wrap_socket(theirs_raw, server_hostname="localhost"))
    )
    handshake.start()
    ours = ours_context.wrap_socket(ours_raw, server_side=True)
    handshake.join()
    ours.setblocking(True)  # as gunicorn's thread sets it
    yield ours, theirs[0]
    ours.close()
    theirs[0].close()


def test_a_request_trickled_byte_by_byte_is_read_until_its_deadline_only(tls_pair):
    ours, theirs = tls_pair
    ours.bound(read_by=time.monotonic() + 0.5)
    read, stop = threading.Semaphore(0), threading.Event()

    def trickle():  # one byte each time the last was read: no read ever waits long
        try:
            for _ in range(TRICKLE_BYTES):
                if stop.is_set():
                    return
                theirs.sendall(b" ")
                read.acquire(timeout=30)
        except OSError:
            pass

    client = threading.Thread(target=trickle)
    client.start()
    received = 0
    try:
        with pytest.raises(ConnectionResetError):
            while received < TRICKLE_BYTES:
                received += len(ours.recv(1))
                read.release()
    finally:
        stop.set()
        read.release()
        client.join()
    assert received < TRICKLE_BYTES  # it stopped reading while bytes were still coming


def test_a_request_already_past_its_deadline_is_not_read_at_all(tls_pair):
    ours, theirs = tls_pair
    theirs.sendall(b"POST /validate HTTP/1.1\r\n")
    ours.bound(read_by=time.monotonic())
    with pytest.raises(ConnectionResetError):
        ours.recv(4096)
