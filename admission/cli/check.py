"""``kubectl gate check``: what the webhook answers to applying a manifest now, object by object.

Against a cluster the API server itself is asked, by a server-side dry-run of each object
(admission.cli.dryrun); with ``--gates-dir``, offline, the webhook's validate handler judges the
request a create would make, in process (docs/decisions/0094-check-asks-the-api-server.md)."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from admission.cli import dryrun, manifests
from admission.cli.cluster import (
    EXIT_DENIED,
    EXIT_OK,
    EXIT_UNJUDGED,
    EXIT_USAGE,
    Cluster,
    GateError,
    Impersonation,
    api_errors,
    connect,
    impersonate,
)
from admission.cli.dryrun import ALLOWED, AUDITED, DENIED, UNJUDGED, Identity
from admission.cli.gate_commands import emit, headers, lookup_gates, text_table
from admission.cli.settings import env, env_mode, policy_settings
from admission.core.admission import halfrelease, pending
from admission.core.admission.applied import apply_request, user_info
from admission.core.admission.decision import Context
from admission.core.admission.review import UserInfo
from admission.core.base import names
from admission.core.base.objects import Object, label
from admission.core.flux import kinds
from admission.core.gates.references import policy_of
from admission.webhook import handlers

__all__ = ["ALLOWED", "AUDITED", "DENIED", "UNJUDGED", "VERDICT_TEXT", "cmd_check", "judge"]

# check's verdicts: a stable token for scripts (-o json|yaml "verdict") and the sentence people
# read (the table's VERDICT column, "verdictText" beside the token).
VERDICT_TEXT = {
    DENIED: "would be denied",
    AUDITED: "would be allowed with an audit warning",
    ALLOWED: "allowed",
    UNJUDGED: "could not be judged",
}
# The spellings `check` took before it was clear they judge as someone, where kubectl's --as
# impersonates: still read, with a warning, for one release (docs/decisions/0094).
DEPRECATED = {"--as": "--judge-as", "--as-group": "--judge-as-group"}

Row = dict[str, Any]
T = TypeVar("T")


def _usage(args: argparse.Namespace) -> None:
    """The flags' errors, before the cluster is asked; the old spellings' warning."""
    for (old, new), used in zip(DEPRECATED.items(), (args.as_user, args.as_groups), strict=True):
        if used:
            print(
                f"warning: check {old} is deprecated and goes in the next release: use {new}", file=sys.stderr
            )
    args.judge_as = args.judge_as or args.as_user
    args.judge_as_groups = [*args.judge_as_groups, *args.as_groups]
    if args.judge_as_groups and not args.judge_as:
        raise GateError("--judge-as-group needs --judge-as", EXIT_USAGE)
    if args.gates_dir:
        if args.force_conflicts or args.field_manager != dryrun.DEFAULT_FIELD_MANAGER:
            raise GateError(
                "--field-manager and --force-conflicts go with a cluster, not --gates-dir", EXIT_USAGE
            )
        return
    # Against a cluster the webhook decides with its own settings: flags saying otherwise would
    # be silently ignored. Their GATE_ADMISSION_* variables (the server's) may be set: those are.
    given = [
        flag
        for flag, value, default in (
            ("--mode", args.mode, env_mode()),
            ("--exempt-users", args.exempt_users, env("exempt-users", "")),
            ("--exempt-groups", args.exempt_groups, env("exempt-groups", "")),
        )
        if value != default
    ]
    if given:
        raise GateError(
            f"{', '.join(given)}: only with --gates-dir (against a cluster, the webhook's own settings decide)",
            EXIT_USAGE,
        )


def _offline_identity(args: argparse.Namespace) -> UserInfo:
    """userInfo for the in-process judge: --judge-as/--judge-as-group, else this machine's user."""
    if args.judge_as:
        return user_info(args.judge_as, args.judge_as_groups)
    return user_info(getpass.getuser())


def judge(manifest: Object, live: Object | None, user: UserInfo, context: Context) -> Row:
    """What the webhook would answer to applying ``manifest`` (over ``live``, when it exists):
    the request the API server would send, judged by the webhook's own validate handler."""
    request = apply_request(manifest, live, user)
    outcome = handlers.validate(request, context)
    response = outcome.response
    message: str | None
    if not response["allowed"]:
        verdict, message = DENIED, response["status"]["message"]
    elif response.get("warnings"):
        verdict, message = AUDITED, "; ".join(response["warnings"])
    else:
        verdict, message = ALLOWED, outcome.decision.exempt
    return {
        "kind": request["kind"]["kind"],
        "namespace": request["namespace"],
        "name": request["name"],
        "operation": request["operation"],
        "verdict": verdict,
        "verdictText": VERDICT_TEXT[verdict],
        "message": message,
    }


def _asked(
    cluster: Cluster, obj: dict[str, Any], live: dict[str, Any] | None, args: argparse.Namespace
) -> Row:
    """The API server's answer to a server-side dry-run of ``obj``, as a row."""
    meta = obj["metadata"]
    row: Row = {
        "kind": str(obj.get("kind", "")),
        "namespace": meta["namespace"],
        "name": meta.get("name"),
        "operation": "UPDATE" if live else "CREATE",
    }
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        answer = dryrun.Answer(UNJUDGED, "no metadata.name: kubectl apply refuses it too", dryrun.INVALID)
    else:
        answer = dryrun.apply_dry_run(cluster, obj, args.field_manager, args.force_conflicts)
    row.update(verdict=answer.verdict, verdictText=VERDICT_TEXT[answer.verdict], message=answer.message)
    if answer.verdict == UNJUDGED:
        row.update(reason=answer.reason, status=answer.status)
    row["apiWarnings"] = list(answer.other_warnings)
    return row


@api_errors
def cmd_check(args: argparse.Namespace) -> int:
    _usage(args)
    given = manifests.read(args)  # a manifest that cannot be read is a usage error: found first
    cluster: Cluster | None = None
    if args.gates_dir:
        _, index, now, default_ns = lookup_gates(args)
        user = _offline_identity(args)
        identity = Identity(user["username"], tuple(user.get("groups") or ()))
    else:
        cluster = connect(args)
        if args.judge_as:  # after connect's own: --judge-as wins over the kubeconfig's `as`
            impersonate(cluster.api, Impersonation(args.judge_as, tuple(args.judge_as_groups)))
        default_ns, identity = cluster.namespace, dryrun.who_am_i(cluster)
    default_ns = default_ns or names.DEFAULT_NAMESPACE
    manifest = [
        o
        for o in given
        if kinds.is_gated_kind(str(o.get("apiVersion", "")).rpartition("/")[0], str(o.get("kind", "")))
    ]
    for obj in manifest:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        obj["metadata"]["namespace"] = str(obj["metadata"].get("namespace") or default_ns)
    live = None
    if cluster is not None:
        from admission.kube.fluxobjects import FluxObjects

        live = FluxObjects(cluster.custom)
    # Half-release warnings; what the caller may not list is not seen (an input it cannot see is
    # not judged), as a dry-run the caller may not make is reported, not a failure of the rest.
    get, listing = pending.lookups(manifest, _unless_forbidden(live.list_kind, []) if live else None)
    rows: list[Row] = []
    for obj in manifest:
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind, meta = str(obj.get("kind", "")), obj["metadata"]
        name = meta.get("name")
        try:
            if cluster is not None and live is not None:
                current = (
                    _unless_forbidden(live.get, None)(kind, meta["namespace"], name, version)
                    if isinstance(name, str) and name
                    else None
                )
                rows.append(_asked(cluster, obj, current, args))
            else:
                rows.append(_judged(obj, args, index, now))
            rows[-1]["warnings"] = halfrelease.warnings(obj, get, listing) if policy_of(obj).refs else []
        except RecursionError:  # as the webhook answers it: such an object cannot be judged
            raise GateError(
                f"{kind} {meta['namespace']}/{name}: nests values too deeply to be judged", EXIT_USAGE
            ) from None
        rows[-1]["as"] = identity.as_dict()

    emit(args, rows, _table(args, rows, identity, cluster is not None))
    if any(r["verdict"] == DENIED for r in rows):
        return EXIT_DENIED
    return EXIT_UNJUDGED if any(r["verdict"] == UNJUDGED for r in rows) else EXIT_OK


def _unless_forbidden(read: Callable[..., T], otherwise: T) -> Callable[..., T]:
    """``read``, answering ``otherwise`` where RBAC forbids it."""
    from kubernetes.client.exceptions import ApiException

    def reading(*args: Any) -> T:
        try:
            return read(*args)
        except ApiException as err:
            if err.status != 403:
                raise
            return otherwise

    return reading


def _judged(obj: dict[str, Any], args: argparse.Namespace, index: Any, now: datetime) -> Row:
    """Offline: the webhook's handler, in process, on the create ``obj`` would be."""
    return judge(obj, None, _offline_identity(args), Context(index.lookup, now, policy_settings(args)))


def _table(
    args: argparse.Namespace, rows: list[Row], identity: Identity, asked: bool
) -> Callable[[], list[str]]:
    def table() -> list[str]:
        # The table is for people: the sentence; an object not judged says why in its message.
        shown = [
            {
                **row,
                "verdict": row["verdictText"],
                "message": f"{row['reason']}: {row['message']}"
                if row["verdict"] == UNJUDGED
                else row["message"],
            }
            for row in rows
        ]
        lines = (
            text_table(shown, ["kind", "namespace", "name", "verdict", "message"], headers(args))
            if rows
            else (["no Flux objects in the manifest"] if headers(args) else [])
        )
        lines += [
            f"  warning: {label(row['kind'], row['namespace'], row['name'])}: {text}"
            for row in rows
            for text in [*row["warnings"], *row.get("apiWarnings", [])]
        ]
        how = (
            "asked the API server (server-side apply, dry run)"
            if asked
            else "judged offline against --gates-dir"
        )
        return lines + ([f"as {identity.text()}: {how}"] if headers(args) and lines else [])

    return table
