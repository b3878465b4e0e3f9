"""What waits behind closed gates, and what an approval of it names: the rows ``kubectl gate
pending`` prints and the board shows, and what ``approve`` writes an approval of
(docs/decisions/0057). Functions of the objects, the Gates and ``now``."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from datetime import datetime
from typing import Any

from admission.core.admission import halfrelease
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.objects import label, metadata
from admission.core.flux import content
from admission.core.flux.conditions import holding_condition
from admission.core.gates import approvalrecord, approvals, approvalview


class NothingToApprove(Exception):
    """What an approval was asked of does not wait (or cannot be named whole): the reason."""


def target_of(obj: dict[str, Any]) -> str:
    meta = metadata(obj)
    return label(obj.get("kind"), meta.get("namespace"), meta.get("name"))


def approve_command(gate: str, target: str, identity: str | None) -> str:
    """The exact command that approves ``identity`` (what waits, whole: ``content.approval_of``)
    for ``target`` behind ``gate`` (namespace/name); when it cannot be known, why not."""
    namespace, name = gate.split("/", 1)
    if identity is None:
        return f"cannot be approved: {UNKNOWN}; open gate {gate} instead"
    return (
        f"kubectl gate approve {name} -n {namespace} --for {target} --content {shlex.quote(identity)} "
        "-m MESSAGE"
    )


# Why what waits has no identity an approval can name (content.approval_of is None).
UNKNOWN = (
    "what waits is not known whole (its text was cut, or the chart or the values it lands with "
    "were not found)"
)


def pending_rows(
    objects: list[dict[str, Any]],
    gates: dict[str, dict[str, Any]],
    now: datetime,
    only: str | None = None,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """Every held object where new content waits (behind gate ``only``, in ``namespace``), with
    what waits, since when, what it serves, its approvals so far and how to approve it."""
    get, listing = lookups(objects)
    read: dict[str, tuple[approvals.Approval, ...]] = {}

    def approvals_of(key: str) -> tuple[approvals.Approval, ...]:
        """A gate's approvals as a reader without the key sees them, read once per gate."""
        if key not in read:
            stored = gates.get(key) or {}
            policy, _ = approvals.parse_policy(stored.get("spec") or {})
            # No approval key here: verified only as the Gate's status (the controller's) lists it.
            parsed, _ = approvals.parse_all(annotations_of(stored), policy)
            parsed, _ = approvalrecord.counting(stored, parsed)  # ended ones admit nothing
            read[key] = tuple(approvalview.read_without_key(parsed, stored))
        return read[key]

    rows = []
    for obj in objects:
        waiting = content.waiting(obj)
        if waiting is None or not waiting.waits or (only and only not in waiting.gates):
            continue
        meta = metadata(obj)
        gate_keys = [only] if only else list(waiting.gates)
        if namespace and meta.get("namespace") != namespace and not only:
            continue
        target = target_of(obj)
        identity = content.approval_of(obj, waiting.waits, get)
        found: list[dict[str, str | int]] = []
        unverified: list[dict[str, str | int]] = []
        for key in gate_keys:
            for a in approvals_of(key):
                if a.live(now) and a.covers((target,)) and approvals.pins(a.content, waiting.waits):
                    (found if a.unverified is None else unverified).append(dict(a.row(), gate=key))
        condition = holding_condition(obj, str(obj.get("kind")))
        rows.append(
            {
                "kind": obj.get("kind"),
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "waits": waiting.waits,
                "serves": waiting.serves,
                "since": condition.get("lastTransitionTime") if condition else None,
                "gates": gate_keys,
                "approvals": found,
                "unverifiedApprovals": unverified,
                "content": identity,  # what an approval names (None: cannot be approved)
                "approve": [approve_command(key, target, identity) for key in gate_keys],
                "warnings": halfrelease.warnings(obj, get, listing),
            }
        )
    return rows


def lookups(
    objects: list[dict[str, Any]], more: Callable[[str], list[dict[str, Any]]] | None = None
) -> tuple[content.Get, halfrelease.Listing]:
    """Find and list Flux objects among ``objects`` (a manifest's win), then among ``more(kind)``
    (the cluster's, listed once per kind and only when asked): what half-release warnings read."""
    listed: dict[str, list[dict[str, Any]]] = {}

    def of(kind: str) -> list[dict[str, Any]]:
        if kind not in listed:
            mine = [o for o in objects if o.get("kind") == kind]
            known = {(metadata(o).get("namespace"), metadata(o).get("name")) for o in mine}
            listed[kind] = mine + [
                o
                for o in (more(kind) if more else [])
                if (metadata(o).get("namespace"), metadata(o).get("name")) not in known
            ]
        return listed[kind]

    found: dict[str, dict[tuple[object, object], dict[str, Any]]] = {}
    spaces: dict[str, dict[object, list[dict[str, Any]]]] = {}

    def indexed(kind: str) -> None:
        # By name and by namespace, once per kind: a board looks up thousands of sources.
        if kind not in found:
            by_name: dict[tuple[object, object], dict[str, Any]] = {}
            by_namespace: dict[object, list[dict[str, Any]]] = {}
            for o in of(kind):
                meta = metadata(o)
                by_name.setdefault((meta.get("namespace"), meta.get("name")), o)  # the first wins
                by_namespace.setdefault(meta.get("namespace"), []).append(o)
            found[kind], spaces[kind] = by_name, by_namespace

    def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        indexed(kind)
        return found[kind].get((namespace, name))

    def listing(kind: str, namespace: str) -> list[dict[str, Any]]:
        indexed(kind)
        return list(spaces[kind].get(namespace, ()))

    return get, listing


def _waiting(
    objects: list[dict[str, Any]], key: str, target: str | None
) -> list[tuple[str, str, str | None]]:
    """(object, what waits as shown, what an approval names: None when unknown) of each object
    where new content waits behind gate ``key``."""
    get, _ = lookups(objects)
    found = []
    for obj in objects:
        waiting = content.waiting(obj)
        if (
            waiting is not None
            and waiting.waits
            and key in waiting.gates
            and target in (None, target_of(obj))
        ):
            found.append((target_of(obj), waiting.waits, content.approval_of(obj, waiting.waits, get)))
    return found


def to_approve(
    objects: list[dict[str, Any]], key: str, target: str | None, wanted: str | None
) -> tuple[list[str], list[str]]:
    """What ``approve`` writes an approval of behind gate ``key`` (for ``target``): ``wanted``
    when an object waits for exactly that, whole; else each whole identity that waits. Also
    what waits but cannot be approved, and why. NothingToApprove when nothing is."""
    waiting = _waiting(objects, key, target)
    unknown = [f"{t} waits {w}: {UNKNOWN}" for t, w, identity in waiting if identity is None]
    if wanted is not None:
        # Exactly what an object waits for, whole: a prefix (a version without its chart) is
        # not what anyone reviewed.
        if not any(identity == wanted for _, _, identity in waiting):
            shown = "; ".join(f"{t} waits {i or w}" for t, w, i in waiting) or "nothing waits"
            raise NothingToApprove(f"{wanted} does not wait behind gate {key} ({shown})")
        return [wanted], []
    contents = list(dict.fromkeys(identity for _, _, identity in waiting if identity is not None))
    if not contents:
        raise NothingToApprove(
            "; ".join(unknown) or f"nothing waits behind gate {key}" + (f" for {target}" if target else "")
        )
    return contents, unknown
