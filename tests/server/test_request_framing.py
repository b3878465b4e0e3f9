"""How the real server (gunicorn, TLS) frames a request: a Content-Length it reads exactly as
gunicorn does, or a 400; the whole request read before a thread sees it; Expect: 100-continue."""

from __future__ import annotations

import subprocess

import orjson
import pytest

from tests.builders import changed, flux, gate, kustomization_status_review, request, review
from tests.polling import until
from tests.processes import serving_gates_dir
from tests.server.wire import ANSWER_WITHIN, get, post, read_answer, read_head, still_waiting, tls_connect

KS = flux(gates="flux-system/sre-approval")
BODY = orjson.dumps(review(request("UPDATE", changed(KS, path="./b"), KS)))
STATUS_REVIEW = kustomization_status_review()  # 132 KB: a thread judges it


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving_gates_dir(
        tmp_path_factory.mktemp("framing"),
        [gate("sre-approval", default="closed")],
        "--workers",
        "2",
        "--threads",
        "4",
    ) as srv:
        yield srv


def held(answer: bytes) -> bool:
    return orjson.loads(answer)["response"]["allowed"] is False


@pytest.mark.parametrize(
    "lengths",
    [
        [b"0000000000000000100"],  # padded: 100 to gunicorn, nothing the loop would read
        [b"00000000100"],
        [b"+100"],
        [b"1e2"],
        [b"0x64"],
        [b"100 100"],
        [b"-1"],
        [b""],
        [b"\xd9\xa1\xd9\xa0\xd9\xa0"],
        [b"100", b"100"],  # repeated, even with one value
        [b"100", b"99"],
    ],
    ids=lambda lengths: b"|".join(lengths).decode("latin-1"),
)
def test_a_content_length_that_is_not_plain_digits_once_is_refused_at_once(server, lengths):
    sock = tls_connect(server)
    sock.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"Content-Length: %s\r\n" % v for v in lengths)
        + b"Content-Type: application/json\r\n\r\n{"
    )
    head, body = read_answer(sock)
    assert head.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in head, head
    assert "Content-Length" in orjson.loads(body)["error"]
    assert (
        until(lambda: still_waiting(sock), lambda waiting: not waiting) is False
    )  # and the connection closes
    sock.close()


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length : 100\r\n",  # gunicorn refuses a name with a space; the loop must not read a body for it
        b"Transfer-Encoding : chunked\r\n",
        b" Content-Length: 100\r\n",  # a folded line
    ],
)
def test_header_names_read_differently_by_the_loop_and_gunicorn_are_refused(server, head):
    sock = tls_connect(server)
    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n{")
    answer, _ = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    sock.close()


def test_padded_lengths_trickling_a_body_do_not_hold_the_threads(server):
    """A Content-Length gunicorn reads as 100 and the loop did not read at all sent the request to
    a thread, which then waited on the body byte by byte: every thread of the pod held, /healthz,
    /readyz, /metrics and large reviews unanswered."""
    trickling = []
    try:
        for _ in range(24):  # 3x the pod's 8 threads: however the kernel spreads them over the workers
            sock = tls_connect(server)
            sock.sendall(
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 0000000000000000100\r\n\r\n{"
            )
            trickling.append(sock)
        for _ in range(3):
            for sock in trickling:  # one more byte each, before every round of probes
                try:
                    sock.sendall(b" ")
                except OSError:
                    pass  # refused and closed: what the fix does
            assert [get(server, path) for path in ("/healthz", "/readyz", "/metrics")] == [200, 200, 200]
            status, answer = post(server, "/validate", STATUS_REVIEW)
            assert status == 200 and held(answer)
    finally:
        for sock in trickling:
            sock.close()


@pytest.mark.parametrize("body", [BODY, STATUS_REVIEW], ids=["small review", "132 KB review"])
def test_expect_100_continue_is_answered_before_the_body_is_sent(server, body):
    sock = tls_connect(server)
    sock.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    assert read_head(sock) == b"HTTP/1.1 100 Continue\r\n\r\n"  # before any byte of the body
    sock.sendall(body)
    head, answer = read_answer(sock)  # the final answer, and only one 100 before it
    assert head.startswith(b"HTTP/1.1 200 ") and held(answer), head
    # The connection is kept alive and serves the next request as usual.
    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
    head, answer = read_answer(sock)
    assert head.startswith(b"HTTP/1.1 200 ") and held(answer), head
    sock.close()


def test_a_request_too_large_is_refused_instead_of_continued(server):
    sock = tls_connect(server)
    sock.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 99999999\r\n\r\n"
    )
    assert read_head(sock).startswith(b"HTTP/1.1 413 ")
    sock.close()


def test_curl_posts_a_large_review_without_waiting_for_100_continue(server, tmp_path):
    """curl asks for 100 Continue before a large body and, unanswered, waits before sending it
    (1 s by default; told here to wait longer than the server's own request deadline)."""
    path = tmp_path / "review.json"
    path.write_bytes(STATUS_REVIEW)
    result = subprocess.run(
        [
            "curl",
            "--silent",
            "--show-error",
            "--cacert",
            str(server.cert_dir / "ca.crt"),
            "--expect100-timeout",
            "60",
            "-H",
            "Content-Type: application/json",
            "-H",
            "Expect: 100-continue",
            "--data-binary",
            f"@{path}",
            "-w",
            "\n%{http_code}",
            f"https://127.0.0.1:{server.port}/validate",
        ],
        capture_output=True,
        timeout=20 + ANSWER_WITHIN,
    )
    answer, _, code = result.stdout.rpartition(b"\n")
    assert result.returncode == 0 and code == b"200", result.stderr
    assert held(answer)
