"""Certificates made by our own code: names, chain, idempotence, renewal."""

from datetime import timedelta

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from admission.pki import certs
from tests.builders import at

NOW = at("2026-06-10T12:00")
NAMES = certs.service_names("gate-admission", "flux-system")


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_service_names_cover_every_way_to_reach_the_service():
    assert NAMES == [
        "gate-admission",
        "gate-admission.flux-system",
        "gate-admission.flux-system.svc",
        "gate-admission.flux-system.svc.cluster.local",
        "localhost",
        "127.0.0.1",
    ]


def test_ensure_creates_a_ca_and_a_serving_certificate_it_signed(tmp_path):
    files, why = certs.ensure(tmp_path, NAMES, NOW)
    assert why == "no serving certificate"
    ca, leaf = load(files.ca_cert), load(files.cert)
    assert leaf.issuer == ca.subject
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (
        ExtendedKeyUsageOID.SERVER_AUTH
        in leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    )
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(NAMES[:-1])
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert (
        oct(files.key.stat().st_mode & 0o777) == "0o600"
        and oct(files.ca_key.stat().st_mode & 0o777) == "0o600"
    )


def test_ensure_is_idempotent(tmp_path):
    files, _ = certs.ensure(tmp_path, NAMES, NOW)
    before = files.cert.read_bytes(), files.ca_cert.read_bytes()
    _, why = certs.ensure(tmp_path, NAMES, NOW + timedelta(days=100))
    assert why is None and (files.cert.read_bytes(), files.ca_cert.read_bytes()) == before


def test_renewal_before_expiry_keeps_the_ca(tmp_path):
    files, _ = certs.ensure(tmp_path, NAMES, NOW)
    ca_before, leaf_before = files.ca_cert.read_bytes(), files.cert.read_bytes()
    _, why = certs.ensure(tmp_path, NAMES, NOW + timedelta(days=340))
    assert why and "expires" in why
    assert files.ca_cert.read_bytes() == ca_before and files.cert.read_bytes() != leaf_before
    load(files.cert).verify_directly_issued_by(load(files.ca_cert))


def test_new_names_reissue_the_certificate(tmp_path):
    certs.ensure(tmp_path, NAMES, NOW)
    _, why = certs.ensure(tmp_path, NAMES + ["webhook.example.com"], NOW)
    assert why == "serving certificate lacks names ['webhook.example.com']"


def test_an_unreadable_certificate_is_replaced(tmp_path):
    files, _ = certs.ensure(tmp_path, NAMES, NOW)
    files.cert.write_text("garbage")
    _, why = certs.ensure(tmp_path, NAMES, NOW)
    assert why.startswith("unreadable serving certificate")
    load(files.cert)
