"""``kubectl gate approve`` and ``kubectl gate pending``: approve the exact content that waits
behind a closed gate, and list what waits everywhere (docs/decisions/0057).

``approve`` writes one annotation per approved content on the Gate; the webhook records who
wrote it (the identity the API server authenticated), never a name this command sends.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from admission.cli import completion, gate_commands
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
from admission.core.admission import pending
from admission.core.base import names
from admission.core.base.objects import Object, label, metadata
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.timefmt import format_duration, parse_duration
from admission.core.gates import approvals, approvalview


def _objects(cluster: Any) -> list[Object]:
    from admission.kube.fluxobjects import FluxObjects

    return FluxObjects(cluster.custom).list_all()


def _gate(cluster: Any, namespace: str, name: str) -> Object:
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


@api_errors
def cmd_pending(args: argparse.Namespace) -> int:
    cluster = connect(args)
    return gate_commands.answers(args, lambda: _pending_answer(args, cluster))


def _pending_answer(args: argparse.Namespace, cluster: Any) -> tuple[object, Callable[[], list[str]]]:
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
    rows = pending.pending_rows(_objects(cluster), gates, utcnow(), only, namespace)

    def table() -> list[str]:
        if not rows:
            return (
                ["nothing waits" + (f" behind gate {only}" if only else "")]
                if gate_commands.headers(args)
                else []
            )
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
            shown,
            ["kind", "namespace", "name", "waits", "serves", "since", "gates", "approvals"],
            gate_commands.headers(args),
        )
        for row in rows:
            lines += [
                f"  {label(row['kind'], row['namespace'], row['name'])}: {command}"
                for command in row["approve"]
            ]
            lines += [f"  warning: {text}" for text in row["warnings"]]
        return lines

    return rows, table


@api_errors
def cmd_approve(args: argparse.Namespace) -> int:
    if args.for_ is not None and not approvals.valid_target(args.for_):
        raise GateError(f"--for {args.for_!r}: give Kind/namespace/name of a gated kind", EXIT_USAGE)
    expires = None
    if args.expires:
        try:
            expires = expiry(args.expires, utcnow())
        except ValueError as err:
            raise GateError(f"--expires {err}", EXIT_USAGE) from None
    cluster = connect(args)
    namespace = args.namespace or cluster.namespace
    if args.withdraw:
        done = withdraw(cluster, namespace, args.name, args.content, args.for_)
    else:
        done = approve(cluster, namespace, args.name, args.content, args.for_, args.message or "", expires)
    gate_commands.show(done)
    return EXIT_OK


def expiry(duration: str, now: datetime) -> datetime:
    """When an approval asked to last ``duration`` ends; ValueError says why it cannot."""
    try:
        lasts = parse_duration(duration)
    except (ValueError, OverflowError) as err:
        raise ValueError(f"{duration}: {err}") from None
    if lasts > approvals.MAX_EXPIRY:
        raise ValueError(f"{duration}: an approval lasts at most {format_duration(approvals.MAX_EXPIRY)}")
    return now + lasts


def approve(
    cluster: Any,
    namespace: str,
    name: str,
    wanted: str | None,
    target: str | None,
    message: str,
    expires: datetime | None,
) -> list[str]:
    """Approve ``wanted`` (else all that waits, whole) for ``target`` (else every object) behind
    gate ``namespace/name``, as the kubeconfig's user: the lines that say what was approved and
    what could not be. GateError when refused before anything is written."""
    gate = _gate(cluster, namespace, name)
    key = f"{namespace}/{name}"
    policy, _ = approvals.parse_policy(gate.get("spec") or {})
    if policy.message_required and not message.strip():
        raise GateError("a message is required (-m: a ticket, a reason)", EXIT_USAGE)
    try:
        contents, unknown = pending.to_approve(_objects(cluster), key, target, wanted)
    except pending.NothingToApprove as err:
        raise GateError(str(err), EXIT_DENIED) from None
    target = target or approvals.ANY
    now = utcnow()
    written = {}
    for text in contents:
        approval_id = approvals.new_id(text, target, f"{cluster.user or ''}@{now.timestamp()}")
        written[names.APPROVAL_ANNOTATION_PREFIX + approval_id] = approvals.value(
            text, target, message, expires
        )
    cluster.custom.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        namespace,
        names.GATE_PLURAL,
        name,
        {"metadata": {"annotations": written}},
    )
    done = [f"approved {text} for {target} behind gate {key}" for text in contents]
    return done + [f"not approved: {u}" for u in unknown]


def withdraw(cluster: Any, namespace: str, name: str, wanted: str | None, target: str | None) -> list[str]:
    """Remove the approvals of ``wanted`` for ``target`` (each None: any) from gate
    ``namespace/name``: the lines that say which. GateError when there is none."""
    gate = _gate(cluster, namespace, name)
    parsed, _ = approvals.parse_all(annotations_of(gate))
    found = approvalview.read_without_key(parsed, gate)  # forged ones too: withdrawing is how they go
    gone = [a for a in found if wanted in (None, a.content) and target in (None, a.target)]
    if not gone:
        raise GateError(f"no approval to withdraw on gate {namespace}/{name}", EXIT_NOT_FOUND)
    body = {"metadata": {"annotations": {a.key: None for a in gone}}}
    cluster.custom.patch_namespaced_custom_object(
        names.GATING_GROUP, names.GATING_VERSION, namespace, names.GATE_PLURAL, name, body
    )
    return [f"withdrawn: {a.describe()}" for a in gone]


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
    gate_commands.add_watch_flags(p)
    p.set_defaults(func=cmd_pending)
