"""Idle and slow clients against the real server (gunicorn, TLS): they must never hold the
threads that answer other clients' reviews (pre-read in the loop), and SIGTERM drains."""

from __future__ import annotations

import os
import select
import signal
import socket
import ssl
import threading
import time

import orjson
import pytest

from tests.builders import (
    changed,
    flux,
    gate,
    kustomization_status_review,
    padded_to_the_limit,
    request,
    review,
)
from tests.polling import until
from tests.processes import GateServer, serving_gates_dir
from tests.server.wire import ANSWER_WITHIN, post, read_answer, still_waiting, tls_connect

KS = flux(gates="flux-system/sre-approval")
BODY = orjson.dumps(review(request("UPDATE", changed(KS, path="./b"), KS)))
STATUS_REVIEW = kustomization_status_review()  # 132 KB: 1,200 inventory entries


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving_gates_dir(
        tmp_path_factory.mktemp("slow"),
        [gate("sre-approval", default="closed")],
        "--workers",
        "2",
        "--threads",
        "4",
    ) as srv:
        yield srv


def review_answered(server: GateServer) -> bool:
    conn = server.connection(timeout=ANSWER_WITHIN)
    try:
        conn.request("POST", "/validate", body=BODY, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status == 200 and orjson.loads(resp.read())["response"]["allowed"] is False
    finally:
        conn.close()


def test_idle_and_slow_clients_do_not_hold_the_threads(server):
    held = []
    try:
        for i in range(40):  # 5x the pod's 8 threads, in every state a request can stall in
            if i % 4 == 0:
                held.append(socket.create_connection(("127.0.0.1", server.port)))  # no TLS handshake
            elif i % 4 == 1:
                held.append(tls_connect(server))  # handshake, then nothing
            elif i % 4 == 2:
                sock = tls_connect(server)
                sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Le")  # headers cut short
                held.append(sock)
            else:
                sock = tls_connect(server)
                sock.sendall(
                    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BODY)
                    + BODY[:100]
                )  # body cut short
                held.append(sock)
        for _ in range(10):
            assert review_answered(server)
        status, _ = server.request("GET", "/healthz")
        assert status == 200
    finally:
        for sock in held:
            sock.close()


def test_idle_keep_alive_connections_do_not_hold_the_threads(server):
    kept = [server.connection() for _ in range(20)]
    try:
        for conn in kept:  # one completed request each, then they stay open, idle
            conn.request("GET", "/healthz")
            assert conn.getresponse().read()
        for _ in range(5):
            assert review_answered(server)
        # ...and they are still served when they speak again.
        status, out = server.request("POST", "/validate", BODY, conn=kept[0])
        assert status == 200 and out["response"]["allowed"] is False
    finally:
        for conn in kept:
            conn.close()


def test_a_client_that_never_finishes_its_request_is_closed(server):
    sock = tls_connect(server)
    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    sock.settimeout(30)
    answer = sock.recv(4096)  # the server gives up on it (after 10 s), with a 408 or by closing
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
    sock.close()


@pytest.mark.parametrize(
    "head, status",
    [
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"411"),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 70000, b"431"),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", b"413"),
    ],
)
def test_requests_a_thread_could_wait_on_are_refused_before_they_reach_one(server, head, status):
    sock = tls_connect(server)
    sock.sendall(head)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, f"closed after {answer!r}"
        answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.1 " + status), answer


def test_sigterm_keeps_serving_for_the_shutdown_delay_then_drains(tmp_path):
    with serving_gates_dir(
        tmp_path, [gate("sre-approval", default="closed")], "--workers", "1", "--shutdown-delay", "4"
    ) as srv:
        kept = srv.connection()
        kept.request("GET", "/healthz")
        kept.getresponse().read()
        os.kill(srv.pid, signal.SIGTERM)  # as the kubelet does, to the master only

        # While the endpoint is being removed, new connections are still served, and every
        # answer closes its connection so the client moves to another replica.
        def on_a_new_connection() -> tuple[int, str | None]:
            conn = srv.connection(timeout=ANSWER_WITHIN)
            conn.request("POST", "/validate", body=BODY, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            return resp.status, resp.getheader("Connection")

        # The master passes SIGTERM on to its worker: until the worker has it, answers keep alive.
        assert until(on_a_new_connection, lambda answer: answer == (200, "close"), timeout=3) == (
            200,
            "close",
        )
        kept.request("POST", "/validate", body=BODY, headers={"Content-Type": "application/json"})
        resp = kept.getresponse()
        assert resp.status == 200 and resp.getheader("Connection") == "close"
        resp.read()
        # Then it stops accepting and exits cleanly.
        until(srv.alive, lambda alive: not alive, timeout=30)
        assert srv.proc.returncode == 0, srv.log()[-2000:]


def test_a_review_larger_than_two_api_server_objects_is_refused(server):
    """The API server sends at most two 3 MiB objects and an envelope: anything larger is not
    from it, and decoding it would hold a worker (review size limits)."""
    sock = tls_connect(server)
    sock.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (6 * 1024 * 1024 + 300 * 1024)
    )
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer


def small_reviews_answered_while_stalled(server: GateServer, start: bytes) -> None:
    """Hold ten connections that each sent ``start`` and then stalled (more than the large-body
    slots of both workers); reviews must still be answered."""
    held = []
    try:
        for _ in range(10):
            sock = tls_connect(server)
            sock.sendall(start)
            held.append(sock)
        for _ in range(5):
            assert review_answered(server)
    finally:
        for sock in held:
            sock.close()


def test_stalled_large_uploads_do_not_delay_small_reviews(server):
    small_reviews_answered_while_stalled(
        server,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (5 * 1024 * 1024)
        + b"[" * 300_000,
    )


def test_stalled_bodies_do_not_hold_the_loop_whatever_the_header_order(server):
    """Go's net/http and Python's http.client send Content-Length before other headers; a body
    that stops short must wait in the loop however its headers are ordered (strict framing)."""
    small_reviews_answered_while_stalled(
        server,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Content-Type: application/json\r\n\r\n" % len(BODY) + BODY[:50],
    )


def test_small_reviews_are_answered_while_the_largest_reviews_are_judged(server):
    """Eight clients posting the largest reviews back to back (review size limits): large bodies take one slot
    per worker and a bounded time to decode, so small reviews keep being answered; and whole large
    bodies are judged smallest first, so a 132 KB status review does not queue behind 6 MiB ones."""
    large = padded_to_the_limit(review(request("UPDATE", changed(KS, path="./b"), KS)))
    stop, answered, failures = threading.Event(), [], []

    def post_large():
        conn = server.connection(timeout=60)
        try:
            while not stop.is_set():
                conn.request("POST", "/validate", body=large, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                (answered if resp.status == 200 else failures).append(resp.status)
        finally:
            conn.close()

    senders = [threading.Thread(target=post_large) for _ in range(8)]
    for t in senders:
        t.start()
    try:
        until(
            lambda: len(answered) + len(failures), lambda n: n >= 2, timeout=60
        )  # both workers busy with them
        for _ in range(10):
            assert review_answered(server)
        for _ in range(3):
            status, answer = post(server, "/validate", STATUS_REVIEW)
            assert status == 200 and orjson.loads(answer)["response"]["allowed"] is False
    finally:
        stop.set()
        for t in senders:
            t.join()
    assert answered and not failures, failures


def test_a_worker_replaced_while_the_certificate_files_are_missing_serves_the_last_good_one(tmp_path):
    """The master must not exit; the new worker serves with the certificate in memory."""
    with serving_gates_dir(tmp_path, [gate("sre-approval", default="closed")], "--workers", "1") as srv:
        keep = tmp_path / "kept"
        keep.mkdir()
        for name in ("tls.crt", "tls.key"):
            (srv.cert_dir / name).rename(keep / name)
        victim = srv.children()[0]
        os.kill(victim, signal.SIGKILL)
        pids = until(srv.children, lambda pids: len(pids) == 1 and victim not in pids, timeout=30)
        assert srv.alive(), srv.log()[-2000:]
        assert len(pids) == 1 and victim not in pids
        assert until(lambda: _answered_or_false(srv), bool, timeout=30), srv.log()[-2000:]


def _answered_or_false(server: GateServer) -> bool:
    try:
        return review_answered(server)
    except OSError:  # the new worker is still starting
        return False


def exchange(sock: ssl.SSLSocket, data: bytes, count: int, timeout: float = 60.0) -> list[dict]:
    """Write ``data`` while reading ``count`` HTTP/1.1 answers (each with a Content-Length) off one
    connection, in order, as a pipelining client does: written whole before reading, the answers
    would have to fit in the kernel's socket buffers (one thread: an SSL socket is not shared)."""
    sock.setblocking(False)
    unsent, received, answers = memoryview(data), b"", []
    deadline = time.monotonic() + timeout
    while len(answers) < count:
        assert time.monotonic() < deadline, f"{len(answers)} answers within {timeout}s"
        readable, writable, _ = select.select([sock], [sock] if unsent else [], [], 1.0)
        if writable:
            try:
                unsent = unsent[sock.send(unsent) :]
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                pass
        if readable or sock.pending():
            try:
                chunk = sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue
            assert chunk, f"closed after {len(answers)} answers"
            received += chunk
        while (end := received.find(b"\r\n\r\n")) >= 0:
            head = received[:end].decode("latin-1").lower()
            length = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(received) < end + 4 + length:
                break
            assert head.startswith("http/1.1 200"), head
            answers.append(orjson.loads(received[end + 4 : end + 4 + length]))
            received = received[end + 4 + length :]
    return answers


def test_pipelined_reviews_are_all_answered_in_order(server):
    # Reviews are answered in the worker's loop; a pipelined one is taken on the loop's next
    # turn, so a thousand of them back to back neither nest calls nor keep other clients waiting.
    sock = tls_connect(server)
    bodies = []
    for i in range(1000):
        doc = review(request("UPDATE", changed(KS, path="./b"), KS))
        doc["request"]["uid"] = f"pipelined-{i}"
        bodies.append(orjson.dumps(doc))
    pipelined = b"".join(
        b"POST /validate?timeout=5s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        for body in bodies
    )
    sent = sock.send(pipelined[:65536])  # pipelined requests waiting in the server's buffer...
    assert review_answered(server)  # ...do not keep another client waiting
    answers = exchange(sock, pipelined[sent:], len(bodies))
    sock.close()
    assert [a["response"]["uid"] for a in answers] == [f"pipelined-{i}" for i in range(len(bodies))]
    assert all(a["response"]["allowed"] is False for a in answers)


def test_clients_that_ask_to_close_but_never_do_do_not_hold_the_loop(server):
    # After an answer with "Connection: close" the server half-closes and waits (a little) for
    # the client to close too; that wait must not stop the worker answering anybody else.
    held = []
    try:
        held.extend(tls_connect(server) for _ in range(12))
        for sock in held:  # all at once: each worker has several to close
            sock.sendall(
                b"POST /validate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
            )  # never read, never closed
        for _ in range(5):
            assert review_answered(server)
    finally:
        for sock in held:
            sock.close()


def misbehaving(server: GateServer, count: int) -> tuple[list[ssl.SSLSocket], list[ssl.SSLSocket]]:
    """``count`` uploads that announce a 1,000,000-byte review: half send nothing more (stalled),
    half send a byte now and then (trickling: the caller sends them)."""
    stalled, trickling = [], []
    for i in range(count):
        sock = tls_connect(server)
        sock.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n{"
        )
        (stalled if i % 2 == 0 else trickling).append(sock)
    return stalled, trickling


@pytest.mark.parametrize("count", [8, 100])
def test_a_large_status_review_is_judged_while_uploads_stall_and_trickle(server, count):
    """Large bodies were read one at a time per worker, so a stalled upload kept every large
    review of its worker waiting for its deadline: a 132 KB Kustomization status review went past
    the API server's 3 s timeout. Now bodies are read as they come, and only whole ones wait."""
    stalled, trickling = misbehaving(server, count)
    try:
        for path in ("/validate", "/mutate", "/validate", "/mutate", "/validate"):
            for sock in trickling:
                sock.sendall(b" ")  # one more byte of the body each (JSON whitespace)
            status, answer = post(server, path, STATUS_REVIEW)
            response = orjson.loads(answer)["response"]
            assert status == 200 and (
                response["allowed"] is False if path == "/validate" else "patch" in response
            )
        # ...all while every misbehaving upload was still open, neither answered nor closed.
        assert [still_waiting(sock) for sock in stalled + trickling] == [True] * count
    finally:
        for sock in stalled + trickling:
            sock.close()


def test_clients_that_keep_sending_after_a_closing_answer_do_not_hold_the_loop(server):
    """An answer from a thread that closes the connection leaves its socket blocking; the loop,
    draining what the client still sends before it closes, must not wait on it."""
    held = []
    try:
        for _ in range(12):  # however the kernel spreads them, each worker gets some
            sock = tls_connect(server)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            held.append(sock)
        for sock in held:
            read_answer(sock)
            sock.sendall(b"more")  # after the answer, and never closed
        for _ in range(5):
            assert review_answered(server)
    finally:
        for sock in held:
            sock.close()


def test_uploads_that_hold_too_many_bytes_are_refused_largest_first(tmp_path):
    """Bodies are read as they arrive, so what stalled uploads hold is bounded per worker
    (64 MiB): past it the request holding the most is refused (503), and reviews go on."""
    with serving_gates_dir(tmp_path, [gate("sre-approval", default="closed")], "--workers", "1") as srv:
        hoarders = []
        try:
            for i in range(14):  # 5.0 to 6.3 MB each, 79 MB in all; each stalls 1,000 bytes short
                sock = tls_connect(srv)
                size = 5_000_000 + i * 100_000
                try:
                    sock.sendall(
                        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size
                        + b" " * (size - 1000)
                    )
                except OSError:
                    pass  # refused while sending: the largest at that moment
                hoarders.append((size, sock))
            refused = [size for size, sock in hoarders if not still_waiting(sock)]
            assert refused and sum(size for size, _ in hoarders) - sum(refused) <= 64 * 1024 * 1024, refused
            status, answer = post(srv, "/validate", STATUS_REVIEW)
            assert status == 200 and orjson.loads(answer)["response"]["allowed"] is False
            assert [still_waiting(sock) for size, sock in hoarders if size not in refused] == [True] * (
                len(hoarders) - len(refused)
            )
        finally:
            for _, sock in hoarders:
                sock.close()
