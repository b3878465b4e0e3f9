"""The shipped NetworkPolicies: the webhook pods take ingress on the webhook port only; every Pod of
ours connects only to DNS and the API server (and the controller to notification-controller)."""

from __future__ import annotations

from pathlib import Path

import yaml

SERVER = Path(__file__).resolve().parents[2] / "manifests" / "server"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_webhook_pods_take_ingress_on_the_webhook_port_only():
    [deployment] = _docs(SERVER / "deployment.yaml")
    [policy] = _docs(SERVER / "networkpolicy.yaml")
    assert "networkpolicy.yaml" in yaml.safe_load((SERVER / "kustomization.yaml").read_text())["resources"]
    assert (
        policy["kind"] == "NetworkPolicy"
        and policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    )
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [container] = pod["spec"]["containers"]
    [webhook_port] = container["ports"]
    ports = [port for rule in policy["spec"]["ingress"] for port in rule["ports"]]
    assert ports == [{"port": webhook_port["containerPort"], "protocol": "TCP"}]
    assert f"--port={webhook_port['containerPort']}" in container["args"]


def _pod_templates() -> list[tuple[str, dict]]:
    """Every Pod template manifests/ ships: the Deployments', the Job's and the CronJob's."""
    root = SERVER.parent
    found = []
    for path in (
        root / "server" / "deployment.yaml",
        root / "controller" / "deployment.yaml",
        root / "certs" / "jobs.yaml",
    ):
        for doc in _docs(path):
            spec = doc["spec"]
            template = (
                spec["jobTemplate"]["spec"]["template"] if doc["kind"] == "CronJob" else spec["template"]
            )
            found.append((f"{doc['kind']}/{doc['metadata']['name']}", template))
    return found


def test_every_pod_may_connect_only_to_dns_and_the_api_server_and_the_controller_to_notifications():
    policies = {p["metadata"]["name"]: p for p in _docs(SERVER / "networkpolicy-egress.yaml")}
    assert (
        "networkpolicy-egress.yaml"
        in yaml.safe_load((SERVER / "kustomization.yaml").read_text())["resources"]
    )
    every, controller = policies["gate-admission-egress"], policies["gate-admission-controller-egress"]
    assert every["spec"]["policyTypes"] == controller["spec"]["policyTypes"] == ["Egress"]
    templates = _pod_templates()
    assert len(templates) == 5
    for name, template in templates:  # no Pod of ours escapes the policy
        labels = template["metadata"]["labels"].items()
        assert every["spec"]["podSelector"]["matchLabels"].items() <= labels, name
        selected = controller["spec"]["podSelector"]["matchLabels"].items() <= labels
        assert selected == (name == "Deployment/gate-admission-controller"), name
    ports = sorted((p["protocol"], p["port"]) for rule in every["spec"]["egress"] for p in rule["ports"])
    assert ports == [("TCP", 53), ("TCP", 443), ("TCP", 6443), ("UDP", 53)]
    [rule] = controller["spec"]["egress"]
    [peer] = rule["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "flux-system"}
    assert peer["podSelector"]["matchLabels"] == {"app": "notification-controller"}
    assert rule["ports"] == [{"port": 9090, "protocol": "TCP"}]


def test_the_controller_pods_take_ingress_on_the_probe_and_metrics_port_only():
    controller = SERVER.parent / "controller"
    [deployment] = _docs(controller / "deployment.yaml")
    [policy] = _docs(controller / "networkpolicy.yaml")
    assert (
        "networkpolicy.yaml" in yaml.safe_load((controller / "kustomization.yaml").read_text())["resources"]
    )
    pod = deployment["spec"]["template"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [container] = pod["spec"]["containers"]
    [health] = container["ports"]
    ports = [port for rule in policy["spec"]["ingress"] for port in rule["ports"]]
    assert ports == [{"port": health["containerPort"], "protocol": "TCP"}]
    assert f"--health-port={health['containerPort']}" in container["args"]
    # Prometheus scrapes /metrics there, by that port's name (manifests/monitoring/podmonitor.yaml).
    [monitor] = _docs(SERVER.parent / "monitoring" / "podmonitor.yaml")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (health["name"], "/metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
