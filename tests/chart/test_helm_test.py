"""`helm test`'s Pod (charts/gate-admission/templates/tests): its script, as the chart renders it,
run against the real `gate-admission serve` over TLS. It passes only when the webhook answers a
review with the uid it was sent; a server it cannot verify or that does not answer fails it."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import yaml

from tests.chart.test_chart import NS, template_args
from tests.processes import GateServer, free_port


@pytest.fixture(scope="module")
def test_pod(helm) -> dict:
    out = helm(*template_args((), NS, None), "--show-only", "templates/tests/webhook-answers.yaml").stdout
    [pod] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod"]
    return pod


def test_the_test_pod_may_reach_the_webhook_port_past_the_egress_policy(helm):
    # Its labels put it under the release's egress policy (DNS and the API server only); without
    # a policy of its own, a network plugin that enforces policies drops its call to the webhook.
    out = helm(*template_args((), NS, None), "--show-only", "templates/tests/webhook-answers.yaml").stdout
    [policy] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "NetworkPolicy"]
    [pod] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod["metadata"]["labels"].items()
    [rule] = policy["spec"]["egress"]
    assert rule["ports"] == [{"port": 9443, "protocol": "TCP"}]
    assert rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "webhook"
    weight = int(policy["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert weight < int(pod["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))  # made first


def run_pod(pod: dict, webhook: str, ca_file: str) -> subprocess.CompletedProcess:
    """The Pod's script against ``webhook`` (https://127.0.0.1:PORT), as Kubernetes would run it:
    the Service's address in its service links, the name verified the one its certificate has
    here (``localhost``; in a cluster, the Service's DNS name)."""
    [container] = pod["spec"]["containers"]
    command = container["command"]
    assert command[:2] == ["python", "-c"]  # the image's PATH has its venv's python first
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "SERVICE": "GATE_ADMISSION",
        "SERVER_NAME": f"gate-admission.{NS}.svc",
        "CA_FILE": "/ca/ca.crt",
    }
    assert pod["spec"]["enableServiceLinks"] is True
    host, port = urlsplit(webhook).hostname, urlsplit(webhook).port
    return subprocess.run(
        [sys.executable, "-c", command[2]],
        env={
            **env,
            "SERVER_NAME": "localhost",
            "CA_FILE": ca_file,
            "GATE_ADMISSION_SERVICE_HOST": str(host),
            "GATE_ADMISSION_SERVICE_PORT": str(port),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_test_pod_is_a_hook_that_mounts_the_ca_alone(test_pod):
    annotations = test_pod["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "test"
    [volume] = test_pod["spec"]["volumes"]
    assert volume["secret"] == {
        "secretName": "gate-admission-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert test_pod["spec"]["automountServiceAccountToken"] is False


def serving(tmp_path, name: str) -> GateServer:
    """`gate-admission serve` over an empty gates directory (nothing is gated), ready."""
    (tmp_path / name / "gates").mkdir(parents=True)
    server = GateServer(tmp_path / name, "--gates-dir", str(tmp_path / name / "gates"), "--workers", "1")
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def test_the_test_pod_passes_when_the_webhook_answers(test_pod, tmp_path):
    server = serving(tmp_path, "a")
    try:
        done = run_pod(test_pod, server.url, str(server.cert_dir / "ca.crt"))
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "/readyz: 200" in done.stdout and '"allowed": true' in done.stdout


def test_the_test_pod_fails_when_nothing_answers_or_the_certificate_is_not_the_cas(test_pod, tmp_path):
    server, other = serving(tmp_path, "a"), serving(tmp_path, "b")
    try:
        foreign = run_pod(test_pod, server.url, str(other.cert_dir / "ca.crt"))
    finally:
        server.stop()
        other.stop()
    assert foreign.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in foreign.stderr, foreign.stderr
    nobody = run_pod(test_pod, f"https://127.0.0.1:{free_port()}", str(server.cert_dir / "ca.crt"))
    assert nobody.returncode != 0 and "Connection refused" in nobody.stderr, nobody.stderr
