"""Holds and releases reach the user's existing Flux alerting: our controller's events go
through the real notification-controller, an `Alert` + `Provider` (type generic) of the user's,
to an HTTP endpoint the test runs, as Slack or Teams would get them."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from tests.realflux.servers import configmap
from tests.realflux.test_kustomization import gate, git_repository, kustomization


class Endpoint:
    """A generic-provider webhook target: records every JSON body posted to it."""

    def __init__(self):
        self.received: list[dict] = []
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/"

    def about(self, name: str, reason: str) -> list[dict]:
        return [
            e
            for e in list(self.received)
            if e.get("involvedObject", {}).get("name") == name and e.get("reason") == reason
        ]


@pytest.fixture
def endpoint():
    target = Endpoint()
    yield target
    target.http.shutdown()


def test_a_hold_and_its_release_reach_a_generic_provider(cluster, git, endpoint):
    ns = cluster.namespace
    repo = git.repository(ns)
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "1"})})
    cluster.apply(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Provider",
            "metadata": {"name": "hook"},
            "spec": {"type": "generic", "address": endpoint.url},
        },
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "apps"},
            "spec": {
                "providerRef": {"name": "hook"},
                "eventSeverity": "info",
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        },
        gate("freeze", ns),
        git_repository("apps", repo.url),
        kustomization("app", "./app", "apps", {"gating.toolkit.fluxcd.io/gates": "freeze"}),
    )
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "1"}) == {"version": "1"}

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})})
    held = cluster.wait(lambda: endpoint.about("app", "GateClosed"), bool)
    assert held, f"no GateClosed event; received: {endpoint.received[-5:]}"
    assert "freeze" in held[0]["message"] and held[0]["involvedObject"]["kind"] == "Kustomization"

    assert cluster.gate("open", "freeze", "-n", ns, "-m", "ship it").returncode == 0
    released = cluster.wait(lambda: endpoint.about("app", "HoldReleased"), bool)
    assert released, f"no HoldReleased event; received: {endpoint.received[-5:]}"
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "2"}) == {"version": "2"}
    assert len(endpoint.about("app", "GateClosed")) == 1, "one hold, announced once"
