"""``kubectl gate`` list, get, open, close and calendar: where gates come from, and how answers are printed."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TextIO

import orjson
import yaml

from admission.cli.cluster import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    Cluster,
    GateError,
    api_errors,
    api_failures,
    connect,
    context_namespace,
)
from admission.cli.settings import env_mode
from admission.clock import utcnow
from admission.core.admission.decision import Context, Settings, standing
from admission.core.base import names
from admission.core.base.controls import escaped
from admission.core.base.objects import Object, label, metadata, object_key
from admission.core.base.timefmt import format_time
from admission.core.flux import content
from admission.core.gates import approvalview, togglestamp
from admission.core.gates.gates import GateState
from admission.core.gates.references import policy_of
from admission.core.gates.toggles import toggle_patch
from admission.store.calendar import feed_rows, feeds_of, feeds_text
from admission.store.index import GateIndex

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
    keepers = custom.list_cluster_custom_object(
        names.GATING_GROUP, names.GATING_VERSION, names.GATEKEEPER_PLURAL
    )
    index.replace_all(gates.get("items") or [], keepers.get("items") or [])
    return index


def _flux_objects(cluster: Cluster | None) -> list[Object]:
    if cluster is None:
        return []
    from admission.kube.fluxobjects import FluxObjects

    return FluxObjects(cluster.custom).list_all()


def _referencing(objects: list[Object], key: str) -> list[Object]:
    return [o for o in objects if key in {r.key for r in policy_of(o).refs}]


def _waiting_on(objects: list[Object], key: str) -> list[tuple[Object, content.Waiting]]:
    """Objects where new content waits because gate ``key`` is closed (their Blocked or
    Approved condition names it), with what waits and what they serve meanwhile."""
    found = []
    for obj in objects:
        waiting = content.waiting(obj)
        if waiting is not None and key in waiting.gates:
            found.append((obj, waiting))
    return found


def _name(obj: Object) -> str:
    meta = metadata(obj)
    return label(obj["kind"], meta["namespace"], meta["name"])


def lookup_gates(args: argparse.Namespace) -> tuple[Cluster | None, GateIndex, datetime, str | None]:
    """The cluster (None offline), its gates, now, and the namespace to look in."""
    cluster = None if args.gates_dir else connect(args)
    namespace = cluster.namespace if cluster else context_namespace(args)
    return cluster, _index(args, cluster), utcnow(), namespace


# -- output -----------------------------------------------------------------------------


def show(lines: Iterable[str], file: TextIO | None = None) -> None:
    """Print ``lines``, control characters escaped: every line this command prints comes here."""
    # A gate's message, an object's name or a calendar's summary is anyone's text: written to the
    # Gate directly, it reaches here unchecked, and a terminal would act on its escape sequences.
    # Escaped line by line, so that a line break in a value cannot start a line of its own.
    print("\n".join(escaped(line) for line in lines), file=file or sys.stdout)


def text_table(rows: list[Object], columns: list[str], headers: bool = True) -> list[str]:
    """``rows`` as aligned columns, under a header line unless ``headers`` is false (--no-headers)."""
    cells = [[c.upper() for c in columns]] + [
        [escaped(str(row.get(c, "") if row.get(c) is not None else "-")) for c in columns] for row in rows
    ]  # escaped first: widths as shown
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return lines if headers else lines[1:]


def headers(args: argparse.Namespace) -> bool:
    """Whether a table has its header line: not with --no-headers."""
    return not getattr(args, "no_headers", False)


def emit(args: argparse.Namespace, payload: object, table: Callable[[], list[str]]) -> None:
    # orjson escapes C0 controls, PyYAML everything outside ASCII; what orjson leaves (C1, DEL,
    # direction marks) show() writes as JSON's own \uXXXX escapes, so it reads back as the same data.
    if args.output == "json":
        show(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode().split("\n"))
    elif args.output == "yaml":
        show(yaml.safe_dump(payload, sort_keys=False).rstrip().split("\n"))
    elif lines := table():  # --no-headers over nothing: nothing, not an empty line
        show(lines)


# -- --watch ------------------------------------------------------------------------------

# How long --watch waits between two looks. A gate opens and closes on its schedule as well as
# on writes, so the answer is computed again, as the first was, rather than following a watch
# of the objects: each look makes the calls one command makes, each bounded by --request-timeout.
WATCH_PERIOD = 2.0


def add_watch_flags(p: argparse.ArgumentParser) -> None:
    """--watch and --no-headers, for the commands that print a table of many rows (list, pending)."""
    p.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the answer, look again every few seconds and print the answer again when it "
        "changed, until interrupted (Ctrl-C)",
    )
    p.add_argument("--no-headers", action="store_true", help="the table without its header line")


def answers(args: argparse.Namespace, look: Callable[[], tuple[object, Callable[[], list[str]]]]) -> int:
    """Print what ``look`` answers (its payload, for -o json|yaml, and its table); with --watch,
    look again every WATCH_PERIOD and print each answer that differs from the last printed
    (a JSON or YAML document each, or a table after a blank line) until interrupted. The first
    look's failure ends the command, as without --watch; a later one is said on stderr (once
    while it repeats) and the watch goes on: an API server restarting does not end it."""
    import time

    payload, table = look()
    emit(args, payload, table)
    if not args.watch:
        return EXIT_OK
    failed = None
    try:
        sys.stdout.flush()
        while True:
            time.sleep(WATCH_PERIOD)
            try:
                with api_failures():
                    again, table = look()
            except GateError as err:
                if str(err) != failed:
                    show([f"error: {err} (--watch goes on)"], sys.stderr)
                failed = str(err)
                continue
            failed = None
            if again != payload:
                payload = again
                if args.output == "yaml":
                    show(["---"])
                elif args.output == "table":
                    show([""])
                emit(args, payload, table)
                sys.stdout.flush()
    except KeyboardInterrupt:  # how a watch is ended: no traceback
        return EXIT_OK


def _state_row(state: GateState) -> Object:
    return {
        "namespace": state.namespace,
        "name": state.name,
        "state": names.STATE_OPENED if state.open else names.STATE_CLOSED,
        "reason": state.reason,
        "message": state.message,
        "until": format_time(state.next_transition) if state.next_transition else None,
        # The search for it gave up here: a change may come after, unlike "until": null alone.
        "unknownAfter": format_time(after) if (after := state.transition_unknown_after) else None,
    }


def _until(row: Object) -> str | None:
    return row["until"] or (f"unknown after {row['unknownAfter']}" if row["unknownAfter"] else None)


# -- commands ---------------------------------------------------------------------------


def cmd_version(args: argparse.Namespace) -> int:
    show([args.version])
    return EXIT_OK


@api_errors
def cmd_list(args: argparse.Namespace) -> int:
    return answers(args, lambda: _list_answer(args))


def _list_answer(args: argparse.Namespace) -> tuple[object, Callable[[], list[str]]]:
    cluster, index, now, namespace = lookup_gates(args)
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
    columns = (["namespace"] if args.all_namespaces else []) + [
        "name",
        "state",
        "reason",
        "until",
        "referenced by",
        "held",
    ]

    def table() -> list[str]:
        shown = [
            {
                **r,
                "until": _until(r),
                "referenced by": len(r["referencedBy"]) if cluster else None,
                "held": len(r["holding"]) if cluster else None,
            }
            for r in rows
        ]
        if not rows:
            return [f"no gates found{f' in {namespace}' if namespace else ''}"] if headers(args) else []
        return text_table(shown, columns, headers(args))

    return rows, table


@api_errors
def cmd_get(args: argparse.Namespace) -> int:
    cluster, index, now, namespace = lookup_gates(args)
    namespace = namespace or names.DEFAULT_NAMESPACE
    if index.compiled(namespace, args.name) is None:
        raise GateError(f"gate {namespace}/{args.name} not found", EXIT_NOT_FOUND)
    state = index.lookup(namespace, args.name, now)
    info = _state_row(state)
    # This command holds no approval key: an approval shows as verified only where the Gate's
    # status (the controller's, which holds it) lists exactly it as verified (approvalview.read_without_key).
    gate_obj = next((g for g in index.gates() if object_key(g) == (namespace, args.name)), {})
    shown = approvalview.read_without_key(state.approvals + state.unverified_approvals, gate_obj)
    # Who toggled it likewise: verified only where the status vouches for exactly this stamp.
    toggled_by = togglestamp.read_without_key(state.toggled_by, gate_obj)
    verified = [a for a in shown if a.unverified is None and a.live(now)]
    unverified = [a for a in shown if a.unverified is not None]
    info.update(
        {
            "requestedAt": format_time(state.requested_at) if state.requested_at else None,
            "requestedBy": state.requested_by,
            names.TOGGLED_BY_FIELD: toggled_by.row() if toggled_by is not None else None,
            "requestMessage": state.request_message,
            "problems": list(state.problems),
            "approvals": [a.row() for a in verified],
            "unverifiedApprovals": [a.row() for a in unverified],
        }
    )
    held_by = []
    objects = _flux_objects(cluster)
    # The webhook's mode (a gate's spec.mode, else the server's): an audit-mode hold lets
    # changes through with a warning, and must not read as held.
    server = Settings(mode=env_mode())
    for obj in _referencing(objects, f"{namespace}/{args.name}"):
        meta = metadata(obj)
        stands = standing(obj, Context(index.lookup, now, server))
        mode = stands.mode if stands.held else None
        held_by.append(
            {
                "kind": obj["kind"],
                "namespace": meta["namespace"],
                "name": meta["name"],
                "held": mode == names.ENFORCE,
                "mode": mode,
                "why": stands.message or None,
            }
        )
    info["referencedBy"] = held_by
    # The GateKeeper calendars it follows: last fetch, errors, and what comes next.
    info["calendars"] = feed_rows(feeds_of(index.compiled(namespace, args.name)), now)
    # New content that waits (also on objects that inherit the gate: generated HelmCharts).
    info["waiting"] = [
        {
            "kind": obj["kind"],
            "namespace": metadata(obj)["namespace"],
            "name": metadata(obj)["name"],
            "waits": waiting.waits or None,
            "serves": waiting.serves or None,
            "message": waiting.message,
        }
        for obj, waiting in _waiting_on(objects, f"{namespace}/{args.name}")
    ]

    def table() -> list[str]:
        lines = [
            f"{label + ':':<15}{value}"
            for label, value in (
                ("Name", info["name"]),
                ("Namespace", info["namespace"]),
                ("State", info["state"]),
                ("Reason", info["reason"]),
                ("Message", info["message"]),
                ("Until", _until(info) or "-"),
            )
        ]
        if state.requested_by or state.request_message:
            lines.append(
                f"{'Requested:':<15}by {state.requested_by or '?'}: {state.request_message or ''}".rstrip(
                    ": "
                )
            )
        if toggled_by is not None:
            lines.append(f"{'Toggled by:':<15}{toggled_by.describe()}")
        lines += [f"{'Problem:':<15}{p}" for p in state.problems]
        lines += [f"{'Approval:':<15}{a.describe()} (until {a.row()['expires']})" for a in verified]
        lines += [f"{'Unverified:':<15}{a.describe()} (counts for nothing)" for a in unverified]
        rows = [
            {
                "kind": o["kind"],
                "namespace": o["namespace"],
                "name": o["name"],
                "held": "yes" if o["held"] else "audit only" if o["mode"] == names.AUDIT else "no",
            }
            for o in held_by
        ]
        lines.append("Referenced by:" + ("" if rows else " none"))
        if rows:
            lines += ["  " + line for line in text_table(rows, ["kind", "namespace", "name", "held"])]
        lines += feeds_text(info["calendars"])
        lines.append("Waiting:" + ("" if info["waiting"] else " nothing"))
        if info["waiting"]:
            lines += [
                "  " + line
                for line in text_table(info["waiting"], ["kind", "namespace", "name", "waits", "serves"])
            ]
        return lines

    emit(args, info, table)
    return EXIT_OK


def _requester(args: argparse.Namespace, cluster: Cluster) -> str:
    return args.requested_by or cluster.user or getpass.getuser()


@api_errors
def cmd_toggle(args: argparse.Namespace) -> int:
    if args.gates_dir:
        raise GateError("open and close write to the cluster; --gates-dir is read-only", EXIT_USAGE)
    message = _message(args)
    for_ = getattr(args, "for_", None)
    try:  # every flag checked before asking for a cluster: a typo is a usage error wherever it runs
        toggle_patch(args.action, utcnow(), message, args.requested_by, for_)
    except ValueError as err:
        raise GateError(str(err), EXIT_USAGE) from None
    cluster = connect(args)
    namespace = args.namespace or cluster.namespace
    show([toggle(cluster, namespace, args.name, args.action, message, _requester(args, cluster), for_)])
    return EXIT_OK


def toggle(
    cluster: Cluster,
    namespace: str,
    name: str,
    action: str,
    message: str | None,
    requested_by: str | None,
    for_: str | None = None,
) -> str:
    """Open or close gate ``namespace/name`` now (``for_``: reopened for that long): the line
    that says so. GateError (usage) when a value is refused before anything is written."""
    try:
        patch = toggle_patch(action, utcnow(), message, requested_by, for_)
    except ValueError as err:
        raise GateError(str(err), EXIT_USAGE) from None
    cluster.custom.patch_namespaced_custom_object(
        names.GATING_GROUP, names.GATING_VERSION, namespace, names.GATE_PLURAL, name, patch
    )
    until = patch["metadata"]["annotations"].get(names.CLOSE_ANNOTATION) if action == "open" else None
    return (
        f"gate {namespace}/{name} {'opened' if action == 'open' else 'closed'}"
        + (f" until {until}" if until else "")
        + (f": {message}" if message else "")
    )


def _message(args: argparse.Namespace) -> str | None:
    """-m, or the argument after NAME (the gating RFC's `flux gate open NAME "message"`)."""
    if args.message is not None and args.text is not None and args.message != args.text:
        raise GateError("two messages (-m and one after the gate's name): give one", EXIT_USAGE)
    message: str | None = args.message if args.message is not None else args.text
    return message


@api_errors
def cmd_calendar(args: argparse.Namespace) -> int:
    from admission.store import calendar

    try:  # before the cluster is asked
        calendar.days_of(args.days)
    except ValueError as err:
        raise GateError(f"--{err}", EXIT_USAGE) from None
    _, index, now, namespace = lookup_gates(args)
    cals = calendar.calendars(index, now, args.days, None if args.all_namespaces else namespace)
    if args.output == "ics":
        sys.stdout.buffer.write(calendar.to_ics(cals, now))
        sys.stdout.flush()
        return EXIT_OK
    emit(args, calendar.to_rows(cals, now), lambda: calendar.to_lines(cals, now, args.days))
    return EXIT_OK
