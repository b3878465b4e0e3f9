"""Image updates behind a gate, with the real image-reflector-controller and
image-automation-controller: a new tag pushed to the registry is not picked up while the
ImagePolicy's gate is closed (nothing is committed), and once it opens the automation commits
the new tag to Git; an approval of exactly one tag lets that tag, and no newer one, through."""

from __future__ import annotations

import json
import time

from admission.core.gates import approvals
from tests.conftest import REPORT
from tests.realflux.conftest import condition
from tests.realflux.test_kustomization import gate, git_repository

IMAGE_API = "image.toolkit.fluxcd.io/v1"


def latest_tag(policy: dict) -> str | None:
    return (policy.get("status", {}).get("latestRef") or {}).get("tag")


def automated(cluster, git, registry, source_annotations: dict | None = None, **policy_spec):
    """Tag 1.0.0 in the registry and in Git; an ImagePolicy behind gate freeze (open) feeding an
    ImageUpdateAutomation that commits to the GitRepository apps."""
    ns = cluster.namespace
    image = f"{registry.address}/{ns}/app"
    registry.push_image(f"{ns}/app", "1.0.0")
    repo = git.repository(ns)
    marker = f'# {{"$imagepolicy": "{ns}:app"}}'
    repo.commit(
        {
            "deploy/app.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"
            f"data:\n  image: {image}:1.0.0 {marker}\n"
        },
        "app 1.0.0",
    )
    cluster.apply(
        gate("freeze", ns),
        git_repository("apps", repo.url, source_annotations),
        {
            "apiVersion": IMAGE_API,
            "kind": "ImageRepository",
            "metadata": {"name": "app"},
            "spec": {"image": image, "interval": "3s", "insecure": True},
        },
        {
            "apiVersion": IMAGE_API,
            "kind": "ImagePolicy",
            "metadata": {"name": "app", "annotations": {"gating.toolkit.fluxcd.io/gates": "freeze"}},
            "spec": {
                "imageRepositoryRef": {"name": "app"},
                "policy": {"semver": {"range": ">=1.0.0"}},
                **policy_spec,
            },
        },
        {
            "apiVersion": IMAGE_API,
            "kind": "ImageUpdateAutomation",
            "metadata": {"name": "app"},
            "spec": {
                "interval": "3s",
                "sourceRef": {"kind": "GitRepository", "name": "apps"},
                "git": {
                    "checkout": {"ref": {"branch": "main"}},
                    "commit": {
                        "author": {"name": "flux", "email": "flux@example.invalid"},
                        "messageTemplate": "image update",
                    },
                    "push": {"branch": "main"},
                },
                "update": {"path": "./deploy", "strategy": "Setters"},
            },
        },
    )
    return image, repo


def test_a_new_tag_waits_for_the_gate_then_is_committed(cluster, git, registry):
    ns = cluster.namespace
    image, repo = automated(cluster, git, registry)
    policy = cluster.wait(lambda: cluster.get("imagepolicy", "app"), lambda p: latest_tag(p) == "1.0.0")
    assert latest_tag(policy) == "1.0.0", policy.get("status")

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    registry.push_image(f"{ns}/app", "1.1.0")
    blocked = cluster.wait(
        lambda: cluster.get("imagepolicy", "app"), lambda p: condition(p, "Blocked").get("status") == "True"
    )
    assert condition(blocked, "Blocked").get("reason") == "GateClosed", blocked.get("status")
    assert "1.1.0" in condition(blocked, "Blocked")["message"]
    assert latest_tag(blocked) == "1.0.0"
    # The automation ran meanwhile (it reconciles every 3 s) and had nothing to commit.
    assert ":1.0.0" in repo.show("deploy/app.yaml")

    opened = time.monotonic()
    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    committed = cluster.wait(lambda: repo.show("deploy/app.yaml"), lambda text: ":1.1.0" in text, timeout=60)
    assert f"{image}:1.1.0" in committed, committed
    REPORT["real Flux: a new image tag is committed after kubectl gate open"] = (
        f"{time.monotonic() - opened:.1f}s"
    )


def wait_blocked(cluster, tag: str) -> dict:
    found = cluster.wait(
        lambda: cluster.get("imagepolicy", "app"),
        lambda p: (
            condition(p, "Blocked").get("status") == "True"
            and f":{tag}@" in condition(p, "Blocked").get("message", "")
        ),
    )
    assert f":{tag}@" in condition(found, "Blocked").get("message", ""), found.get("status")
    return found


def test_an_approved_tag_is_committed_by_the_automation_and_a_newer_one_waits(
    cluster, git, registry, tmp_path
):
    # Approvals of exact content (docs/decisions/0057): approve exactly the name:tag@digest that
    # `kubectl gate pending` shows; the real image-automation-controller commits it; the tag
    # pushed after it waits. The Git source is gated too (by an open gate): pending warns that
    # the automation's commit then waits there as well (half a release).
    ns = cluster.namespace
    cluster.apply(gate("deploy", ns))
    # The policy reflects each tag's digest, so the approval pins the image, not just its tag.
    image, repo = automated(
        cluster,
        git,
        registry,
        {"gating.toolkit.fluxcd.io/gates": "deploy"},
        digestReflectionPolicy="IfNotPresent",
    )
    cluster.wait(lambda: cluster.get("imagepolicy", "app"), lambda p: latest_tag(p) == "1.0.0")
    assert cluster.gate("close", "freeze", "-n", ns, "-m", "image freeze").returncode == 0
    registry.push_image(f"{ns}/app", "1.1.0")
    wait_blocked(cluster, "1.1.0")

    pending = cluster.gate("pending", "-n", ns, "-o", "json")
    assert pending.returncode == 0, pending.stderr
    [row] = [r for r in json.loads(pending.stdout) if r["kind"] == "ImagePolicy"]
    assert row["waits"].startswith(f"{image}:1.1.0@sha256:") and row["serves"].startswith(
        f"{image}:1.0.0@sha256:"
    )
    assert row["warnings"] == [
        f"it feeds ImageUpdateAutomation/{ns}/app, whose commits wait at GitRepository/{ns}/apps, "
        f"gated by {ns}/deploy: an image approved here lands once that commit is let through "
        "there too"
    ]
    assert ":1.0.0" in repo.show("deploy/app.yaml")  # nothing committed while it waits
    # kubectl gate check says the same of the policy alone: the automation and its Git source
    # are looked up in the cluster.
    manifest = tmp_path / "policy.json"
    manifest.write_text(
        json.dumps(
            {
                key: value
                for key, value in cluster.get("imagepolicy", "app").items()
                if key in ("apiVersion", "kind", "metadata", "spec")
            }
        )
    )
    checked = cluster.gate("check", "-f", str(manifest), "-n", ns, "-o", "json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [r["warnings"] for r in json.loads(checked.stdout)] == [row["warnings"]]

    approved_at = time.monotonic()
    done = cluster.gate(
        "approve",
        "freeze",
        "-n",
        ns,
        "--for",
        f"ImagePolicy/{ns}/app",
        "--content",
        row["waits"],
        "-m",
        "CHG-42",
    )
    assert done.returncode == 0, done.stderr
    committed = cluster.wait(lambda: repo.show("deploy/app.yaml"), lambda text: ":1.1.0" in text, timeout=60)
    assert f"{image}:1.1.0" in committed, committed
    REPORT["real Flux: an approved image tag is committed after kubectl gate approve"] = (
        f"{time.monotonic() - approved_at:.1f}s"
    )
    ended = cluster.wait(lambda: approvals.ended(cluster.get("gate", "freeze")), bool)
    assert [e["reason"] for e in ended.values()] == ["ApprovalUsed"], ended  # used: the policy serves it

    registry.push_image(f"{ns}/app", "1.2.0")
    newer = wait_blocked(cluster, "1.2.0")
    assert latest_tag(newer) == "1.1.0"
    # The automation keeps running (every 3 s) with nothing new to commit.
    runs = cluster.get("imageupdateautomation", "app")["status"].get("lastAutomationRunTime")
    cluster.wait(
        lambda: cluster.get("imageupdateautomation", "app")["status"].get("lastAutomationRunTime"),
        lambda t: t != runs,
    )
    assert ":1.1.0" in repo.show("deploy/app.yaml") and ":1.2.0" not in repo.show("deploy/app.yaml")
    assert latest_tag(cluster.get("imagepolicy", "app")) == "1.1.0"
