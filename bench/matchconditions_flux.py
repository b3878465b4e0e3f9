"""The real Flux controllers as the write load of bench/matchconditions.py (``--real-flux``):
source-controller, kustomize-controller and helm-controller (and notification-controller, which
receives their events; FLUX_BINARIES, or built by hack/go-binaries.sh) reconcile the objects
from a Git server and a Helm repository on loopback (tests/realflux/servers.py), every object at
a one-minute interval."""

from __future__ import annotations

import json
import re
import ssl
import time
import urllib.request
from pathlib import Path

import yaml

from admission.core.base import names
from admission.core.flux import kinds
from tests.polling import until
from tests.realflux.flux import FluxControllers, flux_dir
from tests.realflux.servers import ChartRepository, GitServer

# notification-controller too: the others post every event to it, and without a receiver each
# post retries for seconds inside the reconcile.
CONTROLLERS = ("source-controller", "kustomize-controller", "helm-controller", "notification-controller")
WRITERS = CONTROLLERS[:3]
INTERVAL = "1m"
CHART = "demo"
STATUS_WRITE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


class RealFlux:
    """Servers, controllers and the objects they reconcile; ``stop`` ends what it started."""

    def __init__(self, plane, work: Path):
        self.plane, self.work = plane, work
        self.git = GitServer(work / "git")
        self.charts = ChartRepository(work / "charts")
        self.controllers = FluxControllers(plane, flux_dir(), work)

    def objects(self, count: int, gated: float, gate: str) -> list[dict]:
        """As bench/matchconditions.objects: 40% Kustomizations, 30% GitRepositories, 15%
        HelmReleases (helm-controller generates their HelmCharts: not in this list), one
        HelmRepository; ``gated`` of ``count`` reference ``gate``."""
        self.repo = self.git.repository("bench")
        self.revision = self.push("1")
        self.charts.publish(CHART, "1.0.0")
        releases = round(count * 0.15)
        plain = count - 2 * releases
        owners = plain + releases
        target = min(owners, round(count * gated))
        referencing = {round(j * owners / target) for j in range(target)} if target else set()

        def meta(number: int, name: str, namespace: str) -> dict:
            out: dict = {"name": name, "namespace": namespace}
            if number in referencing:
                out["annotations"] = {names.GATES_ANNOTATION: gate}
            return out

        # Kustomizations apply ungated sources only, so every ungated object has new content to
        # take (one behind a held source would keep applying what it serves).
        sources = [i for i in range(plain) if i % 7 >= 4]
        open_sources = [i for i in sources if i not in referencing]
        out: list[dict] = [
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "HelmRepository",
                "metadata": {"name": "charts", "namespace": "flux-system"},
                "spec": {"interval": INTERVAL, "url": self.charts.url},
            }
        ]
        for i in range(plain):
            if i in sources:
                out.append(
                    {
                        "apiVersion": "source.toolkit.fluxcd.io/v1",
                        "kind": "GitRepository",
                        "metadata": meta(i, f"repo-{i}", "flux-system"),
                        "spec": {"interval": INTERVAL, "url": self.repo.url, "ref": {"branch": "main"}},
                    }
                )
            else:
                source = open_sources[i % len(open_sources)]
                out.append(
                    {
                        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                        "kind": "Kustomization",
                        "metadata": meta(i, f"app-{i}", "flux-system"),
                        "spec": {
                            "interval": INTERVAL,
                            "path": "./deploy",
                            "prune": True,
                            "targetNamespace": "apps",
                            "namePrefix": f"app-{i}-",
                            "sourceRef": {"kind": "GitRepository", "name": f"repo-{source}"},
                        },
                    }
                )
        for i in range(releases):
            out.append(
                {
                    "apiVersion": "helm.toolkit.fluxcd.io/v2",
                    "kind": "HelmRelease",
                    "metadata": meta(plain + i, f"release-{i}", "apps"),
                    "spec": {
                        "interval": INTERVAL,
                        "chart": {
                            "spec": {
                                "chart": CHART,
                                "version": "1.x",
                                "interval": INTERVAL,
                                "sourceRef": {
                                    "kind": "HelmRepository",
                                    "name": "charts",
                                    "namespace": "flux-system",
                                },
                            }
                        },
                        "install": {"disableWait": True},
                        "upgrade": {"disableWait": True},
                    },
                }
            )
        return out

    def push(self, revision: str) -> str:
        """A new commit: every GitRepository's next artifact, every Kustomization's next apply."""
        return self.repo.commit(
            {
                "deploy/configmap.yaml": yaml.safe_dump(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "app"},
                        "data": {"revision": revision},
                    }
                )
            }
        )

    def new_content(self, obj: dict, revision: str, chart: str) -> bool:
        """Whether ``obj`` took the new commit or chart version (a HelmRepository: no check)."""
        status = obj.get("status") or {}
        kind = obj["kind"]
        if kind == "GitRepository":
            return (status.get("artifact") or {}).get("revision") == revision
        if kind == "Kustomization":
            return status.get("lastAppliedRevision") == revision
        if kind == "HelmChart":
            return (status.get("artifact") or {}).get("revision") == chart
        if kind == "HelmRelease":
            return ((status.get("history") or [{}])[0]).get("chartVersion") == chart
        return True

    def start(self, manifests: list[dict]) -> None:
        self.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
        self.controllers.start(*CONTROLLERS)

    def listed(self) -> list[dict]:
        """Every Flux object in the cluster, the generated HelmCharts included."""
        plurals = ",".join(
            f"{kinds.BY_KIND[k].plural}.{kinds.BY_KIND[k].group}"
            for k in ("Kustomization", "GitRepository", "HelmRepository", "HelmRelease", "HelmChart")
        )
        return json.loads(self.plane.kubectl("get", plurals, "-A", "-o", "json").stdout)["items"]

    def wait_ready(self, expected: int, timeout: float = 600) -> int:
        """How many objects are Ready=True, once all ``expected`` are or the time is up."""

        def ready() -> int:
            return sum(
                any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (o.get("status") or {}).get("conditions", [])
                )
                for o in self.listed()
            )

        return until(ready, lambda n: n >= expected, timeout=timeout, interval=2)

    def edit(self, api, obj: dict) -> None:
        group, version = obj["apiVersion"].split("/")
        meta = obj["metadata"]
        api.patch_namespaced_custom_object(
            group,
            version,
            meta["namespace"],
            kinds.BY_KIND[obj["kind"]].plural,
            meta["name"],
            {"metadata": {"labels": {"edited": "during-outage"}}},
        )

    def refused_in_logs(self) -> set[str]:
        """Names of the objects whose writes a controller logged as failed by a webhook call."""
        found = set()
        for controller in WRITERS:
            for line in self.controllers.log(controller).splitlines():
                if "failed calling webhook" in line:
                    found.update(re.findall(r'"name":"([^"]+)"', line))
        return found

    def stop(self) -> None:
        self.controllers.stop()
        self.git.stop()
        self.charts.stop()


def status_writes(plane) -> float:
    """Status writes of Flux objects the API server has answered so far (its request counter)."""
    request = urllib.request.Request(
        f"{plane.server}/metrics", headers={"Authorization": "Bearer admin-token"}
    )
    with urllib.request.urlopen(request, context=ssl._create_unverified_context(), timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        found = STATUS_WRITE.match(line)
        if (
            found
            and 'subresource="status"' in found["labels"]
            and "toolkit.fluxcd.io" in found["labels"]
            and re.search(r'verb="(PATCH|UPDATE|APPLY)"', found["labels"])
        ):
            total += float(found["value"])
    return total


def settle(seconds: float) -> None:
    """Let the controllers reach their steady one-minute cadence (a benchmark's wait)."""
    time.sleep(seconds)
