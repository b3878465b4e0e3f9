"""`serve --client-ca-file`: the API server authenticates with a client certificate (its
AdmissionConfiguration kubeconfig). Certificates come from our own admission.pki; the server is
the real `gate-admission serve` over TLS."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives import serialization

from admission.clock import utcnow
from admission.pki import certs
from tests.builders import changed, flux, gate, request, review
from tests.polling import until
from tests.processes import serving_gates_dir
from tests.server.wire import raw_connect, read_answer

HELD = flux(gates="flux-system/sre-approval")
BODY = orjson.dumps(review(request("UPDATE", changed(HELD, path="./b"), HELD)))


def client_ca(directory: Path, name: str) -> Path:
    """A CA (ca.crt, ca.key) in ``directory`` and a client certificate it signed for ``name``."""
    directory.mkdir()
    key, cert = certs.make_ca(utcnow(), common_name=f"{name}-ca")
    (directory / "ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (directory / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    certs.issue_client(directory, name, utcnow())
    return directory


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client-certs")
    trusted = client_ca(tmp / "apiserver", "kube-apiserver")
    with serving_gates_dir(
        tmp,
        [gate("sre-approval", default="closed")],
        "--workers",
        "1",
        "--client-ca-file",
        str(trusted / "ca.crt"),
        "--board",
    ) as srv:
        srv.trusted, srv.rogue = trusted, client_ca(tmp / "rogue", "kube-apiserver")
        yield srv


def post(server, path: str, cert_dir: Path | None = None, method: str = "POST") -> tuple[int, bytes]:
    context = server.tls()
    if cert_dir is not None:
        context.load_cert_chain(str(cert_dir / "client.crt"), str(cert_dir / "client.key"))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        conn.request(
            method,
            path,
            body=BODY if method == "POST" else None,
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_client_without_a_certificate_is_refused_reviews(server):
    for path in ("/validate", "/mutate", "/validate?timeout=10s", "/%76alidate", "//validate"):
        status, body = post(server, path)
        assert status == 403 and b"client certificate" in body, (path, status, body)


def test_a_client_with_a_certificate_from_the_ca_is_served(server):
    status, body = post(server, "/validate", server.trusted)
    answer = orjson.loads(body)["response"]
    assert status == 200 and answer["allowed"] is False and "sre-approval" in answer["status"]["message"]


def test_a_certificate_from_another_ca_fails_the_handshake(server):
    with pytest.raises((ssl.SSLError, ConnectionError)):
        post(server, "/validate", server.rogue)


def test_probes_metrics_and_the_calendar_need_no_certificate(server):
    for path in ("/healthz", "/readyz", "/metrics"):
        assert post(server, path, method="GET")[0] == 200, path
    assert post(server, "/calendar.ics", method="GET")[0] in (200, 503)  # its first build may still run


def test_a_team_screen_reads_the_board_without_a_certificate_and_changes_nothing(server):
    for path in ("/board", "/board/fragment", "/board/static/board.css"):
        # While the worker rests after a drawing, a view it has not drawn yet answers 503 with a
        # page that asks again (docs/decisions/0073): polled, as that page does.
        status = until(
            lambda path=path: post(server, path, method="GET")[0],
            lambda s: s != 503,
            timeout=30,
            interval=0.5,
        )
        assert status == 200, path
    status, body = post(server, "/board/actions/open")  # public, read-only: refused by the board
    assert status == 403 and b"refused" in body


def raw(server, target: str, headers: dict[str, str], cert_dir: Path | None = None) -> tuple[int, dict]:
    """POST the review to ``target`` spelled exactly so (http.client would tidy it), with ``headers``."""
    context = server.tls()
    if cert_dir is not None:
        context.load_cert_chain(str(cert_dir / "client.crt"), str(cert_dir / "client.key"))
    sock = context.wrap_socket(raw_connect(server), server_hostname="localhost")
    try:
        fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        sock.sendall(
            f"POST {target} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{fields}"
            f"Content-Length: {len(BODY)}\r\n\r\n".encode()
            + BODY
        )
        head, body = read_answer(sock)
        return int(head.split(b" ")[1]), orjson.loads(body)
    finally:
        sock.close()


# A public path that becomes /validate or /mutate once the WSGI server strips a SCRIPT_NAME header.
SCRIPT_NAMES = [
    (f"/hooks/gates/{route}", {spelling: "/hooks/gates"})
    for route in ("validate", "mutate")
    for spelling in ("SCRIPT_NAME", "Script_Name", "script_name")
]
# Other spellings of a review path: each must be refused, never routed to a review.
OTHER_FORMS = [
    "//validate",
    "/./validate",
    "/hooks/gates/../../validate",
    "/hooks/gates/%2e%2e/%2e%2e/validate",
    "/hooks/gates/x/..%2F..%2F..%2Fvalidate",
    "/%76alidate",
    "/validate/",
    "https://localhost/validate",
    "http://localhost/hooks/gates/../../mutate",
    "/hooks//gates/x/y/open",
    "/hooks/gates/./x/y/open",
]


@pytest.mark.parametrize("target, headers", SCRIPT_NAMES + [(form, {}) for form in OTHER_FORMS])
def test_no_spelling_of_a_review_path_or_routing_header_passes_without_a_certificate(server, target, headers):
    status, answer = raw(server, target, headers)
    assert status in (400, 403) and "response" not in answer and answer["error"], (status, answer)


@pytest.mark.parametrize("target, headers", SCRIPT_NAMES + [(form, {}) for form in OTHER_FORMS])
def test_a_certified_client_is_told_its_target_or_header_is_refused(server, target, headers):
    status, answer = raw(server, target, headers, server.trusted)
    assert status == 400 and "response" not in answer, (status, answer)
    assert ("header" in answer["error"]) if headers else ("path" in answer["error"]), answer


def test_the_public_receiver_path_still_needs_no_certificate(server):
    status, answer = raw(server, "/hooks/gates/flux-system/sre-approval/open", {})
    assert status != 403 and "client certificate" not in answer.get("error", ""), (status, answer)
