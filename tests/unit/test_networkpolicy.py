"""The shipped NetworkPolicy: the webhook pods take ingress on the webhook port only."""

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
