"""``gate-admission controller``: Gate status, transition Events, and prompt reconciles.

It keeps every Gate's status true (SPEC §2), wakes at the next time any gate can change,
records an Event on each transition with the toggle's message and requester, and when a gate
opens asks Flux to reconcile the objects it was holding (and their parent Kustomization), so
held changes land at once instead of after Flux's retry backoff (up to 15 minutes). The held
objects come from a watch cache of Flux objects (kube/fluxcache.py): no list per opening.
Suspension holds release the same way: when a ``reconcile.fluxcd.io/suspendDuring`` window
ends (the controller wakes then) or ``reconcile.fluxcd.io/suspended`` is removed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client

from admission.clock import utcnow
from admission.core.admission.decision import Context, active_holds
from admission.core.admission.notices import Notice, notice
from admission.core.base import names
from admission.core.base.objects import Object, label, metadata, object_key
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.timefmt import format_distinct_time, format_time, parse_duration
from admission.core.flux import content
from admission.core.flux.conditions import holding_condition
from admission.core.flux.kinds import BY_KIND, FLUX_KINDS
from admission.core.gates.gates import GateState
from admission.core.gates.references import policy_of, suspension_of
from admission.core.gates.status import gate_status, status_differs, transition_message, was_open
from admission.core.time.cron import ScheduleError, parse_cron
from admission.kube.approvallanding import ApprovalLanding, Key, kind_key
from admission.kube.calendarsync import CalendarSync
from admission.kube.client import CALL_ERRORS, describe_error
from admission.kube.events import core_event, post_event
from admission.kube.fluxcache import FluxCache
from admission.kube.notifications import FluxNotifier
from admission.kube.reflector import ClusterStore
from admission.observability.controllermetrics import API_ERRORS, RECONCILE_REQUESTS

log = logging.getLogger("admission.controller")
COMPONENT = "gate-admission-controller"  # the source of transition Events
DEFAULT_INTERVAL = timedelta(minutes=1)
REQUEST_FLOOR = timedelta(seconds=1)  # the soonest the loop wakes for a due reconcile request
SUSPENSION_ANNOTATIONS = (
    names.SUSPENDED_ANNOTATION,
    names.SUSPEND_DURING_ANNOTATION,
    names.SUSPENDED_DURING_ANNOTATION,
)
SCHEDULE_ANNOTATIONS = (names.SUSPEND_DURING_ANNOTATION, names.SUSPENDED_DURING_ANNOTATION)


def _suspension_annotations(obj: Object | None) -> Object:
    found = annotations_of(obj)
    return {key: found[key] for key in SUSPENSION_ANNOTATIONS if key in found}


def _interval(gate: Object) -> timedelta:
    """How soon to look at ``gate`` again: its spec.interval, never later than the pass every gate
    gets anyway (a tenant's ``interval: 99999999h`` added to now would leave the calendar, and
    fail the pass of every gate)."""
    try:
        interval = parse_duration((gate.get("spec") or {}).get("interval") or "1m")
    except ValueError:
        return DEFAULT_INTERVAL
    return interval if timedelta(0) < interval < DEFAULT_INTERVAL else DEFAULT_INTERVAL


class Controller(ApprovalLanding):
    """Reconciles every Gate whenever one changes or the next transition comes."""

    def __init__(
        self,
        api_client: client.ApiClient | None,
        store: ClusterStore | None = None,
        is_leader: threading.Event | None = None,
        clock: Callable[[], datetime] = utcnow,
        *,
        custom: client.CustomObjectsApi | None = None,
        core: client.CoreV1Api | None = None,
        flux: FluxCache | None = None,
        notifier: FluxNotifier | None = None,
        calendars: dict[str, Any] | None = None,
        approval_key: bytes | None = None,
    ):
        # ``custom``, ``core`` and ``flux`` replace what ``api_client`` would build (tests' fakes);
        # ``calendars`` are CalendarSync's options (policy, min_interval, fetcher, parser, ...).
        self.custom = custom or client.CustomObjectsApi(api_client)
        self.core = core or client.CoreV1Api(api_client)
        # The webhook's approval key: only approvals it sealed are announced, landed and listed.
        self.store = store or ClusterStore(api_client, approval_key=approval_key)
        self.store.on_change = self.poke
        self.flux = flux or FluxCache(api_client, FLUX_KINDS)
        self.flux.on_change = self._flux_changed
        self.is_leader = is_leader
        self.clock = clock
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.last_open: dict[tuple[str, str], bool | None] = {}
        self.written: dict[tuple[str, str], Object] = {}
        self.notifier = notifier  # Flux notification-controller events, when enabled
        self.pending: set[tuple[str, str]] = set()  # gates opened while the Flux cache was untrusted
        self.suspended: dict[Key, bool] = {}  # held by a suspension at the last pass
        self._suspendable: set[Key] = set()  # objects that carry (or carried) a suspension annotation
        self.approvals_seen: dict[tuple[str, str], Object] = {}  # approvals announced, per gate
        self.gone: dict[tuple[str, str], set[str]] = {}  # approvals this process ended, per gate
        # (gate "ns/name", approval key) -> (reconcile requests made for it - 1, when the next is due)
        self.requests: dict[tuple[str, str], tuple[int, datetime]] = {}
        self._lock = threading.Lock()
        # GateKeeper calendars: fetched on a thread of their own, written into GateKeeper status.
        self.calendars = CalendarSync(
            self.custom,
            self.core,
            lambda: self.store.index.keepers(),
            clock=clock,
            event=self._event,
            **(calendars or {}),
        )
        self.calendar_wake = threading.Event()

    def poke(self) -> None:
        self.wake.set()
        self.calendar_wake.set()

    def _flux_changed(self, kind: str, old: Object | None, new: Object | None) -> None:
        if any(self.approvals_seen.values()):
            self.poke()  # approved content may have landed: look now
        try:
            self.flux_object_changed(old, new)
        except Exception:  # a notification must never stop the watch that feeds releases
            log.exception("notification failed", extra={"kind": kind})
        before, after = _suspension_annotations(old), _suspension_annotations(new)
        if before == after:
            return
        with self._lock:
            self._suspendable.add(kind_key(kind, new or old))
        self.poke()  # a suspension was added, changed or removed: look now

    def readiness(self) -> tuple[bool, Object]:
        ready, detail = self.store.readiness()
        why = self.flux.untrusted()
        detail["flux"] = self.flux.readiness()
        if why:
            detail.setdefault("reason", why)
        return ready and why is None, detail

    # -- one pass ---------------------------------------------------------------------
    def reconcile(self, now: datetime) -> datetime:
        """Bring every Gate's status up to date; return when to look again."""
        wake_at = now + DEFAULT_INTERVAL
        seen = set()
        for gate in self.store.index.gates():
            key = object_key(gate)
            seen.add(key)
            try:
                state = self.store.index.lookup(key[0], key[1], now)
                self._reconcile_gate(key, gate, state, now)
            except Exception as err:  # one gate's failure must not stop the others
                if isinstance(err, CALL_ERRORS):
                    API_ERRORS.labels("gate_status").inc()
                log.exception(
                    "reconciling gate failed", extra={"Gate": {"namespace": key[0], "name": key[1]}}
                )
                state = None
            expiries = [a.expires for a in (state.approvals if state else ()) if a.live(now)]
            for candidate in (
                state.valid_until if state else None,
                now + _interval(gate),
                min(expiries, default=None),
            ):
                if candidate is not None and candidate < wake_at:
                    wake_at = candidate
        for key in set(self.last_open) - seen:  # deleted gates
            self.last_open.pop(key, None)
            self.written.pop(key, None)
            self.approvals_seen.pop(key, None)
            self.gone.pop(key, None)
        for request in [r for r in self.requests if tuple(r[0].split("/", 1)) not in seen]:
            del self.requests[request]
        due = self.next_request()
        if due is not None and due < wake_at:  # (not sooner than a second: an untrusted cache waits)
            wake_at = max(due, now + REQUEST_FLOOR)
        if self.flux.untrusted() is None:
            for namespace, name in sorted(self.pending):
                self.request_reconciles(namespace, name, now)
            self.pending.clear()
            ends = self._suspensions(now)
            if ends is not None and ends < wake_at:
                wake_at = ends
        return wake_at

    def _reconcile_gate(self, key: tuple[str, str], gate: Object, state: GateState, now: datetime) -> None:
        if key not in self.last_open:
            self.last_open[key] = was_open(gate.get("status"))
        desired = gate_status(gate, state, now, previous=self.written.get(key))
        if self.written.get(key) != desired and status_differs(gate, desired):
            stored = self.custom.patch_namespaced_custom_object_status(
                names.GATING_GROUP,
                names.GATING_VERSION,
                key[0],
                names.GATE_PLURAL,
                key[1],
                {"status": desired},
            )
            self.written[key] = desired
            if isinstance(stored, dict) and annotations_of(stored) == annotations_of(gate):
                gate = stored  # the approvals judged, at its new resourceVersion (ending them needs it)
        before = self.last_open[key]
        self.last_open[key] = state.open
        if before is not None and before != state.open:
            self._transition(gate, state, now)
        self._approvals(key, gate, state, now)

    def _transition(self, gate: Object, state: GateState, now: datetime) -> None:
        message = transition_message(state)
        meta = metadata(gate)
        log.info(
            message,
            extra={
                "closed": str(not state.open).lower(),
                "reason": state.reason,
                "requestedBy": state.requested_by,
                names.TOGGLED_BY_FIELD: state.toggled_by.row() if state.toggled_by is not None else None,
                "Gate": {"namespace": meta.get("namespace"), "name": meta.get("name")},
            },
        )
        self._event(gate, names.GATE_OPENED_EVENT if state.open else names.GATE_CLOSED_EVENT, message, now)
        if self.notifier is not None:
            details = {
                "state": names.STATE_OPENED if state.open else names.STATE_CLOSED,
                "reason": state.reason,
                "requestedBy": state.requested_by or "",
                # Who the API server said toggled it (verified), or "an unverified identity (...)".
                names.TOGGLED_BY_FIELD: state.toggled_by.describe() if state.toggled_by is not None else "",
                "nextTransitionAt": format_time(state.next_transition) if state.next_transition else "",
            }
            self.notifier.gate_transition(
                gate, state.open, message, {k: v for k, v in details.items() if v}, now
            )
        if state.open:
            if self.flux.untrusted() is None:
                self.request_reconciles(state.namespace, state.name, now)
            else:  # release when the cache can say what was held
                self.pending.add((state.namespace, state.name))

    def _event(self, obj: Object, reason: str, message: str, now: datetime, kind: str = "Normal") -> None:
        meta = metadata(obj)
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        body = core_event(involved, reason, message, now, event_type=kind, component=COMPONENT)
        try:
            post_event(self.core, body)
        except CALL_ERRORS as err:
            API_ERRORS.labels("event").inc()
            log.warning("event not recorded", extra={"reason": reason, "error": describe_error(err)})

    # -- Flux notifications for held and released objects ------------------------------
    def flux_object_changed(
        self, old: Object | None, new: Object | None, now: datetime | None = None
    ) -> Notice | None:
        """Notify notification-controller when a Flux object's hold starts, changes or ends.

        Fed with each (old, new) pair of a watch of the gated Flux kinds; status writes that
        leave the ``GateClosed`` condition as it was send nothing.
        """
        if self.notifier is None or (self.is_leader is not None and not self.is_leader.is_set()):
            return None
        now = now or self.clock()
        found = notice(old, new, self.store.index.lookup, now)
        obj = new if new is not None else old
        if found is not None and obj is not None:  # a notice is about one of them
            self.notifier.notify(obj, found.reason, found.message, found.metadata, now)
        return found

    def announce_holds_seen_as_follower(self, now: datetime | None = None) -> list[Notice]:
        """On becoming leader: announce the holds this replica saw while another one led, as
        first sights (so only those that began within FIRST_SIGHT_WINDOW), since the last
        leader may have stopped before it sent them."""
        now = now or self.clock()
        found = []
        for kind in self.flux.kinds():
            for obj in self.flux.objects(kind):
                if holding_condition(obj) is not None and (
                    notice := self.flux_object_changed(None, obj, now)
                ):
                    found.append(notice)
        return found

    # -- prompt reconciles ------------------------------------------------------------
    def _annotate(self, kind: str, namespace: str, name: str, value: str) -> bool:
        row = BY_KIND[kind]
        body = {"metadata": {"annotations": {names.RECONCILE_REQUEST_ANNOTATION: value}}}
        try:
            self.custom.patch_namespaced_custom_object(
                row.group, self.flux.version(kind) or row.versions[0], namespace, row.plural, name, body
            )
            RECONCILE_REQUESTS.labels("requested").inc()
            return True
        except CALL_ERRORS as err:
            RECONCILE_REQUESTS.labels("failed").inc()
            API_ERRORS.labels("reconcile_request").inc()
            log.warning(
                "reconcile not requested",
                extra={"object": label(kind, namespace, name), "error": describe_error(err)},
            )
            return False

    def _held_by_gate(self, obj: Object, gate_key: str) -> bool:
        """Whether ``gate_key`` held ``obj``: its own or inherited gates name it, or what
        waits for it (the Blocked/Approved condition the webhook wrote) says so."""
        for source in (obj, *content.inherits_from(obj, self.flux.get)):
            if gate_key in {ref.key for ref in policy_of(source).refs}:
                return True
        waiting = content.waiting(obj)
        return waiting is not None and gate_key in waiting.gates

    def _release(self, objects: list[tuple[str, Object]], now: datetime) -> list[str]:
        """requestedAt on each object no gate or suspension holds any more, and on the
        Kustomizations that apply them; the objects' names."""
        value = format_distinct_time(now)  # Flux acts on a value it has not handled yet
        done: list[str] = []
        parents: set[tuple[str, str]] = set()
        for kind, obj in objects:
            if active_holds(obj, Context(self.store.index.lookup, now, get=self.flux.get)):
                continue  # another gate (or a suspension) still holds it
            _, namespace, name = kind_key(kind, obj)
            if self._annotate(kind, namespace, name, value):
                done.append(label(kind, namespace, name))
            labels = metadata(obj).get("labels") or {}
            parent_name, parent_namespace = (
                labels.get(names.KUSTOMIZE_NAME_LABEL),
                labels.get(names.KUSTOMIZE_NAMESPACE_LABEL),
            )
            if parent_name and parent_namespace:
                parents.add((parent_name, parent_namespace))
        for parent_name, parent_namespace in sorted(parents):
            if f"Kustomization/{parent_namespace}/{parent_name}" in done:
                continue
            if self._annotate("Kustomization", parent_namespace, parent_name, value):
                done.append(f"Kustomization/{parent_namespace}/{parent_name}")
        return done

    def request_reconciles(self, namespace: str, name: str, now: datetime) -> list[str]:
        """Ask Flux to reconcile the objects this gate held that are free now, and their parents."""
        gate_key = f"{namespace}/{name}"
        held = [
            (kind, obj)
            for kind in self.flux.kinds()
            for obj in self.flux.objects(kind)
            if self._held_by_gate(obj, gate_key)
        ]
        done = self._release(held, now)
        if done:
            log.info(
                "reconcile requested", extra={"Gate": {"namespace": namespace, "name": name}, "objects": done}
            )
        return done

    def _suspensions(self, now: datetime) -> datetime | None:
        """Release objects whose suspension ended since the last pass; when to look again
        (the next start or end of a suspendDuring window)."""
        with self._lock:
            keys = sorted(self._suspendable)
        wake_at: datetime | None = None
        ended: list[tuple[str, Object]] = []
        for key in keys:
            obj = self.flux.get(*key)
            found = _suspension_annotations(obj)
            held = obj is not None and suspension_of(obj, now).hold is not None
            if obj is not None and self.suspended.get(key) and not held:
                ended.append((key[0], obj))
            if found:
                self.suspended[key] = held
            else:
                self.suspended.pop(key, None)
                with self._lock:
                    self._suspendable.discard(key)
            for annotation in SCHEDULE_ANNOTATIONS:
                try:
                    flip = parse_cron(found[annotation]).next_flip(now) if annotation in found else None
                except ScheduleError:
                    flip = None  # counted as active by the webhook until fixed; nothing to wake for
                if flip is not None and (wake_at is None or flip < wake_at):
                    wake_at = flip
        if ended:
            done = self._release(ended, now)
            if done:
                log.info("reconcile requested", extra={"reason": "suspension ended", "objects": done})
        return wake_at

    # -- loop -------------------------------------------------------------------------
    def _acting(self) -> bool:
        return (self.is_leader is None or self.is_leader.is_set()) and self.store.untrusted() is None

    def run(self) -> None:
        self.store.start()
        self.flux.start()
        while not self.stopped.is_set() and not self.store.wait_synced(1.0):
            pass
        threading.Thread(
            target=self.calendars.run,
            args=(self.stopped, self.calendar_wake, self._acting),
            name="calendars",
            daemon=True,
        ).start()
        leading = False
        while not self.stopped.is_set():
            self.wake.clear()
            now = self.clock()
            wake_at = now + DEFAULT_INTERVAL
            if self.is_leader is not None and self.is_leader.is_set() != leading:
                leading = self.is_leader.is_set()
                if leading and self.notifier is not None:
                    self.announce_holds_seen_as_follower(now)
            if (self.is_leader is None or self.is_leader.is_set()) and self.store.untrusted() is None:
                wake_at = self.reconcile(now)
            elif self.is_leader is not None and not self.is_leader.is_set():
                self.last_open.clear()  # a new leader reads transitions from the stored status
                self.written.clear()
                self.suspended.clear()
            delay = max(0.05, min((wake_at - self.clock()).total_seconds(), 60.0))
            if self.is_leader is not None and not self.is_leader.is_set():
                delay = min(delay, 1.0)  # look again soon: leadership may come
            self.wake.wait(delay)

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        self.calendar_wake.set()
        self.store.stop()
        self.flux.stop()
