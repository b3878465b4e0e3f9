"""Connections to the real server (gunicorn, TLS): one client address cannot take every
connection of a worker, and a worker short of file descriptors stops accepting for a moment
instead of dying."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import orjson

from tests.builders import changed, flux, gate, request, review
from tests.polling import until, wait_for
from tests.processes import GateServer, serving_gates_dir
from tests.server.wire import post, raw_connect, read_answer, still_waiting, tls_connect

KS = flux(gates="flux-system/sre-approval")
BODY = orjson.dumps(review(request("UPDATE", changed(KS, path="./b"), KS)))
GATES = [gate("sre-approval", default="closed")]
DEFAULT_PER_CLIENT = 256  # --max-client-connections


def judged(server: GateServer, source: str = "127.0.0.1") -> bool:
    status, answer = post(server, "/validate", BODY, source)
    return status == 200 and orjson.loads(answer)["response"]["allowed"] is False


def judged_on(sock) -> bool:
    """A review answered on ``sock``, a connection kept alive (and never reopened behind our back,
    as http.client would: the worker that holds it must be the one that answers)."""
    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
    head, answer = read_answer(sock)
    return head.startswith(b"HTTP/1.1 200 ") and orjson.loads(answer)["response"]["allowed"] is False


@contextmanager
def flooding(server: GateServer, count: int, sources: list[str]) -> Iterator[list[socket.socket]]:
    """``count`` connections that never start TLS, spread over ``sources``, held for the block:
    those the server did not reset at once (over a cap it resets them at accept, which can reach
    a connect still in progress)."""
    held = []
    try:
        for i in range(count):
            try:
                held.append(raw_connect(server, sources[i % len(sources)]))
            except ConnectionResetError:
                pass  # refused by the cap: what the tests count is what stays open
        yield held
    finally:
        for sock in held:
            sock.close()


@contextmanager
def kept_connection(server: GateServer) -> Iterator[socket.socket]:
    """The API server's connection, judged on, kept alive through the block; after it, a review
    on a new connection is judged too."""
    kept = tls_connect(server)
    try:
        assert judged_on(kept)
        yield kept
        assert wait_for(lambda: judged(server), 30, "a review on a new connection")
    finally:
        kept.close()


def settled(pid: int) -> int | None:
    """How many descriptors ``pid`` holds once it stops taking connections (it takes one per turn
    of its loop): the same count five polls in a row. None if it exited meanwhile."""
    seen: list[int | None] = []

    def count() -> list[int | None]:
        try:
            seen.append(len(os.listdir(f"/proc/{pid}/fd")))
        except FileNotFoundError:
            seen.append(None)
        return seen

    return until(count, lambda s: s[-1] is None or (len(s) >= 5 and len(set(s[-5:])) == 1), timeout=30)[-1]


def test_one_client_with_a_thousand_connections_does_not_take_them_all(tmp_path):
    """A worker serves 1,000 connections; one address held all of them, and the API server's
    reviews waited in the listen backlog."""
    with serving_gates_dir(tmp_path, GATES, "--workers", "1") as srv:
        with flooding(srv, 1000, ["127.0.0.2"]) as held:
            assert judged(srv, "127.0.0.1")
            # ...while that client still holds as many connections as it may, and no more.
            still = sum(still_waiting(sock) for sock in held)
            assert 0 < still <= DEFAULT_PER_CLIENT, still


def test_the_connections_per_client_are_a_setting(tmp_path):
    with serving_gates_dir(tmp_path, GATES, "--workers", "1", "--max-client-connections", "10") as srv:
        with flooding(srv, 40, ["127.0.0.2"]) as held:
            assert judged(srv, "127.0.0.3")
            still = sum(still_waiting(sock) for sock in held)
            assert 0 < still <= 10, still
        # The client is served again once it has closed them.
        assert wait_for(lambda: judged(srv, "127.0.0.2"), 15, "a review from the client again")


def test_a_descriptor_limit_below_the_connection_limit_does_not_stop_the_worker(tmp_path):
    """`ulimit -n 256`: accept() failed with EMFILE once 256 descriptors were open, and the worker
    died on it, again and again. Now the worker takes no more connections than its descriptors allow."""
    with serving_gates_dir(tmp_path, GATES, "--workers", "1", nofile=256) as srv:
        workers = srv.children()
        with kept_connection(srv) as kept, flooding(srv, 400, [f"127.0.0.{n}" for n in range(2, 10)]):
            assert settled(workers[0]) is not None, srv.log()[-3000:]  # it took what it could, and lives
            assert judged_on(kept)
        assert srv.children() == workers, srv.log()[-3000:]
        assert (
            "out of file descriptors" not in srv.log()
        )  # accept() never even failed: the cap kept below the limit


def test_a_worker_out_of_descriptors_backs_off_and_keeps_serving(tmp_path):
    """Descriptors can run out below the connection cap (the limit lowered, files the app opens):
    accept() fails with EMFILE, and the worker pauses accepting instead of exiting."""
    with serving_gates_dir(tmp_path, GATES, "--workers", "1") as srv:
        (worker,) = srv.children()
        with kept_connection(srv) as kept:
            in_use = len(os.listdir(f"/proc/{worker}/fd"))
            _, hard = resource.prlimit(worker, resource.RLIMIT_NOFILE)
            resource.prlimit(worker, resource.RLIMIT_NOFILE, (in_use + 16, hard))
            with flooding(srv, 64, [f"127.0.0.{n}" for n in range(2, 6)]):
                assert judged_on(kept)  # the worker that held it is alive...
                # ...and ran out of descriptors accepting the others.
                assert "out of file descriptors" in until(
                    srv.log, lambda log: "out of file descriptors" in log
                )
                assert judged_on(kept)
        assert srv.children() == [worker], srv.log()[-3000:]
