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
from tests.processes import serving_gates_dir

HELD = flux(gates="flux-system/sre-approval")
BODY = orjson.dumps(review(request("UPDATE", changed(HELD, path="./b"), HELD)))


def client_ca(directory: Path, name: str) -> Path:
    """A CA (ca.crt, ca.key) in ``directory`` and a client certificate it signed for ``name``."""
    directory.mkdir()
    key, cert = certs.make_ca(utcnow(), common_name=f"{name}-ca")
    (directory / "ca.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    (directory / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    certs.issue_client(directory, name, utcnow())
    return directory


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client-certs")
    trusted = client_ca(tmp / "apiserver", "kube-apiserver")
    with serving_gates_dir(tmp, [gate("sre-approval", default="closed")], "--workers", "1",
                           "--client-ca-file", str(trusted / "ca.crt")) as srv:
        srv.trusted, srv.rogue = trusted, client_ca(tmp / "rogue", "kube-apiserver")
        yield srv


def post(server, path: str, cert_dir: Path | None = None, method: str = "POST") -> tuple[int, bytes]:
    context = server.tls()
    if cert_dir is not None:
        context.load_cert_chain(str(cert_dir / "client.crt"), str(cert_dir / "client.key"))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        conn.request(method, path, body=BODY if method == "POST" else None, headers={"Content-Type": "application/json"})
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
