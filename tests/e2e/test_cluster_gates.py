"""Gates as cluster objects: the watch cache on the hot path, and the gate controller.

These tests run their own etcd + kube-apiserver, because one of them restarts the API server.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import orjson
import pytest
import yaml

from admission.core.base.timefmt import format_time
from admission.core.flux.kinds import FLUX_KINDS
from tests.builders import changed, flux, gate, keeper, request, review
from tests.doubles.notification import NotificationControllerDouble
from tests.e2e.conftest import controller_running, own_plane, serving, start_server, until
from tests.e2e.controlplane import ALICE, CONTROLLER, FLUX, GATE_ADMISSION
from tests.e2e.manifests import kustomization, now_rfc3339
from tests.processes import BIN, Process

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("cluster-gates"))  # it restarts the API server


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    with serving(
        plane,
        start_server(
            tmp_path_factory.mktemp("cluster-server"),
            None,
            "--kubeconfig",
            str(plane.kubeconfig(GATE_ADMISSION)),
            "--stale-after",
            "2",
        ),
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def notifications():
    """Flux notification-controller's event API, as a double that reads the JSON as it does."""
    with NotificationControllerDouble() as double:
        yield double


@pytest.fixture(scope="module")
def controller(plane, server, notifications, tmp_path_factory):
    with controller_running(
        plane,
        tmp_path_factory.mktemp("controller"),
        "e2e-controller",
        "--notify",
        "--notify-address",
        notifications.address,
    ) as proc:
        yield proc


def apply(plane, manifest, *args, user=ALICE):
    return plane.kubectl("apply", *args, "-f", "-", input=manifest, user=user, check=False)


def ok(result):
    return result.returncode == 0


def held(result):
    return result.returncode != 0 and " is held: " in result.stderr


def put(plane, *objects):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(objects)))


def gate_row(plane, name) -> dict:
    table = plane.kubectl("get", "gate", name, "-n", "flux-system", check=False).stdout.splitlines()
    if len(table) < 2:
        return {}
    header = table[0].split()
    return dict(zip(header, table[1].split(None, len(header) - 1), strict=False))


def test_a_toggle_opens_the_gate_within_two_seconds_and_the_window_closes_it(plane, server, controller):
    put(plane, gate("e2e-toggle", default="closed", window="5s"))
    manifest = kustomization("toggled", gates="flux-system/e2e-toggle")
    assert held(until(lambda: apply(plane, manifest), held))

    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        "e2e-toggle",
        "-n",
        "flux-system",
        f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}",
    )
    toggled_at = time.monotonic()
    result = until(lambda: apply(plane, manifest), ok, timeout=2.0, interval=0.05)
    assert ok(result), f"still held {time.monotonic() - toggled_at:.2f}s after the toggle: {result.stderr}"

    assert (
        until(lambda: gate_row(plane, "e2e-toggle"), lambda r: r.get("STATE") == "Opened", timeout=5).get(
            "REASON"
        )
        == "OpenRequested"
    )
    row = until(lambda: gate_row(plane, "e2e-toggle"), lambda r: r.get("STATE") == "Closed", timeout=15)
    assert row.get("STATE") == "Closed" and row.get("REASON") == "Default", row
    assert held(
        until(
            lambda: apply(plane, kustomization("toggled", gates="flux-system/e2e-toggle", path="./v2")), held
        )
    )


def test_gate_transitions_are_sent_to_notification_controller(plane, server, controller, notifications):
    put(plane, gate("e2e-notified", default="closed", window="5s"))
    until(lambda: gate_row(plane, "e2e-notified"), lambda r: r.get("STATE") == "Closed", timeout=60)
    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        "e2e-notified",
        "-n",
        "flux-system",
        f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}",
        "gating.toolkit.fluxcd.io/requestedBy=bob",
        "gating.toolkit.fluxcd.io/message=Patching a CVE",
    )

    def sent():
        return [
            (e["reason"], e["message"])
            for e in notifications.received
            if e["involvedObject"]["kind"] == "Gate" and e["involvedObject"]["name"] == "e2e-notified"
        ]

    events = until(sent, lambda got: len(got) >= 2, timeout=20)
    assert events == [
        (
            "GateOpened",
            # The webhook stamped admin, who wrote it; this controller holds no key to verify that.
            "opening gate: 'Patching a CVE' (by an unverified identity (stamp says 'admin', requestedBy "
            "says 'bob', it cannot be verified here: this reader holds no approval key)); Gate scheduled "
            "for closing at " + events[0][1].rsplit(" ", 1)[-1],
        ),
        ("GateClosed", "closing gate; Gate closed by default"),
    ], events
    assert notifications.refused == []
    [opened] = [e for e in notifications.received if e["involvedObject"].get("name") == "e2e-notified"][:1]
    assert opened["reportingInstance"] == "e2e-controller" and opened["severity"] == "info"
    assert opened["metadata"]["gating.toolkit.fluxcd.io/requestedBy"] == "bob"


def test_kubectl_get_gates_shows_state_reason_until_and_age(plane, server, controller):
    put(
        plane,
        gate(
            "e2e-columns",
            default="closed",
            annotations={"open.gate.fluxcd.io/requestedAt": "2030-01-01T00:00:00Z"},
        ),
    )
    row = until(
        lambda: gate_row(plane, "e2e-columns"), lambda r: r.get("UNTIL") == "2030-01-01T00:00:00Z", timeout=10
    )
    assert row == {
        "NAME": "e2e-columns",
        "STATE": "Closed",
        "REASON": "Default",
        "UNTIL": "2030-01-01T00:00:00Z",
        "AGE": row.get("AGE"),
    }
    status = json.loads(
        plane.kubectl("get", "gate", "e2e-columns", "-n", "flux-system", "-o", "json").stdout
    )["status"]
    assert status["conditions"][0]["type"] == "Opened" and status["conditions"][0]["status"] == "False"
    assert status["conditions"][0]["message"] == "Gate closed by default"
    assert status["nextTransitionAt"] == "2030-01-01T00:00:00Z"


def test_a_gatekeeper_covering_this_minute_closes_an_open_gate(plane, server, controller):
    month = time.gmtime().tm_mon % 12 + 1  # next month: never this minute
    put(
        plane,
        gate("e2e-kept"),
        keeper("now-keeper", "e2e-kept", closed=["* * * * *"]),
        gate("e2e-unkept"),
        keeper("later-keeper", "e2e-unkept", closed=[f"* * * {month} *"]),
    )
    result = until(lambda: apply(plane, kustomization("kept", gates="flux-system/e2e-kept")), held)
    assert (
        "gate 'flux-system/e2e-kept' is closed (Gate closed by GateKeeper 'now-keeper' schedule '* * * * *')"
        in result.stderr
    )
    assert ok(until(lambda: apply(plane, kustomization("unkept", gates="flux-system/e2e-unkept")), ok))
    assert (
        until(lambda: gate_row(plane, "e2e-kept"), lambda r: r.get("REASON") == "Scheduled", timeout=10)[
            "STATE"
        ]
        == "Closed"
    )


def test_opening_a_gate_requests_reconciles_and_records_events(plane, server, controller):
    put(plane, gate("e2e-release"))
    parent = kustomization("parent", "flux-system")
    child = yaml.safe_load(kustomization("child", gates="flux-system/e2e-release"))
    child["metadata"]["labels"] = {
        "kustomize.toolkit.fluxcd.io/name": "parent",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    assert ok(apply(plane, parent))
    assert ok(
        until(
            lambda: apply(
                plane,
                yaml.safe_dump(child),
                "--server-side",
                "--field-manager=kustomize-controller",
                user=FLUX,
            ),
            ok,
        )
    )
    # Toggles are whole seconds and a tie goes to close: date the close a little in the past.
    closed_at = format_time(datetime.now(UTC) - timedelta(seconds=5))
    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        "e2e-release",
        "-n",
        "flux-system",
        f"close.gate.fluxcd.io/requestedAt={closed_at}",
        "gating.toolkit.fluxcd.io/message=Black Friday freeze",
        "gating.toolkit.fluxcd.io/requestedBy=alice",
    )
    child["spec"]["path"] = "./v2"
    assert held(
        until(
            lambda: apply(
                plane,
                yaml.safe_dump(child),
                "--server-side",
                "--field-manager=kustomize-controller",
                user=FLUX,
            ),
            held,
        )
    )
    assert until(lambda: gate_row(plane, "e2e-release"), lambda r: r.get("STATE") == "Closed", timeout=60)

    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        "e2e-release",
        "-n",
        "flux-system",
        f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}",
        "gating.toolkit.fluxcd.io/message=Patching a CVE: Signed off by Bob the builder",
        "gating.toolkit.fluxcd.io/requestedBy=bob",
    )

    def requested(name, namespace):
        return plane.kubectl(
            "get",
            "kustomization",
            name,
            "-n",
            namespace,
            "-o",
            r"jsonpath={.metadata.annotations.reconcile\.fluxcd\.io/requestedAt}",
        ).stdout

    assert until(lambda: requested("child", "apps"), bool, timeout=10), (
        "the held object was not asked to reconcile"
    )
    assert requested("parent", "flux-system"), "its parent Kustomization was not asked to reconcile"

    events = until(
        lambda: (
            plane.kubectl(
                "get",
                "events",
                "-n",
                "flux-system",
                "--field-selector",
                "involvedObject.name=e2e-release",
                "-o",
                "json",
            ).stdout
        ),
        lambda out: "GateOpened" in out and "GateClosed" in out,
        timeout=10,
    )
    items = {e["reason"]: e for e in json.loads(events)["items"]}
    # The webhook stamped admin (who wrote it); this controller holds no key to verify it with.
    assert items["GateClosed"]["message"].startswith(
        "closing gate: 'Black Friday freeze' (by an unverified identity (stamp says 'admin', "
        "requestedBy says 'alice'"
    )
    assert items["GateOpened"]["message"].startswith(
        "opening gate: 'Patching a CVE: Signed off by Bob the builder' (by an unverified identity "
        "(stamp says 'admin', requestedBy says 'bob'"
    )
    assert items["GateOpened"]["involvedObject"]["kind"] == "Gate"
    table = plane.kubectl(
        "get", "events", "-n", "flux-system", "--field-selector", "involvedObject.name=e2e-release"
    ).stdout
    assert "GateOpened" in table and "gate/e2e-release" in table


def audit_lines(plane, user):
    lines = plane.audit_log.read_text().splitlines() if plane.audit_log.exists() else []
    return [entry for entry in map(json.loads, lines) if entry.get("user", {}).get("username") == user.name]


def test_reviews_cause_no_api_requests_from_our_server(plane, server):
    put(plane, gate("e2e-quiet", closed=True))
    obj = flux(gates="flux-system/e2e-quiet")
    body = orjson.dumps(review(request("UPDATE", changed(obj, path="./v2"), obj)))
    until(lambda: server.request("POST", "/validate", body)[1]["response"]["allowed"] is False, bool)
    before = len(audit_lines(plane, GATE_ADMISSION))
    conn = server.connection()
    for _ in range(200):
        status, out = server.request("POST", "/validate", body, conn=conn)
        assert status == 200 and out["response"]["allowed"] is False
    conn.close()
    # The audit log backend writes before it answers (--audit-log-mode=blocking, the default).
    new = audit_lines(plane, GATE_ADMISSION)[before:]
    # The watches go on (gates, and the Flux objects whose served content the webhook reads),
    # and the denials become one aggregated Event, written off the admission path; nothing is
    # asked per review.
    watched = {"gates", "gatekeepers"} | {row.plural for row in FLUX_KINDS}
    assert all(
        (e["verb"] in ("list", "watch") and e["objectRef"]["resource"] in watched)
        or e["objectRef"]["resource"] == "events"
        for e in new
    ), [(e["verb"], e["requestURI"]) for e in new]
    # Watches renew every --stale-after/2 seconds whatever the load: only the rest could be per review.
    others = [e for e in new if e["verb"] not in ("list", "watch")]
    assert len(others) <= 12, f"{len(others)} requests by our server during 200 reviews"


def test_the_cache_recovers_from_an_api_server_restart(plane, server, controller):
    put(plane, gate("e2e-restart", default="closed"))
    manifest = kustomization("restarted", gates="flux-system/e2e-restart")
    assert held(until(lambda: apply(plane, manifest), held))
    obj = yaml.safe_load(manifest)
    body = orjson.dumps(review(request("CREATE", obj)))

    plane.stop_apiserver()
    try:
        # Both caches go stale: wait for the gate cache's reason (the Flux object cache may say first).
        status, detail = until(
            lambda: server.request("GET", "/readyz"),
            lambda r: r[0] == 503 and "gate cache stale" in r[1].get("reason", ""),
            timeout=30,
        )
        assert status == 503 and "gate cache stale" in detail["reason"], detail
        # Each worker watches on its own and notices on its own: poll until a review says so.
        verdict = until(
            lambda: server.request("POST", "/validate", body)[1]["response"],
            lambda v: "gate state unknown" in v["status"]["message"],
            timeout=30,
        )
        assert verdict["allowed"] is False
        assert (
            "gate 'flux-system/e2e-restart' is closed (gate state unknown: gate cache stale"
            in verdict["status"]["message"]
        )
    finally:
        plane.start_apiserver()

    status, detail = until(lambda: server.request("GET", "/readyz"), lambda r: r[0] == 200, timeout=60)
    assert status == 200, detail
    assert held(apply(plane, manifest))
    plane.kubectl(
        "annotate",
        "--overwrite",
        "gate",
        "e2e-restart",
        "-n",
        "flux-system",
        f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}",
    )
    assert ok(until(lambda: apply(plane, manifest), ok, timeout=10))
    assert until(lambda: gate_row(plane, "e2e-restart"), lambda r: r.get("STATE") == "Opened", timeout=20)


def lease_holder(plane) -> str:
    return plane.kubectl(
        "get",
        "lease",
        "gate-admission-controller",
        "-n",
        "gate-admission-system",
        "-o",
        "jsonpath={.spec.holderIdentity}",
        check=False,
    ).stdout


def test_a_tenants_gate_dated_near_year_9999_blinds_no_other_gate(plane, server, controller):
    """One Gate's late toggle must not break metrics, `kubectl gate list -A` or the controller's
    status writes of every other gate; a window or interval the webhook would refuse is refused by
    the API server first (what a gates file may still hold: tests/kube/test_controller.py)."""
    late = {"close.gate.fluxcd.io/requestedAt": "9999-12-31T23:59:59Z"}
    put(
        plane,
        gate("e2e-late", annotations=late, window="1h"),
        gate("e2e-after-late", default="closed"),
    )
    row = until(lambda: gate_row(plane, "e2e-after-late"), lambda r: r.get("STATE") == "Closed", timeout=60)
    assert row.get("REASON") == "Default", row
    status = json.loads(plane.kubectl("get", "gate", "e2e-late", "-n", "flux-system", "-o", "json").stdout)
    assert any("too late" in p for p in status.get("status", {}).get("problems", [])), status
    from tests.e2e.test_operators import kubectl_gate

    listed = kubectl_gate(plane, "list", "-A", "-o", "json")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert {"e2e-late", "e2e-after-late"} <= {r["name"] for r in orjson.loads(listed.stdout)}
    metrics = server.metrics()
    assert any('gate="e2e-after-late"' in sample for sample in metrics), "no gauge for the other gate"
    refused = apply(plane, yaml.safe_dump(gate("e2e-forever", window="99999999h")))
    assert refused.returncode != 0 and "876000h" in refused.stderr, refused.stderr
    assert ok(apply(plane, yaml.safe_dump(gate("e2e-century", window="876000h"))))


def test_one_controller_acts_at_a_time_and_another_takes_over(plane, server, controller, tmp_path):
    # Last in this module: it stops the module's controller.
    second = Process(
        [
            str(BIN / "gate-admission"),
            "controller",
            "--kubeconfig",
            str(plane.kubeconfig(CONTROLLER)),
            "--health-port",
            "0",
            "--identity",
            "e2e-controller-2",
        ],
        tmp_path / "controller-2.log",
    )
    try:
        assert (
            until(lambda: lease_holder(plane), lambda h: h == "e2e-controller", timeout=20)
            == "e2e-controller"
        )
        put(plane, gate("e2e-leader", default="closed"))
        assert until(lambda: gate_row(plane, "e2e-leader"), lambda r: r.get("STATE") == "Closed", timeout=60)
        assert lease_holder(plane) == "e2e-controller", (
            "the standby must not take the lease while the leader renews"
        )

        controller.stop()  # SIGTERM: the leader hands its Lease back
        assert (
            until(lambda: lease_holder(plane), lambda h: h == "e2e-controller-2", timeout=30)
            == "e2e-controller-2"
        )
        plane.kubectl(
            "annotate",
            "--overwrite",
            "gate",
            "e2e-leader",
            "-n",
            "flux-system",
            f"open.gate.fluxcd.io/requestedAt={now_rfc3339()}",
        )
        row = until(lambda: gate_row(plane, "e2e-leader"), lambda r: r.get("STATE") == "Opened", timeout=20)
        assert row.get("STATE") == "Opened", second.log()[-2000:]
    finally:
        second.stop()
