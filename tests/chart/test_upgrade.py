"""The upgrade from 0.2.0 across the selector change (docs/decisions/0074), by the real helm
against a real kube-apiserver with the Pods 0.2.0 runs.

No nodes and no kube-controller-manager here: what they would do is done by the test, as
test_helm_release.py does for the certificate Job. The Deployment controller's ReplicaSet and
Pod of each 0.2.0 Deployment are created as it creates them (owned, labelled, pod-template-hash);
the pre-upgrade hook Job's command runs as the hook's service account with the Job's own
arguments; the garbage collector's orphaning (owner references removed, the `orphan` finalizer
dropped) is done when the Deployment is deleted that way. What is checked is what the API server
says: the new Deployments exist with the instance in their selector, and the Pods that served
before are still there, selected by them and by the Service, free to be adopted.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from admission.kube.client import api_client
from admission.kube.reselect import reselect
from tests import ROOT
from tests.chart.standins import get, run_the_certs_job, run_the_hook_job
from tests.chart.test_chart import CHART, NS
from tests.e2e.controlplane import ControlPlane, assets_dir
from tests.polling import until

pytestmark = pytest.mark.e2e
OLD_SELECTORS = {
    "gate-admission": {"app.kubernetes.io/name": "gate-admission", "app.kubernetes.io/component": "webhook"},
    "gate-admission-controller": {
        "app.kubernetes.io/name": "gate-admission",
        "app.kubernetes.io/component": "controller",
    },
}
INSTANCE = {"app.kubernetes.io/instance": "gate-admission"}
OLD_WEBHOOK_SELECTOR = (
    b"matchLabels: {app.kubernetes.io/name: gate-admission, app.kubernetes.io/component: webhook}"
)


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def chart_before_the_selector_change(into: Path) -> Path | None:
    """charts/gate-admission at the newest commit of version 0.2.0 whose Deployments select
    without the instance: what 0.2.0 users run. None without that history (a shallow clone)."""
    log = git("log", "--format=%H", "--", "charts/gate-admission")
    for commit in log.stdout.decode().split():
        chart = git("show", f"{commit}:charts/gate-admission/Chart.yaml")
        server = git("show", f"{commit}:charts/gate-admission/templates/server.yaml")
        if chart.returncode or server.returncode:
            continue
        if yaml.safe_load(chart.stdout)["version"] == "0.2.0" and OLD_WEBHOOK_SELECTOR in server.stdout:
            archive = git("archive", commit, "charts/gate-admission")
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(into, filter="data")
            return into / "charts" / "gate-admission"
    return None


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    if os.environ.get("KUBECONFIG"):
        pytest.skip("needs its own control plane, not $KUBECONFIG's")
    plane = ControlPlane(tmp_path_factory.mktemp("upgrade"), assets_dir())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def old_chart(tmp_path_factory) -> Path:
    chart = chart_before_the_selector_change(tmp_path_factory.mktemp("chart-0.2.0"))
    if chart is None:
        pytest.skip("no git history with the 0.2.0 chart (a shallow clone?)")
    return chart


@pytest.fixture(scope="module")
def helm(plane, helm_binary, tmp_path_factory):
    home = tmp_path_factory.mktemp("helm-home")
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CONFIG", "CACHE", "DATA")}}

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [str(helm_binary), f"--kubeconfig={plane.kubeconfig()}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    return start


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return out


def create(plane, obj: dict) -> dict:
    return json.loads(plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj)).stdout)


def run_like_the_deployment_controller(plane, name: str) -> tuple[dict, dict]:
    """The ReplicaSet and one Pod the Deployment controller makes for Deployment ``name``."""
    deployment = get(plane, "deployment", name, "-n", NS)
    template = deployment["spec"]["template"]
    labels = {**template["metadata"]["labels"], "pod-template-hash": "0a2b0c"}

    def owner(obj: dict, kind: str) -> list[dict]:
        meta = obj["metadata"]
        return [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
            }
        ]

    rs = create(
        plane,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-0a2b0c",
                "namespace": NS,
                "labels": labels,
                "ownerReferences": owner(deployment, "Deployment"),
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {**deployment["spec"]["selector"]["matchLabels"], **labels}},
                "template": {**template, "metadata": {**template["metadata"], "labels": labels}},
            },
        },
    )
    pod = create(
        plane,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-0a2b0c-x1",
                "namespace": NS,
                "labels": labels,
                "ownerReferences": owner(rs, "ReplicaSet"),
            },
            "spec": template["spec"],
        },
    )
    return rs, pod


def selected(plane, kind: str, labels: dict[str, str]) -> list[str]:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    return sorted(i["metadata"]["name"] for i in get(plane, kind, "-n", NS, "-l", selector)["items"])


def test_an_upgrade_from_0_2_0_keeps_the_pods_that_serve_and_widens_the_selectors(
    plane, helm, helm_binary, old_chart, tmp_path
):
    install = helm("install", "gate-admission", str(old_chart), "-n", NS, "--create-namespace")
    run_the_certs_job(plane, "gate-admission-certs-init-1", "gate-admission:0.2.0")
    finish(install)
    before = {name: run_like_the_deployment_controller(plane, name) for name in OLD_SELECTORS}
    for name, selector in OLD_SELECTORS.items():
        assert get(plane, "deployment", name, "-n", NS)["spec"]["selector"]["matchLabels"] == selector

    # Why a hook: the new chart's Deployment over 0.2.0's is refused as it stands.
    rendered = subprocess.run(
        [
            str(helm_binary),
            "template",
            "gate-admission",
            str(CHART),
            "-n",
            NS,
            "--show-only",
            "templates/server.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    [deployment] = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment"]
    refused = plane.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(deployment), check=False)
    assert refused.returncode != 0 and "field is immutable" in refused.stderr, refused.stderr

    upgrade = helm("upgrade", "gate-admission", str(CHART), "-n", NS)
    said = run_the_hook_job(plane, tmp_path)
    run_the_certs_job(plane, "gate-admission-certs-init-2", "gate-admission:0.2.0")
    finish(upgrade)

    assert said.count("ReplicaSet(s) and 1 Pod(s) labelled app.kubernetes.io/instance=gate-admission") == 2, (
        said
    )
    for name, selector in OLD_SELECTORS.items():
        new = {**selector, **INSTANCE}
        deployment = get(plane, "deployment", name, "-n", NS)
        assert deployment["spec"]["selector"]["matchLabels"] == new
        assert deployment["metadata"]["uid"] != before[name][0]["metadata"]["ownerReferences"][0]["uid"]
        rs, pod = before[name]
        # Still there, selected by the new Deployment and free for it to adopt; the Pod is as it was.
        assert selected(plane, "replicasets", new) == [rs["metadata"]["name"]]
        assert not get(plane, "rs", rs["metadata"]["name"], "-n", NS)["metadata"].get("ownerReferences")
        assert selected(plane, "pods", new) == [pod["metadata"]["name"]]
        now = get(plane, "pod", pod["metadata"]["name"], "-n", NS)
        assert now["metadata"]["uid"] == pod["metadata"]["uid"]
        assert now["metadata"]["ownerReferences"] == pod["metadata"]["ownerReferences"]
    service = get(plane, "service", "gate-admission", "-n", NS)["spec"]["selector"]
    assert selected(plane, "pods", service) == ["gate-admission-0a2b0c-x1"]  # the webhook keeps answering
    gone = until(
        lambda: get(plane, "jobs", "-n", NS)["items"],
        lambda jobs: all(j["metadata"]["name"] != "gate-admission-upgrade" for j in jobs),
        timeout=30,
    )
    assert all(j["metadata"]["name"] != "gate-admission-upgrade" for j in gone)  # hook-succeeded: deleted

    # The next upgrade's hook finds nothing to do.
    again = reselect(
        api_client(str(plane.kubeconfig())),
        NS,
        "gate-admission",
        {**OLD_SELECTORS["gate-admission"], **INSTANCE},
    )
    assert (
        again
        == f"deployment {NS}/gate-admission: already selects app.kubernetes.io/component=webhook,app.kubernetes.io/instance=gate-admission,app.kubernetes.io/name=gate-admission"
    )
