"""Certificates kept in the cluster: Secrets for the CA and serving pair, caBundle injection."""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.kube.webhookconfig import ca_bundle
from admission.pki import approvalkey, certs

WEBHOOK_CONFIGURATION = "gate-admission"


def inject(api_client: client.ApiClient | None, pem: bytes, name: str = WEBHOOK_CONFIGURATION) -> list[str]:
    """Set caBundle on every webhook of both configurations called ``name``; return what changed."""
    api = client.AdmissionregistrationV1Api(api_client)
    bundle = ca_bundle(pem)
    changed: list[str] = []
    configurations: tuple[
        tuple[
            str,
            Callable[[str], client.V1ValidatingWebhookConfiguration | client.V1MutatingWebhookConfiguration],
            Callable[[str, list[dict[str, Any]]], object],
        ],
        ...,
    ] = (
        (
            "ValidatingWebhookConfiguration",
            api.read_validating_webhook_configuration,
            api.patch_validating_webhook_configuration,
        ),
        (
            "MutatingWebhookConfiguration",
            api.read_mutating_webhook_configuration,
            api.patch_mutating_webhook_configuration,
        ),
    )
    for kind, read, patch in configurations:
        config = read(name)
        hooks: Sequence[client.V1ValidatingWebhook | client.V1MutatingWebhook] = config.webhooks or []
        ops: list[dict[str, Any]] = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i, hook in enumerate(hooks)
            if hook.client_config.ca_bundle != bundle
        ]
        if ops:
            patch(name, ops)  # a list body is sent as a JSON patch
            changed += [f"{kind}/{name}/{hook.name}" for hook in hooks]
    return changed


def _read_secret(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, bytes] | None:
    try:
        secret = core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def _write_secret(
    core: client.CoreV1Api, namespace: str, name: str, kind: str, data: dict[str, bytes]
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gate-admission"},
        },
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    try:
        # The client validates a dict body into the model, as the API server reads it.
        core.replace_namespaced_secret(name, namespace, body)  # type: ignore[arg-type]
    except ApiException as err:
        if err.status != 404:
            raise
        core.create_namespaced_secret(namespace, body)  # type: ignore[arg-type]


def sync_secrets(
    api_client: client.ApiClient | None,
    namespace: str,
    secret: str,
    names: list[str],
    now: datetime,
    force: bool = False,
) -> tuple[bytes, str | None]:
    """Keep the serving pair in Secret ``secret`` (type kubernetes.io/tls, with ca.crt) and
    the CA in ``secret``-ca; issue or renew as ``certs.ensure`` would. Return the CA PEM and
    why the serving certificate was issued (None: left alone)."""
    core = client.CoreV1Api(api_client)
    with tempfile.TemporaryDirectory(prefix="gate-admission-certs-") as tmp:
        files = certs.CertFiles(Path(tmp))
        stored = {
            **(_read_secret(core, namespace, f"{secret}-ca") or {}),
            **(_read_secret(core, namespace, secret) or {}),
        }
        for key, path in (
            ("ca.crt", files.ca_cert),
            ("ca.key", files.ca_key),
            ("tls.crt", files.cert),
            ("tls.key", files.key),
        ):
            if key in stored:
                path.write_bytes(stored[key])
                path.chmod(0o600)
        files, why = certs.ensure(tmp, names, now, force=force)
        ca_pem = files.ca_cert.read_bytes()
        if why is not None:
            _write_secret(
                core,
                namespace,
                f"{secret}-ca",
                "Opaque",
                {"ca.crt": ca_pem, "ca.key": files.ca_key.read_bytes()},
            )
            _write_secret(
                core,
                namespace,
                secret,
                "kubernetes.io/tls",
                {"tls.crt": files.cert.read_bytes(), "tls.key": files.key.read_bytes(), "ca.crt": ca_pem},
            )
        return ca_pem, why


def ensure_approval_key(api_client: client.ApiClient | None, namespace: str, secret: str) -> bool:
    """Create Secret ``secret`` holding a new approval key unless it exists; never replace it
    (a new key leaves every live approval unverified). Whether it was created."""
    core = client.CoreV1Api(api_client)
    if _read_secret(core, namespace, secret) is not None:
        return False
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gate-admission"},
        },
        "data": {approvalkey.SECRET_KEY: base64.b64encode(approvalkey.new()).decode()},
    }
    try:
        core.create_namespaced_secret(namespace, body)  # type: ignore[arg-type]
    except ApiException as err:
        if err.status == 409:  # another Job made it first: theirs stays
            return False
        raise
    return True
