"""The chart installed, upgraded, rolled back and uninstalled by the real helm CLI against a real
kube-apiserver (no nodes: nothing runs; what is checked is what Helm does to the objects).

Without nodes no Job runs: the certificate Job's work is done by running its command as its
service account (`gate-admission certs --inject`), so the webhook configurations carry a caBundle
that Helm did not write, as in a cluster; and the Job (one per revision) is marked complete as
the Job controller would mark it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from datetime import UTC, datetime

import pytest
import yaml

from tests.chart.test_chart import CHART, NS
from tests.e2e.controlplane import CERTS, ControlPlane, assets_dir
from tests.polling import until
from tests.processes import BIN

pytestmark = pytest.mark.e2e
CRDS = ("gates.gating.toolkit.fluxcd.io", "gatekeepers.gating.toolkit.fluxcd.io")
WEBHOOKS = ("validatingwebhookconfiguration/gate-admission", "mutatingwebhookconfiguration/gate-admission")


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """A bare control plane: nothing of ours installed, so Helm owns every object it creates."""
    if os.environ.get("KUBECONFIG"):
        pytest.skip("needs its own control plane, not $KUBECONFIG's")
    plane = ControlPlane(tmp_path_factory.mktemp("helm-release"), assets_dir())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def helm(plane, helm_binary, tmp_path_factory):
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "CACHE", "DATA")},
    }

    def run(
        *args: str, check: bool = True, certs_job: tuple[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """helm; with ``certs_job`` (a Job's name and image), that certificate Job is run as above."""
        proc = subprocess.Popen(
            [str(helm_binary), f"--kubeconfig={plane.kubeconfig()}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            if certs_job:
                run_the_certs_job(plane, *certs_job)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if check:
            assert proc.returncode == 0, err
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    return run


def jobs(plane) -> dict[str, str]:
    """The certificate Jobs there are, and the image of each."""
    found = get(plane, "jobs", "-n", NS)["items"]
    return {
        job["metadata"]["name"]: job["spec"]["template"]["spec"]["containers"][0]["image"] for job in found
    }


def run_the_certs_job(plane, name: str, image: str) -> None:
    """Wait for Helm to create the Job ``name`` of ``image``, do its work, and mark it complete."""
    seen = until(lambda: jobs(plane), lambda found: found.get(name) == image, timeout=60)
    assert seen.get(name) == image, seen
    certs = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "certs",
            "--secret",
            "gate-admission-tls",
            "--namespace",
            NS,
            "--inject",
            "--kubeconfig",
            str(plane.kubeconfig(CERTS)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert certs.returncode == 0, certs.stderr  # the chart's RBAC lets the Job's account do it
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = [
        {
            "type": kind,
            "status": "True",
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": "CompletionsReached",
            "message": "Reached expected number of succeeded pods",
        }
        for kind in ("SuccessCriteriaMet", "Complete")
    ]
    plane.kubectl(
        "patch",
        "job",
        name,
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "startTime": now,
                    "completionTime": now,
                    "succeeded": 1,
                    "ready": 0,
                    "terminating": 0,
                    "conditions": done,
                }
            }
        ),
    )


def get(plane, *what: str) -> dict:
    return json.loads(plane.kubectl("get", *what, "-o", "json").stdout)


def ca_bundles(plane) -> set[str]:
    return {
        hook.get("clientConfig", {}).get("caBundle", "")
        for name in WEBHOOKS
        for hook in get(plane, name)["webhooks"]
    }


def timeouts(plane) -> dict[str, int]:
    return {hook["name"]: hook["timeoutSeconds"] for hook in get(plane, WEBHOOKS[0])["webhooks"]}


@pytest.fixture(scope="module")
def installed(plane, helm):
    helm(
        "install",
        "gate-admission",
        str(CHART),
        "-n",
        NS,
        "--create-namespace",
        certs_job=("gate-admission-certs-init-1", "gate-admission:0.2.0"),
    )
    [bundle] = ca_bundles(plane)
    assert base64.b64decode(bundle).startswith(b"-----BEGIN CERTIFICATE-----")
    return bundle


def test_install_creates_what_helm_template_renders(plane, helm, installed):
    rendered = [
        d for d in yaml.safe_load_all(helm("template", "gate-admission", str(CHART), "-n", NS).stdout) if d
    ]
    release = [d for d in yaml.safe_load_all(helm("get", "manifest", "gate-admission", "-n", NS).stdout) if d]
    assert not [d for d in yaml.safe_load_all(helm("get", "hooks", "gate-admission", "-n", NS).stdout) if d]
    assert len(release) == len(rendered) == 33  # manifests/ less its Namespace
    assert ("Job", "gate-admission-certs-init-1") in [(d["kind"], d["metadata"]["name"]) for d in release]
    for doc in release:
        namespace = ["-n", doc["metadata"]["namespace"]] if "namespace" in doc["metadata"] else []
        plane.kubectl("get", doc["kind"], doc["metadata"]["name"], *namespace)
    labels = get(plane, "namespace", NS)["metadata"]["labels"]
    assert labels["kubernetes.io/metadata.name"] == NS  # what the webhooks' namespaceSelector reads


def test_upgrade_and_rollback_change_the_webhooks_and_keep_the_ca_bundle(plane, helm, installed):
    before = timeouts(plane)
    assert before["validate.gating.toolkit.fluxcd.io"] == 5
    helm(
        "upgrade",
        "gate-admission",
        str(CHART),
        "-n",
        NS,
        "--set",
        "webhooks.timeoutSeconds=7",
        certs_job=("gate-admission-certs-init-2", "gate-admission:0.2.0"),
    )
    assert timeouts(plane)["validate.gating.toolkit.fluxcd.io"] == 7
    assert ca_bundles(plane) == {installed}  # written by the certificate Job, not by Helm: kept
    helm("rollback", "gate-admission", "1", "-n", NS)
    assert timeouts(plane) == before
    assert ca_bundles(plane) == {installed}
    annotations = get(plane, "crd", CRDS[0])["metadata"]["annotations"]
    assert annotations["helm.sh/resource-policy"] == "keep"
    assert (
        annotations["meta.helm.sh/release-name"] == "gate-admission"
    )  # the release manages it: upgrades reach it


def test_an_upgrade_to_a_new_image_replaces_the_certificate_job(plane, helm, installed):
    # A Job's Pod template cannot change: under one name this upgrade would fail ("field is
    # immutable") while the install's Job exists. Named after the revision, it is a new Job.
    helm(
        "upgrade",
        "gate-admission",
        str(CHART),
        "-n",
        NS,
        "--set",
        "image.tag=0.2.1",
        certs_job=("gate-admission-certs-init-4", "gate-admission:0.2.1"),
    )
    images = plane.kubectl(
        "get",
        "deployments,cronjobs",
        "-n",
        NS,
        "-o",
        "jsonpath={range .items[*]}{..containers[0].image} {end}",
    ).stdout.split()
    assert images == ["gate-admission:0.2.1"] * 3
    left = until(
        lambda: jobs(plane), lambda found: list(found) == ["gate-admission-certs-init-4"], timeout=30
    )
    assert left == {
        "gate-admission-certs-init-4": "gate-admission:0.2.1"
    }  # the previous revision's Job deleted
    helm("rollback", "gate-admission", "-n", NS)
    assert ca_bundles(plane) == {installed}


def test_uninstall_keeps_the_crds_and_the_gates_and_a_reinstall_adopts_them(plane, helm, installed):
    plane.kubectl("create", "namespace", "apps")
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                "kind": "Gate",
                "metadata": {"name": "freeze", "namespace": "apps"},
                "spec": {"default": "opened"},
            }
        ),
    )
    helm("uninstall", "gate-admission", "-n", NS)
    for name in WEBHOOKS + ("deployment/gate-admission",):
        namespace = ["-n", NS] if name.startswith("deployment") else []
        assert plane.kubectl("get", name, *namespace, check=False).returncode != 0, name
    for crd in CRDS:
        plane.kubectl("get", "crd", crd)
    plane.kubectl("get", "gate", "freeze", "-n", "apps")
    helm(
        "install",
        "gate-admission",
        str(CHART),
        "-n",
        NS,
        certs_job=("gate-admission-certs-init-1", "gate-admission:0.2.0"),
    )
    assert (
        get(plane, "crd", CRDS[0])["metadata"]["annotations"]["meta.helm.sh/release-name"] == "gate-admission"
    )
    plane.kubectl("get", "gate", "freeze", "-n", "apps")
