"""Denial Events in process, against FakeKube: one Event per object, message and period, its
count raised for repeats, shared between workers, never for dry runs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admission.core import names
from admission.core.timefmt import parse_time
from admission.kube.events import DenialEvents
from tests.builders import at, changed, flux, request
from tests.fakekube import FakeKube
from tests.polling import wait_for

NOW = at("2026-06-10T12:00")
OBJ = flux(name="shop", gates="flux-system/freeze")
OBJ["metadata"]["uid"] = "uid-shop"
HELD = "Kustomization apps/shop is held: gate 'flux-system/freeze' is closed (Gate closed by default); require=all"


@pytest.fixture
def kube():
    return FakeKube()


@pytest.fixture
def events(kube):
    recorder = DenialEvents(None, period=300, clock=lambda: NOW, flush_every=0.05, core=kube)
    recorder.start()
    yield recorder
    recorder.stop()


def denial(dry_run: bool = False) -> dict:
    return request("UPDATE", changed(OBJ, path="./v2"), OBJ, dry_run=dry_run)


def counts(kube: FakeKube) -> dict[str, int]:
    return {e["message"]: e["count"] for e in kube.of("events")}


def test_repeats_in_one_period_raise_the_count_of_one_event(kube, events):
    for second in range(5):
        events.record(denial(), HELD, NOW + timedelta(seconds=second))
    wait_for(lambda: counts(kube).get(HELD) == 5, 10, "one Event counting five denials")
    [event] = kube.of("events")
    assert event["reason"] == names.GATE_CLOSED_EVENT and event["type"] == "Warning"
    assert event["involvedObject"] == {"apiVersion": OBJ["apiVersion"], "kind": "Kustomization",
                                       "namespace": "apps", "name": "shop", "uid": "uid-shop"}
    assert parse_time(event["firstTimestamp"]) == NOW and parse_time(event["lastTimestamp"]) == NOW


def test_another_message_or_period_is_another_event_and_dry_runs_are_none(kube, events):
    other = HELD.replace("freeze", "release")
    events.record(denial(dry_run=True), HELD, NOW)
    events.record(denial(), HELD, NOW)
    events.record(denial(), other, NOW)
    events.record(denial(), HELD, NOW + timedelta(seconds=300))  # the next period
    wait_for(lambda: len(kube.of("events")) == 3, 10, "three Events")
    assert [e["count"] for e in kube.of("events")] == [1, 1, 1]
    assert {e["message"] for e in kube.of("events")} == {HELD, other}


def test_an_event_another_worker_created_is_counted_not_duplicated(kube):
    first = DenialEvents(None, period=300, clock=lambda: NOW, flush_every=0.05, core=kube)
    second = DenialEvents(None, period=300, clock=lambda: NOW, flush_every=0.05, core=kube)
    for recorder in (first, second):
        recorder.start()
    try:
        first.record(denial(), HELD, NOW)
        wait_for(lambda: kube.of("events"), 10, "the first worker's Event")
        second.record(denial(), HELD, NOW + timedelta(seconds=1))
        second.record(denial(), HELD, NOW + timedelta(seconds=2))
        wait_for(lambda: counts(kube).get(HELD) == 3, 10, "the second worker's denials counted")
        assert len(kube.of("events")) == 1
    finally:
        first.stop()
        second.stop()
