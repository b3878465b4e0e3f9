"""The controller's /metrics: served by the real process beside its probes, whole however large;
what the controller does counted (reconcile requests, approvals, API errors), and what its
caches say (calendar freshness, approvals waiting) read when scraped."""

from __future__ import annotations

import http.client
import re
import socket
from datetime import timedelta

from kubernetes.client.rest import ApiException

from admission import __version__
from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.kube.health import serve_health
from admission.kube.scrape import collector
from admission.observability import controllermetrics
from tests.builders import flux, gate, keeper
from tests.doubles.fakekube import FakeKube
from tests.kube.test_approval_requests import setup
from tests.kube.test_controller import NOW, controller
from tests.kube.test_health import controller as controller_process
from tests.polling import wait_for


def samples(text: str) -> dict[str, float]:
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def scrape(ctl, leader: bool = True, clock=lambda: NOW) -> dict[str, float]:
    body, _ = controllermetrics.exposition(collector(ctl.store, lambda: leader, clock))
    return samples(body.decode())


def get(port: int, path: str) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        conn.close()


def test_the_controller_process_serves_metrics_on_its_probe_port(tmp_path):
    with controller_process(tmp_path) as (proc, port):
        answered = wait_for(lambda: get(port, "/metrics"), timeout=30, what="the controller's /metrics")
    status, content_type, text = answered
    assert status == 200 and content_type.startswith("text/plain")
    found = samples(text)
    info = [k for k in found if k.startswith("gate_admission_build_info{")]
    assert info and 'component="controller"' in info[0] and f'version="{__version__}"' in info[0]
    assert found["gate_admission_controller_leader"] == 1.0  # --no-leader-elect: it acts alone
    # Every bounded label value is there from the start, at 0 until it happens.
    for name in (
        'gate_admission_controller_reconcile_requests_total{result="failed"}',
        'gate_admission_controller_calendar_fetches_total{result="failed"}',
        'gate_admission_controller_approvals_total{event="expired"}',
        'gate_admission_controller_api_errors_total{operation="lease"}',
        'gate_admission_controller_notifications_total{result="failed"}',
    ):
        assert name in found, name
    assert "gate_admission_reviews_total" not in text  # the webhook's metrics are the webhook's


def test_a_scrape_larger_than_the_socket_takes_at_once_arrives_whole():
    big = b"# " + b"x" * (1 << 20) + b"\n"
    server = serve_health(0, lambda: (True, {}), metrics=lambda: (big, "text/plain; version=0.0.4"))
    # Accepted connections inherit the listener's send buffer: a few KiB, so the answer is sent
    # in hundreds of parts, each when the client has read the one before.
    server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            received = bytearray(conn.recv(4096))
            assert get(server.port, "/healthz")[0] == 200  # answered while the scrape is half sent
            while chunk := conn.recv(65536):
                received += chunk
        assert received.endswith(big) and b"Content-Length: %d" % len(big) in received
    finally:
        server.shutdown()


def test_a_failing_collector_is_a_503_and_the_probes_still_answer():
    def broken() -> tuple[bytes, str]:
        raise RuntimeError("collector exploded")

    server = serve_health(0, lambda: (True, {}), metrics=broken)
    try:
        status, _, text = get(server.port, "/metrics")
        assert status == 503 and "collector exploded" in text
        assert get(server.port, "/readyz")[0] == 200
    finally:
        server.shutdown()


def test_reconcile_requests_and_their_failures_are_counted():
    kube = FakeKube()
    kube.add(names.GATE_PLURAL, gate("release", closed=True))
    kube.add("kustomizations", flux(name="shop", gates="flux-system/release"))
    ctl, cache = controller(kube)
    ctl.reconcile(NOW)
    before = scrape(ctl)
    kube.fail["patch_namespaced_custom_object"] = ApiException(status=500, reason="etcd down")
    opened = NOW + timedelta(minutes=1)
    kube.add(
        names.GATE_PLURAL,
        gate("release", closed=True, annotations={names.OPEN_ANNOTATION: format_time(opened)}),
    )
    cache.sync()
    ctl.reconcile(opened + timedelta(seconds=1))
    after = scrape(ctl)

    def moved(name: str) -> float:
        return after[name] - before[name]

    assert moved('gate_admission_controller_reconcile_requests_total{result="failed"}') == 1
    assert moved('gate_admission_controller_api_errors_total{operation="reconcile_request"}') == 1
    assert moved('gate_admission_controller_reconcile_requests_total{result="requested"}') == 0


def test_approvals_recorded_used_and_waiting_are_seen():
    kube, ctl, cache = setup()
    before = scrape(ctl)
    ctl.reconcile(NOW)
    found = scrape(ctl)
    assert found['gate_admission_controller_approvals_total{event="recorded"}'] == (
        before['gate_admission_controller_approvals_total{event="recorded"}'] + 1
    )
    labels = '{gate="freeze",gate_namespace="flux-system"}'
    assert found[f"gate_admission_controller_approvals_waiting{labels}"] == 1
    expires = found[f"gate_admission_controller_approval_next_expiry_timestamp_seconds{labels}"]
    assert expires == NOW.replace(day=11).timestamp()  # approval()'s default expiry
    # Past its expiry it is no longer waiting, and the controller ends it as expired.
    later = NOW + timedelta(days=2)
    ctl.reconcile(later)
    gone = scrape(ctl, clock=lambda: later)
    assert f"gate_admission_controller_approvals_waiting{labels}" not in gone
    assert gone['gate_admission_controller_approvals_total{event="expired"}'] == (
        found['gate_admission_controller_approvals_total{event="expired"}'] + 1
    )


def test_each_calendar_says_when_it_was_last_fetched_well_and_whether_it_fails():
    kube = FakeKube()
    spec = {
        "calendars": [
            {"url": "https://feeds.example/a.ics", "staleAfter": "2h"},
            {"url": "https://feeds.example/b.ics"},
        ]
    }
    kept = keeper("holidays", "release", **spec)
    from admission.core.time.subscriptions import parse_calendars

    first, second = parse_calendars(kept["spec"])
    kept["status"] = {
        "calendars": [
            {
                "url": first.url,
                "specDigest": first.digest,
                "lastFetchTime": "2026-06-10T11:59:00Z",
                "lastSuccessTime": "2026-06-10T10:00:00Z",
                "error": "503 Service Unavailable",
            },
        ]
    }
    kube.add(names.GATEKEEPER_PLURAL, kept)
    kube.add(names.GATE_PLURAL, gate("release"))
    ctl, cache = controller(kube)
    cache.index.replace_all(kube.of(names.GATE_PLURAL), kube.of(names.GATEKEEPER_PLURAL))
    found = scrape(ctl)
    a = '{calendar="feeds.example",gatekeeper="holidays",gatekeeper_namespace="flux-system"}'
    b = '{calendar="feeds.example#1",gatekeeper="holidays",gatekeeper_namespace="flux-system"}'
    assert found[f"gate_admission_controller_calendar_last_success_timestamp_seconds{a}"] == (
        NOW.replace(hour=10).timestamp()
    )
    assert found[f"gate_admission_controller_calendar_failing{a}"] == 1
    assert found[f"gate_admission_controller_calendar_stale_after_seconds{a}"] == 7200
    # Never fetched: no success to show, not failing yet; its staleAfter is the default.
    assert f"gate_admission_controller_calendar_last_success_timestamp_seconds{b}" not in found
    assert found[f"gate_admission_controller_calendar_failing{b}"] == 0
    assert found[f"gate_admission_controller_calendar_stale_after_seconds{b}"] > 0


def test_no_label_is_one_prometheus_gives_the_target():
    kube, ctl, _ = setup()
    ctl.reconcile(NOW)
    body, _ = controllermetrics.exposition(collector(ctl.store, lambda: False, lambda: NOW))
    used = {
        label
        for labels in re.findall(r"^gate_admission_\w+\{([^}]*)\}", body.decode(), re.M)
        for label in re.findall(r"(\w+)=", labels)
    }
    assert used and not used & {"namespace", "pod", "instance", "job", "service", "container", "endpoint"}
    assert samples(body.decode())["gate_admission_controller_leader"] == 0.0
