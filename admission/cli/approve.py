"""``kubectl gate approve`` and ``kubectl gate pending``: approve the exact content that waits
behind a closed gate, and list what waits everywhere (docs/decisions/0057).

``approve`` writes one annotation per approved content on the Gate; the webhook records who
wrote it (the identity the API server authenticated), never a name this command sends.
"""

from __future__ import annotations

import argparse
import shlex
from datetime import datetime
from typing import Any, Callable

from admission.cli import completion
from admission.cli import gate_commands
from admission.cli.cluster import (
    EXIT_DENIED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    GateError,
    api_errors,
    connect,
)
from admission.clock import utcnow
from admission.core import approvalrecord
from admission.core import approvals
from admission.core import approvalview
from admission.core import content
from admission.core import halfrelease
from admission.core import names
from admission.core.conditions import holding_condition
from admission.core.objects import annotations as annotations_of, label, metadata
from admission.core.timefmt import format_duration, parse_duration


def _target(obj: dict) -> str:
    meta = metadata(obj)
    return label(obj.get("kind"), meta.get("namespace"), meta.get("name"))


def _objects(cluster: Any) -> list[dict]:
    from admission.kube.fluxobjects import FluxObjects

    return FluxObjects(cluster.custom).list_all()


def _gate(cluster: Any, namespace: str, name: str) -> dict:
    from kubernetes.client.exceptions import ApiException

    try:
        return dict(
            cluster.custom.get_namespaced_custom_object(
                names.GATING_GROUP, names.GATING_VERSION, namespace, names.GATE_PLURAL, name
            )
        )
    except ApiException as err:
        if err.status == 404:
            raise GateError(f"gate {namespace}/{name} not found", EXIT_NOT_FOUND) from None
        raise


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
    objects: list[dict],
    gates: dict[str, dict],
    now: datetime,
    only: str | None = None,
    namespace: str | None = None,
) -> list[dict]:
    """Every held object where new content waits (behind gate ``only``, in ``namespace``), with
    what waits, since when, what it serves, its approvals so far and how to approve it."""
    get, listing = lookups(objects)
    rows = []
    for obj in objects:
        waiting = content.waiting(obj)
        if waiting is None or not waiting.waits or (only and only not in waiting.gates):
            continue
        meta = metadata(obj)
        gate_keys = [only] if only else list(waiting.gates)
        if namespace and meta.get("namespace") != namespace and not only:
            continue
        target = _target(obj)
        identity = content.approval_of(obj, waiting.waits, get)
        found: list[dict[str, str | int]] = []
        unverified: list[dict[str, str | int]] = []
        for key in gate_keys:
            stored = gates.get(key) or {}
            policy, _ = approvals.parse_policy(stored.get("spec") or {})
            # No approval key here: verified only as the Gate's status (the controller's) lists it.
            parsed, _ = approvals.parse_all(annotations_of(stored), policy)
            parsed, _ = approvalrecord.counting(stored, parsed)  # ended ones admit nothing
            for a in approvalview.read_without_key(parsed, stored):
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
                "approve": [approve_command(key, target, identity) for key in gate_keys],
                "warnings": halfrelease.warnings(obj, get, listing),
            }
        )
    return rows


def lookups(
    objects: list[dict], more: Callable[[str], list[dict]] | None = None
) -> tuple[content.Get, halfrelease.Listing]:
    """Find and list Flux objects among ``objects`` (a manifest's win), then among ``more(kind)``
    (the cluster's, listed once per kind and only when asked): what half-release warnings read."""
    listed: dict[str, list[dict]] = {}

    def of(kind: str) -> list[dict]:
        if kind not in listed:
            mine = [o for o in objects if o.get("kind") == kind]
            known = {(metadata(o).get("namespace"), metadata(o).get("name")) for o in mine}
            listed[kind] = mine + [
                o
                for o in (more(kind) if more else [])
                if (metadata(o).get("namespace"), metadata(o).get("name")) not in known
            ]
        return listed[kind]

    def get(kind: str, namespace: str, name: str) -> dict | None:
        return next(
            (
                o
                for o in of(kind)
                if (metadata(o).get("namespace"), metadata(o).get("name")) == (namespace, name)
            ),
            None,
        )

    def listing(kind: str, namespace: str) -> list[dict]:
        return [o for o in of(kind) if metadata(o).get("namespace") == namespace]

    return get, listing


@api_errors
def cmd_pending(args: argparse.Namespace) -> int:
    cluster = connect(args)
    namespace = None if args.all_namespaces else (args.namespace or cluster.namespace)
    gates = {
        f"{metadata(g).get('namespace')}/{metadata(g).get('name')}": g
        for g in cluster.custom.list_cluster_custom_object(
            names.GATING_GROUP, names.GATING_VERSION, names.GATE_PLURAL
        ).get("items")
        or []
    }
    only = f"{namespace or 'default'}/{args.name}" if args.name else None
    if only and only not in gates:
        raise GateError(f"gate {only} not found", EXIT_NOT_FOUND)
    rows = pending_rows(_objects(cluster), gates, utcnow(), only, namespace)

    def table() -> list[str]:
        if not rows:
            return ["nothing waits" + (f" behind gate {only}" if only else "")]
        shown = [
            {
                **r,
                "gates": ", ".join(r["gates"]),
                "approvals": ", ".join(
                    sorted(
                        {a["by"] for a in r["approvals"]}
                        | {f"{a['by']} (unverified)" for a in r["unverifiedApprovals"]}
                    )
                )
                or "none",
            }
            for r in rows
        ]
        lines = gate_commands.text_table(
            shown, ["kind", "namespace", "name", "waits", "serves", "since", "gates", "approvals"]
        )
        for row in rows:
            lines += [
                f"  {label(row['kind'], row['namespace'], row['name'])}: {command}"
                for command in row["approve"]
            ]
            lines += [f"  warning: {text}" for text in row["warnings"]]
        return lines

    gate_commands.emit(args, rows, table)
    return EXIT_OK


def _waiting(objects: list[dict], key: str, target: str | None) -> list[tuple[str, str, str | None]]:
    """(object, what waits as shown, what an approval names: None when unknown) of each object
    where new content waits behind gate ``key``."""
    get, _ = lookups(objects)
    found = []
    for obj in objects:
        waiting = content.waiting(obj)
        if waiting is not None and waiting.waits and key in waiting.gates and target in (None, _target(obj)):
            found.append((_target(obj), waiting.waits, content.approval_of(obj, waiting.waits, get)))
    return found


def to_approve(
    objects: list[dict], key: str, target: str | None, wanted: str | None
) -> tuple[list[str], list[str]]:
    """What ``approve`` writes an approval of behind gate ``key`` (for ``target``): ``wanted``
    when an object waits for exactly that, whole; else each whole identity that waits. Also
    what waits but cannot be approved, and why. GateError when nothing is to be approved."""
    waiting = _waiting(objects, key, target)
    unknown = [f"{t} waits {w}: {UNKNOWN}" for t, w, identity in waiting if identity is None]
    if wanted is not None:
        # Exactly what an object waits for, whole: a prefix (a version without its chart) is
        # not what anyone reviewed.
        if not any(identity == wanted for _, _, identity in waiting):
            shown = "; ".join(f"{t} waits {i or w}" for t, w, i in waiting) or "nothing waits"
            raise GateError(f"{wanted} does not wait behind gate {key} ({shown})", EXIT_DENIED)
        return [wanted], []
    contents = list(dict.fromkeys(identity for _, _, identity in waiting if identity is not None))
    if not contents:
        raise GateError(
            "; ".join(unknown) or f"nothing waits behind gate {key}" + (f" for {target}" if target else ""),
            EXIT_DENIED,
        )
    return contents, unknown


@api_errors
def cmd_approve(args: argparse.Namespace) -> int:
    if args.for_ is not None and not approvals.valid_target(args.for_):
        raise GateError(f"--for {args.for_!r}: give Kind/namespace/name of a gated kind", EXIT_USAGE)
    expires = None
    if args.expires:
        try:
            lasts = parse_duration(args.expires)
        except (ValueError, OverflowError) as err:
            raise GateError(f"--expires: {err}", EXIT_USAGE) from None
        if lasts > approvals.MAX_EXPIRY:
            raise GateError(
                f"--expires {args.expires}: an approval lasts at most {format_duration(approvals.MAX_EXPIRY)}",
                EXIT_USAGE,
            )
        expires = utcnow() + lasts
    cluster = connect(args)
    namespace = args.namespace or cluster.namespace
    gate = _gate(cluster, namespace, args.name)
    key = f"{namespace}/{args.name}"
    if args.withdraw:
        return _withdraw(args, cluster, namespace, gate)
    policy, _ = approvals.parse_policy((gate.get("spec") or {}))
    if policy.message_required and not (args.message or "").strip():
        raise GateError("a message is required (-m: a ticket, a reason)", EXIT_USAGE)
    contents, unknown = to_approve(_objects(cluster), key, args.for_, args.content)
    target = args.for_ or approvals.ANY
    now = utcnow()
    written = {}
    for text in contents:
        approval_id = approvals.new_id(text, target, f"{cluster.user or ''}@{now.timestamp()}")
        written[names.APPROVAL_ANNOTATION_PREFIX + approval_id] = approvals.value(
            text, target, args.message or "", expires
        )
    cluster.custom.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        namespace,
        names.GATE_PLURAL,
        args.name,
        {"metadata": {"annotations": written}},
    )
    done = [f"approved {text} for {target} behind gate {key}" for text in contents]
    gate_commands.show(done + [f"not approved: {u}" for u in unknown])
    return EXIT_OK


def _withdraw(args: argparse.Namespace, cluster: Any, namespace: str, gate: dict) -> int:
    parsed, _ = approvals.parse_all(annotations_of(gate))
    found = approvalview.read_without_key(parsed, gate)  # forged ones too: withdrawing is how they go
    gone = [a for a in found if args.content in (None, a.content) and args.for_ in (None, a.target)]
    if not gone:
        raise GateError(f"no approval to withdraw on gate {namespace}/{args.name}", EXIT_NOT_FOUND)
    body = {"metadata": {"annotations": {a.key: None for a in gone}}}
    cluster.custom.patch_namespaced_custom_object(
        names.GATING_GROUP, names.GATING_VERSION, namespace, names.GATE_PLURAL, args.name, body
    )
    gate_commands.show([f"withdrawn: {a.describe()}" for a in gone])
    return EXIT_OK


def add_parsers(sub: Any, common: argparse.ArgumentParser, completes: Callable[..., None]) -> None:
    """The approve and pending subcommands, on ``kubectl gate`` and ``flux gate`` alike."""
    p = sub.add_parser(
        "approve",
        parents=[common],
        help="approve the exact content that waits behind a closed gate (it lands at once; nothing newer does)",
    )
    completes(p.add_argument("name"), completion.gate_names)
    p.add_argument(
        "--for",
        dest="for_",
        metavar="KIND/NAMESPACE/NAME",
        help="only for this held object (default: every object behind the gate)",
    )
    p.add_argument(
        "--content",
        help="what to approve, as `pending` shows it waiting (default: what waits now); "
        "refused when that is not what waits",
    )
    p.add_argument(
        "-m", "--message", help="why: a ticket, a reason (required unless the gate says otherwise)"
    )
    p.add_argument(
        "--expires",
        metavar="DURATION",
        help="unused approvals end after this long, 168h at most (default: the gate's window, else 24h)",
    )
    p.add_argument(
        "--withdraw", action="store_true", help="remove approvals (those of --content/--for, else all)"
    )
    p.set_defaults(func=cmd_approve)

    p = sub.add_parser(
        "pending",
        parents=[common],
        help="every held object: what waits, since when, what it serves, its approvals and the approve command",
    )
    completes(p.add_argument("name", nargs="?"), completion.gate_names)
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.set_defaults(func=cmd_pending)
