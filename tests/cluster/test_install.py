"""Installed as the README says, into a real cluster: the image runs as Pods, the API server
reaches them through their Service, and a platform team's first day works."""

from __future__ import annotations

import json

import pytest
import yaml

from admission.core.base.names import OPEN_ANNOTATION, REASON_DEFAULT
from tests.builders import gate
from tests.cluster.conftest import FIGURES, NS, kubectl_gate, pods, service_get
from tests.e2e.controlplane import ALICE
from tests.e2e.manifests import kustomization
from tests.monitoring.conftest import find_tool, run_expression_tests
from tests.monitoring.test_dashboard import queries
from tests.polling import until
from tests.scrapes import WEBHOOK_TARGET, as_scraped, samples, series_selector

DENIED = 'admission webhook "validate.gating.toolkit.fluxcd.io" denied the request: '


def apply(cluster, manifest: str, user=ALICE, *args: str):
    return cluster.kubectl("apply", *args, "-f", "-", input=manifest, user=user, check=False)


def test_every_component_runs_from_the_image(cluster, installed):
    webhook = json.loads(
        cluster.kubectl("get", "deployment", "gate-admission", "-n", NS, "-o", "json").stdout
    )
    assert webhook["status"]["readyReplicas"] == 2
    running = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json").stdout)["items"]
    images = {c["image"] for p in running for c in p["spec"]["containers"]}
    assert images == {"gate-admission:0.2.0"}
    phases = sorted(
        (p["metadata"]["labels"].get("app.kubernetes.io/component", "job"), p["status"]["phase"])
        for p in running
    )
    assert phases.count(("webhook", "Running")) == 2
    assert ("controller", "Running") in phases
    assert any(
        p["metadata"].get("labels", {}).get("job-name") == "gate-admission-certs-init"
        and p["status"]["phase"] == "Succeeded"
        for p in running
    )
    # The certificate Job injected the CA into both webhook configurations.
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        bundle = cluster.kubectl(
            "get", kind, "gate-admission", "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}"
        ).stdout
        assert len(bundle) > 100
    FIGURES.append(
        f"install: webhook pods {pods(cluster)} Ready; controller and certificate Job from the image"
    )


def test_a_gated_edit_is_refused_by_kubectl_apply_through_the_service(cluster, installed):
    created = until(
        lambda: cluster.kubectl(
            "apply",
            "-f",
            "-",
            check=False,
            input=yaml.safe_dump(
                gate("install-freeze", annotations={OPEN_ANNOTATION: "2026-01-01T00:00:00Z"})
            ),
        ),
        lambda r: r.returncode == 0,
    )
    assert created.returncode == 0, created.stderr
    manifest = kustomization("frontend", gates="flux-system/install-freeze")
    result = until(lambda: apply(cluster, manifest), lambda r: r.returncode == 0)
    assert result.returncode == 0, result.stderr

    closed = kubectl_gate(cluster, "close", "install-freeze", "-n", "flux-system")
    assert closed.returncode == 0, closed.stderr
    change = kustomization("frontend", gates="flux-system/install-freeze", path="./deploy/v2")
    refused = until(lambda: apply(cluster, change), lambda r: r.returncode != 0, timeout=30)
    assert "Error from server (Forbidden)" in refused.stderr
    assert (
        DENIED + "Kustomization apps/frontend is held: gate 'flux-system/install-freeze' is closed"
        in refused.stderr
    )
    kept = cluster.kubectl(
        "get", "kustomization", "frontend", "-n", "apps", "-o", "jsonpath={.spec.path}"
    ).stdout
    assert kept == "./deploy"

    shown = kubectl_gate(cluster, "get", "install-freeze", "-n", "flux-system")
    assert shown.returncode == 0 and "closed" in shown.stdout.lower(), shown.stdout + shown.stderr
    opened = kubectl_gate(cluster, "open", "install-freeze", "-n", "flux-system")
    assert opened.returncode == 0, opened.stderr
    landed = until(lambda: apply(cluster, change), lambda r: r.returncode == 0, timeout=30)
    assert landed.returncode == 0, landed.stderr
    assert (
        cluster.kubectl(
            "get", "kustomization", "frontend", "-n", "apps", "-o", "jsonpath={.spec.path}"
        ).stdout
        == "./deploy/v2"
    )


def test_metrics_are_scraped_through_the_service(cluster, installed):
    text = until(lambda: service_get(cluster, "/metrics"), lambda t: "gate_admission" in t, timeout=30)
    samples = [
        line for line in text.splitlines() if line.startswith("gate_admission") and not line.startswith("#")
    ]
    assert samples, text[:2000]
    assert service_get(cluster, "/readyz").strip()


def _pod_scrape(cluster, pod: str, port: str) -> str:
    """One scrape of a Pod's /metrics through the API server's Pod proxy (which reaches the Pod
    IP as a scraper in the cluster does); empty while it does not answer."""
    done = cluster.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{NS}/pods/{port.replace('POD', pod)}/proxy/metrics", check=False
    )
    return done.stdout if done.returncode == 0 else ""


def _pod_metrics(cluster, pod: str, port: str) -> dict[str, float]:
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in _pod_scrape(cluster, pod, port).splitlines()
        if line and not line.startswith("#")
    }


def test_each_pod_serves_its_metrics_where_the_monitors_scrape_them(cluster, installed):
    # The webhook's on its TLS port (the ServiceMonitor's), the controller's on its probe port
    # (the PodMonitor's): each says what it is, and one controller replica leads.
    for pod in pods(cluster, "webhook"):
        found = until(
            lambda pod=pod: _pod_metrics(cluster, pod, "https:POD:9443"), bool, timeout=60, interval=1.0
        )
        assert any(k.startswith("gate_admission_build_info{") and 'component="webhook"' in k for k in found)
        assert "gate_admission_certificate_expiry_timestamp_seconds" in found
    controllers = pods(cluster, "controller")

    def leading() -> float | None:
        scraped = [_pod_metrics(cluster, pod, "http:POD:8081") for pod in controllers]
        if not all(scraped):
            return None
        for found in scraped:
            assert any(
                k.startswith("gate_admission_build_info{") and 'component="controller"' in k for k in found
            )
        return sum(found["gate_admission_controller_leader"] for found in scraped)

    assert until(leading, lambda n: n == 1.0, timeout=60, interval=1.0) == 1.0


DASHBOARD_NAMESPACES = ("dash-a", "dash-b")


def test_the_dashboards_gate_table_over_the_pods_own_scrapes_shows_each_gate_once(
    cluster, installed, tmp_path
):
    # Each webhook replica reports every gate; Prometheus stores each Pod's samples with its
    # target labels (the ServiceMonitor's). The dashboard's queries, run by promtool over the
    # real Pods' scrapes, show each gate once, same-named gates of two namespaces apart.
    promtool = find_tool("promtool")
    if promtool is None:
        pytest.skip("no promtool in TEST_TOOLS: hack/test.sh builds it for this tier")
    for namespace in DASHBOARD_NAMESPACES:
        cluster.kubectl("create", "namespace", namespace, check=False)
    gates = [
        gate("freeze", "dash-a", default="opened"),
        gate("freeze", "dash-b", default="closed"),
        gate("watch", "dash-b", default="opened"),
    ]
    wanted = {("dash-a", "freeze"): 1.0, ("dash-b", "freeze"): 0.0, ("dash-b", "watch"): 1.0}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(gates))
    try:

        def ours(text: str) -> list[tuple[str, dict[str, str], float]]:
            return [
                (name, labels, value)
                for name, labels, value in samples(text)
                if name == "gate_admission_gate_open" and labels.get("gate_namespace") in DASHBOARD_NAMESPACES
            ]

        def scraped() -> dict[str, str]:
            return {pod: _pod_scrape(cluster, pod, "https:POD:9443") for pod in pods(cluster, "webhook")}

        texts = until(
            scraped,
            lambda found: (
                len(found) >= 2
                and all(
                    {(l["gate_namespace"], l["gate"]): v for _, l, v in ours(t)} == wanted
                    for t in found.values()
                )
            ),
            timeout=60,
            interval=1.0,
        )
        series = []
        for pod, text in texts.items():
            target = {**WEBHOOK_TARGET, "pod": pod, "instance": f"{pod}:9443"}
            for name, labels, value in as_scraped(text, target):
                if (
                    name == "gate_admission_gate_open"
                    and labels.get("gate_namespace") in DASHBOARD_NAMESPACES
                ):
                    series.append({"series": series_selector(name, labels), "values": f"{value} {value}"})
        panels = dict(queries())
        default = f'reason="{REASON_DEFAULT}"'
        tests = [
            {
                "expr": panels["Gates"],
                "eval_time": "1m",
                "exp_samples": [
                    {"labels": f'{{gate="{g}",gate_namespace="{ns}",{default}}}', "value": v}
                    for (ns, g), v in sorted(wanted.items())
                ],
            },
            {
                "expr": panels["Closed gates"],
                "eval_time": "1m",
                "exp_samples": [{"labels": "{}", "value": 1}],
            },
        ]
        run_expression_tests(promtool, tmp_path, series, tests)
        FIGURES.append(
            f"dashboard over {len(texts)} webhook Pods' scrapes: {len(wanted)} gates, each once (promtool)"
        )
    finally:
        for namespace in DASHBOARD_NAMESPACES:
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_network_policy_lets_the_api_server_in(cluster, installed):
    """The API server's calls arrive from outside the pod network (here: the node's bridge
    address): the policy must admit them on the webhook port, or every gated write fails."""
    policy = json.loads(
        cluster.kubectl("get", "networkpolicy", "gate-admission", "-n", NS, "-o", "json").stdout
    )
    ingress = policy["spec"]["ingress"]
    assert [rule.get("from") for rule in ingress] == [None]  # no source narrowing
    assert {(p["port"], p["protocol"]) for rule in ingress for p in rule["ports"]} == {(9443, "TCP")}
    served = cluster.kubectl(
        "get", "service", "gate-admission", "-n", NS, "-o", "jsonpath={.spec.ports[0].targetPort}"
    ).stdout
    assert served == "https"


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_pods_are_placed_and_prioritised_for_a_fail_closed_webhook(cluster, installed, component):
    name = "gate-admission" if component == "webhook" else "gate-admission-controller"
    spec = json.loads(cluster.kubectl("get", "deployment", name, "-n", NS, "-o", "json").stdout)["spec"][
        "template"
    ]["spec"]
    assert spec.get("priorityClassName") == "system-cluster-critical"
    running = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", NS, "-l", f"app.kubernetes.io/component={component}", "-o", "json"
        ).stdout
    )["items"]
    assert all(p["spec"].get("priority", 0) >= 2000000000 for p in running)
