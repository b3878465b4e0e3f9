"""Held and released Flux objects reach notification-controller as Flux's own events.

The controller runs in process over a gate index; the notifier POSTs to a real HTTP server
that reads the JSON as notification-controller does (tests/doubles/notification.py).
"""

from __future__ import annotations

import copy
import threading

import pytest
from kubernetes import client

from admission.core.base import names
from admission.core.gates import togglestamp
from admission.kube.controller import Controller
from admission.kube.notifications import FluxNotifier
from admission.kube.reflector import ClusterStore
from tests.builders import at, flux, gate, keeper
from tests.doubles.notification import NotificationControllerDouble
from tests.polling import until

NOW = at("2026-12-21T10:00")
BLOCKED = "Reconciliation is blocked as gate 'flux-system/change-freeze' is closed: main@sha1:9f2c waits, serving main@sha1:41ab"
ALERTS = [
    {"kind": "GitRepository", "namespace": "flux-system", "name": "*", "eventSeverity": "info"},
    {"kind": "GitRepository", "namespace": "flux-system", "name": "*", "eventSeverity": "error"},
]


def source(held: bool, rv: str = "1") -> dict:
    condition = (
        {
            "type": names.BLOCKED_CONDITION,
            "status": "True",
            "reason": names.GATE_CLOSED_REASON,
            "message": BLOCKED,
        }
        if held
        else {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "stored artifact"}
    )
    obj = flux(
        "GitRepository",
        "podinfo",
        "flux-system",
        gates="flux-system/change-freeze",
        status={"conditions": [condition]},
    )
    obj["metadata"].update(uid="0b7c3c9e-4b7e-4a0e-9a55-2f1c1d1e0001", resourceVersion=rv)
    return obj


@pytest.fixture
def receiver():
    with NotificationControllerDouble(ALERTS) as double:
        yield double


def controller_with(gates: list[dict], keepers: list[dict], notifier: FluxNotifier) -> Controller:
    # The API client is never used: the store is filled by hand instead of by a watch.
    api = client.ApiClient(client.Configuration(host="https://127.0.0.1:1"))
    store = ClusterStore(api)
    store.index.replace_all(gates, keepers)
    return Controller(api, store=store, notifier=notifier, clock=lambda: NOW)


def test_a_hold_and_its_release_are_one_event_each_as_notification_controller_reads_them(receiver):
    notifier = FluxNotifier(receiver.address, instance="gate-admission-controller-7d9f", period=300)
    notifier.start()
    freeze = gate("change-freeze", default="opened")
    freeze_keeper = keeper("freeze", "change-freeze", closed=["* * 20-31 12 *"], timeZone="Europe/Berlin")
    ctl = controller_with([freeze], [freeze_keeper], notifier)
    try:
        ctl.flux_object_changed(source(False), source(True, "2"))
        for rv in ("3", "4", "5"):  # the source controller keeps writing status while it is held
            ctl.flux_object_changed(source(True, str(int(rv) - 1)), source(True, rv))
        opened = copy.deepcopy(freeze)
        opened["metadata"]["annotations"] = {
            names.OPEN_ANNOTATION: "2026-12-21T09:59:00Z",
            names.REQUESTED_BY_ANNOTATION: "bob",
            names.MESSAGE_ANNOTATION: "Patching a CVE",
        }
        ctl.store.index.put_gate(opened)
        ctl.flux_object_changed(source(True, "5"), source(False, "6"))
        ctl.flux_object_changed(source(False, "6"), source(False, "7"))
        events = until(lambda: list(receiver.received), lambda got: len(got) >= 2, timeout=10)
    finally:
        notifier.stop()
    assert receiver.refused == []
    assert len(events) == 2, events
    held, released = events
    assert held["involvedObject"] == {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "namespace": "flux-system",
        "name": "podinfo",
        "uid": "0b7c3c9e-4b7e-4a0e-9a55-2f1c1d1e0001",
        "resourceVersion": "2",
    }
    assert (held["severity"], held["reason"], held["timestamp"]) == (
        "info",
        "GateClosed",
        "2026-12-21T10:00:00Z",
    )
    assert held["reportingController"] == "gate-admission-controller"
    assert held["reportingInstance"] == "gate-admission-controller-7d9f"
    assert held["message"] == (
        "GitRepository flux-system/podinfo is held: " + BLOCKED + " (gate 'flux-system/change-freeze': "
        "Gate closed by GateKeeper 'freeze' schedule '* * 20-31 12 *'; "
        "expected to open at 2026-12-31T23:00:00Z)"
    )
    assert released["reason"] == "HoldReleased" and released["message"] == (
        "GitRepository flux-system/podinfo released: main@sha1:9f2c proceeds; gate 'flux-system/change-freeze' is open "
        "(Gate open requested; opened by an unverified identity (requestedBy says 'bob', "
        f"{togglestamp.UNSTAMPED}): 'Patching a CVE')"
    )
    # What an Alert with eventSeverity info hands its Provider; one with eventSeverity error sees neither.
    dispatched = [
        (alert["eventSeverity"], event["reason"], event["metadata"]) for alert, event in receiver.dispatched
    ]
    assert dispatched == [
        (
            "info",
            "GateClosed",
            {
                "gates": "flux-system/change-freeze",
                "waiting": "main@sha1:9f2c",
                "serving": "main@sha1:41ab",
                "opensAt": "2026-12-31T23:00:00Z",
            },
        ),
        (
            "info",
            "HoldReleased",
            {
                "gates": "flux-system/change-freeze",
                "released": "main@sha1:9f2c",
                "requestedBy": "bob",
                "openedBy": f"an unverified identity (requestedBy says 'bob', {togglestamp.UNSTAMPED})",
            },
        ),
    ]


def test_the_same_hold_again_within_the_period_is_aggregated(receiver):
    notifier = FluxNotifier(receiver.address, period=300)
    obj = source(True)
    assert notifier.notify(obj, "GateClosed", "held", {}, NOW)
    assert not notifier.notify(obj, "GateClosed", "held", {}, at("2026-12-21T10:04"))
    assert notifier.notify(obj, "GateClosed", "held", {}, at("2026-12-21T10:05"))  # next period
    assert notifier.notify(obj, "GateClosed", "something else", {}, at("2026-12-21T10:05"))
    assert notifier.queue.qsize() == 3 and notifier.results["aggregated"] == 1


def test_a_notification_controller_that_is_down_costs_a_log_line_not_the_controller(receiver):
    notifier = FluxNotifier("http://127.0.0.1:1/", period=300, timeout=1)
    notifier.start()
    try:
        assert notifier.notify(source(True), "GateClosed", "held", {}, NOW)
        until(lambda: notifier.results["failed"], lambda n: n == 1, timeout=10)
    finally:
        notifier.stop()
    assert notifier.results["failed"] == 1


def test_gate_transitions_are_valid_events_that_no_alert_can_select(receiver):
    # Alert.spec.eventSources[].kind is an enum of Flux kinds: no Alert names a Gate, so
    # notification-controller accepts the event and discards it (docs/operations.md).
    notifier = FluxNotifier("http://127.0.0.1:1/", gates_address=receiver.address)
    notifier.start()
    try:
        notifier.gate_transition(
            gate("change-freeze"), True, "opening gate; Gate open requested", {"state": "Opened"}, NOW
        )
        [event] = until(lambda: list(receiver.received), lambda got: got, timeout=10)
    finally:
        notifier.stop()
    assert event["involvedObject"]["kind"] == "Gate" and event["reason"] == "GateOpened"
    assert event["metadata"] == {"gating.toolkit.fluxcd.io/state": "Opened"}
    assert receiver.refused == [] and receiver.dispatched == []


def test_without_a_notifier_nothing_is_computed():
    ctl = controller_with([gate("change-freeze")], [], None)
    assert ctl.flux_object_changed(source(False), source(True)) is None


def test_a_new_leader_announces_the_recent_holds_it_saw_as_a_follower(receiver):
    # A follower sees every hold and announces none; when the leader stops before it sent one
    # (a crash, a rollout), the new leader says it: holds that began in the last few minutes.
    notifier = FluxNotifier(receiver.address, period=300)
    notifier.start()
    ctl = controller_with([gate("change-freeze", closed=True)], [], notifier)
    ctl.is_leader = threading.Event()
    recent, old = source(True, "2"), source(True, "3")
    recent["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-21T09:58:00Z"
    old["metadata"]["name"] = "older"
    old["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-21T08:00:00Z"
    ctl.flux = StaticFlux({"GitRepository": [recent, old]})
    try:
        assert ctl.flux_object_changed(None, recent) is None  # a follower sends nothing
        ctl.is_leader.set()
        announced = ctl.announce_holds_seen_as_follower()
        events = until(lambda: list(receiver.received), bool, timeout=10)
    finally:
        notifier.stop()
    assert [n.what for n in announced] == ["held"]
    assert [(e["reason"], e["involvedObject"]["name"]) for e in events] == [("GateClosed", "podinfo")]


class StaticFlux:
    """The Flux objects a replica has cached, by kind (only what announcing reads)."""

    def __init__(self, by_kind: dict[str, list[dict]]):
        self.by_kind = by_kind

    def kinds(self) -> list[str]:
        return list(self.by_kind)

    def objects(self, kind: str) -> list[dict]:
        return self.by_kind[kind]
