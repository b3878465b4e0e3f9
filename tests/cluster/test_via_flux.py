"""Installed by Flux, the way Flux users install add-ons: the README's OCIRepository and
HelmRelease, the chart packaged and pushed with the real helm, reconciled by the real
source-controller and helm-controller into the real cluster. The release installed first is the
previous one, rebuilt from git history (its chart and its image); it is upgraded to this one
under write load, healed by Flux when its Deployment is deleted, shown deadlocking when the
release that installs the webhook is itself gated, and uninstalled by deleting the HelmRelease.
Runs after test_uninstall (which leaves the kubectl install in place: it is removed first)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from admission.core.base.names import (
    CLOSE_ANNOTATION,
    GATES_ANNOTATION,
    OPEN_ANNOTATION,
    RECONCILE_REQUEST_ANNOTATION,
)
from tests.builders import gate
from tests.cluster.conftest import (
    FIGURES,
    NS,
    no_webhook_pod,
    wait_webhook_ready,
    webhook_deployment_uid,
    webhook_pods,
)
from tests.cluster.fluxinstall import (
    Helm,
    Release,
    current_release,
    previous_release,
    push_readme_chart,
    readme_objects,
    release,
    released,
    running_version,
)
from tests.cluster.load import steady_load
from tests.e2e.controlplane import ADMIN, ROOT
from tests.polling import until
from tests.realflux.conftest import condition, ready
from tests.realflux.flux import FluxControllers, flux_dir, tools_dir
from tests.realflux.servers import Registry

RATE = 24


def release_objects(registry: Registry, version: str) -> list[dict]:
    """The README's OCIRepository and HelmRelease, with the tests' registry (plain HTTP) and
    intervals short enough for a test to see drift corrected."""
    source, helm_release = readme_objects("OCIRepository", "HelmRelease")
    source["spec"].update(
        url=source["spec"]["url"].replace("REGISTRY", registry.address),
        insecure=True,
        interval="5s",
        ref={"tag": version},
    )
    helm_release["spec"].update(interval="10s", timeout="4m")
    return [source, helm_release]


@pytest.fixture(scope="module")
def releases(cluster, tmp_path_factory) -> tuple[Release | None, Release]:
    """The previous release (None in a clone without the history) and this one, their images
    loaded into the node."""
    previous = previous_release(tmp_path_factory.mktemp("previous"))
    if previous is not None:
        cluster.load_docker_image(previous.image)
    return previous, current_release()


@pytest.fixture(scope="module")
def flux_installed(cluster, installed, releases, tmp_path_factory):
    """The kubectl install removed, then the chart of the previous release (this one if the
    clone has no history) installed by Flux from an OCI registry holding both."""
    removed = cluster.kubectl(
        "delete", "-k", str(ROOT / "manifests"), "--timeout=180s", check=False, timeout=240
    )
    assert removed.returncode == 0, removed.stderr
    workdir = tmp_path_factory.mktemp("via-flux")
    registry = Registry(tools_dir() / "registry", workdir)
    controllers = FluxControllers(cluster, flux_dir(), workdir)
    helm = Helm(workdir)
    previous, current = releases
    first = previous or current
    try:
        controllers.start("source-controller", "helm-controller")
        push_readme_chart(cluster, helm, registry, workdir)  # this release, as the README pushes it
        if previous is not None:
            helm.push(helm.package(previous.chart, workdir / "previous"), registry)
        cluster.kubectl(
            "apply", "-f", "-", input=yaml.safe_dump_all(release_objects(registry, first.version))
        )
        released(cluster, first.version)
        wait_webhook_ready(cluster)
        yield controllers
    finally:
        cluster.kubectl(
            "delete",
            "ocirepository",
            "gate-admission",
            "-n",
            "flux-system",
            "--ignore-not-found",
            check=False,
        )
        controllers.stop()
        registry.stop()


@pytest.fixture(scope="module")
def load(cluster, flux_installed):
    with steady_load(cluster, "flux", RATE) as running:
        yield running


def test_flux_installs_the_chart_and_its_webhook_holds_gated_objects(cluster, releases, flux_installed, load):
    installed = release(cluster)
    history = installed["status"]["history"][0]
    first = releases[0] or releases[1]
    assert (history["chartName"], running_version(installed), history["status"]) == (
        "gate-admission",
        first.version,
        "deployed",
    )
    FIGURES.append(
        f"via Flux: HelmRelease (chartRef: OCIRepository, pushed with helm push) installed chart "
        f"{first.version} ({first.image}) and Ready"
    )


def test_a_chart_upgrade_by_flux_from_the_previous_release_fails_no_admission(
    cluster, releases, flux_installed, load
):
    previous, current = releases
    if previous is None:
        pytest.skip("this clone has no git history with an earlier chart version: nothing to upgrade from")
    with load.window(
        f"upgrade by Flux (chart {previous.version} -> {current.version}, "
        f"{previous.image} -> {current.image})"
    ) as window:
        cluster.kubectl(
            "patch",
            "ocirepository",
            "gate-admission",
            "-n",
            "flux-system",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"ref": {"tag": current.version}}}),
        )
        released(cluster, current.version)
        cluster.kubectl(
            "rollout", "status", "-n", NS, "deployment/gate-admission", "--timeout=300s", timeout=320
        )
        wait_webhook_ready(cluster)
        tail = len(window.outcomes) + 3 * RATE
        until(lambda: len(window.outcomes), lambda n: n >= tail, timeout=60, interval=0.2)
    FIGURES.append(window.summary())
    images = cluster.kubectl(
        "get",
        "deployment",
        "gate-admission",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ).stdout
    assert images == current.image
    assert not window.failed(), [(o.target.name, o.status, o.message[:200]) for o in window.failed()[:5]]
    # Across the selector change (docs/decisions/0074): the previous release selected without the
    # instance; the pre-upgrade hook let the Deployments be made again with it, without an outage.
    for name in ("gate-admission", "gate-admission-controller"):
        selector = cluster.kubectl(
            "get", "deployment", name, "-n", NS, "-o", "jsonpath={.spec.selector.matchLabels}"
        ).stdout
        assert json.loads(selector).get("app.kubernetes.io/instance") == "gate-admission", (name, selector)


def test_helm_test_of_the_release_flux_installed_proves_the_webhook_answers(
    cluster, releases, flux_installed, tmp_path
):
    # The real helm CLI reads the release helm-controller stored, and runs the chart's test Pod
    # (our image) against the running webhook: a review over TLS, answered allowed for its uid.
    installed = released(cluster, releases[1].version)  # upgraded to, or installed first
    history = installed["status"]["history"][0]
    storage = installed["status"].get("storageNamespace") or history["namespace"]
    out = Helm(tmp_path)(
        "test",
        history["name"],
        "-n",
        storage,
        "--timeout",
        "100s",
        # No --logs: helm looks for the Pod in the release's storage namespace, and a Pod that
        # passed is deleted (hook-succeeded).
        "--kubeconfig",
        str(cluster.kubeconfig(ADMIN)),
    )
    assert re.search(r"^Phase:\s+Succeeded$", out, re.M), out
    FIGURES.append(f"helm test {history['name']}: the test Pod's review answered ({releases[1].version})")


def test_flux_heals_a_deleted_webhook_deployment_and_gated_writes_fail_closed_meanwhile(
    cluster, flux_installed, load
):
    deleted, serving = webhook_deployment_uid(cluster), webhook_pods(cluster)
    assert deleted and serving
    with load.window("webhook Deployment deleted, restored by Flux") as window:
        cluster.kubectl("delete", "deployment", "gate-admission", "-n", NS, "--wait=false")
        # Flux may put the Deployment back before the deleted one's Pods have all exited, so the
        # webhook need not ever be without a Pod: what is checked is that the deleted Pods went
        # and a new Deployment came.
        left = until(
            lambda: serving & webhook_pods(cluster), lambda pods: not pods, timeout=180, interval=0.5
        )
        assert not left, f"the deleted Deployment's Pods never went: {sorted(left)}"
        restored = until(
            lambda: webhook_deployment_uid(cluster),
            lambda uid: uid not in (None, deleted),
            timeout=180,
            interval=1,
        )
        assert restored not in (None, deleted), condition(release(cluster), "Ready")
        wait_webhook_ready(cluster)
        tail = len(window.outcomes) + 3 * RATE
        until(lambda: len(window.outcomes), lambda n: n >= tail, timeout=60, interval=0.2)
    FIGURES.append(window.summary())
    assert not [o for o in window.outcomes if o.kind == "wrong"]  # never a held write allowed
    assert all(o.kind == "ok" for o in window.outcomes if not o.target.gated)  # ungated writes never see us
    assert all(o.kind == "ok" for o in window.outcomes[-2 * RATE :])  # healed


def test_a_gate_on_the_release_that_installs_the_webhook_stops_flux_from_healing_it(
    cluster, flux_installed, load, tmp_path
):
    """docs/operations.md, "Do not gate the gate": what happens when someone does, and the way out."""
    controllers = flux_installed
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(gate("self-freeze", annotations={CLOSE_ANNOTATION: "2026-06-01T00:00:00Z"})),
    )
    cluster.kubectl(
        "annotate",
        "helmrelease",
        "gate-admission",
        "-n",
        "flux-system",
        f"{GATES_ANNOTATION}=flux-system/self-freeze",
    )
    with load.window("the installing HelmRelease gated, its webhook Deployment deleted") as window:
        cluster.kubectl("delete", "deployment", "gate-admission", "-n", NS, "--wait=false")
        assert until(lambda: no_webhook_pod(cluster), bool, timeout=120, interval=0.5)
        # No replica answers, so the API server refuses helm-controller's writes of this
        # HelmRelease (its status carries a gate reference: failurePolicy Fail) and the release
        # is never repaired: the deadlock the rule prevents.
        refused = until(
            lambda: controllers.log("helm-controller"),
            lambda log: "validate-status.gating.toolkit.fluxcd.io" in log,
            timeout=120,
            interval=1,
        )
        assert "validate-status.gating.toolkit.fluxcd.io" in refused
        never = until(lambda: deployment_exists(cluster), bool, timeout=45, interval=1)
        assert not never
        # The way out that keeps the freeze: put back what the release runs, from its own record
        # (helm-controller stores it in the HelmRelease's namespace). Our namespace is never
        # judged, so this apply goes through; once a replica answers, helm-controller's writes
        # are judged again, and allowed (drift correction brings nothing new).
        manifest = Helm(tmp_path)(
            "get", "manifest", "gate-admission", "-n", "flux-system", f"--kubeconfig={cluster.kubeconfig()}"
        )
        cluster.kubectl("apply", "-f", "-", input=manifest)
        wait_webhook_ready(cluster)
        asked = "healed-" + str(len(window.outcomes))
        cluster.kubectl(
            "annotate",
            "helmrelease",
            "gate-admission",
            "-n",
            "flux-system",
            "--overwrite",
            f"{RECONCILE_REQUEST_ANNOTATION}={asked}",
        )
        handled = until(
            lambda: release(cluster),
            lambda hr: hr["status"].get("lastHandledReconcileAt") == asked and ready(hr) == "True",
            timeout=240,
            interval=1,
        )  # after it corrects the drift
        assert handled["status"].get("lastHandledReconcileAt") == asked, condition(handled, "Ready")
        assert ready(handled) == "True", condition(handled, "Ready")
        tail = len(window.outcomes) + 3 * RATE
        until(lambda: len(window.outcomes), lambda n: n >= tail, timeout=60, interval=0.2)
    FIGURES.append(window.summary())
    assert not [o for o in window.outcomes if o.kind == "wrong"]  # the freeze held throughout
    assert all(o.kind == "ok" for o in window.outcomes[-2 * RATE :])  # the webhook answering again
    cluster.kubectl(
        "annotate",
        "gate",
        "self-freeze",
        "-n",
        "flux-system",
        "--overwrite",
        f"{OPEN_ANNOTATION}=2026-12-01T00:00:00Z",
        f"{CLOSE_ANNOTATION}-",
    )
    ungated = until(
        lambda: cluster.kubectl(
            "annotate",
            "helmrelease",
            "gate-admission",
            "-n",
            "flux-system",
            f"{GATES_ANNOTATION}-",
            check=False,
        ),
        lambda r: r.returncode == 0,
        timeout=30,
    )
    assert ungated.returncode == 0, ungated.stderr


def deployment_exists(cluster) -> bool:
    return cluster.kubectl("get", "deployment", "gate-admission", "-n", NS, check=False).returncode == 0


def test_deleting_the_helm_release_uninstalls_and_leaves_no_webhook(cluster, flux_installed, load):
    cluster.kubectl(
        "delete", "helmrelease", "gate-admission", "-n", "flux-system", "--timeout=180s", timeout=240
    )
    left = until(
        lambda: (
            cluster.kubectl(
                "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
            ).stdout
        ),
        lambda out: "gate-admission" not in out,
        timeout=120,
    )
    assert "gate-admission" not in left
    assert not cluster.kubectl("get", "deployments", "-n", NS, "-o", "name", check=False).stdout.strip()
