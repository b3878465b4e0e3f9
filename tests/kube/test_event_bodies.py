"""admission.kube.events.core_event: the one builder of core/v1 Event bodies (denials, transitions)."""

from __future__ import annotations

from datetime import UTC, datetime

from admission.core.base.timefmt import format_time
from admission.kube.events import MAX_EVENT_MESSAGE, core_event

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
GATE = {
    "apiVersion": "gating.example/v1",
    "kind": "Gate",
    "namespace": "flux-system",
    "name": "release",
    "uid": "uid-release",
}


def test_a_named_event_with_a_reporting_component():
    body = core_event(
        GATE,
        "GateClosed",
        "held",
        NOW,
        name="release.gateclosed.0",
        event_type="Warning",
        component="gate-admission",
        reporting_component="gate-admission",
    )
    assert body == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "release.gateclosed.0", "namespace": "flux-system"},
        "involvedObject": GATE,
        "reason": "GateClosed",
        "type": "Warning",
        "message": "held",
        "source": {"component": "gate-admission"},
        "reportingComponent": "gate-admission",
        "firstTimestamp": format_time(NOW),
        "lastTimestamp": format_time(NOW),
        "count": 1,
    }


def test_an_unnamed_event_is_named_by_the_api_server_after_its_object():
    body = core_event(
        GATE,
        "GateOpened",
        "x" * (MAX_EVENT_MESSAGE + 1),
        NOW,
        event_type="Normal",
        component="gate-admission-controller",
    )
    assert body["metadata"] == {"generateName": "release.", "namespace": "flux-system"}
    assert body["source"] == {"component": "gate-admission-controller"} and "reportingComponent" not in body
    assert len(body["message"]) == MAX_EVENT_MESSAGE
