"""``kubectl gate check``: what the webhook would answer to applying a manifest now, object by object."""

from __future__ import annotations

import argparse
import getpass

from admission.cli import manifests
from admission.cli.cluster import EXIT_DENIED, EXIT_OK, EXIT_USAGE, Cluster, GateError, api_errors
from admission.cli.gate_commands import emit, headers, lookup_gates, text_table
from admission.cli.settings import policy_settings
from admission.core.admission import halfrelease, pending
from admission.core.admission.applied import apply_request, user_info
from admission.core.admission.decision import Context
from admission.core.admission.review import UserInfo
from admission.core.base import names
from admission.core.base.objects import Object, label
from admission.core.flux import kinds
from admission.core.gates.references import policy_of
from admission.webhook import handlers

# What `check` says of each object: the webhook's answer to the request applying it would make.
# check's verdicts: a stable token for scripts (-o json|yaml "verdict") and the sentence people
# read (the table's VERDICT column, "verdictText" beside the token).
DENIED, AUDITED, ALLOWED = "denied", "audited", "allowed"
VERDICT_TEXT = {
    DENIED: "would be denied",
    AUDITED: "would be allowed with an audit warning",
    ALLOWED: "allowed",
}


def _usage(args: argparse.Namespace) -> None:
    """The flags' errors, before the cluster is asked."""
    if args.as_groups and not args.as_user:
        raise GateError("--as-group needs --as (as with kubectl)", EXIT_USAGE)


def _identity(args: argparse.Namespace, cluster: Cluster | None) -> UserInfo:
    """userInfo the API server would see: --as/--as-group, else what the kubeconfig tells."""
    if args.as_user:
        return user_info(args.as_user, args.as_groups)
    if cluster is None:
        return user_info(getpass.getuser())
    return user_info(*_kubeconfig_user(cluster))


def _kubeconfig_user(cluster: Cluster) -> tuple[str, list[str]]:
    """A client certificate names its user (CN) and groups (O); a token does not, so the
    context's user entry name stands in for it (check as someone else with --as)."""
    cert_file = getattr(getattr(cluster.api, "configuration", None), "cert_file", None)
    if cert_file:
        try:
            from cryptography import x509
            from cryptography.x509.oid import NameOID

            subject = x509.load_pem_x509_certificate(open(cert_file, "rb").read()).subject
            common = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            if common:
                return str(common[0].value), [
                    str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
                ]
        except (OSError, ValueError):
            pass
    return cluster.user or getpass.getuser(), []


def judge(manifest: Object, live: Object | None, user: UserInfo, context: Context) -> Object:
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


@api_errors
def cmd_check(args: argparse.Namespace) -> int:
    _usage(args)
    given = manifests.read(args)  # a manifest that cannot be read is a usage error: found first
    cluster, index, now, default_ns = lookup_gates(args)
    default_ns = default_ns or names.DEFAULT_NAMESPACE
    settings, user = policy_settings(args), _identity(args, cluster)
    live = None
    if cluster is not None:
        from admission.kube.fluxobjects import FluxObjects

        live = FluxObjects(cluster.custom)
    rows, manifest = (
        [],
        [
            o
            for o in given
            if kinds.is_gated_kind(str(o.get("apiVersion", "")).rpartition("/")[0], str(o.get("kind", "")))
        ],
    )
    for obj in manifest:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        obj["metadata"]["namespace"] = str(obj["metadata"].get("namespace") or default_ns)
    get, listing = pending.lookups(
        manifest, live.list_kind if live else None
    )  # (its inputs: half-release warnings)
    for obj in manifest:
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind, meta = str(obj.get("kind", "")), obj["metadata"]
        name = meta.get("name")
        current = (
            live.get(kind, meta["namespace"], name, version)
            if live and isinstance(name, str) and name
            else None
        )
        try:
            rows.append(judge(obj, current, user, Context(index.lookup, now, settings)))
            rows[-1]["warnings"] = halfrelease.warnings(obj, get, listing) if policy_of(obj).refs else []
        except RecursionError:  # as the webhook answers it: such an object cannot be judged
            raise GateError(
                f"{kind} {meta['namespace']}/{name}: nests values too deeply to be judged", EXIT_USAGE
            ) from None

    def table() -> list[str]:
        shown = [{**row, "verdict": row["verdictText"]} for row in rows]  # the sentence, as before
        if not rows:
            return ["no Flux objects in the manifest"] if headers(args) else []
        return text_table(shown, ["kind", "namespace", "name", "verdict", "message"], headers(args)) + [
            f"  warning: {label(row['kind'], row['namespace'], row['name'])}: {text}"
            for row in rows
            for text in row["warnings"]
        ]

    emit(args, rows, table)
    return EXIT_DENIED if any(r["verdict"] == DENIED for r in rows) else EXIT_OK
