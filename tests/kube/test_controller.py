"""The gate controller in process, against FakeKube: status writes, transition Events, reconcile
requests when a gate opens, and acting only while leader (the e2e suite runs it against a real
API server)."""

from __future__ import annotations

import threading
from datetime import timedelta

from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.kube.controller import Controller
from admission.store.index import GateIndex
from tests.builders import APPROVAL_KEY, at, flux, gate, keeper
from tests.doubles.fakekube import FakeFluxCache, FakeKube, QuietStore
from tests.polling import wait_for

NOW = at("2026-06-10T12:00")


class GateCache(QuietStore):
    """Stands in for the cluster store (its list+watch is proven in e2e): the index of the
    Gates in FakeKube, refreshed when a test calls ``sync``."""

    def __init__(self, kube: FakeKube):
        # The webhook's key, as the controller is given it: approvals the tests seal count.
        self.kube, self.index, self.on_change = kube, GateIndex(APPROVAL_KEY), None
        self.sync()

    def sync(self) -> None:
        self.index.replace_all(self.kube.of(names.GATE_PLURAL), [])
        if self.on_change:
            self.on_change()


def controller(kube: FakeKube, **kwargs) -> tuple[Controller, GateCache]:
    cache = GateCache(kube)
    kwargs.setdefault("flux", FakeFluxCache(kube))
    return Controller(None, store=cache, custom=kube, core=kube, **kwargs), cache


def status_of(kube: FakeKube, name: str) -> dict:
    return kube.get(names.GATE_PLURAL, "flux-system", name)["status"]


def status_writes(kube: FakeKube) -> list:
    return [c for c in kube.calls if c[0] == "patch_namespaced_custom_object_status"]


def test_status_is_written_once_per_change_of_state():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("freeze", closed=True))
    kube.add(names.GATE_PLURAL, gate("release"))
    ctl, _ = controller(kube)
    ctl.reconcile(NOW)
    freeze, release = status_of(kube, "freeze"), status_of(kube, "release")
    assert freeze["state"] == names.STATE_CLOSED and release["state"] == names.STATE_OPENED
    condition = freeze["conditions"][0]
    assert condition["type"] == names.OPENED_CONDITION and condition["status"] == "False"
    assert condition["reason"] == names.REASON_DEFAULT and condition["lastTransitionTime"] == format_time(NOW)
    writes = len(status_writes(kube))
    ctl.reconcile(NOW + timedelta(minutes=1))
    assert len(status_writes(kube)) == writes  # nothing changed, nothing written


def test_a_gate_dated_or_timed_near_year_9999_stops_no_other_gates_status():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("slow", interval="99999999h"))
    late = {names.CLOSE_ANNOTATION: "9999-12-31T23:59:59Z"}
    kube.add(names.GATE_PLURAL, gate("late", annotations=late, window="1h"))
    kube.add(names.GATE_PLURAL, gate("freeze", closed=True))
    ctl, _ = controller(kube)
    wake = ctl.reconcile(NOW)
    assert NOW < wake <= NOW + timedelta(minutes=1)
    assert status_of(kube, "freeze")["state"] == names.STATE_CLOSED
    assert status_of(kube, "slow")["state"] == names.STATE_CLOSED  # Invalid: longer than 100 years
    assert any("too late" in p for p in status_of(kube, "late")["problems"])


def test_opening_records_an_event_and_asks_flux_to_reconcile_what_it_held():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("release", closed=True))
    kube.add(names.GATE_PLURAL, gate("other", closed=True))
    labels = {names.KUSTOMIZE_NAME_LABEL: "apps", names.KUSTOMIZE_NAMESPACE_LABEL: "flux-system"}
    kube.add("kustomizations", flux(name="shop", gates="flux-system/release", labels=labels))
    kube.add("kustomizations", flux(name="both", gates="flux-system/release, flux-system/other"))
    kube.add("kustomizations", flux(name="apps", namespace="flux-system"))
    kube.add("helmreleases", flux("HelmRelease", name="db", gates="flux-system/release"))
    ctl, cache = controller(kube)
    ctl.reconcile(NOW)
    assert not kube.of("events")  # the first look records the state, not a transition

    opened_at = NOW + timedelta(minutes=5)
    kube.add(
        names.GATE_PLURAL,
        gate(
            "release",
            closed=True,
            annotations={
                names.OPEN_ANNOTATION: format_time(opened_at),
                names.MESSAGE_ANNOTATION: "CAB approved",
                names.REQUESTED_BY_ANNOTATION: "bob",
            },
        ),
    )
    cache.sync()
    later = opened_at + timedelta(seconds=1, microseconds=250)
    ctl.reconcile(later)

    events = kube.of("events")
    assert len(events) == 1
    event = events[0]
    assert event["reason"] == names.GATE_OPENED_EVENT and event["type"] == "Normal"
    assert event["involvedObject"]["kind"] == names.GATE_KIND and event["involvedObject"]["name"] == "release"
    assert "CAB approved" in event["message"] and "bob" in event["message"]
    assert status_of(kube, "release")["state"] == names.STATE_OPENED

    requested = {
        (k[0], k[2]): kube.get(*k)["metadata"]["annotations"][names.RECONCILE_REQUEST_ANNOTATION]
        for m, k in kube.calls
        if m == "patch_namespaced_custom_object"
    }
    value = "2026-06-10T12:05:01.000250Z"  # distinct within the second: Flux must see a new request
    assert requested == {
        ("kustomizations", "shop"): value,
        ("helmreleases", "db"): value,
        ("kustomizations", "apps"): value,
    }  # "both" is still held by "other"


def test_a_failed_status_write_is_logged_and_made_on_the_next_pass():
    from kubernetes.client.rest import ApiException

    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("a", closed=True))
    kube.add(names.GATE_PLURAL, gate("b", closed=True))
    ctl, _ = controller(kube)
    kube.fail["patch_namespaced_custom_object_status"] = ApiException(status=500, reason="etcd down")
    ctl.reconcile(NOW)
    del kube.fail["patch_namespaced_custom_object_status"]
    ctl.reconcile(NOW + timedelta(seconds=1))
    assert status_of(kube, "a")["state"] == status_of(kube, "b")["state"] == names.STATE_CLOSED


class CountingClock:
    """The controller's clock, counting its reads: each loop pass reads it."""

    def __init__(self):
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return NOW


def test_only_the_leader_writes_and_a_new_leader_starts_at_once():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("freeze", closed=True))
    leader, clock = threading.Event(), CountingClock()
    ctl, _ = controller(kube, is_leader=leader, clock=clock)
    worker = threading.Thread(target=ctl.run, daemon=True)
    worker.start()
    try:
        wait_for(lambda: clock.reads >= 4, 10, "two passes as a follower")
        assert not status_writes(kube)
        leader.set()
        ctl.poke()
        wait_for(lambda: status_writes(kube), 10, "the new leader's status write")
        assert status_of(kube, "freeze")["state"] == names.STATE_CLOSED
    finally:
        ctl.stop()
        worker.join(5)
    assert not worker.is_alive()


def test_an_opening_the_search_gave_up_on_is_acted_on_when_it_comes():
    # Closed every quarter hour, open at night in Berlin: its next transition is not
    # known at 05:00 Berlin, yet the controller never relies on it. It looks again at the
    # state's valid_until and every spec.interval (1m), so at 00:01 Berlin it records the
    # opening and releases what was held.
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("d", default="closed"))
    kube.add(
        names.GATEKEEPER_PLURAL,
        keeper(
            "k0",
            "d",
            closed=["*/15 * * * *"],
            opened=["* 0-4 * * *", "0,15,30,45 * * * *"],
            timeZone="Europe/Berlin",
        ),
    )
    kube.add("kustomizations", flux(name="shop", gates="flux-system/d"))
    ctl, cache = controller(kube)
    cache.index.replace_all(kube.of(names.GATE_PLURAL), kube.of(names.GATEKEEPER_PLURAL))
    assert cache.index.lookup("flux-system", "d", at("2026-11-15T04:00")).next_transition is None
    woke, t = [], at("2026-11-15T04:00")
    while t <= at("2026-11-15T23:01"):
        woke.append(t)
        t = ctl.reconcile(t)
    assert at("2026-11-15T23:01") in woke
    [opened] = [e for e in kube.of("events") if e["reason"] == names.GATE_OPENED_EVENT]
    assert opened["firstTimestamp"] == "2026-11-15T23:01:00Z"
    assert status_of(kube, "d")["state"] == names.STATE_OPENED
    requested = [k for m, k in kube.calls if m == "patch_namespaced_custom_object" and k[2] == "shop"]
    assert requested, "what the gate held was not asked to reconcile"
