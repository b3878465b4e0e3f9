"""The other Flux ways in the README's Install section, on the real cluster with the real
source-controller, helm-controller and kustomize-controller: a HelmRelease of the chart from a
classic chart repository (`helm repo index`), and the rendered manifests pushed as an OCI artifact
with the real `flux push artifact`, then `flux create source oci` and `flux create kustomization`
exactly as the README shows them. Each installs a webhook that holds gated Flux objects elsewhere,
and its removal through Flux leaves no webhook configuration behind."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from admission.core.base.names import CLOSE_ANNOTATION, OPEN_ANNOTATION
from tests.builders import gate
from tests.cluster.conftest import FIGURES, NS, wait_webhook_ready
from tests.cluster.fluxinstall import (
    ChartIndex,
    Helm,
    chart_version,
    no_webhook_configuration,
    over_plain_http,
    readme_commands,
    readme_objects,
    released,
    run_readme_command,
)
from tests.e2e.controlplane import ALICE, ROOT
from tests.e2e.manifests import kustomization
from tests.polling import until
from tests.realflux.flux import FluxControllers, flux_cli, flux_dir, tools_dir
from tests.realflux.servers import Registry

DENIED = 'admission webhook "validate.gating.toolkit.fluxcd.io" denied the request: '


@pytest.fixture(scope="module")
def flux(cluster, installed, tmp_path_factory):
    """No gate-admission installed (the kubectl install removed if still there), the three Flux
    controllers running, an OCI registry and a chart repository."""
    removed = cluster.kubectl(
        "delete",
        "-k",
        str(ROOT / "manifests"),
        "--ignore-not-found",
        "--timeout=180s",
        check=False,
        timeout=240,
    )
    assert removed.returncode == 0, removed.stderr
    workdir = tmp_path_factory.mktemp("via-flux-sources")
    registry = Registry(tools_dir() / "registry", workdir)
    index = ChartIndex(workdir / "index", Helm(workdir))
    controllers = FluxControllers(cluster, flux_dir(), workdir)
    try:
        controllers.start("source-controller", "helm-controller", "kustomize-controller")
        yield registry, index
    finally:
        controllers.stop()
        index.stop()
        registry.stop()


def holds_a_gated_edit(cluster, name: str) -> None:
    """A Kustomization elsewhere, behind a gate that is then closed: its edit is refused."""
    opened = gate(name, annotations={OPEN_ANNOTATION: "2026-01-01T00:00:00Z"})
    made = until(
        lambda: cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(opened), check=False),
        lambda r: r.returncode == 0,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    created = until(
        lambda: cluster.kubectl(
            "apply",
            "-f",
            "-",
            user=ALICE,
            check=False,
            input=kustomization(name, gates=f"flux-system/{name}"),
        ),
        lambda r: r.returncode == 0,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    cluster.kubectl(
        "annotate",
        "gate",
        name,
        "-n",
        "flux-system",
        "--overwrite",
        f"{OPEN_ANNOTATION}-",
        f"{CLOSE_ANNOTATION}=2026-06-01T00:00:00Z",
    )
    edit = kustomization(name, gates=f"flux-system/{name}", path="./deploy/v2")
    refused = until(
        lambda: cluster.kubectl("apply", "-f", "-", user=ALICE, check=False, input=edit),
        lambda r: r.returncode != 0,
        timeout=30,
    )
    assert (
        DENIED + f"Kustomization apps/{name} is held: gate 'flux-system/{name}' is closed" in refused.stderr
    )


def git_origin() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"], capture_output=True, text=True
    ).stdout.strip()


def test_a_helm_release_from_a_chart_repository_installs_and_uninstalls_it(cluster, flux, tmp_path):
    _, index = flux
    index.add(index.helm.package(ROOT / "charts" / "gate-admission", tmp_path))
    source, helm_release = readme_objects("HelmRepository", "HelmRelease")
    source["spec"].update(url=index.url, interval="1m")
    helm_release["spec"]["timeout"] = "4m"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([source, helm_release]))
    seen = released(cluster, chart_version())
    wait_webhook_ready(cluster)
    holds_a_gated_edit(cluster, "from-chart-repo")
    FIGURES.append(
        f"via Flux: HelmRelease from a HelmRepository (helm repo index) installed chart "
        f"{seen['status']['history'][0]['chartVersion']}; a gated edit refused"
    )
    cluster.kubectl(
        "delete", "helmrelease", "gate-admission", "-n", "flux-system", "--timeout=180s", timeout=240
    )
    assert until(lambda: no_webhook_configuration(cluster), bool, timeout=120)
    cluster.kubectl("delete", "helmrepository", "gate-admission", "-n", "flux-system")


def test_the_manifests_pushed_as_an_oci_artifact_install_through_a_kustomization(cluster, flux):
    registry, _ = flux
    commands = readme_commands("kubectl kustomize manifests/")
    assert [c.split(" --")[0] for c in commands] == [
        "kubectl kustomize manifests/ | flux push artifact oci://$REGISTRY/manifests/gate-admission:"
        + chart_version()
        + " -f -",
        "flux create source oci gate-admission-manifests",
        "flux create kustomization gate-admission",
    ]
    env = {"REGISTRY": registry.address}
    if not git_origin():  # a repository with no remote (not a clone): the one it would be cloned from
        env |= {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "remote.origin.url",
            "GIT_CONFIG_VALUE_0": str(ROOT),
        }
    for command in commands:
        run_readme_command(cluster, over_plain_http(command), env)
    wait_webhook_ready(cluster)
    jobs = cluster.kubectl("get", "jobs", "-n", NS, "-o", "jsonpath={.items[*].status.succeeded}").stdout
    assert jobs.split() == ["1"]
    holds_a_gated_edit(cluster, "from-oci-artifact")
    FIGURES.append(
        "via Flux: `flux push artifact` of the rendered manifests, `flux create source oci` and "
        "`flux create kustomization --wait` installed it; a gated edit refused"
    )
    deleted = flux_cli(
        cluster, flux_dir(), "delete", "kustomization", "gate-admission", "--silent", timeout=240
    )
    assert deleted.returncode == 0, deleted.stderr
    assert until(lambda: no_webhook_configuration(cluster), bool, timeout=180)
    gone = until(
        lambda: cluster.kubectl("get", "crd", "gates.gating.toolkit.fluxcd.io", check=False).returncode,
        lambda rc: rc != 0,
        timeout=120,
    )
    assert gone != 0  # pruned with the rest, as `kubectl delete -k` removes them
    flux_cli(cluster, flux_dir(), "delete", "source", "oci", "gate-admission-manifests", "--silent")
