"""Image updates behind a gate, with the real image-reflector-controller and
image-automation-controller: a new tag pushed to the registry is not picked up while the
ImagePolicy's gate is closed (nothing is committed), and once it opens the automation commits
the new tag to Git."""

from __future__ import annotations

import time

from tests.conftest import REPORT
from tests.realflux.conftest import condition
from tests.realflux.test_kustomization import gate, git_repository

IMAGE_API = "image.toolkit.fluxcd.io/v1"


def latest_tag(policy: dict) -> str | None:
    return (policy.get("status", {}).get("latestRef") or {}).get("tag")


def test_a_new_tag_waits_for_the_gate_then_is_committed(cluster, git, registry):
    ns = cluster.namespace
    image = f"{registry.address}/{ns}/app"
    registry.push_image(f"{ns}/app", "1.0.0")
    repo = git.repository(ns)
    marker = '# {"$imagepolicy": "%s:app"}' % ns
    repo.commit({"deploy/app.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"
                                    f"data:\n  image: {image}:1.0.0 {marker}\n"}, "app 1.0.0")
    cluster.apply(
        gate("freeze", ns), git_repository("apps", repo.url),
        {"apiVersion": IMAGE_API, "kind": "ImageRepository", "metadata": {"name": "app"},
         "spec": {"image": image, "interval": "3s", "insecure": True}},
        {"apiVersion": IMAGE_API, "kind": "ImagePolicy",
         "metadata": {"name": "app", "annotations": {"gating.toolkit.fluxcd.io/gates": "freeze"}},
         "spec": {"imageRepositoryRef": {"name": "app"}, "policy": {"semver": {"range": ">=1.0.0"}}}},
        {"apiVersion": IMAGE_API, "kind": "ImageUpdateAutomation", "metadata": {"name": "app"},
         "spec": {"interval": "3s", "sourceRef": {"kind": "GitRepository", "name": "apps"},
                  "git": {"checkout": {"ref": {"branch": "main"}},
                          "commit": {"author": {"name": "flux", "email": "flux@example.invalid"},
                                     "messageTemplate": "image update"},
                          "push": {"branch": "main"}},
                  "update": {"path": "./deploy", "strategy": "Setters"}}})
    policy = cluster.wait(lambda: cluster.get("imagepolicy", "app"), lambda p: latest_tag(p) == "1.0.0")
    assert latest_tag(policy) == "1.0.0", policy.get("status")

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    registry.push_image(f"{ns}/app", "1.1.0")
    blocked = cluster.wait(lambda: cluster.get("imagepolicy", "app"),
                           lambda p: condition(p, "Blocked").get("status") == "True")
    assert condition(blocked, "Blocked").get("reason") == "GateClosed", blocked.get("status")
    assert "1.1.0" in condition(blocked, "Blocked")["message"]
    assert latest_tag(blocked) == "1.0.0"
    # The automation ran meanwhile (it reconciles every 3 s) and had nothing to commit.
    assert ":1.0.0" in repo.show("deploy/app.yaml")

    opened = time.monotonic()
    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    committed = cluster.wait(lambda: repo.show("deploy/app.yaml"), lambda text: ":1.1.0" in text, timeout=60)
    assert f"{image}:1.1.0" in committed, committed
    REPORT["real Flux: a new image tag is committed after kubectl gate open"] = f"{time.monotonic() - opened:.1f}s"
