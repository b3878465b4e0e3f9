"""One gate for a fleet: a hub (our server, ``--gates-dir``, serving /calendar.ics behind a
token) and a spoke (our controller, on FakeKube) whose GateKeeper follows the hub's gate. A
toggle on the hub, a close and then an open, is honoured by the spoke's gate at its next fetch."""

from __future__ import annotations

import base64
import threading
import time
from datetime import timedelta

import pytest

from admission.clock import utcnow
from admission.core.base import names
from admission.core.base.timefmt import format_distinct_time
from admission.ical.fetch import Policy, parse_networks
from admission.kube.controller import Controller
from tests.builders import gate
from tests.conftest import REPORT, write_gates
from tests.doubles.fakekube import FakeFluxCache, FakeKube
from tests.kube.test_calendarsync import LiveCache
from tests.polling import wait_for
from tests.processes import serving_gates_dir

INTERVAL = "1s"  # the spoke fetches the hub's feed every second


@pytest.fixture
def hub(tmp_path):
    token = tmp_path / "calendar-token"
    token.write_text("fleet-s3cret\n")
    with serving_gates_dir(
        tmp_path, [gate("freeze", default="opened")], "--calendar-token-file", str(token), "--workers", "2"
    ) as server:
        yield server


def spoke(hub) -> tuple[FakeKube, Controller]:
    kube = FakeKube()
    kube.add(
        "secrets",
        {
            "metadata": {"name": "hub-calendar", "namespace": "flux-system"},
            "data": {"token": base64.b64encode(b"fleet-s3cret").decode()},
        },
    )
    kube.add(names.GATE_PLURAL, gate("freeze", default="opened", interval="1s"))
    ca = (hub.cert_dir / "ca.crt").read_bytes()
    kube.add(
        names.GATEKEEPER_PLURAL,
        {
            "apiVersion": names.GATING_API_VERSION,
            "kind": names.GATEKEEPER_KIND,
            "metadata": {"name": "fleet-freeze", "namespace": "flux-system"},
            "spec": {
                "gate": "freeze",
                "calendars": [
                    {
                        "name": "hub",
                        "url": f"{hub.url}/calendar.ics?namespace=flux-system&gate=freeze&days=40",
                        "secretRef": {"name": "hub-calendar"},
                        "caBundle": base64.b64encode(ca).decode(),
                        "interval": INTERVAL,
                    }
                ],
            },
        },
    )
    calendars = {
        "policy": Policy(total_timeout=10, allowed_networks=parse_networks("127.0.0.0/8")),
        "min_interval": timedelta(seconds=1),
    }
    return kube, Controller(
        None, store=LiveCache(kube), custom=kube, core=kube, flux=FakeFluxCache(kube), calendars=calendars
    )


def spoke_gate(kube: FakeKube) -> dict:
    status = kube.get(names.GATE_PLURAL, "flux-system", "freeze").get("status") or {}
    condition = (status.get("conditions") or [{}])[0]
    return {
        "state": status.get("state"),
        "reason": condition.get("reason"),
        "message": condition.get("message"),
    }


def toggle(hub, gates_dir, action: str) -> float:
    """Write a toggle on the hub's gate, as `kubectl gate` would; when it was written."""
    annotation = names.OPEN_ANNOTATION if action == "open" else names.CLOSE_ANNOTATION
    write_gates(
        gates_dir,
        [
            gate(
                "freeze",
                default="opened",
                annotations={
                    annotation: format_distinct_time(utcnow()),
                    names.REQUESTED_BY_ANNOTATION: "hub-oncall",
                    names.MESSAGE_ANNOTATION: f"fleet {action}",
                },
            )
        ],
    )
    return time.monotonic()


def test_a_hub_toggle_reaches_the_spoke_at_its_next_fetch(hub):
    kube, controller = spoke(hub)
    worker = threading.Thread(target=controller.run, daemon=True)
    worker.start()
    gates_dir = hub.cert_dir.parent / "gates"
    try:
        # Until its first fetch the spoke's gate is Unknown (closed); then the hub's gate is open.
        wait_for(lambda: spoke_gate(kube)["reason"] == names.REASON_DEFAULT, 60, "the spoke's first fetch")
        assert spoke_gate(kube)["state"] == names.STATE_OPENED

        closed_at = toggle(hub, gates_dir, "close")
        wait_for(lambda: spoke_gate(kube)["state"] == names.STATE_CLOSED, 60, "the hub's close on the spoke")
        REPORT["hub close seen by the spoke"] = (
            f"{time.monotonic() - closed_at:.1f}s (spoke interval {INTERVAL})"
        )
        seen = spoke_gate(kube)
        assert seen["reason"] == names.REASON_SCHEDULED
        assert (
            seen["message"]
            == "Gate closed by GateKeeper 'fleet-freeze' calendar 'hub' event 'Gate flux-system/freeze closed'"
        )
        status = kube.get(names.GATEKEEPER_PLURAL, "flux-system", "fleet-freeze")["status"]
        cal = status["calendars"][0]
        assert cal["etag"] and "error" not in cal and status["conditions"][0]["status"] == "True"

        opened_at = toggle(hub, gates_dir, "open")
        wait_for(lambda: spoke_gate(kube)["state"] == names.STATE_OPENED, 60, "the hub's open on the spoke")
        REPORT["hub open seen by the spoke"] = (
            f"{time.monotonic() - opened_at:.1f}s (spoke interval {INTERVAL})"
        )
        assert spoke_gate(kube)["reason"] == names.REASON_DEFAULT
    finally:
        controller.stop()
        worker.join(15)
    assert not worker.is_alive()


def test_a_spoke_without_the_token_stays_closed_and_says_why(hub):
    kube, controller = spoke(hub)
    kube.add(
        "secrets",
        {
            "metadata": {"name": "hub-calendar", "namespace": "flux-system"},
            "data": {"token": base64.b64encode(b"guess").decode()},
        },
    )
    controller.calendars.sync(utcnow())
    cal = kube.get(names.GATEKEEPER_PLURAL, "flux-system", "fleet-freeze")["status"]["calendars"][0]
    assert cal["error"] == "HTTP 401 UNAUTHORIZED"
    controller.reconcile(utcnow())
    seen = spoke_gate(kube)
    assert (seen["state"], seen["reason"]) == (names.STATE_CLOSED, names.REASON_UNKNOWN)
    assert "calendar 'hub' has not been fetched yet: HTTP 401 UNAUTHORIZED" in seen["message"]
