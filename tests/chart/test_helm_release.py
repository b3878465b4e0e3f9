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

import pytest
import yaml

from admission.core.base.names import APPROVAL_ANNOTATION_PREFIX, OPEN_ANNOTATION
from tests.chart.standins import get, jobs, run_the_certs_job, run_the_hook_job
from tests.chart.test_chart import CHART, NS, is_hook
from tests.e2e.controlplane import ALICE, CERTS, ControlPlane, assets_dir
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
    hook_dir = tmp_path_factory.mktemp("hook")
    env = {
        **os.environ,
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "CACHE", "DATA")},
    }

    def run(
        *args: str, check: bool = True, certs_job: tuple[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """helm; with ``certs_job`` (a Job's name and image), that certificate Job is run as above,
        after the pre-upgrade hook's Job for an upgrade."""
        proc = subprocess.Popen(
            [str(helm_binary), f"--kubeconfig={plane.kubeconfig()}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            if args[0] == "upgrade":
                said = run_the_hook_job(plane, hook_dir)
                assert said.count("already selects") == 2, said  # installed by this chart
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
        d
        for d in yaml.safe_load_all(helm("template", "gate-admission", str(CHART), "-n", NS).stdout)
        if d and not is_hook(d)
    ]
    release = [d for d in yaml.safe_load_all(helm("get", "manifest", "gate-admission", "-n", NS).stdout) if d]
    hooks = [d for d in yaml.safe_load_all(helm("get", "hooks", "gate-admission", "-n", NS).stdout) if d]
    assert {d["metadata"]["annotations"]["helm.sh/hook"] for d in hooks} == {"pre-upgrade", "test"}
    assert not [
        d
        for d in hooks
        if d["kind"] != "Pod"
        and plane.kubectl("get", d["kind"], d["metadata"]["name"], "-n", NS, check=False).returncode == 0
    ]  # run at upgrades only
    assert len(release) == len(rendered) == 40  # manifests/ less its Namespace
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
    assert images == ["gate-admission:0.2.1"] * 4
    left = until(
        lambda: jobs(plane), lambda found: list(found) == ["gate-admission-certs-init-4"], timeout=30
    )
    assert left == {
        "gate-admission-certs-init-4": "gate-admission:0.2.1"
    }  # the previous revision's Job deleted
    helm("rollback", "gate-admission", "-n", NS)
    assert ca_bundles(plane) == {installed}


def test_the_notes_say_how_to_test_and_rotate(helm, installed):
    notes = helm("status", "gate-admission", "-n", NS).stdout
    assert "helm test gate-admission -n gate-admission-system" in notes
    rotate = "create job gate-admission-certs-renew-$(date +%s) --from=cronjob/gate-admission-certs-renew"
    assert rotate in notes
    assert f'["kube-system","{NS}"]' in notes  # the namespaces never judged
    assert "--clusterrole=gate-admission-approve" in notes


def test_the_certificate_is_rotated_on_demand_by_the_documented_command(plane, installed, tmp_path):
    """docs/operations.md, "Rotating the certificate": `kubectl create job --from=cronjob/...-renew`
    makes a Job whose container (the image's entrypoint is `gate-admission`) renews now."""
    before = get(plane, "secret", "gate-admission-tls", "-n", NS)["data"]
    plane.kubectl(
        "create",
        "job",
        "gate-admission-certs-renew-now",
        "-n",
        NS,
        "--from=cronjob/gate-admission-certs-renew",
    )
    job = get(plane, "job", "gate-admission-certs-renew-now", "-n", NS)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "certs" and container["args"][-1] == "--renew"
    assert get(plane, "cronjob", "gate-admission-certs-renew", "-n", NS)["spec"]["suspend"] is True
    done = subprocess.run(
        [str(BIN / "gate-admission"), *container["args"], "--kubeconfig", str(plane.kubeconfig(CERTS))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr  # as the Job's own service account
    after = get(plane, "secret", "gate-admission-tls", "-n", NS)["data"]
    assert after["tls.crt"] != before["tls.crt"] and after["tls.key"] != before["tls.key"]
    assert after["ca.crt"] == before["ca.crt"]  # same CA: the webhooks' caBundle stays valid
    assert ca_bundles(plane) == {installed}
    plane.kubectl("delete", "job", "gate-admission-certs-renew-now", "-n", NS)


def test_an_approver_may_write_approvals_and_nothing_else_of_a_gate(plane, installed):
    """gate-admission-approve bound to alice in one namespace: she reads and patches Gates there,
    and the policy gate-admission-approvals-only refuses every change but approval annotations.
    (An approval itself then goes to the webhook, which has no replica here: refused by the call,
    not by the policy.)"""
    plane.kubectl("create", "namespace", "approvers")
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                "kind": "Gate",
                "metadata": {"name": "release", "namespace": "approvers"},
                "spec": {"default": "closed"},
            }
        ),
    )
    plane.kubectl(
        "create",
        "rolebinding",
        "approvers",
        "-n",
        "approvers",
        "--clusterrole=gate-admission-approve",
        "--user=alice",
    )

    def can(verb: str) -> str:
        return plane.kubectl(
            "auth", "can-i", verb, "gates", "-n", "approvers", user=ALICE, check=False
        ).stdout.strip()

    assert until(lambda: can("patch"), lambda answer: answer == "yes", timeout=30) == "yes"
    assert (can("update"), can("create"), can("delete")) == ("no", "no", "no")

    def patch(body: dict):
        return plane.kubectl(
            "patch",
            "gate",
            "release",
            "-n",
            "approvers",
            "--type=merge",
            "-p",
            json.dumps(body),
            user=ALICE,
            check=False,
        )

    refusal = "without update on Gates, only approvals may be written"
    for change in (
        {"spec": {"default": "opened"}},
        {"metadata": {"annotations": {OPEN_ANNOTATION: "2026-11-28T00:00:00Z"}}},
        {"metadata": {"labels": {"team": "x"}}},
    ):
        refused = until(lambda change=change: patch(change), lambda r: refusal in r.stderr, timeout=30)
        assert refused.returncode != 0 and refusal in refused.stderr, (change, refused.stderr)
    approval = patch({"metadata": {"annotations": {APPROVAL_ANNOTATION_PREFIX + "a1b2c3": "{}"}}})
    assert approval.returncode != 0 and refusal not in approval.stderr, approval.stderr
    assert "mutate-approvals.gating.toolkit.fluxcd.io" in approval.stderr, (
        approval.stderr
    )  # the webhook's turn
    assert get(plane, "gate", "release", "-n", "approvers")["spec"] == {"default": "closed"}
    plane.kubectl(
        "patch", "gate", "release", "-n", "approvers", "--type=merge", "-p", '{"spec": {"default": "opened"}}'
    )


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
