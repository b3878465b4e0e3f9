"""Approvals and the policy they were given under, on a real kube-apiserver with our webhooks and
gates read from the cluster (docs/decisions/0057): one person never meets
``spec.approvals.required: 2`` by lowering it, in the write that approves or in a write of its
own (which the approvals entries never see)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from admission.core.base import names
from tests.e2e.conftest import own_plane, serving_the_cluster
from tests.e2e.controlplane import ALICE, SOURCE_CONTROLLER
from tests.e2e.manifests import artifact_patch
from tests.polling import until

pytestmark = pytest.mark.e2e
NS = "apps"
GATE = "two"
A, B, C = "main@sha1:aaaa0001", "main@sha1:bbbb0002", "main@sha1:cccc0003"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("approval-policy"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    with serving_the_cluster(plane, tmp_path_factory.mktemp("approval-policy-server")) as srv:
        yield srv


def apply(plane, *objects: dict) -> None:
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(objects)))


def patch_gate(plane, body: dict, user=ALICE):
    return plane.kubectl(
        "patch", "gate", GATE, "-n", NS, "--type=merge", "-p", json.dumps(body), user=user, check=False
    )


def approve(plane, key: str, content: str, message: str = "CHG-1", **spec) -> subprocess.CompletedProcess:
    """alice's approval of ``content`` as ``kubectl gate approve`` writes it, with ``spec`` beside it."""
    value = json.dumps({"content": content, "for": "*", "message": message}, separators=(",", ":"))
    body: dict = {"metadata": {"annotations": {names.APPROVAL_ANNOTATION_PREFIX + key: value}}}
    if spec:
        body["spec"] = spec
    return patch_gate(plane, body)


def repository(name: str) -> dict:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": NS, "annotations": {names.GATES_ANNOTATION: f"{NS}/{GATE}"}},
        "spec": {"interval": "10m", "url": f"https://git.example.com/{name}", "ref": {"branch": "main"}},
    }


def write_artifact(plane, name: str, revision: str) -> str:
    """source-controller's status write of ``revision``; what the repository serves afterwards."""
    plane.kubectl(
        "patch",
        "gitrepository",
        name,
        "-n",
        NS,
        "--type=merge",
        "--subresource=status",
        "-p",
        artifact_patch(revision),
        user=SOURCE_CONTROLLER,
    )
    stored = json.loads(plane.kubectl("get", "gitrepository", name, "-n", NS, "-o", "json").stdout)
    return ((stored.get("status") or {}).get("artifact") or {}).get("revision", "")


def stored_approval(plane, key: str) -> dict:
    gate = json.loads(plane.kubectl("get", "gate", GATE, "-n", NS, "-o", "json").stdout)
    return json.loads(gate["metadata"]["annotations"][names.APPROVAL_ANNOTATION_PREFIX + key])


def test_one_person_cannot_meet_two_required_approvers_by_lowering_the_policy(plane, server):
    gate = {
        "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
        "kind": "Gate",
        "metadata": {"name": GATE, "namespace": NS},
        "spec": {"default": "opened", "approvals": {"required": 2}},
    }
    apply(plane, gate, repository("repo"), repository("other"))
    assert until(lambda: write_artifact(plane, "repo", A), lambda r: r == A) == A
    assert until(lambda: write_artifact(plane, "other", A), lambda r: r == A) == A
    assert patch_gate(plane, {"spec": {"default": "closed"}}, user=ALICE).returncode == 0
    assert until(lambda: write_artifact(plane, "repo", C), lambda r: r == A) == A  # the server sees it closed

    # One write approving and lowering the policy (or dropping the message it requires): refused.
    for spec, message in (({"approvals": {"required": 1}}, "CHG-1"), ({"approvals": None}, "CHG-1")):
        refused = approve(plane, "one-write", B, message, **spec)
        assert refused.returncode != 0 and "loosens spec.approvals" in refused.stderr, refused.stderr
    assert (
        patch_gate(plane, {"spec": {"approvals": {"required": 2, "messageRequired": True}}}).returncode == 0
    )
    refused = approve(plane, "one-write", B, "", approvals={"required": 2, "messageRequired": False})
    assert refused.returncode != 0 and "loosens spec.approvals" in refused.stderr, refused.stderr

    # alice approves B under required 2 (the API server's oldObject says so), then lowers it
    # in a write of its own, which the approvals entries are never called for.
    assert approve(plane, "alice-b", B).returncode == 0
    recorded = stored_approval(plane, "alice-b")
    assert (recorded["by"], recorded["required"]) == (ALICE.name, 2), recorded
    assert patch_gate(plane, {"spec": {"approvals": {"required": 1}}}).returncode == 0
    # An approval given after the lowering counts under it: once C lands on "other", the
    # server's gate cache has seen the lowering too (the watch delivers writes in order).
    assert approve(plane, "alice-c", C).returncode == 0
    assert stored_approval(plane, "alice-c")["required"] == 1
    assert until(lambda: write_artifact(plane, "other", C), lambda r: r == C) == C
    # alice's approval of B, given while two approvers were required, does not count.
    assert write_artifact(plane, "repo", B) == A
