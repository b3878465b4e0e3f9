"""What matchConditions save, through a real kube-apiserver: webhook calls per minute and our
server's CPU under a Flux-like write load with and without the conditions, the latency a write
of an ungated object gains, and what an outage of our server fails.

Usage: python bench/matchconditions.py [--objects 200] [--gated 0.1] [--seconds 60] [--interval 10]
                                       [--writes 200] [--rounds 3] [--real-flux]
Starts its own etcd + kube-apiserver with the real Flux CRDs and manifests/flux-crd-patches
(tests/e2e harness) and `gate-admission serve` (cluster store, its defaults: 2 workers), and
creates `--objects` Flux objects of which `--gated` reference an open gate: Kustomizations,
GitRepositories, HelmReleases and the HelmChart helm-controller would generate for each
(labelled with its HelmRelease, as helm-controller does).

By default the writes are driven here, as the Flux controllers send them (FLUX-WRITES.md,
"Common to every controller"): each reconcile is one status patch call, two requests to
`<kind>/status` as the controller's service account: the conditions as a merge patch with the
resourceVersion as a precondition, then the rest of status (observedGeneration,
lastHandledReconcileAt; for a source every third reconcile a new artifact). Every object
reconciles every `--interval` seconds, in a staggered schedule, for `--seconds`, once with
manifests/webhooks (conditions) and once with manifests/components/pre-1.30 (none).
With `--real-flux` the real source-, kustomize- and helm-controller reconcile the objects from
a Git server and a Helm repository on loopback instead (bench/matchconditions_flux.py), and
each variant is measured over `--seconds` of their steady one-minute cadence. Figures: Flux's
status writes per minute (the API server's request counter), webhook calls per minute per
endpoint (our server's request counters), our server's CPU (master and workers, /proc).

Then, alternating rounds (none, conditions, no conditions), `--writes` sequential status writes
of an ungated ImagePolicy (no running controller writes it): median and p95 latency, and what
each variant adds to "none". Last, with the conditions registered and our server stopped: a
status write and an edit of every object (driven), or an edit of every object, a new commit and
a new chart version (real controllers); ungated objects' writes must succeed and their new
content land, gated ones' must fail closed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matchconditions_flux as real  # noqa: E402  (bench/, next to this script)

from admission.core.admission import matching
from admission.core.base import names  # noqa: E402
from admission.core.flux import kinds
from admission.kube.client import api_client  # noqa: E402
from tests.builders import gate  # noqa: E402
from tests.e2e.conftest import pre_1_30_webhooks, prepared, register_webhooks  # noqa: E402
from tests.e2e.controlplane import (
    FLUX,
    GATE_ADMISSION,
    HELM_CONTROLLER,
    IMAGE_REFLECTOR,
    SOURCE_CONTROLLER,
    ControlPlane,
    assets_dir,
)  # noqa: E402
from tests.matching_cases import artifact, condition, obj  # noqa: E402
from tests.polling import until  # noqa: E402
from tests.processes import GateServer  # noqa: E402
from tests.procfs import children  # noqa: E402

GATE = "flux-system/bench-open"
WRITER = {
    "Kustomization": FLUX,
    "HelmRelease": HELM_CONTROLLER,
    "GitRepository": SOURCE_CONTROLLER,
    "HelmChart": SOURCE_CONTROLLER,
    "HelmRepository": SOURCE_CONTROLLER,
    "ImagePolicy": IMAGE_REFLECTOR,
}
# The probes and the object whose writes are timed: ImagePolicies, which no controller started
# here reconciles (with --real-flux, a GitRepository of our own would be the controllers' too).
IMAGE_POLICY = {"imageRepositoryRef": {"name": "none"}, "policy": {"semver": {"range": ">=1.0.0"}}}
REVIEWS = "gate_admission_reviews_total{"
TICK = os.sysconf("SC_CLK_TCK")


def objects(count: int, gated: float) -> list[dict]:
    """``count`` objects: 40% Kustomizations, 30% GitRepositories, 15% HelmReleases each with
    its generated HelmChart; ``gated`` of all of them reference the gate, spread evenly over the
    objects that are not charts (a generated chart inherits its release's gates)."""
    releases = round(count * 0.15)
    plain = count - 2 * releases
    owners = plain + releases  # the objects that can reference a gate themselves
    target = min(owners, round(count * gated))
    referencing = {round(j * owners / target) for j in range(target)} if target else set()
    numbered = itertools.count()

    def annotations() -> dict | None:
        return {names.GATES_ANNOTATION: GATE} if next(numbered) in referencing else None

    out: list[dict] = []
    for i in range(plain):
        kind = "Kustomization" if i % 7 < 4 else "GitRepository"
        out.append(obj(kind, f"{kind.lower()}-{i}", annotations=annotations()))
    for i in range(releases):
        out.append(obj("HelmRelease", f"release-{i}", annotations=annotations()))
        out.append(
            obj(
                "HelmChart",
                f"apps-release-{i}",
                namespace="flux-system",
                labels={names.HELM_NAME_LABEL: f"release-{i}", names.HELM_NAMESPACE_LABEL: "apps"},
            )
        )
    return out


def is_gated(manifest: dict) -> bool:
    return names.GATES_ANNOTATION in (manifest["metadata"].get("annotations") or {})


def _where(manifest: dict) -> tuple[str, str, str, str, str]:
    group, version = manifest["apiVersion"].split("/")
    meta = manifest["metadata"]
    return group, version, meta["namespace"], kinds.BY_KIND[manifest["kind"]].plural, meta["name"]


class Flux:
    """Status writes as the Flux controllers send them, one client per controller."""

    def __init__(self, plane):
        self.apis = {
            kind: client.CustomObjectsApi(self._client(plane, user)) for kind, user in WRITER.items()
        }
        self.reconciles: dict[str, int] = {}
        self.lock = threading.Lock()
        self.conflicts = 0

    @staticmethod
    def _client(plane, user) -> client.ApiClient:
        api = api_client(str(plane.kubeconfig(user)))
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
        return api

    def reconcile(self, manifest: dict) -> None:
        api = self.apis[manifest["kind"]]
        key = f"{manifest['kind']}/{manifest['metadata']['name']}"
        with self.lock:
            n = self.reconciles[key] = self.reconciles.get(key, 0) + 1
        where = _where(manifest)
        for _ in range(5):  # Flux retries only Conflict: 5 steps
            current = api.get_namespaced_custom_object_status(*where)
            first = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {
                    "conditions": [
                        condition("Ready", "Unknown", "Progressing"),
                        condition("Reconciling", "True", "Progressing"),
                    ]
                },
            }
            try:
                api.patch_namespaced_custom_object_status(*where, first)
                break
            except ApiException as err:
                if err.status != 409:
                    raise
                with self.lock:
                    self.conflicts += 1
        rest: dict = {
            "observedGeneration": 1,
            "lastHandledReconcileAt": str(n),
            "conditions": [condition("Ready")],
        }
        if manifest["kind"] in kinds.SOURCE_KINDS:
            rest["artifact"] = artifact(f"main@sha1:{n // 3:04d}")  # a new revision every third reconcile
        api.patch_namespaced_custom_object_status(*where, {"status": rest})


def server_cpu(server: GateServer) -> float:
    """CPU seconds used so far by our server's master and its workers (and their children)."""
    total = 0.0
    pending = [server.pid]
    while pending:
        pid = pending.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        pending += children(pid)
    return total


def reached(server: GateServer, kind: str = "") -> dict[str, float]:
    """Reviews answered so far per endpoint (of ``kind`` only, when given)."""
    counts = {matching.VALIDATE: 0.0, matching.MUTATE: 0.0}
    for sample, value in server.metrics().items():
        if sample.startswith(REVIEWS) and (not kind or f'kind="{kind}"' in sample):
            for endpoint in counts:
                if f'webhook="{endpoint}"' in sample:
                    counts[endpoint] += value
    return counts


def calls(server: GateServer) -> float:
    """Reviews of the probes (ImagePolicies, which no running controller writes)."""
    return sum(reached(server, "ImagePolicy").values())


def switch(plane, server: GateServer, variant: str, work: Path, probes: dict[str, dict], flux: Flux) -> None:
    """Register ``variant`` (none, conditions, all) and wait until the API server uses it."""
    if variant == "none":
        plane.kubectl(
            "delete",
            "validatingwebhookconfiguration,mutatingwebhookconfiguration",
            "gate-admission",
            "--ignore-not-found",
        )
    else:
        register_webhooks(
            plane,
            server,
            kustomization=(
                pre_1_30_webhooks(work) if variant == "all" else plane_root() / "manifests" / "webhooks"
            ),
        )

    def sent(manifest: dict) -> bool:
        before = calls(server)
        flux.reconcile(manifest)
        return calls(server) > before

    # The API server loads configurations asynchronously: until three writes in a row agree.
    want = {"none": (False, False), "conditions": (True, False), "all": (True, True)}[variant]
    agreed = until(
        lambda: all((sent(probes["gated"]), sent(probes["free"])) == want for _ in range(3)), bool, timeout=30
    )
    assert agreed, f"the API server did not switch to {variant}"


def plane_root() -> Path:
    return Path(__file__).resolve().parents[1]


def load(
    plane, server: GateServer, flux: Flux, manifests: list[dict], seconds: float, interval: float
) -> dict:
    """Every object reconciled every ``interval`` seconds for ``seconds``, staggered."""
    slot = interval / len(manifests)
    failures: list[str] = []
    before_calls, before_cpu, started = reached(server), server_cpu(server), time.monotonic()
    before_writes = real.status_writes(plane)
    done = [0]

    def one(manifest: dict) -> None:
        try:
            flux.reconcile(manifest)
            done[0] += 1
        except ApiException as err:
            failures.append(f"{manifest['metadata']['name']}: {err.status}")

    with ThreadPoolExecutor(max_workers=16) as pool:
        for n in itertools.count():
            due = started + n * slot
            if due - started >= seconds:
                break
            time.sleep(max(0.0, due - time.monotonic()))  # a benchmark's schedule, not a test's wait
            pool.submit(one, manifests[n % len(manifests)])
    elapsed = time.monotonic() - started
    after_calls, after_cpu = reached(server), server_cpu(server)
    minutes = elapsed / 60
    return {
        "minutes": minutes,
        "reconciles": done[0],
        "failures": failures,
        "writes": (real.status_writes(plane) - before_writes) / minutes,
        "calls": {e: (after_calls[e] - before_calls[e]) / minutes for e in after_calls},
        "cpu": (after_cpu - before_cpu) / elapsed,
    }


def latencies(flux: Flux, manifest: dict, writes: int) -> list[float]:
    api = flux.apis[manifest["kind"]]
    where = _where(manifest)
    out = []
    for i in range(writes):
        started = time.perf_counter()
        api.patch_namespaced_custom_object_status(*where, {"status": {"lastHandledReconcileAt": f"lat-{i}"}})
        out.append((time.perf_counter() - started) * 1000)
    return out


def outage(plane, flux: Flux, manifests: list[dict]) -> dict[str, int]:
    """With our server stopped: a status write and an edit of every object, counted by outcome."""
    admin = client.CustomObjectsApi(api_client(str(plane.kubeconfig())))
    out: dict[str, int] = {}
    for manifest in manifests:
        group = ("gated " if is_gated(manifest) else "ungated ") + manifest["kind"]
        for what, write in (
            ("status write", lambda m=manifest: flux.reconcile(m)),
            (
                "edit",
                lambda m=manifest: admin.patch_namespaced_custom_object(
                    *_where(m), {"metadata": {"labels": {"edited": "yes"}}}
                ),
            ),
        ):
            try:
                write()
                outcome = "succeeded"
            except ApiException as err:
                if err.status != 500 or "failed calling webhook" not in str(err.body):
                    raise
                outcome = "failed closed"
            key = f"{group}, {what} {outcome}"
            out[key] = out.get(key, 0) + 1
    return out


def probe_objects(plane, flux: Flux) -> dict[str, dict]:
    probes = {
        "gated": {
            "apiVersion": "image.toolkit.fluxcd.io/v1",
            "kind": "ImagePolicy",
            "metadata": {
                "name": "probe-gated",
                "namespace": "apps",
                "annotations": {names.GATES_ANNOTATION: GATE},
            },
            "spec": IMAGE_POLICY,
        },
        "free": {
            "apiVersion": "image.toolkit.fluxcd.io/v1",
            "kind": "ImagePolicy",
            "metadata": {"name": "probe-free", "namespace": "apps"},
            "spec": IMAGE_POLICY,
        },
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(probes.values())))
    for probe in probes.values():
        flux.reconcile(probe)
    return probes


def window(plane, server: GateServer, seconds: float) -> dict:
    """Webhook calls, our server's CPU and Flux's status writes during ``seconds`` of whatever
    writes the real controllers make."""
    before_calls, before_cpu, before_writes = reached(server), server_cpu(server), real.status_writes(plane)
    started = time.monotonic()
    real.settle(seconds)
    elapsed = time.monotonic() - started
    after_calls, after_cpu, after_writes = reached(server), server_cpu(server), real.status_writes(plane)
    minutes = elapsed / 60
    return {
        "minutes": minutes,
        "writes": (after_writes - before_writes) / minutes,
        "failures": [],
        "calls": {e: (after_calls[e] - before_calls[e]) / minutes for e in after_calls},
        "cpu": (after_cpu - before_cpu) / elapsed,
    }


def real_outage(plane, flux_: real.RealFlux, timeout: float) -> dict[str, int]:
    """With our server stopped: an edit of every object, a new commit and a new chart version.
    Ungated objects must take the new content at their next reconcile; gated ones must not (their
    status writes fail closed), and their edits must be refused."""
    admin = client.CustomObjectsApi(api_client(str(plane.kubeconfig())))
    objects_ = flux_.listed()
    out: dict[str, int] = {}

    def count(key: str) -> None:
        out[key] = out.get(key, 0) + 1

    for o in objects_:
        group = ("gated " if is_gated(o) else "ungated ") + o["kind"]
        try:
            flux_.edit(admin, o)
            count(f"{group}, edit succeeded")
        except ApiException as err:
            if err.status != 500 or "failed calling webhook" not in str(err.body):
                raise
            count(f"{group}, edit failed closed")
    revision, chart = flux_.push("2"), "1.1.0"
    flux_.charts.publish(real.CHART, chart)

    def landed() -> dict[tuple[str, str], bool]:
        return {
            (o["kind"], o["metadata"]["name"]): flux_.new_content(o, revision, chart) for o in flux_.listed()
        }

    gated = {(o["kind"], o["metadata"]["name"]) for o in objects_ if is_gated(o)}
    state = until(
        landed,
        lambda now: all(took for key, took in now.items() if key not in gated),
        timeout=timeout,
        interval=5,
    )
    refused = flux_.refused_in_logs()
    for (kind, name), took in sorted(state.items()):
        if kind == "HelmRepository":
            continue  # its index is content only to its charts
        if (kind, name) not in gated:
            count(f"ungated {kind}, new content " + ("landed" if took else "not landed in time"))
        elif took:
            count(f"gated {kind}, new content LANDED")
        else:
            count(
                f"gated {kind}, new content held: "
                + (
                    "its status write failed closed"
                    if name in refused
                    else "no write of it seen (nothing new reached it)"
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--gated", type=float, default=0.1, help="share of objects that reference a gate")
    parser.add_argument("--seconds", type=float, default=60, help="length of each load phase")
    parser.add_argument(
        "--interval",
        type=float,
        default=10,
        help="seconds between driven reconciles of one object (the real controllers: 1m)",
    )
    parser.add_argument("--writes", type=int, default=200, help="sequential writes per latency round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--real-flux",
        action="store_true",
        help="the real source-, kustomize- and helm-controller make the writes (FLUX_BINARIES)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-matchconditions-"))
    server = flux_ = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-open", default="opened")))
            flux = Flux(plane)
            probes = probe_objects(plane, flux)
            server = GateServer(work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)))
            server.wait_ready()
            loads = {}
            if args.real_flux:
                flux_ = real.RealFlux(plane, work)
                manifests = flux_.objects(args.objects, args.gated, GATE)
                switch(plane, server, "conditions", work, probes, flux)
                flux_.start(manifests)
                releases = sum(m["kind"] == "HelmRelease" for m in manifests)
                ready = flux_.wait_ready(len(manifests) + releases)  # and the generated HelmCharts
                print(f"# {ready} of {len(manifests) + releases} objects Ready", flush=True)
                for variant in ("conditions", "all"):
                    switch(plane, server, variant, work, probes, flux)
                    real.settle(args.seconds / 2)  # past the switch, into the steady cadence
                    loads[variant] = window(plane, server, args.seconds)
            else:
                manifests = objects(args.objects, args.gated)
                plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
                for manifest in manifests:
                    flux.reconcile(manifest)  # a first status, before any webhook
                for variant in ("conditions", "all"):
                    switch(plane, server, variant, work, probes, flux)
                    loads[variant] = load(plane, server, flux, manifests, args.seconds, args.interval)

            rounds: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                for variant in ("none", "conditions", "all"):
                    switch(plane, server, variant, work, probes, flux)
                    latencies(flux, probes["free"], 20)  # the API server's connections to the webhook, warm
                    rounds.setdefault(variant, []).extend(latencies(flux, probes["free"], args.writes))

            switch(plane, server, "conditions", work, probes, flux)
            server.stop()
            down = real_outage(plane, flux_, 420) if flux_ else outage(plane, flux, manifests)
            objects_ = flux_.listed() if flux_ else manifests
        finally:
            if flux_:
                flux_.stop()
            if server:
                server.stop()
    report(args, loads, rounds, down, sum(is_gated(m) for m in objects_), len(objects_))


def report(args, loads: dict, rounds: dict, down: dict, gated: int, total: int) -> None:
    writer = (
        "the real source-, kustomize- and helm-controller (Flux v2.9.4), every object at a 1m interval"
        if args.real_flux
        else "writes driven by this script as Flux sends them (no real controllers)"
    )
    print(
        f"# python bench/matchconditions.py --objects {args.objects} --gated {args.gated} --seconds {args.seconds:g} "
        f"--interval {args.interval:g} --writes {args.writes} --rounds {args.rounds}"
        f"{' --real-flux' if args.real_flux else ''}  |  {os.cpu_count()} cpus, "
        f"kube-apiserver v1.36.3 + etcd on loopback, gate-admission defaults (2 workers x 4 threads); {writer}"
    )
    cadence = (
        "at the controllers' own intervals"
        if args.real_flux
        else f"each reconciles every {args.interval:g} s (2 status requests per reconcile)"
    )
    print(f"{total} objects, {gated} reference a gate; {cadence}")
    print(
        "variant         status writes/min  validate calls/min  mutate calls/min  server CPU (cores)  failed"
    )
    for variant, row in loads.items():
        name = "conditions" if variant == "conditions" else "no conditions"
        print(
            f"{name:<14}  {row['writes']:17.0f}  {row['calls']['validate']:18.0f}  "
            f"{row['calls']['mutate']:16.0f}  {row['cpu']:18.3f}  {len(row['failures']):6d}"
        )
    print(f"ungated ImagePolicy status write, {args.rounds} x {args.writes} writes per variant:")
    none = statistics.median(rounds["none"])
    for variant in ("none", "conditions", "all"):
        lat = sorted(rounds[variant])
        median = statistics.median(lat)
        name = {"none": "no webhook", "conditions": "conditions", "all": "no conditions"}[variant]
        print(
            f"  {name:<14} median {median:6.2f} ms  p95 {lat[int(len(lat) * 0.95)]:6.2f} ms  "
            f"added {median - none:+6.2f} ms"
        )
    print("our server stopped, conditions registered:")
    for outcome, n in sorted(down.items()):
        print(f"  {outcome:<72} {n:4d}")


if __name__ == "__main__":
    main()
