"""One table of requests, and which of our endpoints the API server should call for each with
the matchConditions of manifests/webhooks. The unit test (tests/unit/test_matching.py) holds
the Python predicate to it; the end-to-end test (tests/e2e/test_match_conditions.py) makes each
request on a real kube-apiserver and holds what reached our server to the Python predicate."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from admission.core.base import names
from tests.builders import FLUX_API, gate, request
from tests.doubles.mergepatch import merged

OPEN_GATE = "flux-system/open"  # a gate that is open: every write in the table is allowed
NS = "apps"
CHARTS_NS = "flux-system"
SPECS: dict[str, dict] = {
    "Kustomization": {
        "interval": "10m",
        "path": "./deploy",
        "prune": False,
        "sourceRef": {"kind": "GitRepository", "name": "podinfo", "namespace": "flux-system"},
    },
    "GitRepository": {"interval": "1m", "url": "https://example.com/repo.git", "ref": {"branch": "main"}},
    "HelmChart": {
        "interval": "1m",
        "chart": "podinfo",
        "version": "*",
        "sourceRef": {"kind": "HelmRepository", "name": "podinfo"},
    },
    "HelmRelease": {
        "interval": "10m",
        "chart": {
            "spec": {
                "chart": "podinfo",
                "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"},
            }
        },
    },
    "ImageRepository": {"interval": "5m", "image": "registry.example/podinfo"},
}
TIME = "2026-06-10T10:00:00Z"


def artifact(revision: str) -> dict:
    digest = "sha256:" + (revision.encode().hex() * 64)[:64]
    return {
        "revision": revision,
        "digest": digest,
        "path": f"x/{revision}.tar.gz",
        "size": 10,
        "url": f"http://source-controller/x/{revision}.tar.gz",
        "lastUpdateTime": TIME,
    }


def condition(kind: str, status: str = "True", reason: str = "Succeeded") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": "m", "lastTransitionTime": TIME}


def obj(
    kind: str,
    name: str,
    *,
    namespace: str = NS,
    annotations: dict | None = None,
    labels: dict | None = None,
    spec: dict | None = None,
    status: dict | None = None,
) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    out = {
        "apiVersion": FLUX_API[kind],
        "kind": kind,
        "metadata": meta,
        "spec": {**SPECS[kind], **(spec or {})},
    }
    if status is not None:
        out["status"] = status
    return out


@dataclass(frozen=True)
class Case:
    """A request on one object: CREATE of ``change``; UPDATE of ``stored`` by the merge patch
    ``change`` (of ``/status`` when ``status``); DELETE of ``stored``. ``setup``: merge patches
    (status?, patch) that turn the created object into ``stored`` when it cannot be written
    directly (our own mutation would change it on the way)."""

    id: str
    operation: str
    stored: dict | None
    change: dict | None = None
    status: bool = False
    validate: bool = False  # the API server calls /validate
    mutate: bool = False  # the API server calls /mutate
    setup: tuple[tuple[bool, dict], ...] = field(default=())

    def request(self, stored: dict | None = None) -> dict:
        """The AdmissionRequest, from ``stored`` as read back from a cluster when given."""
        old = stored if stored is not None else self.stored
        if self.operation == "CREATE":
            return request("CREATE", copy.deepcopy(self.change))
        if self.operation == "DELETE":
            return request("DELETE", None, copy.deepcopy(old))
        return request(
            "UPDATE",
            merged(old, self.change),
            copy.deepcopy(old),
            sub_resource="status" if self.status else "",
        )


GATED = {names.GATES_ANNOTATION: OPEN_GATE}
SPEC_GATES = {"gates": [{"name": "open", "namespace": "flux-system"}]}
OWNER = {names.HELM_NAME_LABEL: "podinfo", names.HELM_NAMESPACE_LABEL: NS}
REMOVE_GATES = {"metadata": {"annotations": {names.GATES_ANNOTATION: None}}}
EDIT = {"spec": {"interval": "11m"}}
READY = {"status": {"conditions": [condition("Ready")]}}


# Gates and their approvals (the approvals entries, docs/decisions/0057): the value is one a
# client writes, which the mutating entry stamps on a real API server.
APPROVAL = names.APPROVAL_ANNOTATION_PREFIX + "0123456789abcdef"
APPROVAL_OTHER = names.APPROVAL_ANNOTATION_PREFIX + "fedcba9876543210"


def approval(content: str) -> str:
    return f'{{"content":"{content}","for":"*","message":"CHG-1"}}'


def a_gate(name: str, annotations: dict | None = None) -> dict:
    return gate(name, NS, annotations, default="closed")


def _annotate(annotations: dict) -> dict:
    return {"metadata": {"annotations": annotations}}


def _artifact_write(revision: str) -> dict:
    return {"status": {"artifact": artifact(revision)}}


CASES: tuple[Case, ...] = (
    # Main resources: creations.
    Case("create plain", "CREATE", None, obj("Kustomization", "c-plain")),
    Case(
        "create with the gates annotation",
        "CREATE",
        None,
        obj("Kustomization", "c-gated", annotations=GATED),
        validate=True,
        mutate=True,
    ),
    Case(
        "create with spec.gates",
        "CREATE",
        None,
        obj("Kustomization", "c-spec-gates", spec=SPEC_GATES),
        validate=True,
        mutate=True,
    ),
    Case(
        "create with only the require annotation",
        "CREATE",
        None,
        obj("Kustomization", "c-require", annotations={names.REQUIRE_ANNOTATION: "oneOf"}),
        validate=True,
        mutate=True,
    ),
    Case(
        "create suspended by annotation",
        "CREATE",
        None,
        obj("GitRepository", "c-suspended", annotations={names.SUSPENDED_ANNOTATION: "maintenance"}),
        validate=True,
        mutate=True,
    ),
    Case(
        "create with suspendDuring",
        "CREATE",
        None,
        obj("GitRepository", "c-during", annotations={names.SUSPEND_DURING_ANNOTATION: "@never"}),
        validate=True,
        mutate=True,
    ),
    Case(
        "create with suspendedDuring",
        "CREATE",
        None,
        obj("HelmRelease", "c-alias", annotations={names.SUSPENDED_DURING_ANNOTATION: "@never"}),
        validate=True,
        mutate=True,
    ),
    Case(
        "create with spec.suspend", "CREATE", None, obj("Kustomization", "c-suspend", spec={"suspend": True})
    ),
    Case(
        "create with unrelated annotations and labels",
        "CREATE",
        None,
        obj("GitRepository", "c-other", annotations={"example.com/x": "1"}, labels={"team": "a"}),
    ),
    # Main resources: updates.
    Case("edit plain", "UPDATE", obj("Kustomization", "u-plain"), EDIT),
    Case(
        "edit gated",
        "UPDATE",
        obj("Kustomization", "u-gated", annotations=GATED),
        EDIT,
        validate=True,
        mutate=True,
    ),
    Case(
        "add a reference",
        "UPDATE",
        obj("Kustomization", "u-add"),
        {"metadata": {"annotations": GATED}},
        validate=True,
        mutate=True,
    ),
    Case(
        "remove the gates annotation",
        "UPDATE",
        obj("Kustomization", "u-remove", annotations=GATED),
        REMOVE_GATES,
        validate=True,
        mutate=True,
    ),
    Case(
        "remove spec.gates",
        "UPDATE",
        obj("HelmRelease", "u-remove-spec", spec=SPEC_GATES),
        {"spec": {"gates": None}},
        validate=True,
        mutate=True,
    ),
    Case("suspend a plain object", "UPDATE", obj("GitRepository", "u-suspend"), {"spec": {"suspend": True}}),
    Case(
        "edit a generated HelmChart",
        "UPDATE",
        obj(
            "HelmChart",
            "apps-edited",
            namespace=CHARTS_NS,
            labels={names.HELM_NAME_LABEL: "edited", names.HELM_NAMESPACE_LABEL: NS},
        ),
        {"spec": {"version": "6.x"}},
    ),
    # Main resources: deletions (object is null; the mutating entries are not registered).
    Case("delete plain", "DELETE", obj("Kustomization", "d-plain")),
    Case("delete gated", "DELETE", obj("Kustomization", "d-gated", annotations=GATED), validate=True),
    Case(
        "delete with spec.gates",
        "DELETE",
        obj("GitRepository", "d-spec-gates", spec=SPEC_GATES),
        validate=True,
    ),
    # Status writes.
    Case(
        "status of a plain Kustomization",
        "UPDATE",
        obj("Kustomization", "s-plain"),
        {"status": {"lastAttemptedRevision": "main@sha1:b"}},
        status=True,
    ),
    Case(
        "status of a gated Kustomization",
        "UPDATE",
        obj("Kustomization", "s-gated", annotations=GATED),
        {"status": {"lastAttemptedRevision": "main@sha1:b"}},
        status=True,
        validate=True,
        mutate=True,
    ),
    Case(
        "artifact of a plain source",
        "UPDATE",
        obj("GitRepository", "s-source"),
        _artifact_write("main@sha1:b"),
        status=True,
    ),
    Case(
        "artifact of a gated source",
        "UPDATE",
        obj("GitRepository", "s-gated-source", annotations=GATED),
        _artifact_write("main@sha1:b"),
        status=True,
        validate=True,
        mutate=True,
    ),
    Case(
        "artifact of a source with spec.gates",
        "UPDATE",
        obj("GitRepository", "s-spec-gates", spec=SPEC_GATES),
        _artifact_write("main@sha1:b"),
        status=True,
        validate=True,
        mutate=True,
    ),
    Case(
        "status of a source suspended during a schedule",
        "UPDATE",
        obj("GitRepository", "s-during", annotations={names.SUSPEND_DURING_ANNOTATION: "@never"}),
        READY,
        status=True,
        validate=True,
        mutate=True,
    ),
    Case("status of a plain HelmRelease", "UPDATE", obj("HelmRelease", "s-release"), READY, status=True),
    Case(
        "status with spec.suspend",
        "UPDATE",
        obj("GitRepository", "s-suspend", spec={"suspend": True}),
        READY,
        status=True,
        mutate=True,
    ),
    Case(
        "status with status.suspended left true after a resume",
        "UPDATE",
        obj("GitRepository", "s-resumed", status={"suspended": True}),
        READY,
        status=True,
        mutate=True,
        setup=((False, {"spec": {"suspend": True}}), (True, READY), (False, {"spec": {"suspend": False}})),
    ),
    Case(
        "status with status.suspended false",
        "UPDATE",
        obj("GitRepository", "s-false", status={"suspended": False}),
        READY,
        status=True,
    ),
    Case(
        "status of a kind without content, spec.suspend",
        "UPDATE",
        obj("ImageRepository", "s-image", spec={"suspend": True}),
        READY,
        status=True,
        mutate=True,
    ),
    Case(
        "status of a kind without content, plain",
        "UPDATE",
        obj("ImageRepository", "s-image-plain"),
        READY,
        status=True,
    ),
    Case(
        "a Blocked condition on an object that references nothing",
        "UPDATE",
        obj("GitRepository", "s-blocked"),
        {"status": {"conditions": [condition(names.BLOCKED_CONDITION, reason=names.GATE_CLOSED_REASON)]}},
        status=True,
        mutate=True,
    ),
    Case(
        "status of a generated HelmChart",
        "UPDATE",
        obj("HelmChart", "apps-podinfo", namespace=CHARTS_NS, labels=OWNER),
        _artifact_write("6.5.1"),
        status=True,
        validate=True,
        mutate=True,
    ),
    Case(
        "status of a generated HelmChart that references a gate itself",
        "UPDATE",
        obj(
            "HelmChart",
            "apps-gated",
            namespace=CHARTS_NS,
            annotations=GATED,
            labels={names.HELM_NAME_LABEL: "gated", names.HELM_NAMESPACE_LABEL: NS},
        ),
        _artifact_write("6.5.1"),
        status=True,
        validate=True,
        mutate=True,
    ),
    Case(
        "status of a HelmChart a release deployed (its labels, another name)",
        "UPDATE",
        obj("HelmChart", "deployed", namespace=CHARTS_NS, labels=OWNER),
        _artifact_write("6.5.1"),
        status=True,
    ),
    Case(
        "status of a HelmChart without labels",
        "UPDATE",
        obj("HelmChart", "apps-unlabelled", namespace=CHARTS_NS),
        _artifact_write("6.5.1"),
        status=True,
    ),
    # Gates: only a write that adds an approval or changes one is sent (both approvals entries).
    Case("create a gate", "CREATE", None, a_gate("g-plain")),
    Case(
        "create a gate with an approval",
        "CREATE",
        None,
        a_gate("g-approved", {APPROVAL: approval("main@sha1:b")}),
        validate=True,
        mutate=True,
    ),
    Case(
        "add an approval",
        "UPDATE",
        a_gate("g-add"),
        _annotate({APPROVAL: approval("main@sha1:b")}),
        validate=True,
        mutate=True,
    ),
    Case(
        "add a second approval",
        "UPDATE",
        a_gate("g-second", {APPROVAL: approval("main@sha1:b")}),
        _annotate({APPROVAL_OTHER: approval("main@sha1:c")}),
        validate=True,
        mutate=True,
    ),
    Case(
        "change an approval",
        "UPDATE",
        a_gate("g-change", {APPROVAL: approval("main@sha1:b")}),
        _annotate({APPROVAL: approval("main@sha1:c")}),
        validate=True,
        mutate=True,
    ),
    Case(
        "open a gate that holds an approval",
        "UPDATE",
        a_gate("g-open", {APPROVAL: approval("main@sha1:b")}),
        _annotate({names.OPEN_ANNOTATION: TIME, names.MESSAGE_ANNOTATION: "CAB"}),
        mutate=True,  # who opened it: stamped (mutate-toggles), never waited for
    ),
    Case(
        "close a gate",
        "UPDATE",
        a_gate("g-close"),
        _annotate({names.CLOSE_ANNOTATION: TIME}),
        mutate=True,
    ),
    Case(
        "create a gate opened",
        "CREATE",
        None,
        a_gate("g-create-open", {names.OPEN_ANNOTATION: TIME}),
        mutate=True,
    ),
    Case(
        "write only who toggled a gate",
        "UPDATE",
        a_gate("g-stamp", {names.OPEN_ANNOTATION: TIME}),
        _annotate({names.TOGGLED_BY_ANNOTATION: '{"by":"alice"}'}),
        mutate=True,  # put back: the stamp is the webhook's to write
    ),
    Case(
        "open a gate and approve in one write",
        "UPDATE",
        a_gate("g-open-approve"),
        _annotate({names.OPEN_ANNOTATION: TIME, APPROVAL: approval("main@sha1:b")}),
        validate=True,
        mutate=True,  # once: mutate-approvals stamps the toggle too
    ),
    Case(
        "withdraw an approval",
        "UPDATE",
        a_gate("g-withdraw", {APPROVAL: approval("main@sha1:b")}),
        _annotate({APPROVAL: None}),
    ),
    Case(
        "an annotation that is not an approval",
        "UPDATE",
        a_gate("g-other"),
        _annotate({"approval.example.com/x": "1", "example.com/approval.gating.toolkit.fluxcd.io": "1"}),
    ),
    Case("edit a gate's spec", "UPDATE", a_gate("g-edit"), {"spec": {"default": "opened"}}),
    Case("delete a gate with an approval", "DELETE", a_gate("g-delete", {APPROVAL: approval("main@sha1:b")})),
)
