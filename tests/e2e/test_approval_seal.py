"""Only an approval the webhook sealed counts (docs/decisions/0064), through a real kube-apiserver:
an approval written while the approval webhook entries were absent (break-glass, a reinstall, an
upgrade from a build without them) keeps its forged ``by`` in the annotation, and once the
entries are back it lets nothing through and is shown as unverified; without the mutating entry
alone, the validating one refuses a client-chosen ``by``/``at``; an approval made through the
webhook still lands.
"""

from __future__ import annotations

import json

import pytest
import yaml

from admission.core.base import names
from tests.e2e.conftest import controller_running, own_plane, register_webhooks, serving_the_cluster
from tests.e2e.controlplane import ADMIN, FLUX
from tests.e2e.manifests import artifact_patch, git_repository
from tests.polling import until

pytestmark = pytest.mark.e2e
NS = "apps"
GATE = "seal-freeze"
REPO = "sealed-src"
OLD, NEW, NEWER = "main@sha1:aaaa", "main@sha1:bbbb", "main@sha1:cccc"
APPROVAL_ENTRIES = (names.MUTATE_APPROVALS_WEBHOOK, names.VALIDATE_APPROVALS_WEBHOOK)


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("approval-seal"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    # --generate-certs (start_server's) also makes the approval key beside the certificates.
    with serving_the_cluster(plane, tmp_path_factory.mktemp("seal-server")) as srv:
        yield srv


@pytest.fixture(scope="module")
def controller(plane, server, tmp_path_factory):
    key = server.cert_dir / "approval.key"
    with controller_running(
        plane, tmp_path_factory.mktemp("seal-controller"), "e2e-seal", "--approval-key-file", str(key)
    ) as proc:
        yield proc


def put(plane, *objects):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(objects)))


def gate_object(default: str) -> dict:
    return {
        "apiVersion": names.GATING_API_VERSION,
        "kind": names.GATE_KIND,
        "metadata": {"name": GATE, "namespace": NS},
        "spec": {"default": default},
    }


def stored_gate(plane) -> dict:
    return json.loads(plane.kubectl("get", "gate", GATE, "-n", NS, "-o", "json").stdout)


def write_artifact(plane, revision: str):
    return plane.kubectl(
        "patch",
        "gitrepository",
        REPO,
        "-n",
        NS,
        "--type=merge",
        "--subresource=status",
        "-p",
        artifact_patch(revision),
        "-o",
        "json",
        user=FLUX,
        check=False,
    )


def serves(result) -> str | None:
    if result.returncode != 0:
        return None
    return json.loads(result.stdout).get("status", {}).get("artifact", {}).get("revision")


def approve(plane, key: str, fields: dict, *dry: str):
    body = {"metadata": {"annotations": {names.APPROVAL_ANNOTATION_PREFIX + key: json.dumps(fields)}}}
    return plane.kubectl(
        "patch", "gate", GATE, "-n", NS, "--type=merge", "-p", json.dumps(body), *dry, user=ADMIN, check=False
    )


def recorded_by(result, key: str) -> str | None:
    """The ``by`` a (dry-run) write's answer records for approval ``key``."""
    if result.returncode != 0:
        return None
    annotations = json.loads(result.stdout)["metadata"].get("annotations") or {}
    value = annotations.get(names.APPROVAL_ANNOTATION_PREFIX + key)
    return json.loads(value).get("by") if value else None


def without_entries(plane, drop: tuple[str, ...]) -> None:
    """Both webhook configurations without the entries named ``drop``, as someone breaking glass
    (or an install from a build without them) leaves them."""
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        config = json.loads(plane.kubectl("get", kind, "gate-admission", "-o", "json").stdout)
        gone = [i for i, w in enumerate(config["webhooks"]) if w["name"] in drop]
        ops = [
            op
            for i in reversed(gone)
            for op in (
                {"op": "test", "path": f"/webhooks/{i}/name", "value": config["webhooks"][i]["name"]},
                {"op": "remove", "path": f"/webhooks/{i}"},
            )
        ]
        if ops:
            plane.kubectl("patch", kind, "gate-admission", "--type=json", "-p", json.dumps(ops))


def entries_back(plane, server) -> None:
    register_webhooks(plane, server)
    # The API server loads configurations asynchronously: until a malformed approval is refused.
    refused = until(
        lambda: approve(plane, "probe", {"content": "", "for": "*", "message": "m"}, "--dry-run=server"),
        lambda r: r.returncode != 0,
        timeout=30,
    )
    assert "approval refused" in refused.stderr, refused.stderr


@pytest.fixture(scope="module")
def held(plane, server, controller):
    """GitRepository apps/sealed-src behind a closed gate: OLD served, NEW waits."""
    put(plane, gate_object("opened"))
    plane.kubectl("apply", "-f", "-", input=git_repository(REPO, NS, gates=f"{NS}/{GATE}"))
    assert serves(until(lambda: write_artifact(plane, OLD), lambda r: serves(r) == OLD)) == OLD
    put(plane, gate_object("closed"))
    result = until(lambda: write_artifact(plane, NEW), lambda r: serves(r) == OLD)
    assert serves(result) == OLD, result.stderr
    return plane


def test_an_approval_forged_while_the_entries_were_absent_never_counts_and_shows_unverified(held, server):
    plane = held
    without_entries(plane, APPROVAL_ENTRIES)
    forged = {
        "content": NEW,
        "for": "*",
        "message": "CHG-1",
        "by": "bob",  # nobody the API server authenticated for this write
        "at": "2026-01-01T00:00:00Z",
        "expires": "2099-01-01T00:00:00Z",
    }
    # The API server stops calling the entries a moment later: until then a dry run shows the
    # mutating entry replacing the name. Once it does not, the write lands as written.
    dry = until(
        lambda: approve(plane, "forged", forged, "--dry-run=server", "-o", "json"),
        lambda r: recorded_by(r, "forged") == "bob",
        timeout=30,
    )
    assert recorded_by(dry, "forged") == "bob", dry.stdout[-2000:] + dry.stderr
    written = approve(plane, "forged", forged)
    assert written.returncode == 0, written.stderr
    entries_back(plane, server)
    stored = stored_gate(plane)["metadata"]["annotations"][names.APPROVAL_ANNOTATION_PREFIX + "forged"]
    assert json.loads(stored)["by"] == "bob"  # the forged name is still in the annotation...

    # ... and the controller, which holds the key, shows it as unverified, never as an approval.
    def status(gate: dict) -> dict:
        return gate.get("status") or {}

    seen = until(lambda: stored_gate(plane), lambda g: status(g).get("unverifiedApprovals"), timeout=30)
    [row] = status(seen)["unverifiedApprovals"]
    assert (row["id"], row["by"]) == ("forged", "bob") and "no seal" in row["unverified"], row
    assert not status(seen).get("approvals")
    assert any("forged" in p and "no seal" in p for p in status(seen).get("problems", [])), status(seen)
    # An approval made through the webhook (sealed), of other content, written after it: once that
    # lands, the webhook's cache has seen the forged one too (one watch, in order)...
    real = approve(plane, "real", {"content": NEWER, "for": "*", "message": "CHG-2"})
    assert real.returncode == 0, real.stderr
    landed = until(lambda: write_artifact(plane, NEWER), lambda r: serves(r) == NEWER, timeout=30)
    assert serves(landed) == NEWER, landed.stderr
    # ... and the revision the forged approval names still waits.
    assert serves(write_artifact(plane, NEW)) == NEWER
    assert "bob" not in json.dumps((stored_gate(plane).get("status") or {}).get("approvals") or [])


def test_without_the_mutating_entry_the_validating_one_refuses_a_client_chosen_by_and_at(held, server):
    plane = held
    without_entries(plane, (names.MUTATE_APPROVALS_WEBHOOK,))
    chosen = {
        "content": "main@sha1:dddd",
        "for": "*",
        "message": "CHG-3",
        "by": ADMIN.name,  # the writer's own name: the old check let it through with any at
        "at": "2026-01-01T00:00:00Z",
        "expires": "2099-01-01T00:00:00Z",
    }
    # Once the API server calls no mutating entry for it, the validating one answers alone.
    refused = until(
        lambda: approve(plane, "chosen", chosen, "--dry-run=server"),
        lambda r: "not recorded by the approval webhook" in r.stderr,
        timeout=30,
    )
    assert refused.returncode != 0 and "not recorded by the approval webhook" in refused.stderr, (
        refused.stderr
    )
    entries_back(plane, server)
