"""Plain-dict builders for Gates, GateKeepers, Flux objects and AdmissionReviews."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from typing import Any

import orjson

from admission.core.base import names
from admission.core.flux import kinds
from admission.webhook.app import MAX_BODY
from admission.webhook.review import MAX_CONTAINERS

_uids = itertools.count(1)

# Each gated kind at the version the table says is used (its newest served).
FLUX_API = {k.kind: f"{k.group}/{k.versions[0]}" for k in kinds.FLUX_KINDS}
FLUX_KINDS = tuple(FLUX_API)
FLUX_USER = {
    "username": "system:serviceaccount:flux-system:kustomize-controller",
    "groups": ["system:serviceaccounts", "system:authenticated"],
}
ALICE = {"username": "alice", "groups": ["developers", "system:authenticated"]}


def at(text: str) -> datetime:
    """A UTC instant from 'YYYY-MM-DDTHH:MM[:SS]'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def gate(name: str, namespace: str = "flux-system", annotations: dict | None = None, **spec: Any) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": names.GATING_API_VERSION, "kind": "Gate", "metadata": meta, "spec": spec}


# The webhook's approval key in tests: lookup_from verifies approvals with it, sealed() seals them.
APPROVAL_KEY = b"0123456789abcdef0123456789abcdef-test"


def probe_kustomization(namespace: str, gates: str, name: str = "gate-probe") -> dict:
    """A Kustomization our webhook gates by ``gates``, to send as a server-side dry-run: the
    webhook's answer shows the state of those gates as it sees them."""
    return {
        "apiVersion": FLUX_API["Kustomization"],
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace, "annotations": {names.GATES_ANNOTATION: gates}},
        "spec": {
            "interval": "10m",
            "path": "./",
            "prune": False,
            "sourceRef": {"kind": "GitRepository", "name": "gate-probe"},
        },
    }


def sealed(gate_obj: dict, key: bytes = APPROVAL_KEY) -> dict:
    """``gate_obj`` as the API server holds it after the webhook recorded its approvals: a uid
    (when it has none) and every approval annotation sealed for it (admission.core.gates.approvalseal)."""
    import json

    from admission.core.gates import approvals, approvalseal

    meta = gate_obj.setdefault("metadata", {})
    meta.setdefault("uid", f"uid-{meta.get('namespace')}-{meta.get('name')}")
    found = meta.get("annotations") or {}
    for k in approvals.keys(found):
        fields = json.loads(found[k])
        fields[approvalseal.FIELD] = approvalseal.seal(key, meta["uid"], k, fields)
        found[k] = json.dumps(fields)
    return gate_obj


def keeper(
    name: str,
    gate_name: str,
    closed: list | None = None,
    opened: list | None = None,
    namespace: str = "flux-system",
    **spec: Any,
) -> dict:
    cronjob: dict[str, Any] = {}
    if closed is not None:
        cronjob["closed"] = closed
    if opened is not None:
        cronjob["opened"] = opened
    return {
        "apiVersion": names.GATING_API_VERSION,
        "kind": "GateKeeper",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gate": gate_name, "cronjob": cronjob, **spec},
    }


def flux(
    kind: str = "Kustomization",
    name: str = "podinfo",
    namespace: str = "apps",
    *,
    gates: str | None = None,
    require: str | None = None,
    annotations: dict | None = None,
    spec: dict | None = None,
    status: dict | None = None,
    labels: dict | None = None,
) -> dict:
    ann = dict(annotations or {})
    if gates is not None:
        ann[names.GATES_ANNOTATION] = gates
    if require is not None:
        ann[names.REQUIRE_ANNOTATION] = require
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if ann:
        meta["annotations"] = ann
    if labels:
        meta["labels"] = dict(labels)
    obj = {
        "apiVersion": FLUX_API[kind],
        "kind": kind,
        "metadata": meta,
        "spec": spec if spec is not None else {"interval": "10m", "path": "./deploy"},
    }
    if status is not None:
        obj["status"] = status
    return obj


def applied_live(manifest: dict, status: dict | None = None) -> dict:
    """``manifest`` as the API server keeps it after `kubectl apply`: the last-applied copy,
    uid, resourceVersion and generation, and ``status`` when given."""
    import json

    live = copy.deepcopy(manifest)
    live["metadata"].setdefault("annotations", {})[names.LAST_APPLIED_ANNOTATION] = json.dumps(manifest)
    live["metadata"].update(uid="uid-live", resourceVersion="42", generation=3)
    if status is not None:
        live["status"] = status
    return live


def changed(obj: dict, **spec_updates: Any) -> dict:
    new = copy.deepcopy(obj)
    new["spec"].update(spec_updates)
    return new


def request(
    operation: str,
    new: dict | None = None,
    old: dict | None = None,
    *,
    sub_resource: str = "",
    user: dict | None = None,
    dry_run: bool = False,
) -> dict:
    obj = new if new is not None else old
    api, _, version = obj["apiVersion"].partition("/")
    req: dict[str, Any] = {
        "uid": f"uid-{next(_uids)}",
        "kind": {"group": api, "version": version, "kind": obj["kind"]},
        "resource": {"group": api, "version": version, "resource": obj["kind"].lower() + "s"},
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"]["namespace"],
        "operation": operation,
        "userInfo": copy.deepcopy(user or ALICE),
        "object": new,
        "oldObject": old,
        "dryRun": dry_run,
    }
    if sub_resource:
        req["subResource"] = sub_resource
    return req


def review(req: dict, api_version: str = "admission.k8s.io/v1") -> dict:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": req}


def lookup_from(gate_objects: list[dict] = (), keeper_objects: list[dict] = ()):
    """A gate lookup over plain dicts, evaluated afresh each call (no caching)."""
    from admission.core.gates.gates import evaluate_gate, not_found

    by_key = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in gate_objects}

    def lookup(namespace, name, now):
        obj = by_key.get((namespace, name))
        return evaluate_gate(obj, keeper_objects, now, APPROVAL_KEY) if obj else not_found(namespace, name)

    return lookup


def padded_to_the_limit(doc: dict) -> bytes:
    """An UPDATE review (not changed: padded copies) made as large as the server accepts and as
    costly to decode: as many empty lists as the review's limit on arrays and objects allows,
    split between its objects, then a long string up to the body limit."""
    doc = copy.deepcopy(doc)
    base = orjson.dumps(doc)
    lists = (MAX_CONTAINERS - base.count(b"[") - base.count(b"{") - 8) // 2
    room = (MAX_BODY - len(base) - 1024) // 2 - 3 * lists
    for obj in (doc["request"]["object"], doc["request"]["oldObject"]):
        obj["spec"]["padding"] = [[]] * lists
        obj["spec"]["note"] = "a" * room
    raw = orjson.dumps(doc)
    assert MAX_BODY - 4096 < len(raw) <= MAX_BODY, len(raw)
    return raw


def calendar_status(
    calendar: dict,
    fetched: datetime,
    events: list[tuple[str, str]] | None = None,
    *,
    keeper_zone: str | None = None,
    complete_until: datetime | None = None,
    error: str | None = None,
    previous: dict | None = None,
) -> dict:
    """The ``status.calendars`` entry the controller writes for ``calendar`` (a spec entry)
    fetched at ``fetched``: ``events`` as ('YYYY-MM-DDTHH:MM', 'YYYY-MM-DDTHH:MM') UTC spans,
    complete until ``complete_until`` (default: the controller's horizon), or an ``error``."""
    from datetime import timedelta

    from admission.core.time.subscriptions import HORIZON, FeedEvent, parse_calendar, status_entry

    cal = parse_calendar(calendar, time_zone=keeper_zone)
    if error is not None:
        return status_entry(cal, previous, fetched, error=error)
    listed = [FeedEvent(at(a), at(b), f"uid-{i}", f"event {i}") for i, (a, b) in enumerate(events or [])]
    return status_entry(
        cal,
        previous,
        fetched,
        events=listed,
        complete_until=complete_until or fetched + HORIZON + timedelta(0),
    )


def calendar_keeper(
    name: str,
    gate_name: str,
    calendars: list[dict],
    statuses: list[dict] | None = None,
    namespace: str = "flux-system",
    **spec: Any,
) -> dict:
    """A GateKeeper following ``calendars``, with ``statuses`` (calendar_status) as the controller wrote them."""
    obj = keeper(name, gate_name, namespace=namespace, **spec)
    obj["spec"]["calendars"] = calendars
    if statuses is not None:
        obj["status"] = {"calendars": statuses}
    return obj


def kustomization_status_review(entries: int = 1200) -> bytes:
    """The status write kustomize-controller makes when it starts on a new revision of a gated
    Kustomization that applies ``entries`` objects: an UPDATE of ``kustomizations/status`` whose
    objects carry the whole status (an inventory entry per object, conditions, history) and
    managed fields, as the API server sends it. 1,200 entries make about 132 KB."""
    revision_a, revision_b = "main@sha1:" + "41ab" * 10, "main@sha1:" + "9f2c" * 10
    kinds_applied = ("apps_Deployment", "_Service", "_ConfigMap", "policy_PodDisruptionBudget")
    inventory = {
        "entries": [{"id": f"apps_podinfo-{i:06d}_{kinds_applied[i % 4]}", "v": "v1"} for i in range(entries)]
    }
    managed = [
        {
            "manager": "kustomize-controller",
            "operation": "Update",
            "apiVersion": FLUX_API["Kustomization"],
            "time": "2026-06-10T11:59:00Z",
            "fieldsType": "FieldsV1",
            "subresource": "status",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {},
                    "f:inventory": {"f:entries": {}},
                    "f:lastAppliedRevision": {},
                    "f:lastAttemptedRevision": {},
                }
            },
        }
    ]

    def kustomization(attempted: str, ready: tuple[str, str, str]) -> dict:
        obj = flux(
            gates="flux-system/sre-approval",
            spec={
                "interval": "10m",
                "path": "./deploy",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"},
            },
            status={
                "observedGeneration": 3,
                "lastAppliedRevision": revision_a,
                "lastAttemptedRevision": attempted,
                "inventory": inventory,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": ready[0],
                        "reason": ready[1],
                        "message": ready[2],
                        "lastTransitionTime": "2026-06-10T11:59:00Z",
                        "observedGeneration": 3,
                    }
                ],
                "history": [
                    {
                        "digest": "sha256:" + "e3b0" * 16,
                        "firstReconciled": "2026-06-01T00:00:00Z",
                        "lastReconciled": "2026-06-10T11:59:00Z",
                        "lastReconciledDuration": "2.1s",
                        "lastReconciledStatus": "ReconciliationSucceeded",
                        "totalReconciliations": 812,
                        "metadata": {"revision": revision_a},
                    }
                ],
            },
        )
        obj["metadata"].update(
            uid="5d9c2f3e-0000-4000-8000-000000000001",
            resourceVersion="48213",
            generation=3,
            managedFields=copy.deepcopy(managed),
        )
        return obj

    old = kustomization(revision_a, ("True", "ReconciliationSucceeded", f"Applied revision: {revision_a}"))
    new = kustomization(
        revision_b,
        ("Unknown", "Progressing", f"Building manifests for revision {revision_b} with a timeout of 9m30s"),
    )
    doc = review(request("UPDATE", new, old, sub_resource="status", user=FLUX_USER))
    return orjson.dumps(doc)


def generated_chart(artifact: dict, **fields: Any) -> dict:
    """The HelmChart helm-controller generates for HelmRelease apps/podinfo (named
    ``<namespace>-<name>`` in its source's namespace, labelled with its release) serving ``artifact``."""
    from tests.matching_cases import OWNER

    return flux(
        "HelmChart",
        name="apps-podinfo",
        namespace="flux-system",
        labels=OWNER,
        status={"artifact": artifact},
        **fields,
    )
