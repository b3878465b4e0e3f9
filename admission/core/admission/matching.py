"""Which admission requests concern us at all, in one place: each webhook entry's
``matchConditions`` (CEL, evaluated by the API server since Kubernetes 1.30) and the same
predicate in Python (what the server and ``kubectl gate check`` answer first).

Most writes of Flux objects are status writes of objects that reference no gate; the API
server need not call us for them, and a webhook that is not called cannot fail them. A
request concerns us when something in it can change an answer:
- the object or the old object references a gate or a suspension (the annotations the
  decision reads, or ``spec.gates``): edits, creations, deletions and the removal of a
  reference (only the old object has it) are judged;
- on status writes, a HelmChart that helm-controller generated (its owner labels name a
  HelmRelease, and its name is ``<namespace>-<name>`` of that release) inherits the release's
  gates;
- on status writes, for the mutating webhook: ``status.suspended`` must change (``spec.suspend``
  is true, or ``status.suspended`` is set and not false), or the status carries a condition
  only we write (Blocked, Approved), which goes once nothing holds the object.

The CEL never errs on what the API server sends (``object`` is null on DELETE, ``oldObject``
on CREATE, and metadata, spec and status may lack any field: ``has()`` first), because an
error in an entry with ``failurePolicy: Fail`` fails the request. Where it could still err
(a mutating entry seeing a field of the wrong type, which schema validation then refuses
anyway) the entries fail open, which the Python twin answers as False. tests/unit/test_kinds.py
holds manifests/webhooks to these entries; tests/e2e/test_match_conditions.py holds the real
API server to the Python predicate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from admission.core.base import names
from admission.core.base.objects import annotations as annotations_of
from admission.core.flux import content, kinds
from admission.core.gates import approvals

VALIDATE = "validate"
MUTATE = "mutate"
FAIL = "Fail"
IGNORE = "Ignore"
CONDITION_NAME = "concerns-gate-admission"  # a matchCondition's name, as the API server reports it

# Every annotation the decision reads on a Flux object (admission.core.gates.references): gate
# references, the require mode (loosening it is held), and the three suspension spellings.
HOLDING_ANNOTATIONS = (
    names.GATES_ANNOTATION,
    names.REQUIRE_ANNOTATION,
    names.SUSPENDED_ANNOTATION,
    names.SUSPEND_DURING_ANNOTATION,
    names.SUSPENDED_DURING_ANNOTATION,
)
HOLD_CONDITIONS = (names.BLOCKED_CONDITION, names.APPROVED_CONDITION)
GENERATED_KIND = "HelmChart"

# An AdmissionRequest (admission.core.admission.review's), or any mapping: the predicate reads whatever shape comes.
Request = Mapping[str, Any]


@dataclass(frozen=True)
class Part:
    """One clause, twice: as CEL for the API server and as Python with the same meaning."""

    cel: str
    test: Callable[[Request], bool]

    def __or__(self, other: Part) -> Part:
        return Part(f"{self.cel} ||\n{other.cel}", lambda r: self.test(r) or other.test(r))

    def __invert__(self) -> Part:
        return Part(f"!({self.cel})", lambda r: not self.test(r))

    def __and__(self, other: Part) -> Part:
        return Part(f"({self.cel}) &&\n({other.cel})", lambda r: self.test(r) and other.test(r))


def _list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _section(obj: object, key: str) -> dict[str, Any] | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else None


def _references(var: str) -> Part:
    """``var`` (object or oldObject) names a gate or a suspension."""

    def test(request: Request) -> bool:
        obj = request.get(var)
        if not isinstance(obj, dict):
            return False
        if any(key in annotations_of(obj) for key in HOLDING_ANNOTATIONS):
            return True
        spec = _section(obj, "spec")
        return spec is not None and "gates" in spec  # has(): present, whatever its value

    cel = (
        f"({var} != null && (has({var}.metadata.annotations) && "
        f"{_list(HOLDING_ANNOTATIONS)}.exists(k, k in {var}.metadata.annotations) || "
        f"has({var}.spec) && has({var}.spec.gates)))"
    )
    return Part(cel, test)


def _generated_chart(request: Request) -> bool:
    obj = request.get("object")
    return (
        (request.get("kind") or {}).get("kind") == GENERATED_KIND
        and isinstance(obj, dict)
        and content.generator(obj) is not None
    )


_LABELS = "object.metadata.labels"
# helm-controller names a generated chart <release namespace>-<release name>; an object a
# release merely deploys carries the same labels under another name.
GENERATED = Part(
    f"(request.kind.kind == '{GENERATED_KIND}' && object != null && has({_LABELS}) && "
    f"'{names.HELM_NAME_LABEL}' in {_LABELS} && '{names.HELM_NAMESPACE_LABEL}' in {_LABELS} && "
    f"has(object.metadata.name) && object.metadata.name == "
    f"{_LABELS}['{names.HELM_NAMESPACE_LABEL}'] + '-' + {_LABELS}['{names.HELM_NAME_LABEL}'])",
    _generated_chart,
)


def _suspension(request: Request) -> bool:
    obj = request.get("object")
    spec, status = _section(obj, "spec"), _section(obj, "status")
    return (spec is not None and spec.get("suspend") is True) or (
        status is not None and "suspended" in status and status["suspended"] is not False
    )


# status.suspended must become true, or stop being true; absent and false both say "not suspended".
SUSPENSION = Part(
    "(object != null && (has(object.spec) && has(object.spec.suspend) && object.spec.suspend == true || "
    "has(object.status) && has(object.status.suspended) && object.status.suspended != false))",
    _suspension,
)


def _hold_marks(request: Request) -> bool:
    status = _section(request.get("object"), "status")
    conditions = status.get("conditions") if status is not None else None
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and "type" in c and c["type"] in HOLD_CONDITIONS for c in conditions
    )


HOLD_MARKS = Part(
    "(object != null && has(object.status) && has(object.status.conditions) && "
    f"object.status.conditions.exists(c, has(c.type) && c.type in {_list(HOLD_CONDITIONS)}))",
    _hold_marks,
)

REFERENCES = _references("object") | _references("oldObject")
# A DELETE without its old object cannot be judged (its gates are unknown): the server denies
# it. API servers have sent oldObject on DELETE since 1.15, so this costs no call.
DELETE_UNKNOWN = Part(
    "(request.operation == 'DELETE' && oldObject == null)",
    lambda r: r.get("operation") == "DELETE" and not isinstance(r.get("oldObject"), dict),
)


@dataclass(frozen=True)
class Entry:
    """One webhook entry of manifests/webhooks: what it is registered for, how it fails, and
    the condition under which the API server calls it."""

    name: str
    endpoint: str  # VALIDATE or MUTATE: the path it calls
    status: bool  # registered for <plural>/status, else for the main resources
    operations: tuple[str, ...]
    covers: Callable[[kinds.FluxKind], bool]  # the gated kinds it is registered for
    failure_policy: str
    condition: Part
    gates: bool = False  # registered for Gates (their approvals), not for the Flux kinds

    def match_conditions(self) -> list[dict[str, str]]:
        """The entry's ``matchConditions``, as manifests/webhooks must carry them."""
        return [{"name": CONDITION_NAME, "expression": self.condition.cel}]

    def resources(self) -> dict[str, list[str]]:
        """Its rules' resources per API group, in the order of the kinds table."""
        if self.gates:
            return {names.GATING_GROUP: [names.GATE_PLURAL]}
        out: dict[str, list[str]] = {}
        for row in kinds.FLUX_KINDS:
            if self.covers(row):
                out.setdefault(row.group, []).append(row.plural + ("/status" if self.status else ""))
        return out

    def registered_for(self, request: Request) -> bool:
        """Whether the entry's rules send ``request`` (what matchConditions then judge)."""
        gvk = request.get("kind") or {}
        if self.gates:
            return (
                (gvk.get("group"), gvk.get("kind")) == (names.GATING_GROUP, names.GATE_KIND)
                and request.get("operation") in self.operations
                and not request.get("subResource")
            )
        row = kinds.lookup(gvk.get("group", ""), gvk.get("kind", ""))
        sub_resource = request.get("subResource") or ""
        return (
            row is not None
            and self.covers(row)
            and request.get("operation") in self.operations
            and sub_resource == ("status" if self.status else "")
        )

    def calls(self, request: Request) -> bool:
        """Whether the API server calls this entry for ``request`` (conditions in place)."""
        return self.registered_for(request) and self.condition.test(request)


def _every_kind(row: kinds.FluxKind) -> bool:
    return True


def _with_content(row: kinds.FluxKind) -> bool:
    return row.content.holds


def _generated_kind(row: kinds.FluxKind) -> bool:
    return row.kind == GENERATED_KIND


def _approvals_change(request: Request) -> bool:
    obj, old = request.get("object"), request.get("oldObject")
    return isinstance(obj, dict) and bool(approvals.changed(annotations_of(old), annotations_of(obj)))


_NEW = "object.metadata.annotations"
_OLD = "oldObject.metadata.annotations"
# A Gate write that adds an approval or changes one: only these need the approver stamped, so a
# gate is opened and closed (and approvals withdrawn) without the webhook.
APPROVALS_CHANGE = Part(
    f"(object != null && has({_NEW}) && {_NEW}.exists(k, k.startsWith('{names.APPROVAL_ANNOTATION_PREFIX}') && "
    f"(oldObject == null || !has({_OLD}) || !(k in {_OLD}) || {_OLD}[k] != {_NEW}[k])))",
    _approvals_change,
)


def _toggles_change(request: Request) -> bool:
    new, old = annotations_of(request.get("object")), annotations_of(request.get("oldObject"))
    return any(new.get(k, "") != old.get(k, "") for k in TOGGLE_ANNOTATIONS)


# A Gate write that opens, closes, or touches who did: the stamp of who toggled it
# (admission.core.admission.togglereview). An absent annotation reads as '' here, as a value
# the API server would not store differently for a toggle (an empty time is ignored anyway).
TOGGLE_ANNOTATIONS = (names.OPEN_ANNOTATION, names.CLOSE_ANNOTATION, names.TOGGLED_BY_ANNOTATION)
_NEW_VALUE = f"(object != null && has({_NEW}) && k in {_NEW} ? {_NEW}[k] : '')"
_OLD_VALUE = f"(oldObject != null && has({_OLD}) && k in {_OLD} ? {_OLD}[k] : '')"
TOGGLES_CHANGE = Part(
    f"({_list(TOGGLE_ANNOTATIONS)}.exists(k, {_NEW_VALUE} != {_OLD_VALUE}))", _toggles_change
)


def _no_kind(row: kinds.FluxKind) -> bool:
    return False


_MAIN_OPERATIONS = ("CREATE", "UPDATE", "DELETE")
ENTRIES: tuple[Entry, ...] = (
    # Edits, creations, deletions of objects that reference a gate: never unjudged.
    Entry(
        names.VALIDATE_WEBHOOK,
        VALIDATE,
        False,
        _MAIN_OPERATIONS,
        _every_kind,
        FAIL,
        REFERENCES | DELETE_UNKNOWN,
    ),
    # New content of objects that reference a gate: never unjudged either.
    Entry(names.VALIDATE_STATUS_WEBHOOK, VALIDATE, True, ("UPDATE",), _with_content, FAIL, REFERENCES),
    # Generated HelmCharts of their own: every HelmRelease has one, gated or not, so an outage
    # must not stop their charts; a gated release is still held at its own status write.
    Entry(
        names.VALIDATE_INHERITED_WEBHOOK,
        VALIDATE,
        True,
        ("UPDATE",),
        _generated_kind,
        IGNORE,
        GENERATED & ~REFERENCES,
    ),
    # Approvals: the approver is who the API server says wrote it, never what the client wrote.
    # Both entries fail closed: an approval nobody stamped must not be recorded
    # (admission.core.admission.approvalreview).
    Entry(
        names.VALIDATE_APPROVALS_WEBHOOK,
        VALIDATE,
        False,
        ("CREATE", "UPDATE"),
        _no_kind,
        FAIL,
        APPROVALS_CHANGE,
        gates=True,
    ),
    # Mutation never blocks (the validating entries are the backstop): it fails open.
    Entry(names.MUTATE_WEBHOOK, MUTATE, False, ("CREATE", "UPDATE"), _every_kind, IGNORE, REFERENCES),
    Entry(
        names.MUTATE_STATUS_WEBHOOK,
        MUTATE,
        True,
        ("UPDATE",),
        _every_kind,
        IGNORE,
        REFERENCES | GENERATED | SUSPENSION | HOLD_MARKS,
    ),
    # The one mutating entry that fails closed (and may refuse): it stamps the approver.
    Entry(
        names.MUTATE_APPROVALS_WEBHOOK,
        MUTATE,
        False,
        ("CREATE", "UPDATE"),
        _no_kind,
        FAIL,
        APPROVALS_CHANGE,
        gates=True,
    ),
    # Who toggled a Gate: stamped when the webhook answers, never waited for (break-glass: a
    # toggle written while it is down lands, and shows unverified).
    Entry(
        names.MUTATE_TOGGLES_WEBHOOK,
        MUTATE,
        False,
        ("CREATE", "UPDATE"),
        _no_kind,
        IGNORE,
        TOGGLES_CHANGE & ~APPROVALS_CHANGE,  # with an approval: mutate-approvals stamps both
        gates=True,
    ),
)
BY_NAME: dict[str, Entry] = {entry.name: entry for entry in ENTRIES}


def concerns(endpoint: str, request: Request) -> bool:
    """Whether the API server, with our conditions in place, would send ``request`` to
    ``endpoint``: when it would not, the answer is a plain "allowed" with no patch."""
    gvk = request.get("kind") or {}
    rules = (gvk.get("group"), gvk.get("kind"), request.get("operation"), request.get("subResource"))
    if not all(v is None or (isinstance(v, str) and len(v) <= _KEPT_LENGTH) for v in rules):
        return any(entry.calls(request) for entry in ENTRIES if entry.endpoint == endpoint)
    return any(entry.condition.test(request) for entry in _registered(endpoint, *rules))


_KEPT_LENGTH = 253  # a longer group or kind is no resource's: asked each time, never kept


@functools.lru_cache(maxsize=256)
def _registered(
    endpoint: str, group: str | None, kind: str | None, operation: str | None, sub_resource: str | None
) -> tuple[Entry, ...]:
    """The endpoint's entries whose rules send such a request: what the rules read of it, kept,
    as every review asks (at most 256 requests' shapes, of short strings)."""
    request = {
        "kind": {"group": group, "kind": kind},
        "operation": operation,
        "subResource": sub_resource,
    }
    return tuple(entry for entry in ENTRIES if entry.endpoint == endpoint and entry.registered_for(request))
