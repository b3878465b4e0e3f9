"""Denial Events in process, against FakeKube: one Event per object, message and period, its
count raised for repeats, shared between workers, never for dry runs; and a review is only a
hint: the Event is about the object the API server returns (same uid), says the hold that
object shows, and reads and writes are bounded whatever the reviews say."""

from __future__ import annotations

import copy

import orjson
import pytest

from admission.core.admission.decision import Settings
from admission.core.base import names
from admission.core.base.timefmt import parse_time
from admission.kube.events import DenialEvents
from admission.store.files import FileStore
from admission.webhook.app import create_app
from tests.builders import at, changed, flux, gate, lookup_from, request, review
from tests.conftest import write_gates
from tests.doubles.fakekube import FakeKube
from tests.polling import wait_for

NOW = at("2026-06-10T12:00")
GATES = [gate("freeze", default="closed"), gate("release", default="closed"), gate("open")]
OBJ = flux(name="shop", gates="flux-system/freeze")
OBJ["metadata"]["uid"] = "uid-shop"
HELD = "Kustomization apps/shop is held: gate 'flux-system/freeze' is closed (Gate closed by default); require=all"


@pytest.fixture
def kube():
    kube = FakeKube()
    kube.add("kustomizations", OBJ)
    return kube


def recorder(kube, gates=GATES, **kwargs) -> DenialEvents:
    options = {"period": 300, "clock": lambda: NOW, "flush_every": 0.05, **kwargs}
    return DenialEvents(None, lookup_from(list(gates)), Settings(), core=kube, custom=kube, **options)


@pytest.fixture
def events(kube):
    events = recorder(kube)
    events.start()
    yield events
    events.stop()


def denial(obj: dict = OBJ, dry_run: bool = False) -> dict:
    return request("UPDATE", changed(obj, path="./v2"), obj, dry_run=dry_run)


def drain(events: DenialEvents) -> list[str]:
    """Run the background thread's work here, until nothing is queued: each outcome."""
    outcomes = []
    while (item := events._next(timeout=0)) is not None:
        outcomes.append(events.show(*item))
    return outcomes


def counts(kube: FakeKube) -> dict[str, int]:
    return {e["message"]: e["count"] for e in kube.of("events")}


def test_repeats_in_one_period_raise_the_count_of_one_event(kube, events):
    for _ in range(5):
        events.record(denial())
    wait_for(lambda: counts(kube).get(HELD) == 5, 10, "one Event counting five denials")
    [event] = kube.of("events")
    assert event["reason"] == names.GATE_CLOSED_EVENT and event["type"] == "Warning"
    assert event["involvedObject"] == {
        "apiVersion": OBJ["apiVersion"],
        "kind": "Kustomization",
        "namespace": "apps",
        "name": "shop",
        "uid": "uid-shop",
    }
    assert parse_time(event["firstTimestamp"]) == NOW and parse_time(event["lastTimestamp"]) == NOW


def test_another_hold_or_period_is_another_event_and_dry_runs_are_none(kube):
    clock = [NOW]
    events = recorder(kube, clock=lambda: clock[0], reread_after=0)
    events.record(denial(dry_run=True))
    assert events.pending == {}
    events.record(denial())
    assert drain(events) == ["created"]
    kube.add("kustomizations", flux(name="shop", gates="flux-system/release", annotations={}))
    kube.store[("kustomizations", "apps", "shop")]["metadata"]["uid"] = "uid-shop"
    events.record(denial())
    clock[0] = NOW.replace(minute=5)  # the next period
    events.record(denial(OBJ))
    assert drain(events) == ["created"]  # coalesced: the object is read once, as it is now
    events.record(denial())
    assert drain(events) == ["aggregated"]
    messages = [e["message"] for e in kube.of("events")]
    assert len(messages) == 2 and HELD in messages and any("flux-system/release" in m for m in messages)


def test_an_event_another_worker_created_is_counted_not_duplicated(kube):
    first, second = recorder(kube), recorder(kube)
    for events in (first, second):
        events.start()
    try:
        first.record(denial())
        wait_for(lambda: kube.of("events"), 10, "the first worker's Event")
        second.record(denial())
        second.record(denial())
        wait_for(lambda: counts(kube).get(HELD) == 3, 10, "the second worker's denials counted")
        assert len(kube.of("events")) == 1
    finally:
        first.stop()
        second.stop()


# -- forged reviews: the server writes only what the API server shows ------------------------


def forged(name: str, namespace: str = "kube-system", uid: str = "uid-forged") -> dict:
    obj = flux(name=name, namespace=namespace, gates="flux-system/freeze")
    obj["metadata"]["uid"] = uid
    return denial(obj)


def test_forged_denials_of_objects_that_do_not_exist_write_no_event_and_reads_are_bounded(kube):
    events = recorder(kube, reads_per_namespace=20)
    for i in range(500):
        events.record(forged(f"attacker-chosen-{i}"))
    outcomes = drain(events)
    assert kube.of("events") == [] and [c for c in kube.calls if c[0] == "create_namespaced_event"] == []
    # Each missing object is asked at every version the table knows (3 for Kustomization).
    assert outcomes.count("unverified") == 6 and outcomes.count("limited") == 494
    assert len([r for r in kube.reads if r[1] == "kube-system"]) == 20
    # Shapes no API server sends are not even read: a path in a name, no uid, a kind we do not gate.
    bad = [
        forged("../../api/v1/namespaces/kube-system/secrets"),
        forged("a/b"),
        forged("x", namespace=".."),
        forged("no-uid", uid=""),
    ]
    other_kind = forged("widget")
    other_kind["kind"] = {"group": "evil.example", "version": "v1", "kind": "Widget"}
    for req in [*bad, other_kind]:
        events.record(req)
    assert events.pending == {} and drain(events) == []


def test_a_review_naming_a_real_object_with_another_uid_writes_no_event(kube):
    events = recorder(kube)
    events.record(forged("shop", namespace="apps", uid="uid-of-something-else"))
    assert drain(events) == ["unverified"] and kube.of("events") == []


def test_a_denied_create_makes_no_event_the_object_does_not_exist(kube):
    events = recorder(kube)
    new = flux(name="brand-new", gates="flux-system/freeze")
    new["metadata"]["uid"] = "uid-new"
    events.record(request("CREATE", new))
    assert drain(events) == ["unverified"] and kube.of("events") == []


def test_the_event_says_what_the_stored_object_shows_never_the_reviews_text(kube, gates_dir):
    """Through /validate, as an attacker would: the review's objects name the real object
    (its uid) but reference a made-up gate whose name carries text; the denial's message has
    that text, the Event only the stored object's own hold."""
    write_gates(gates_dir, GATES)
    store = FileStore(gates_dir)
    events = recorder(kube)
    app = create_app(store, Settings(), clock=lambda: NOW, events=events)
    lie = copy.deepcopy(OBJ)
    lie["metadata"]["annotations"][names.GATES_ANNOTATION] = "flux-system/CALL 555-0100 TO REOPEN"
    answer = (
        app.test_client()
        .post("/validate", data=orjson.dumps(review(denial(lie))), content_type="application/json")
        .get_json()["response"]
    )
    assert answer["allowed"] is False and "CALL 555-0100" in answer["status"]["message"]
    assert drain(events) == ["created"]
    [event] = kube.of("events")
    assert event["message"] == HELD and "555" not in orjson.dumps(event).decode()


def test_an_object_the_api_server_shows_unheld_gets_no_event(kube):
    kube.add(
        "kustomizations",
        {
            **flux(name="free", gates="flux-system/open"),
            "metadata": {
                "name": "free",
                "namespace": "apps",
                "uid": "uid-free",
                "annotations": {names.GATES_ANNOTATION: "flux-system/open"},
            },
        },
    )
    events = recorder(kube)
    lie = flux(name="free", gates="flux-system/freeze")
    lie["metadata"]["uid"] = "uid-free"
    events.record(denial(lie))
    assert drain(events) == ["unheld"] and kube.of("events") == []


def test_new_events_are_bounded_per_namespace_and_per_object(kube):
    for i in range(6):
        kube.add("kustomizations", flux(name=f"app-{i}", gates="flux-system/freeze"))
    events = recorder(kube, events_per_namespace=4)
    for i in range(6):
        events.record(denial(kube.get("kustomizations", "apps", f"app-{i}")))
    assert drain(events) == ["created"] * 4 + ["limited"] * 2 and len(kube.of("events")) == 4
    # One object whose hold keeps changing (a new message each time) is bounded on its own.
    events = recorder(kube, events_per_object=2, reread_after=0)
    stored = kube.store[("kustomizations", "apps", "app-5")]
    outcomes = []
    for gates in ("flux-system/freeze", "flux-system/release", "flux-system/freeze, flux-system/release"):
        stored["metadata"]["annotations"][names.GATES_ANNOTATION] = gates
        events.record(denial(kube.get("kustomizations", "apps", "app-5")))
        outcomes += drain(events)
    assert outcomes == ["created", "created", "limited"] and len(kube.of("events")) == 6
