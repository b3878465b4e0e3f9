"""The worker writes an answer made in its loop without ever blocking the loop (real sockets)."""

from __future__ import annotations

import selectors
import socket

from admission.transport.worker import PreReadWorker
from tests.polling import until


class Conn:
    """What the worker keeps of a connection while it writes an answer."""

    def __init__(self, sock: socket.socket, answer: bytes):
        self.sock, self.out, self.keep, self.watching, self.held = sock, bytearray(answer), True, 0, 0


def loop_worker() -> tuple[PreReadWorker, list]:
    worker = PreReadWorker.__new__(PreReadWorker)  # its loop's state only: no gunicorn arbiter here
    worker.poller = selectors.DefaultSelector()
    worker.flushing, worker.arriving, worker.waiting, worker.lingering = {}, {}, {}, {}
    worker.large_in_use, worker.nr_conns, worker.buffered = 0, 1, 0
    finished = []
    worker.finish_request = lambda conn, fs: finished.append((conn, fs.result()))
    return worker, finished


def test_an_answer_the_socket_cannot_take_at_once_is_written_as_the_client_reads():
    ours, client = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    answer = bytes(range(256)) * 1024  # 256 KiB: far more than the socket buffers hold
    worker, finished = loop_worker()
    conn = Conn(ours, answer)

    worker._flush(conn)  # returns at once, with most of the answer still to write
    assert conn in worker.flushing and conn.watching == selectors.EVENT_WRITE and not finished

    received = bytearray()
    client.setblocking(False)

    def turn() -> bool:  # the client reads what arrived; the worker's loop takes one turn
        try:
            while chunk := client.recv(65536):
                received.extend(chunk)
        except BlockingIOError:
            pass
        for key, _ in worker.poller.select(timeout=0.01):
            key.data(key.fileobj)
        return bool(finished)

    until(turn, bool, timeout=30)
    client.setblocking(True)
    while len(received) < len(answer):  # the last of it, written on the loop's last turn
        received.extend(client.recv(65536))
    assert bytes(received) == answer
    assert finished == [(conn, True)] and conn not in worker.flushing and conn.watching == 0
    ours.close()
    client.close()


def test_a_client_gone_while_its_answer_is_written_is_closed():
    ours, client = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    worker, finished = loop_worker()
    conn = Conn(ours, b"x" * (2 << 20))
    conn.close = ours.close
    worker._flush(conn)
    client.close()
    until(
        lambda: (
            [key.data(key.fileobj) for key, _ in worker.poller.select(timeout=0.05)] and ours.fileno() == -1
        ),
        bool,
        timeout=10,
    )
    assert not finished and conn not in worker.flushing and worker.nr_conns == 0
