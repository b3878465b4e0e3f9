"""``kubectl gate``: list, inspect, open and close gates, and check manifests in CI.

Exit codes a script can rely on:
  0  done; for ``check``, nothing would be denied (allowed with an audit warning is not a failure)
  1  ``check``: applying the manifest now would be denied for at least one object
  2  usage error (bad flags, bad duration, unreadable manifest)
  3  not found (the gate, or the namespace's gates)
  4  forbidden (RBAC) or unauthorized
  5  no cluster (no kubeconfig, API server unreachable)
  6  ``--gates-dir``: a gates file (or the directory) cannot be used; each problem is printed on
     stderr, and the answer printed is the server's with that directory (the gates such a file
     may define are closed). ``check`` exits 1 rather than 6 when something would be denied.
"""

from __future__ import annotations

import argparse
import copy
import getpass
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, TextIO

import orjson
import yaml

from admission.cli import approve
from admission.cli import completion
from admission.cli.cluster import (EXIT_BAD_GATES_DIR, EXIT_DENIED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, Cluster,
                                    GateError, api_errors, connect)
from admission.cli.shellcomplete import hoist, print_completions
from admission.cli.settings import add_policy_flags, env_mode, policy_settings
from admission.clock import utcnow
from admission.core import content
from admission.core import halfrelease
from admission.core import kinds
from admission.core import names
from admission.core.controls import escaped
from admission.core.applied import apply_request, user_info
from admission.core.decision import Context, Settings, standing
from admission.core.gates import GateState
from admission.core.objects import label, metadata, object_key
from admission.core.references import policy_of
from admission.core.review import UserInfo
from admission.store.calendar import feed_rows, feeds_of, feeds_text
from admission.store.index import GateIndex
from admission.core.timefmt import format_time
from admission.core.toggles import refuse_controls, toggle_patch
from admission.store.yamldocs import objects
from admission.webhook import handlers

# What `check` says of each object: the webhook's answer to the request applying it would make.
# check's verdicts: a stable token for scripts (-o json|yaml "verdict") and the sentence people
# read (the table's VERDICT column, "verdictText" beside the token).
DENIED, AUDITED, ALLOWED = "denied", "audited", "allowed"
VERDICT_TEXT = {DENIED: "would be denied", AUDITED: "would be allowed with an audit warning", ALLOWED: "allowed"}


# -- where gates come from --------------------------------------------------------------

def _index(args: argparse.Namespace, cluster: Cluster | None) -> GateIndex:
    if args.gates_dir:
        import logging
        from admission.store.files import FileStore
        logging.getLogger("admission.store").addHandler(logging.NullHandler())  # reported below, once
        store = FileStore(args.gates_dir, inotify=False)
        # Reported, not fatal: the answer is still the server's with this directory.
        args.gates_dir_problems = dict(store.problems)
        for why in store.problems.values():
            show([f"error: --gates-dir: {why}"], sys.stderr)
        return store.index
    index = GateIndex()
    assert cluster is not None  # without --gates-dir, the command connected first
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
    return label(obj["kind"], meta["namespace"], meta["name"])


def _gates(args: argparse.Namespace) -> tuple[Cluster | None, GateIndex, datetime, str | None]:
    """The cluster (None offline), its gates, now, and the namespace to look in."""
    cluster = None if args.gates_dir else connect(args)
    namespace = args.namespace or (cluster.namespace if cluster else None)
    return cluster, _index(args, cluster), utcnow(), namespace


# -- output -----------------------------------------------------------------------------

def show(lines: Iterable[str], file: TextIO | None = None) -> None:
    """Print ``lines``, control characters escaped: every line this command prints comes here."""
    # A gate's message, an object's name or a calendar's summary is anyone's text: written to the
    # Gate directly, it reaches here unchecked, and a terminal would act on its escape sequences.
    # Escaped line by line, so that a line break in a value cannot start a line of its own.
    print("\n".join(escaped(line) for line in lines), file=file or sys.stdout)


def _table(rows: list[dict], columns: list[str]) -> list[str]:
    cells = [[c.upper() for c in columns]] + [[escaped(str(row.get(c, "") if row.get(c) is not None else "-"))
                                               for c in columns] for row in rows]  # escaped first: widths as shown
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]


def _emit(args: argparse.Namespace, payload: object, table: Callable[[], list[str]]) -> None:
    # orjson escapes C0 controls, PyYAML everything outside ASCII; what orjson leaves (C1, DEL,
    # direction marks) show() writes as JSON's own \uXXXX escapes, so it reads back as the same data.
    if args.output == "json":
        show(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode().split("\n"))
    elif args.output == "yaml":
        show(yaml.safe_dump(payload, sort_keys=False).rstrip().split("\n"))
    else:
        show(table())


def _state_row(state: GateState) -> dict:
    return {"namespace": state.namespace, "name": state.name, "state": names.STATE_OPENED if state.open else names.STATE_CLOSED,
            "reason": state.reason, "message": state.message,
            "until": format_time(state.next_transition) if state.next_transition else None,
            # The search for it gave up here: a change may come after, unlike "until": null alone.
            "unknownAfter": format_time(after) if (after := state.transition_unknown_after) else None}


def _until(row: dict) -> str | None:
    return row["until"] or (f"unknown after {row['unknownAfter']}" if row["unknownAfter"] else None)


# -- commands ---------------------------------------------------------------------------

@api_errors
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

    def table() -> list[str]:
        shown = [{**r, "until": _until(r), "referenced by": len(r["referencedBy"]) if cluster else None,
                  "held": len(r["holding"]) if cluster else None} for r in rows]
        return _table(shown, columns) if rows else [f"no gates found{f' in {namespace}' if namespace else ''}"]

    _emit(args, rows, table)
    return EXIT_OK


@api_errors
def cmd_get(args: argparse.Namespace) -> int:
    cluster, index, now, namespace = _gates(args)
    namespace = namespace or "default"
    if index.compiled(namespace, args.name) is None:
        raise GateError(f"gate {namespace}/{args.name} not found", EXIT_NOT_FOUND)
    state = index.lookup(namespace, args.name, now)
    info = _state_row(state)
    info.update({"requestedAt": format_time(state.requested_at) if state.requested_at else None,
                 "requestedBy": state.requested_by, "requestMessage": state.request_message,
                 "problems": list(state.problems),
                 "approvals": [a.row() for a in state.approvals if a.live(now)]})
    held_by = []
    objects = _flux_objects(cluster)
    # The webhook's mode (a gate's spec.mode, else the server's): an audit-mode hold lets
    # changes through with a warning, and must not read as held.
    server = Settings(mode=env_mode())
    for obj in _referencing(objects, f"{namespace}/{args.name}"):
        meta = metadata(obj)
        stands = standing(obj, Context(index.lookup, now, server))
        mode = stands.mode if stands.held else None
        held_by.append({"kind": obj["kind"], "namespace": meta["namespace"], "name": meta["name"],
                        "held": mode == names.ENFORCE, "mode": mode, "why": stands.message or None})
    info["referencedBy"] = held_by
    # The GateKeeper calendars it follows: last fetch, errors, and what comes next.
    info["calendars"] = feed_rows(feeds_of(index.compiled(namespace, args.name)), now)
    # New content that waits (also on objects that inherit the gate: generated HelmCharts).
    info["waiting"] = [{"kind": obj["kind"], "namespace": metadata(obj)["namespace"], "name": metadata(obj)["name"],
                        "waits": waiting.waits or None, "serves": waiting.serves or None, "message": waiting.message}
                       for obj, waiting in _waiting_on(objects, f"{namespace}/{args.name}")]

    def table() -> list[str]:
        lines = [f"{label + ':':<15}{value}" for label, value in (
            ("Name", info["name"]), ("Namespace", info["namespace"]), ("State", info["state"]),
            ("Reason", info["reason"]), ("Message", info["message"]), ("Until", _until(info) or "-"))]
        if state.requested_by or state.request_message:
            lines.append(f"{'Requested:':<15}by {state.requested_by or '?'}: {state.request_message or ''}".rstrip(": "))
        lines += [f"{'Problem:':<15}{p}" for p in state.problems]
        lines += [f"{'Approval:':<15}{a.describe()} (until {a.row()['expires']})" for a in state.approvals if a.live(now)]
        rows = [{"kind": o["kind"], "namespace": o["namespace"], "name": o["name"],
                 "held": "yes" if o["held"] else "audit only" if o["mode"] == names.AUDIT else "no"} for o in held_by]
        lines.append("Referenced by:" + ("" if rows else " none"))
        if rows:
            lines += ["  " + line for line in _table(rows, ["kind", "namespace", "name", "held"])]
        lines += feeds_text(info["calendars"])
        lines.append("Waiting:" + ("" if info["waiting"] else " nothing"))
        if info["waiting"]:
            lines += ["  " + line for line in _table(info["waiting"], ["kind", "namespace", "name", "waits", "serves"])]
        return lines

    _emit(args, info, table)
    return EXIT_OK


def _requester(args: argparse.Namespace, cluster: Cluster) -> str:
    return args.requested_by or cluster.user or getpass.getuser()


@api_errors
def cmd_toggle(args: argparse.Namespace) -> int:
    if args.gates_dir:
        raise GateError("open and close write to the cluster; --gates-dir is read-only", EXIT_USAGE)
    message = _message(args)
    try:
        refuse_controls(message=message, requestedBy=args.requested_by)  # said before asking for a cluster
    except ValueError as err:
        raise GateError(str(err), EXIT_USAGE) from None
    cluster = connect(args)
    try:
        patch = toggle_patch(args.action, utcnow(), message, _requester(args, cluster), getattr(args, "for_", None))
    except ValueError as err:
        raise GateError(str(err), EXIT_USAGE) from None
    namespace = args.namespace or cluster.namespace
    cluster.custom.patch_namespaced_custom_object(names.GATING_GROUP, names.GATING_VERSION, namespace,
                                                  names.GATE_PLURAL, args.name, patch)
    until = patch["metadata"]["annotations"].get(names.CLOSE_ANNOTATION) if args.action == "open" else None
    show([f"gate {namespace}/{args.name} {'opened' if args.action == 'open' else 'closed'}"
          + (f" until {until}" if until else "") + (f": {message}" if message else "")])
    return EXIT_OK


def _message(args: argparse.Namespace) -> str | None:
    """-m, or the argument after NAME (the gating RFC's `flux gate open NAME "message"`)."""
    if args.message is not None and args.text is not None and args.message != args.text:
        raise GateError("two messages (-m and one after the gate's name): give one", EXIT_USAGE)
    return args.message if args.message is not None else args.text


def _manifest(path: str) -> list[dict]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        docs = objects(text)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise GateError(f"cannot read {path}: {' '.join(str(err).split())}", EXIT_USAGE) from None
    except RecursionError:
        raise GateError(f"cannot read {path}: values nest too deeply", EXIT_USAGE) from None
    return [doc for doc in docs if isinstance(doc, dict)]


def _identity(args: argparse.Namespace, cluster: Cluster | None) -> UserInfo:
    """userInfo the API server would see: --as/--as-group, else what the kubeconfig tells."""
    if args.as_groups and not args.as_user:
        raise GateError("--as-group needs --as (as with kubectl)", EXIT_USAGE)
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
                return str(common[0].value), [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        except (OSError, ValueError):
            pass
    return cluster.user or getpass.getuser(), []


def judge(manifest: dict, live: dict | None, user: UserInfo, context: Context) -> dict:
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
    return {"kind": request["kind"]["kind"], "namespace": request["namespace"], "name": request["name"],
            "operation": request["operation"], "verdict": verdict, "verdictText": VERDICT_TEXT[verdict],
            "message": message}


@api_errors
def cmd_check(args: argparse.Namespace) -> int:
    cluster, index, now, default_ns = _gates(args)
    default_ns = default_ns or "default"
    settings, user = policy_settings(args), _identity(args, cluster)
    live = None
    if cluster is not None:
        from admission.kube.fluxobjects import FluxObjects
        live = FluxObjects(cluster.custom)
    rows, manifest = [], [o for o in _manifest(args.filename) if kinds.is_gated_kind(
        str(o.get("apiVersion", "")).rpartition("/")[0], str(o.get("kind", "")))]
    for obj in manifest:
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        obj["metadata"]["namespace"] = str(obj["metadata"].get("namespace") or default_ns)
    get, listing = approve.lookups(manifest, live.list_kind if live else None)  # (its inputs: half-release warnings)
    for obj in manifest:
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind, meta = str(obj.get("kind", "")), obj["metadata"]
        name = meta.get("name")
        current = live.get(kind, meta["namespace"], name, version) if live and isinstance(name, str) and name else None
        try:
            rows.append(judge(obj, current, user, Context(index.lookup, now, settings)))
            rows[-1]["warnings"] = halfrelease.warnings(obj, get, listing) if policy_of(obj).refs else []
        except RecursionError:  # as the webhook answers it: such an object cannot be judged
            raise GateError(f"{kind} {meta['namespace']}/{name}: nests values too deeply to be judged", EXIT_USAGE) from None

    def table() -> list[str]:
        shown = [{**row, "verdict": row["verdictText"]} for row in rows]  # the sentence, as before
        if not rows:
            return ["no Flux objects in the manifest"]
        return _table(shown, ["kind", "namespace", "name", "verdict", "message"]) + [
            f"  warning: {label(row['kind'], row['namespace'], row['name'])}: {text}" for row in rows for text in row["warnings"]]

    _emit(args, rows, table)
    return EXIT_DENIED if any(r["verdict"] == DENIED for r in rows) else EXIT_OK


@api_errors
def cmd_calendar(args: argparse.Namespace) -> int:
    from admission.store import calendar
    _, index, now, namespace = _gates(args)
    try:
        calendar.days_of(args.days)
    except ValueError as err:
        raise GateError(f"--{err}", EXIT_USAGE) from None
    cals = calendar.calendars(index, now, args.days, None if args.all_namespaces else namespace)
    if args.output == "ics":
        sys.stdout.buffer.write(calendar.to_ics(cals, now))
        sys.stdout.flush()
        return EXIT_OK
    _emit(args, calendar.to_rows(cals, now), lambda: calendar.to_lines(cals, now, args.days))
    return EXIT_OK


def complete_main(argv: list[str] | None = None) -> int:
    """``kubectl_complete-gate ARGS... PARTIAL``: kubectl's plugin completion protocol."""
    return print_completions(list(sys.argv[1:] if argv is None else argv), build_parser())


# -- parser -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Flavor:
    """What differs between `kubectl gate` and `flux gate` (admission.cli.flux_gate): the name in
    help, and the namespace a command uses without -n."""

    prog: str = "kubectl gate"
    namespace_help: str = "namespace (default: the context's)"
    default_namespace: Callable[[argparse.Namespace], str | None] | None = None  # None: the context's
    switches: tuple[tuple[str, str], ...] = ()  # more common flags: (name, help)


KUBECTL = Flavor()


def _completes(action: argparse.Action, completer: Callable[..., list[str]]) -> None:
    """Have argcomplete offer what ``completer`` returns for ``action``'s values."""
    action.completer = completer  # type: ignore[attr-defined]  # argcomplete's attribute, read by name


def build_parser(flavor: Flavor = KUBECTL) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context")
    _completes(common.add_argument("-n", "--namespace", help=flavor.namespace_help), completion.namespaces)
    common.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    for switch, help_text in flavor.switches:
        common.add_argument(switch, action="store_true", help=help_text)
    parser = argparse.ArgumentParser(prog=flavor.prog, description="Open, close and inspect Flux gates.",
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
    _completes(p.add_argument("name"), completion.gate_names)
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    p.set_defaults(func=cmd_get)

    for action in ("open", "close"):
        p = sub.add_parser(action, parents=[common], help=f"{action} a gate now (writes the toggle annotation)")
        _completes(p.add_argument("name"), completion.gate_names)
        _completes(p.add_argument("text", nargs="?", metavar="MESSAGE", help="why, as -m gives it"),
                   completion.no_candidates)
        p.add_argument("-m", "--message", help="why: shown in Events, logs and `get`")
        p.add_argument("--requested-by", help="who asks (default: the kubeconfig user)")
        if action == "open":
            p.add_argument("--for", dest="for_", metavar="DURATION", help="close again after this long (Go duration, e.g. 2h)")
        p.set_defaults(func=cmd_toggle, action=action, gates_dir=None)

    p = sub.add_parser("check", parents=[common], help="would the webhook deny applying these Flux objects now?")
    p.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    p.add_argument("--gates-dir", help="judge against gates in YAML files instead of the cluster (every object is a CREATE)")
    p.add_argument("--as", dest="as_user", metavar="USER",
                   help="judge as this user (default: the kubeconfig's: a client certificate's CN, else the context's user name)")
    p.add_argument("--as-group", dest="as_groups", metavar="GROUP", action="append", default=[],
                   help="with --as: a group of that user (repeatable)")
    add_policy_flags(p)  # the server's --mode and exempt lists, from the same GATE_ADMISSION_* variables
    p.set_defaults(func=cmd_check)

    approve.add_parsers(sub, common, _completes)  # approve, pending (docs/decisions/0057)
    # Subcommands share their parents' actions: calendar's wider -o belongs to a copy.
    calendar_common = copy.deepcopy(common)
    next(a for a in calendar_common._actions if a.dest == "output").choices = ("table", "json", "yaml", "ics")
    p = sub.add_parser("calendar", parents=[calendar_common],
                       help="open and closed intervals of each gate over the coming days")
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("--days", type=int, default=14, help="how many days, from today in each gate's time zone (default 14)")
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    p.set_defaults(func=cmd_calendar)
    for p in sub.choices.values():  # on each subcommand: completers see the subcommand's namespace
        p.set_defaults(default_namespace=flavor.default_namespace)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    parser = parser or build_parser()
    import argcomplete
    # Answers the shell's completion request and exits; does nothing otherwise.
    argcomplete.autocomplete(parser, always_complete_options=False)
    args = parser.parse_args(hoist(list(sys.argv[1:] if argv is None else argv)))
    try:
        args.namespace = completion.namespace_of(args)
        code = args.func(args)
    except GateError as err:
        show([f"error: {err}"], sys.stderr)
        return err.code
    return EXIT_BAD_GATES_DIR if code == EXIT_OK and getattr(args, "gates_dir_problems", None) else code


if __name__ == "__main__":
    sys.exit(main())
