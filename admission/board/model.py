"""What the gate board shows, computed once per look: every gate's state and its closed spans
over the coming days, what waits behind each, and each Flux object's suspendDuring windows.

Nothing here evaluates a gate of its own: states are ``GateIndex.lookup`` (what the webhook
asks), spans are ``core.gates.timeline.intervals`` (the change points the webhook's evaluation uses),
held rows are ``core.admission.pending.pending_rows`` (what ``kubectl gate pending`` prints) and
suspensions are ``core.gates.references.suspend_windows``. The page (``board.page``) only draws this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, timedelta, tzinfo
from typing import Any, NamedTuple, Protocol

from admission.core.admission.pending import pending_rows
from admission.core.base.objects import label, metadata, object_key
from admission.core.gates import approvals, approvalview, togglestamp
from admission.core.gates.gates import GateState
from admission.core.gates.references import SuspendWindow, is_namespace, policy_of, suspend_windows
from admission.core.gates.timeline import Interval, intervals, time_zone
from admission.core.time.cron import ScheduleError
from admission.core.time.cron import zone as zone_named
from admission.store.index import GateIndex

MAX_DAYS = 14  # the board's horizon: two weeks, zoomable to one day
DAY_CHOICES = (1, 3, 7, 14)
MAX_QUERY = 200  # characters of a search: longer is cut, not refused
GATE_ZONE = "gate"  # ?tz=gate: each gate's row in its own time zone


class Snapshot(NamedTuple):
    """What the board reads at one moment: the gates (compiled, as the webhook holds them), the
    Flux objects (none without a cluster), and what could not be read."""

    gate_index: GateIndex
    objects: list[dict[str, Any]]
    problems: tuple[str, ...] = ()
    reads_objects: bool = True  # False: no Flux objects are read here (a gates directory)


class Source(Protocol):
    """Where the board reads from: the cluster through the user's kubeconfig, or a gates directory."""

    @property
    def where(self) -> str:
        """What is read, for the page's header: a context, a directory."""
        ...

    def snapshot(self) -> Snapshot: ...


class Refused(Exception):
    """An action the API server (or the command before it) refused: its words, shown as they are."""


class Actions(Protocol):
    """What the page may do, each as the user (their kubeconfig's credentials): the API server
    authorizes it and our webhook stamps the approver; the board holds no identity."""

    def approve(
        self, namespace: str, gate: str, content: str, target: str, message: str, expires: str
    ) -> list[str]: ...

    def withdraw(self, namespace: str, gate: str, content: str, target: str) -> list[str]: ...

    def toggle(self, namespace: str, gate: str, action: str, message: str, for_: str) -> list[str]: ...


@dataclass(frozen=True)
class Query:
    """What the viewer asked to see: one namespace (or all), a search, how many days from which
    day, in which time zone (an IANA name, ``gate``, or empty for the viewer's)."""

    namespace: str = ""
    search: str = ""
    days: int = MAX_DAYS
    offset: int = 0  # days from today: with days=1, which day is zoomed into
    tz: str = ""


def query_of(args: dict[str, str]) -> Query:
    """The query from a page's parameters; what cannot be read is left at its default (a page
    always renders), a namespace that is not one shows nothing."""

    def number(key: str, default: int, low: int, high: int) -> int:
        try:
            return min(max(int(args.get(key, default)), low), high)
        except ValueError:
            return default

    days = number("days", MAX_DAYS, 1, MAX_DAYS)
    namespace = args.get("namespace", "").strip()
    tz = args.get("tz", "").strip()
    if tz and tz != GATE_ZONE:
        try:
            zone_named(tz)
        except ScheduleError:
            tz = ""
    return Query(
        namespace=namespace if not namespace or is_namespace(namespace) else "-",
        search=args.get("q", "").strip()[:MAX_QUERY],
        days=days,
        offset=number("from", 0, 0, MAX_DAYS - days),
        tz=tz,
    )


@dataclass(frozen=True)
class Timeline:
    """One row of the timeline: ``[start, end)`` read in ``zone``, and its spans."""

    zone: tzinfo
    start: datetime
    end: datetime
    spans: tuple[Interval, ...]


@dataclass(frozen=True)
class GateRow:
    state: GateState
    timeline: Timeline
    approvals: tuple[dict[str, str | int], ...]  # live, verified as the controller lists them
    unverified: tuple[dict[str, str | int], ...]
    ended: tuple[dict[str, str], ...]  # used or expired, as the Gate's status records them
    referenced_by: tuple[str, ...]
    holding: int  # objects where new content waits behind it
    # Who the webhook's stamp says opened or closed it, as `kubectl gate get` says it (no key
    # here: verified only where the Gate's status vouches for exactly this stamp).
    toggled_by: str | None = None

    @property
    def key(self) -> str:
        return self.state.key


@dataclass(frozen=True)
class SuspendRow:
    target: str  # Kind/namespace/name
    timeline: Timeline
    windows: tuple[SuspendWindow, ...]


@dataclass(frozen=True)
class Board:
    now: datetime
    query: Query
    where: str
    writable: bool
    zone: tzinfo  # the viewer's zone, unless the query names one
    gates: tuple[GateRow, ...]
    held: tuple[dict[str, Any], ...]  # core.admission.pending.pending_rows
    suspensions: tuple[SuspendRow, ...]
    problems: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = field(default=())
    reads_objects: bool = True  # as the snapshot: without objects, what waits is not known


def _window(zone: tzinfo, now: datetime, query: Query) -> tuple[datetime, datetime]:
    """Local midnight ``query.offset`` days from today in ``zone``, and ``query.days`` days on."""
    day = now.astimezone(zone).date() + timedelta(days=query.offset)
    start = datetime.combine(day, time(0), tzinfo=zone)
    return start, datetime.combine(day + timedelta(days=query.days), time(0), tzinfo=zone)


def _matches(search: str, *texts: object) -> bool:
    needle = search.casefold()
    return not needle or any(needle in str(t).casefold() for t in texts if t)


def build(
    snapshot: Snapshot, now: datetime, query: Query, viewer: tzinfo, where: str, writable: bool
) -> Board:
    """The board at ``now`` for ``query``; ``viewer`` is the zone shown when the query names none."""
    index, objects = snapshot.gate_index, snapshot.objects
    shown = zone_named(query.tz) if query.tz and query.tz != GATE_ZONE else viewer
    namespace = query.namespace or None
    gate_objects = {f"{ns}/{name}": g for g in index.gates() for ns, name in [object_key(g)]}
    every_held = pending_rows(objects, gate_objects, now)
    held = [
        row
        for row in every_held
        if (not namespace or row["namespace"] == namespace)
        and _matches(query.search, row["kind"], row["namespace"], row["name"], row["waits"], *row["gates"])
    ]
    refs: dict[str, list[str]] = {}
    for obj in objects:
        for ref in policy_of(obj).refs:
            meta = metadata(obj)
            refs.setdefault(ref.key, []).append(
                label(obj.get("kind"), meta.get("namespace"), meta.get("name"))
            )
    holding: dict[str, int] = {}
    for row in every_held:
        for key in row["gates"]:
            holding[key] = holding.get(key, 0) + 1
    rows = []
    for key, gate in sorted(gate_objects.items()):
        ns, name = key.split("/", 1)
        compiled = index.compiled(ns, name)
        if compiled is None or (namespace and ns != namespace):
            continue
        state = index.lookup(ns, name, now)
        toggled_by = _toggled_by(state, gate)
        # What the row shows is what a search finds: a toggle's message and who made it are in
        # its Requested cell.
        if not _matches(
            query.search,
            key,
            state.reason,
            state.message,
            state.requested_by,
            state.request_message,
            toggled_by,
        ):
            continue
        zone = time_zone(compiled) if query.tz == GATE_ZONE else shown
        start, end = _window(zone, now, query)
        read = approvalview.read_without_key(state.approvals + state.unverified_approvals, gate)
        rows.append(
            GateRow(
                state,
                Timeline(zone, start, end, intervals(compiled, start, end)),
                tuple(a.row() for a in read if a.unverified is None and a.live(now)),
                tuple(a.row() for a in read if a.unverified is not None),
                tuple(approvals.ended(gate).values()),
                tuple(refs.get(key, ())),
                holding.get(key, 0),
                toggled_by,
            )
        )
    suspensions = []
    start, end = _window(shown, now, query)
    for obj in objects:
        meta = metadata(obj)
        if namespace and meta.get("namespace") != namespace:
            continue
        target = label(obj.get("kind"), meta.get("namespace"), meta.get("name"))
        windows = tuple(suspend_windows(obj, start, end))
        if windows and _matches(query.search, target):
            suspensions.append(SuspendRow(target, Timeline(shown, start, end, ()), windows))
    namespaces = sorted({k.split("/", 1)[0] for k in gate_objects} | {str(r["namespace"]) for r in held})
    return Board(
        now,
        query,
        where,
        writable,
        shown,
        tuple(rows),
        tuple(held),
        tuple(sorted(suspensions, key=lambda s: s.target)),
        snapshot.problems,
        tuple(namespaces),
        snapshot.reads_objects,
    )


def _toggled_by(state: GateState, gate: dict[str, Any]) -> str | None:
    identity = togglestamp.read_without_key(state.toggled_by, gate)
    return identity.describe() if identity is not None else None
