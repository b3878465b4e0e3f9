"""``kubectl gate``: list, inspect, open and close gates, and check manifests in CI.

Exit codes a script can rely on:
  0  done; for ``check``, nothing would be held
  1  ``check``: at least one object would be held
  2  usage error (bad flags, bad duration, unreadable manifest)
  3  not found (the gate, or the namespace's gates)
  4  forbidden (RBAC) or unauthorized
  5  no cluster (no kubeconfig, API server unreachable)
"""

from __future__ import annotations

import argparse
import getpass
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import orjson
import yaml

from admission.clock import utcnow
from admission.core import content
from admission.core import kinds
from admission.core import names
from admission.core.decision import describe, hold_of
from admission.core.gates import GateState
from admission.core.references import metadata, policy_of
from admission.store.index import GateIndex, object_key
from admission.core.timefmt import format_time
from admission.core.toggles import toggle_patch
from admission.store.yamldocs import objects

EXIT_OK, EXIT_HELD, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_FORBIDDEN, EXIT_NO_CLUSTER = range(6)


class GateError(Exception):
    """A failure to report in one line, with the exit code that classifies it."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


@dataclass
class Cluster:
    """The API clients and default namespace that kubeconfig (and flags) select."""

    api: object
    namespace: str
    user: str | None

    @property
    def custom(self):
        from kubernetes import client
        return client.CustomObjectsApi(self.api)


def _connect(args: argparse.Namespace) -> Cluster:
    from kubernetes import client, config
    try:
        contexts, current = config.list_kube_config_contexts(config_file=args.kubeconfig)
        context = next((c for c in contexts if c["name"] == args.context), None) if args.context else current
        if args.context and context is None:
            raise GateError(f"context {args.context!r} not found in kubeconfig", EXIT_USAGE)
        configuration = client.Configuration()
        config.load_kube_config(config_file=args.kubeconfig, context=args.context, client_configuration=configuration)
    except config.ConfigException as err:
        raise GateError(f"no cluster: {err}", EXIT_NO_CLUSTER) from None
    details = (context or {}).get("context") or {}
    return Cluster(client.ApiClient(configuration), args.namespace or details.get("namespace") or "default",
                   details.get("user"))


def _api_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn API and connection failures into one line and an exit code."""

    def wrapped(args: argparse.Namespace) -> int:
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError
        try:
            return fn(args)
        except ApiException as err:
            detail = _api_message(err)
            if err.status == 404:
                raise GateError(detail, EXIT_NOT_FOUND) from None
            if err.status in (401, 403):
                raise GateError(f"forbidden: {detail}", EXIT_FORBIDDEN) from None
            raise GateError(f"API error {err.status}: {detail}", EXIT_NO_CLUSTER) from None
        except HTTPError as err:
            raise GateError(f"no cluster: {err}", EXIT_NO_CLUSTER) from None

    return wrapped


def _api_message(err) -> str:
    try:
        return orjson.loads(err.body).get("message") or err.reason
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)


# -- where gates come from --------------------------------------------------------------

def _index(args: argparse.Namespace, cluster: Cluster | None) -> GateIndex:
    if args.gates_dir:
        from admission.store.files import FileStore
        return FileStore(args.gates_dir).index
    index = GateIndex()
    custom = cluster.custom
    gates = custom.list_cluster_custom_object(names.GATING_GROUP, names.GATING_VERSION, names.GATE_PLURAL)
    keepers = custom.list_cluster_custom_object(names.GATING_GROUP, names.GATING_VERSION, names.GATEKEEPER_PLURAL)
    index.replace_all(gates.get("items") or [], keepers.get("items") or [])
    return index


def _flux_objects(cluster: Cluster | None) -> list[dict]:
    if cluster is None:
        return []
    from admission.kube.fluxobjects import FluxObjects
    return FluxObjects(cluster.custom).list_all()


def _referencing(objects: list[dict], key: str) -> list[dict]:
    return [o for o in objects if key in {r.key for r in policy_of(o).refs}]


def _waiting_on(objects: list[dict], key: str) -> list[tuple[dict, content.Waiting]]:
    """Objects where new content waits because gate ``key`` is closed (their Blocked or
    Approved condition names it), with what waits and what they serve meanwhile."""
    found = []
    for obj in objects:
        waiting = content.waiting(obj)
        if waiting is not None and key in waiting.gates:
            found.append((obj, waiting))
    return found


def _name(obj: dict) -> str:
    meta = metadata(obj)
    return f"{obj['kind']}/{meta['namespace']}/{meta['name']}"


def _gates(args: argparse.Namespace) -> tuple[Cluster | None, GateIndex, datetime, str | None]:
    """The cluster (None offline), its gates, now, and the namespace to look in."""
    cluster = None if args.gates_dir else _connect(args)
    namespace = args.namespace or (cluster.namespace if cluster else None)
    return cluster, _index(args, cluster), utcnow(), namespace


# -- output -----------------------------------------------------------------------------

def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[c.upper() for c in columns]] + [[str(row.get(c, "") if row.get(c) is not None else "-")
                                               for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)


def _emit(args: argparse.Namespace, payload: object, table: Callable[[], str]) -> None:
    if args.output == "json":
        print(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
    elif args.output == "yaml":
        print(yaml.safe_dump(payload, sort_keys=False).rstrip())
    else:
        print(table())


def _state_row(state: GateState) -> dict:
    return {"namespace": state.namespace, "name": state.name, "state": "Opened" if state.open else "Closed",
            "reason": state.reason, "message": state.message,
            "until": format_time(state.next_transition) if state.next_transition else None}


# -- commands ---------------------------------------------------------------------------

@_api_errors
def cmd_list(args: argparse.Namespace) -> int:
    cluster, index, now, namespace = _gates(args)
    objects = _flux_objects(cluster)
    namespace = None if args.all_namespaces else namespace
    rows = []
    for gate in sorted(index.gates(), key=object_key):
        ns, name = object_key(gate)
        if namespace and ns != namespace:
            continue
        row = _state_row(index.lookup(ns, name, now))
        refs = _referencing(objects, f"{ns}/{name}")
        row["referencedBy"] = [_name(o) for o in refs]
        row["holding"] = [_name(o) for o, _ in _waiting_on(objects, f"{ns}/{name}")]
        rows.append(row)
    columns = (["namespace"] if args.all_namespaces else []) + ["name", "state", "reason", "until", "referenced by",
                                                                 "held"]

    def table() -> str:
        shown = [{**r, "referenced by": len(r["referencedBy"]) if cluster else None,
                  "held": len(r["holding"]) if cluster else None} for r in rows]
        return _table(shown, columns) if rows else f"no gates found{'' if args.all_namespaces else f' in {namespace}'}"

    _emit(args, rows, table)
    return EXIT_OK


@_api_errors
def cmd_get(args: argparse.Namespace) -> int:
    cluster, index, now, namespace = _gates(args)
    namespace = namespace or "default"
    if index.compiled(namespace, args.name) is None:
        raise GateError(f"gate {namespace}/{args.name} not found", EXIT_NOT_FOUND)
    state = index.lookup(namespace, args.name, now)
    info = _state_row(state)
    info.update({"requestedAt": format_time(state.requested_at) if state.requested_at else None,
                 "requestedBy": state.requested_by, "requestMessage": state.request_message,
                 "problems": list(state.problems)})
    held_by = []
    objects = _flux_objects(cluster)
    for obj in _referencing(objects, f"{namespace}/{args.name}"):
        meta = metadata(obj)
        hold = hold_of(obj, index.lookup, now)
        held_by.append({"kind": obj["kind"], "namespace": meta["namespace"], "name": meta["name"],
                        "held": hold.held,
                        "why": describe(obj["kind"], meta["namespace"], meta["name"], [hold]) if hold.held else None})
    info["referencedBy"] = held_by
    # New content that waits (also on objects that inherit the gate: generated HelmCharts).
    info["waiting"] = [{"kind": obj["kind"], "namespace": metadata(obj)["namespace"], "name": metadata(obj)["name"],
                        "waits": waiting.waits or None, "serves": waiting.serves or None, "message": waiting.message}
                       for obj, waiting in _waiting_on(objects, f"{namespace}/{args.name}")]

    def table() -> str:
        lines = [f"{label + ':':<15}{value}" for label, value in (
            ("Name", info["name"]), ("Namespace", info["namespace"]), ("State", info["state"]),
            ("Reason", info["reason"]), ("Message", info["message"]), ("Until", info["until"] or "-"))]
        if state.requested_by or state.request_message:
            lines.append(f"{'Requested:':<15}by {state.requested_by or '?'}: {state.request_message or ''}".rstrip(": "))
        lines += [f"{'Problem:':<15}{p}" for p in state.problems]
        rows = [{"kind": o["kind"], "namespace": o["namespace"], "name": o["name"],
                 "held": "yes" if o["held"] else "no"} for o in held_by]
        lines.append("Referenced by:" + ("" if rows else " none"))
        if rows:
            lines += ["  " + line for line in _table(rows, ["kind", "namespace", "name", "held"]).splitlines()]
        lines.append("Waiting:" + ("" if info["waiting"] else " nothing"))
        if info["waiting"]:
            lines += ["  " + line for line in
                      _table(info["waiting"], ["kind", "namespace", "name", "waits", "serves"]).splitlines()]
        return "\n".join(lines)

    _emit(args, info, table)
    return EXIT_OK


def _requester(args: argparse.Namespace, cluster: Cluster) -> str:
    return args.requested_by or cluster.user or getpass.getuser()


@_api_errors
def cmd_toggle(args: argparse.Namespace) -> int:
    if args.gates_dir:
        raise GateError("open and close write to the cluster; --gates-dir is read-only", EXIT_USAGE)
    cluster = _connect(args)
    try:
        patch = toggle_patch(args.action, utcnow(), args.message, _requester(args, cluster), getattr(args, "for_", None))
    except ValueError as err:
        raise GateError(str(err), EXIT_USAGE) from None
    namespace = args.namespace or cluster.namespace
    cluster.custom.patch_namespaced_custom_object(names.GATING_GROUP, names.GATING_VERSION, namespace,
                                                  names.GATE_PLURAL, args.name, patch)
    until = patch["metadata"]["annotations"].get(names.CLOSE_ANNOTATION) if args.action == "open" else None
    print(f"gate {namespace}/{args.name} {'opened' if args.action == 'open' else 'closed'}"
          + (f" until {until}" if until else "") + (f": {args.message}" if args.message else ""))
    return EXIT_OK


def _manifest(path: str) -> list[dict]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        docs = objects(text)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise GateError(f"cannot read {path}: {' '.join(str(err).split())}", EXIT_USAGE) from None
    return [doc for doc in docs if isinstance(doc, dict)]


@_api_errors
def cmd_check(args: argparse.Namespace) -> int:
    cluster, index, now, default_ns = _gates(args)
    default_ns = default_ns or "default"
    live = None
    if cluster is not None:
        from admission.kube.fluxobjects import FluxObjects
        live = FluxObjects(cluster.custom)
    rows = []
    for obj in _manifest(args.filename):
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind = obj.get("kind", "")
        if not kinds.is_gated_kind(group, kind):
            continue
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", default_ns)
        # A change must satisfy the policy it enters, and the one the live object has.
        judged = [obj]
        current = live.get(kind, meta["namespace"], meta.get("name", ""), version) if live else None
        if current is not None:
            judged.append(current)
        holds = [h for h in (hold_of(o, index.lookup, now) for o in judged) if h.held]
        rows.append({"kind": kind, "namespace": meta["namespace"], "name": meta.get("name"),
                     "verdict": "held" if holds else "allowed",
                     "message": describe(kind, meta["namespace"], meta.get("name", ""), holds) if holds else None})

    def table() -> str:
        return _table(rows, ["kind", "namespace", "name", "verdict", "message"]) if rows else "no Flux objects in the manifest"

    _emit(args, rows, table)
    return EXIT_HELD if any(r["verdict"] == "held" for r in rows) else EXIT_OK


# -- parser -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context")
    common.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    common.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser = argparse.ArgumentParser(prog="kubectl gate", description="Open, close and inspect Flux gates.",
                                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", parents=[common],
                       help="gates with their state, what references them and how many objects they hold "
                            "(HELD: new content waits there)")
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("get", parents=[common],
                       help="one gate: state, why, until when, what it holds, what waits and what is served")
    p.add_argument("name")
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    p.set_defaults(func=cmd_get)

    for action in ("open", "close"):
        p = sub.add_parser(action, parents=[common], help=f"{action} a gate now (writes the toggle annotation)")
        p.add_argument("name")
        p.add_argument("-m", "--message", help="why: shown in Events, logs and `get`")
        p.add_argument("--requested-by", help="who asks (default: the kubeconfig user)")
        if action == "open":
            p.add_argument("--for", dest="for_", metavar="DURATION", help="close again after this long (Go duration, e.g. 2h)")
        p.set_defaults(func=cmd_toggle, action=action, gates_dir=None)

    p = sub.add_parser("check", parents=[common], help="would a change to these Flux objects be held now?")
    p.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    p.add_argument("--gates-dir", help="judge against gates in YAML files instead of the cluster")
    p.set_defaults(func=cmd_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GateError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.code


if __name__ == "__main__":
    sys.exit(main())
