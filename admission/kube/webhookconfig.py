"""The webhook configurations' caBundle: the CA that signs the server's certificate."""

from __future__ import annotations

import base64


def ca_bundle(pem: bytes) -> str:
    """The caBundle field value for a PEM CA certificate."""
    return base64.b64encode(pem).decode("ascii")
