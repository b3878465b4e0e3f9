"""``gate-admission controller``: Gate status, transition Events, and prompt reconciles.

It keeps every Gate's status true (SPEC §2), wakes at the next time any gate can change,
records an Event on each transition with the toggle's message and requester, and when a gate
opens asks Flux to reconcile the objects it was holding (and their parent Kustomization), so
held changes land at once instead of at the next interval.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.clock import utcnow
from admission.core import names
from admission.core.decision import hold_of
from admission.kube.fluxobjects import FluxObjects
from admission.kube.notifications import FluxNotifier
from admission.core.notices import Notice, notice
from admission.core.gates import GateState
from admission.core.objects import metadata, object_key
from admission.core.references import policy_of
from admission.core.status import gate_status, status_differs, transition_message, was_open
from admission.kube.reflector import ClusterStore
from admission.core.timefmt import format_distinct_time, format_time, parse_duration

log = logging.getLogger("admission.controller")
DEFAULT_INTERVAL = timedelta(minutes=1)


def _interval(gate: dict) -> timedelta:
    try:
        return parse_duration((gate.get("spec") or {}).get("interval") or "1m")
    except ValueError:
        return DEFAULT_INTERVAL


class Controller:
    """Reconciles every Gate whenever one changes or the next transition comes."""

    def __init__(self, api_client: client.ApiClient | None, store: ClusterStore | None = None,
                 is_leader: threading.Event | None = None, clock=utcnow, *,
                 custom: client.CustomObjectsApi | None = None, core: client.CoreV1Api | None = None,
                 notifier: FluxNotifier | None = None):
        # ``custom`` and ``core`` replace the API groups built from ``api_client`` (tests' fakes).
        self.custom = custom or client.CustomObjectsApi(api_client)
        self.core = core or client.CoreV1Api(api_client)
        self.flux = FluxObjects(self.custom)
        self.store = store or ClusterStore(api_client)
        self.store.on_change = self.poke
        self.is_leader = is_leader
        self.clock = clock
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.last_open: dict[tuple[str, str], bool | None] = {}
        self.written: dict[tuple[str, str], dict] = {}
        self.notifier = notifier  # Flux notification-controller events, when enabled

    def poke(self) -> None:
        self.wake.set()

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
            except Exception:  # one gate's failure must not stop the others
                log.exception("reconciling gate failed", extra={"Gate": {"namespace": key[0], "name": key[1]}})
                state = None
            for candidate in (state.valid_until if state else None, now + _interval(gate)):
                if candidate is not None and candidate < wake_at:
                    wake_at = candidate
        for key in set(self.last_open) - seen:  # deleted gates
            self.last_open.pop(key, None)
            self.written.pop(key, None)
        return wake_at

    def _reconcile_gate(self, key: tuple[str, str], gate: dict, state: GateState, now: datetime) -> None:
        if key not in self.last_open:
            self.last_open[key] = was_open(gate.get("status"))
        desired = gate_status(gate, state, now, previous=self.written.get(key))
        if self.written.get(key) != desired and status_differs(gate, desired):
            self.custom.patch_namespaced_custom_object_status(
                names.GATING_GROUP, names.GATING_VERSION, key[0], names.GATE_PLURAL, key[1], {"status": desired})
            self.written[key] = desired
        before = self.last_open[key]
        self.last_open[key] = state.open
        if before is not None and before != state.open:
            self._transition(gate, state, now)

    def _transition(self, gate: dict, state: GateState, now: datetime) -> None:
        message = transition_message(state)
        meta = metadata(gate)
        log.info(message, extra={"closed": str(not state.open).lower(), "reason": state.reason,
                                 "requestedBy": state.requested_by,
                                 "Gate": {"namespace": meta.get("namespace"), "name": meta.get("name")}})
        self._event(gate, names.GATE_OPENED_EVENT if state.open else names.GATE_CLOSED_EVENT, message, now)
        if self.notifier is not None:
            details = {"state": names.STATE_OPENED if state.open else names.STATE_CLOSED, "reason": state.reason,
                       "requestedBy": state.requested_by or "",
                       "nextTransitionAt": format_time(state.next_transition) if state.next_transition else ""}
            self.notifier.gate_transition(gate, state.open, message, {k: v for k, v in details.items() if v}, now)
        if state.open:
            self.request_reconciles(state.namespace, state.name, now)

    def _event(self, obj: dict, reason: str, message: str, now: datetime) -> None:
        meta = metadata(obj)
        stamp = format_time(now)
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta.get("name"), "namespace": meta.get("namespace"),
                               "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024], "type": "Normal",
            "source": {"component": "gate-admission-controller"},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.core.create_namespaced_event(meta.get("namespace"), body)
        except ApiException as err:
            log.warning("event not recorded", extra={"reason": reason, "error": err.reason})

    # -- Flux notifications for held and released objects ------------------------------
    def flux_object_changed(self, old: dict | None, new: dict | None, now: datetime | None = None) -> Notice | None:
        """Notify notification-controller when a Flux object's hold starts, changes or ends.

        Fed with each (old, new) pair of a watch of the gated Flux kinds; status writes that
        leave the ``GateClosed`` condition as it was send nothing.
        """
        if self.notifier is None or (self.is_leader is not None and not self.is_leader.is_set()):
            return None
        now = now or self.clock()
        found = notice(old, new, self.store.index.lookup, now)
        if found is not None:
            self.notifier.notify(new if new is not None else old, found.reason, found.message, found.metadata, now)
        return found

    # -- prompt reconciles ------------------------------------------------------------
    def _annotate(self, kind: str, namespace: str, name: str, value: str) -> bool:
        body = {"metadata": {"annotations": {names.RECONCILE_REQUEST_ANNOTATION: value}}}
        try:
            self.flux.patch(kind, namespace, name, body)
            return True
        except ApiException as err:
            log.warning("reconcile not requested", extra={"object": f"{kind}/{namespace}/{name}", "error": err.reason})
            return False

    def request_reconciles(self, namespace: str, name: str, now: datetime) -> list[str]:
        """Ask Flux to reconcile the objects this gate held that are free now, and their parents."""
        gate_key = f"{namespace}/{name}"
        value = format_distinct_time(now)  # Flux acts on a value it has not handled yet
        done: list[str] = []
        parents: set[tuple[str, str]] = set()
        for obj in self.flux.list_all():
            if gate_key not in {ref.key for ref in policy_of(obj).refs}:
                continue
            if hold_of(obj, self.store.index.lookup, now).held:
                continue  # another gate still holds it
            meta = metadata(obj)
            if self._annotate(obj["kind"], meta["namespace"], meta["name"], value):
                done.append(f"{obj['kind']}/{meta['namespace']}/{meta['name']}")
            labels = meta.get("labels") or {}
            parent = labels.get(names.KUSTOMIZE_NAME_LABEL), labels.get(names.KUSTOMIZE_NAMESPACE_LABEL)
            if all(parent):
                parents.add(parent)
        for parent_name, parent_namespace in sorted(parents):
            if self._annotate("Kustomization", parent_namespace, parent_name, value):
                done.append(f"Kustomization/{parent_namespace}/{parent_name}")
        if done:
            log.info("reconcile requested", extra={"Gate": {"namespace": namespace, "name": name}, "objects": done})
        return done

    # -- loop -------------------------------------------------------------------------
    def run(self) -> None:
        self.store.start()
        while not self.stopped.is_set() and not self.store.wait_synced(1.0):
            pass
        while not self.stopped.is_set():
            self.wake.clear()
            now = self.clock()
            wake_at = now + DEFAULT_INTERVAL
            if (self.is_leader is None or self.is_leader.is_set()) and self.store.untrusted() is None:
                wake_at = self.reconcile(now)
            elif self.is_leader is not None and not self.is_leader.is_set():
                self.last_open.clear()  # a new leader reads transitions from the stored status
                self.written.clear()
            delay = max(0.05, min((wake_at - self.clock()).total_seconds(), 60.0))
            if self.is_leader is not None and not self.is_leader.is_set():
                delay = min(delay, 1.0)  # look again soon: leadership may come
            self.wake.wait(delay)

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        self.store.stop()
