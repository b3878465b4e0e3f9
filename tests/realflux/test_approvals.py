"""Approvals of exact content with the real Flux controllers (docs/decisions/0057): an approved
commit lands through a closed gate and the commit pushed after it waits; the approver is who the
API server says wrote the approval; two approvers where two are required; an approval that
expires unused; a chart approved whole (source, name, version, digest, values) for a HelmRelease,
from a Helm and from an OCI repository."""

from __future__ import annotations

import json
import os
import re
import subprocess

from admission.core.base import names
from admission.core.gates import approvals
from tests.conftest import REPORT
from tests.e2e.controlplane import ALICE
from tests.processes import BIN
from tests.realflux.conftest import condition
from tests.realflux.test_helm import helm_release, helm_repository, wait_data
from tests.realflux.test_kustomization import git_repository, kustomization, manifests

PREFIX = names.APPROVAL_ANNOTATION_PREFIX
GATED = {"gating.toolkit.fluxcd.io/gates": "freeze"}
# What alice may do in these tests: approve (patch Gates) after reading what waits.
APPROVER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "realflux-approver"},
    "rules": [
        {
            "apiGroups": ["gating.toolkit.fluxcd.io"],
            "resources": ["gates"],
            "verbs": ["get", "list", "patch"],
        },
        {
            "apiGroups": [
                "source.toolkit.fluxcd.io",
                "kustomize.toolkit.fluxcd.io",
                "helm.toolkit.fluxcd.io",
                "image.toolkit.fluxcd.io",
            ],
            "resources": ["*"],
            "verbs": ["get", "list"],
        },
    ],
}
APPROVER_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "realflux-approver"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "realflux-approver"},
    "subjects": [{"kind": "User", "name": ALICE.name, "apiGroup": "rbac.authorization.k8s.io"}],
}


def closed_gate(name: str, namespace: str, **spec) -> dict:
    return {
        "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
        "kind": "Gate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"default": "closed", **spec},
    }


def approvals_on(cluster, gate: str = "freeze") -> dict[str, dict]:
    """The gate's approvals that have not ended (the controller lists the ended in its status)."""
    stored = cluster.get("gate", gate)
    found = (stored.get("metadata") or {}).get("annotations") or {}
    over = approvals.ended(stored)
    return {
        k: json.loads(v)
        for k, v in found.items()
        if k.startswith(PREFIX) and k.removeprefix(PREFIX) not in over
    }


def written(cluster, gate: str = "freeze") -> list[dict]:
    """The approvals written on the gate, ended or not: one whose content lands quickly may
    already be ended (used) when it is read; its annotation stays until withdrawn."""
    found = (cluster.get("gate", gate).get("metadata") or {}).get("annotations") or {}
    return [json.loads(v) for k, v in found.items() if k.startswith(PREFIX)]


def gate_as(cluster, user, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.plane.kubeconfig(user)),
    }
    return subprocess.run(
        [cluster.plane.kubectl_path, "gate", *args], capture_output=True, text=True, env=env, timeout=60
    )


def events(cluster, reason: str) -> list[str]:
    out = cluster.plane.kubectl(
        "get", "events", "-n", cluster.namespace, "--field-selector", f"reason={reason}", "-o", "json"
    ).stdout
    return [e.get("message", "") for e in json.loads(out).get("items", [])]


def blocked_waits(cluster, kind: str, name: str) -> str:
    message = condition(cluster.get(kind, name), "Blocked").get("message", "")
    return message


def git_setup(cluster, git, **gate_spec):
    """A closed gate on a GitRepository and its Kustomization, version 1 applied while it was open."""
    ns = cluster.namespace
    repo = git.repository(ns)
    cluster.apply(closed_gate("freeze", ns, **gate_spec))
    assert cluster.gate("open", "freeze", "-n", ns, "-m", "first install").returncode == 0
    first = repo.commit(manifests(ns, "1"), "version 1")
    cluster.apply(
        git_repository("apps", repo.url, dict(GATED)), kustomization("app", "./a", "apps", dict(GATED))
    )
    assert cluster.wait(lambda: cluster.data("app-a"), lambda d: d == {"version": "1"}) == {"version": "1"}
    assert cluster.gate("close", "freeze", "-n", ns, "-m", "release freeze").returncode == 0
    return repo, first


def test_an_approved_commit_lands_and_the_next_one_waits(cluster, git):
    ns = cluster.namespace
    repo, first = git_setup(cluster, git)
    second = repo.commit(manifests(ns, "2"), "version 2")
    cluster.wait(lambda: blocked_waits(cluster, "gitrepository", "apps"), lambda m: second in m)
    assert second in blocked_waits(cluster, "gitrepository", "apps")

    pending = cluster.gate("pending", "-n", ns, "-o", "json")
    assert pending.returncode == 0, pending.stderr
    rows = json.loads(pending.stdout)
    row = next(r for r in rows if r["kind"] == "GitRepository")
    assert (row["waits"], row["serves"], row["gates"], row["approvals"]) == (
        second,
        first,
        [f"{ns}/freeze"],
        [],
    )
    assert row["approve"] == [
        f"kubectl gate approve freeze -n {ns} --for GitRepository/{ns}/apps --content {second} -m MESSAGE"
    ]
    REPORT["kubectl gate pending (a commit waits)"] = "\n" + cluster.gate("pending", "-n", ns).stdout.rstrip()

    # No message: refused before anything is written.
    assert cluster.gate("approve", "freeze", "-n", ns).returncode == 2
    # Content that does not wait is refused.
    assert cluster.gate("approve", "freeze", "-n", ns, "--content", first, "-m", "CHG-1").returncode == 1
    approved = cluster.gate("approve", "freeze", "-n", ns, "-m", "CHG-1234")
    assert approved.returncode == 0, approved.stderr
    REPORT["kubectl gate approve freeze -m CHG-1234"] = "\n" + approved.stdout.rstrip()
    recorded = written(cluster)
    assert [(a["content"], a["for"], a["by"], a["message"]) for a in recorded] == [
        (second, "*", "admin", "CHG-1234")
    ]

    # The source takes the approved commit; a commit pushed right after waits.
    cluster.wait(
        lambda: cluster.get("gitrepository", "apps"), lambda g: g["status"]["artifact"]["revision"] == second
    )
    third = repo.commit(manifests(ns, "3"), "version 3")
    assert cluster.wait(lambda: cluster.data("app-a"), lambda d: d == {"version": "2"}) == {"version": "2"}
    cluster.wait(lambda: blocked_waits(cluster, "gitrepository", "apps"), lambda m: third in m)
    assert third in blocked_waits(cluster, "gitrepository", "apps")
    assert cluster.get("gitrepository", "apps")["status"]["artifact"]["revision"] == second
    applied = cluster.wait(
        lambda: cluster.get("kustomization", "app"),
        lambda k: k["status"].get("lastAppliedRevision") == second,
    )
    assert applied["status"]["lastAppliedRevision"] == second

    # The approval is used up once its content landed everywhere behind the gate, with an Event.
    assert cluster.wait(lambda: approvals_on(cluster), lambda a: not a, timeout=60) == {}
    used = cluster.wait(lambda: events(cluster, "ApprovalUsed"), bool)
    assert used and f"approved by admin: {second} for * — CHG-1234" in used[0], used
    assert cluster.data("app-a") == {"version": "2"}
    after = json.loads(cluster.gate("pending", "-n", ns, "-o", "json").stdout)
    assert [(r["kind"], r["waits"], r["approvals"]) for r in after if r["kind"] == "GitRepository"] == [
        ("GitRepository", third, [])
    ]
    REPORT["kubectl gate pending (after the approved commit landed)"] = (
        "\n" + cluster.gate("pending", "-n", ns).stdout.rstrip()
    )


def test_the_approver_is_who_the_api_server_authenticated(cluster, git):
    ns = cluster.namespace
    cluster.apply(closed_gate("freeze", ns, approvals={"messageRequired": True}))
    forged = json.dumps({"content": "main@sha1:0123", "for": "*", "message": "CHG-9", "by": "mallory"})
    cluster.plane.kubectl("annotate", "gate", "freeze", "-n", ns, f"{PREFIX}forged={forged}")
    assert [(a["by"], a["content"]) for a in approvals_on(cluster).values()] == [("admin", "main@sha1:0123")]
    # Malformed approvals are refused with a reason: no message, unknown fields.
    for value in (
        {"content": "x", "for": "*"},
        {"content": "x", "for": "*", "message": "m", "extra": 1},
        "not json",
    ):
        text = value if isinstance(value, str) else json.dumps(value)
        out = cluster.plane.kubectl(
            "annotate", "gate", "freeze", "-n", ns, f"{PREFIX}bad={text}", check=False
        )
        assert out.returncode != 0 and "approval refused" in out.stderr, out.stderr
    # Opening and closing never reach the approvals webhook entries.
    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    assert cluster.gate("approve", "freeze", "-n", ns, "--withdraw").returncode == 0
    assert approvals_on(cluster) == {}


def test_two_approvers_are_required_and_an_unused_approval_expires(cluster, git):
    ns = cluster.namespace
    cluster.plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [APPROVER_ROLE, APPROVER_BINDING]}),
    )
    repo, first = git_setup(cluster, git, approvals={"required": 2})
    second = repo.commit(manifests(ns, "2"), "version 2")
    cluster.wait(lambda: blocked_waits(cluster, "gitrepository", "apps"), lambda m: second in m)

    # One approver, with a short expiry: not enough, and it ends unused.
    assert cluster.gate("approve", "freeze", "-n", ns, "-m", "CHG-1", "--expires", "4s").returncode == 0
    expired = cluster.wait(lambda: events(cluster, "ApprovalExpired"), bool, timeout=60)
    assert expired and "approval expired unused: approved by admin" in expired[0], expired
    assert cluster.wait(lambda: approvals_on(cluster), lambda a: not a) == {}
    assert cluster.get("gitrepository", "apps")["status"]["artifact"]["revision"] == first
    assert cluster.data("app-a") == {"version": "1"}

    # Two distinct approvers: it lands.
    assert cluster.gate("approve", "freeze", "-n", ns, "-m", "CHG-2").returncode == 0
    assert cluster.get("gitrepository", "apps")["status"]["artifact"]["revision"] == first
    by_alice = gate_as(cluster, ALICE, "approve", "freeze", "-n", ns, "--content", second, "-m", "CHG-2")
    assert by_alice.returncode == 0, by_alice.stderr
    assert cluster.wait(lambda: cluster.data("app-a"), lambda d: d == {"version": "2"}) == {"version": "2"}
    # Both approvals are used (and removed) once it landed; the Events say who approved.
    used = cluster.wait(lambda: events(cluster, "ApprovalUsed"), lambda found: len(found) >= 2)
    assert sorted(m.split("approved by ")[1].split(":")[0] for m in used) == ["admin", "alice"], used


def test_a_chart_version_approved_for_a_helm_release(cluster, charts):
    ns = cluster.namespace
    chart = f"demo-{ns}"
    charts.publish(chart, "1.0.0")
    cluster.apply(
        closed_gate("freeze", ns, default="opened"),
        helm_repository("charts", charts.url),
        helm_release("app", chart, "charts", {"greeting": "hello"}),
    )
    approved = {"chartVersion": "1.0.0", "greeting": "hello", "mode": "none"}
    assert wait_data(cluster, "app", approved) == approved
    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    charts.publish(chart, "1.1.0")
    cluster.wait(lambda: blocked_waits(cluster, "helmchart", f"{ns}-app"), lambda m: "1.1.0" in m)
    # A version alone is not what anyone reviewed: the chart is named whole, with its values.
    version_only = cluster.gate("approve", "freeze", "-n", ns, "--content", "1.1.0", "-m", "CHG-77")
    assert version_only.returncode == 1 and "does not wait behind gate" in version_only.stderr
    done = cluster.gate("approve", "freeze", "-n", ns, "-m", "CHG-77")
    assert done.returncode == 0, done.stderr
    [recorded] = [a["content"] for a in written(cluster)]
    applied = cluster.get("helmrelease", "app")["status"]["history"][0]["configDigest"]
    assert re.fullmatch(
        rf"chart {re.escape(chart)} 1\.1\.0@sha256:[0-9a-f]{{64}} from HelmRepository/{ns}/charts "
        rf"\(values {re.escape(applied)}\)",
        recorded,
    ), recorded
    REPORT["kubectl gate approve: a chart approved whole"] = recorded
    expected = {"chartVersion": "1.1.0", "greeting": "hello", "mode": "none"}
    assert wait_data(cluster, "app", expected) == expected, cluster.get("helmrelease", "app").get("status")
    assert cluster.wait(lambda: approvals_on(cluster), lambda a: not a, timeout=60) == {}


def test_an_oci_chart_is_approved_whole_and_its_version_alone_is_refused(cluster, registry):
    ns = cluster.namespace
    registry.push_chart(f"{ns}/charts", "demo", "1.0.0")
    cluster.apply(
        closed_gate("freeze", ns, default="opened"),
        helm_repository("charts", f"oci://{registry.address}/{ns}/charts", type="oci", insecure=True),
        helm_release("app", "demo", "charts"),
    )
    first = {"chartVersion": "1.0.0", "greeting": "hello", "mode": "none"}
    assert wait_data(cluster, "app", first) == first
    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    registry.push_chart(f"{ns}/charts", "demo", "1.1.0")
    cluster.wait(lambda: blocked_waits(cluster, "helmchart", f"{ns}-app"), lambda m: "1.1.0" in m)
    refused = cluster.gate("approve", "freeze", "-n", ns, "--content", "1.1.0", "-m", "CHG-78")
    assert refused.returncode == 1 and "does not wait behind gate" in refused.stderr, refused.stderr
    done = cluster.gate("approve", "freeze", "-n", ns, "-m", "CHG-78")
    assert done.returncode == 0, done.stderr
    [recorded] = [a["content"] for a in written(cluster)]
    assert re.fullmatch(
        rf"chart demo 1\.1\.0\S*@sha256:[0-9a-f]{{64}} from HelmRepository/{ns}/charts \(values sha256:\S+\)",
        recorded,
    ), recorded
    released = {"chartVersion": "1.1.0", "greeting": "hello", "mode": "none"}
    assert wait_data(cluster, "app", released) == released, cluster.get("helmrelease", "app").get("status")
    assert cluster.wait(lambda: approvals_on(cluster), lambda a: not a, timeout=60) == {}
