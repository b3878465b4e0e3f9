"""The webhook configurations: point them at a server and give them its CA bundle."""

from __future__ import annotations

import base64
import copy

KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def ca_bundle(pem: bytes) -> str:
    """The caBundle field value for a PEM CA certificate."""
    return base64.b64encode(pem).decode("ascii")


def with_client_config(doc: dict, bundle: str, url_base: str | None = None) -> dict:
    """A copy of a webhook configuration with ``caBundle`` set, and the Service replaced by
    ``url_base`` + its path when the server runs outside the cluster."""
    if doc.get("kind") not in KINDS:
        return doc
    out = copy.deepcopy(doc)
    for hook in out.get("webhooks") or []:
        client = hook.setdefault("clientConfig", {})
        client["caBundle"] = bundle
        if url_base is not None:
            service = client.pop("service", None) or {}
            client["url"] = url_base.rstrip("/") + service.get("path", "/")
    return out
