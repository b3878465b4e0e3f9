"""A private CA and a serving certificate for the webhook, made with cryptography.

Keys are ECDSA P-256: small, and cheap to handshake with. The CA outlives many
serving certificates, so renewing the serving certificate never changes the
caBundle the API server trusts.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission.core.base.timefmt import format_time

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = timedelta(days=30)


@dataclass(frozen=True)
class CertFiles:
    """Where the PEM files live in a certificate directory."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> Path:
        return self.directory / "tls.key"


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach a Service, plus loopback."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
        "127.0.0.1",
    ]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def make_ca(
    now: datetime, common_name: str = "gate-admission-ca"
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA that can sign serving certificates only."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf_cert(
    ca_key: CertificateIssuerPrivateKeyTypes,
    ca_cert: x509.Certificate,
    common_name: str,
    usage: x509.ObjectIdentifier,
    now: datetime,
    days: int,
    names: list[str] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for one ``usage`` (server or client authentication), signed by the CA."""
    key = _key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(_san(names), critical=False)
    cert = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
    ).sign(ca_key, hashes.SHA256())
    return key, cert


def make_serving_cert(
    ca_key: CertificateIssuerPrivateKeyTypes,
    ca_cert: x509.Certificate,
    names: list[str],
    now: datetime,
    days: int = SERVING_DAYS,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A TLS server certificate for ``names`` (DNS names or IPs), signed by the CA."""
    return _leaf_cert(ca_key, ca_cert, names[0], ExtendedKeyUsageOID.SERVER_AUTH, now, days, names)


def make_client_cert(
    ca_key: CertificateIssuerPrivateKeyTypes,
    ca_cert: x509.Certificate,
    common_name: str,
    now: datetime,
    days: int = SERVING_DAYS,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A TLS client certificate (``clientAuth`` only) for ``common_name``, signed by the CA: what
    the API server presents to ``serve --client-ca-file`` (docs/operations.md)."""
    return _leaf_cert(ca_key, ca_cert, common_name, ExtendedKeyUsageOID.CLIENT_AUTH, now, days)


def _ca_key(pem: bytes) -> CertificateIssuerPrivateKeyTypes:
    # A CA key of a kind that cannot sign (X25519, DH) fails where it signs, with TypeError.
    return cast(CertificateIssuerPrivateKeyTypes, serialization.load_pem_private_key(pem, password=None))


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    # Write then rename, so a reader never sees half a file.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _needs_renewal(files: CertFiles, names: list[str], now: datetime, renew_before: timedelta) -> str | None:
    if not files.cert.exists() or not files.key.exists():
        return "no serving certificate"
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    except ValueError as err:
        return f"unreadable serving certificate: {err}"
    if cert.not_valid_after_utc - renew_before <= now:
        return f"serving certificate expires at {format_time(cert.not_valid_after_utc)}"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    have = {str(v) for v in sans.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in sans.get_values_for_type(x509.IPAddress)}
    missing = set(names) - have
    if missing:
        return f"serving certificate lacks names {sorted(missing)}"
    if files.ca_cert.exists():
        ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        if cert.issuer != ca.subject:
            return "serving certificate was not issued by ca.crt"
    return None


def ensure(
    directory: str | os.PathLike[str],
    names: list[str],
    now: datetime,
    renew_before: timedelta = RENEW_BEFORE,
    force: bool = False,
) -> tuple[CertFiles, str | None]:
    """Create the CA and serving certificate if missing or due (or ``force``); return the
    files and why the serving certificate was issued, None when it was left alone.

    Idempotent: a valid, current certificate for ``names`` is left alone.
    """
    files = CertFiles(Path(directory))
    files.directory.mkdir(parents=True, exist_ok=True)
    why = _needs_renewal(files, names, now, renew_before) or ("renewal requested" if force else None)
    if why is None:
        return files, None
    ca_usable = files.ca_cert.exists() and files.ca_key.exists()
    if ca_usable:
        ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        ca_key = _ca_key(files.ca_key.read_bytes())
        ca_usable = ca_cert.not_valid_after_utc - timedelta(days=SERVING_DAYS) > now
    if not ca_usable:
        ca_key, ca_cert = make_ca(now)
        _write(files.ca_key, _pem_key(ca_key), 0o600)
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    key, cert = make_serving_cert(ca_key, ca_cert, names, now)
    _write(files.key, _pem_key(key), 0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files, why


def issue_client(directory: str | os.PathLike[str], common_name: str, now: datetime) -> tuple[Path, Path]:
    """A client certificate for ``common_name`` signed by the CA in ``directory`` (``ca.crt``,
    ``ca.key``), written as ``client.crt`` and ``client.key`` there; their paths."""
    files = CertFiles(Path(directory))
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    ca_key = _ca_key(files.ca_key.read_bytes())
    key, cert = make_client_cert(ca_key, ca_cert, common_name, now)
    key_path, cert_path = files.directory / "client.key", files.directory / "client.crt"
    _write(key_path, _pem_key(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert_path, key_path
