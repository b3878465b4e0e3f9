"""YAML for the Flux objects the end-to-end tests apply, and our webhook configurations pointed at a test server."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import yaml

from admission.core.base.timefmt import format_time


def now_rfc3339() -> str:
    return format_time(datetime.now(UTC))


def _meta(
    name: str, namespace: str, gates: str | None, require: str | None, annotations: dict | None
) -> dict:
    ann = dict(annotations or {})
    if gates:
        ann["gating.toolkit.fluxcd.io/gates"] = gates
    if require:
        ann["gating.toolkit.fluxcd.io/require"] = require
    meta = {"name": name, "namespace": namespace}
    if ann:
        meta["annotations"] = ann
    return meta


def kustomization(
    name: str,
    namespace: str = "apps",
    *,
    gates: str | None = None,
    require: str | None = None,
    path: str = "./deploy",
    annotations: dict | None = None,
    spec_gates: object = None,
    **spec,
) -> str:
    body = {
        "interval": "10m",
        "path": path,
        "prune": True,
        "sourceRef": {"kind": "GitRepository", "name": "podinfo", "namespace": "flux-system"},
        **spec,
    }
    if spec_gates is not None:
        body["gates"] = spec_gates
    return yaml.safe_dump(
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": _meta(name, namespace, gates, require, annotations),
            "spec": body,
        }
    )


def git_repository(
    name: str, namespace: str = "flux-system", *, gates: str | None = None, require: str | None = None
) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": _meta(name, namespace, gates, require, None),
            "spec": {
                "interval": "1m",
                "url": "https://github.com/stefanprodan/podinfo",
                "ref": {"branch": "master"},
            },
        }
    )


def oci_repository(name: str, namespace: str = "flux-system", *, gates: str | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": _meta(name, namespace, gates, None, None),
            "spec": {
                "interval": "5m",
                "url": "oci://registry.example/stefanprodan/manifests/podinfo",
                "ref": {"semver": "6.0.x"},
            },
        }
    )


def helm_release(
    name: str, namespace: str = "apps", *, gates: str | None = None, version: str = "6.0.x"
) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": _meta(name, namespace, gates, None, None),
            "spec": {
                "interval": "10m",
                "chart": {
                    "spec": {
                        "chart": "podinfo",
                        "version": version,
                        "sourceRef": {
                            "kind": "HelmRepository",
                            "name": "podinfo",
                            "namespace": "flux-system",
                        },
                    }
                },
            },
        }
    )


def artifact_patch(revision: str) -> str:
    digest = "sha256:" + (revision.encode().hex() * 64)[:64]
    return json.dumps(
        {
            "status": {
                "artifact": {
                    "revision": revision,
                    "digest": digest,
                    "path": f"x/{revision}.tar.gz",
                    "size": 1000,
                    "url": f"http://source-controller.flux-system.svc.cluster.local./x/{revision}.tar.gz",
                    "lastUpdateTime": now_rfc3339(),
                }
            }
        }
    )


def with_client_config(doc: dict, bundle: str, url_base: str | None = None) -> dict:
    """A copy of a webhook configuration with ``caBundle`` set, and the Service replaced by
    ``url_base`` + its path (the test server runs outside the cluster)."""
    if doc.get("kind") not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        return doc
    out = copy.deepcopy(doc)
    for hook in out.get("webhooks") or []:
        client = hook.setdefault("clientConfig", {})
        client["caBundle"] = bundle
        if url_base is not None:
            service = client.pop("service", None) or {}
            client["url"] = url_base.rstrip("/") + service.get("path", "/")
    return out
