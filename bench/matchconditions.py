"""What matchConditions save, through a real kube-apiserver: webhook calls per minute and our
server's CPU under a Flux-like write load with and without the conditions, the latency a write
of an ungated object gains, and what an outage of our server fails.

Usage: python bench/matchconditions.py [--objects 200] [--gated 0.1] [--seconds 60] [--interval 10]
                                       [--writes 200] [--rounds 3]
Starts its own etcd + kube-apiserver with the real Flux CRDs and manifests/flux-crd-patches
(tests/e2e harness) and `gate-admission serve` (cluster store, its defaults: 2 workers), and
creates `--objects` Flux objects of which `--gated` reference an open gate: Kustomizations,
GitRepositories, HelmReleases and the HelmChart helm-controller would generate for each
(labelled with its HelmRelease, as helm-controller does).

The writes are driven here, as the Flux controllers send them (FLUX-WRITES.md, "Common to every
controller"): each reconcile is one status patch call, two requests to `<kind>/status` as the
controller's service account: the conditions as a merge patch with the resourceVersion as a
precondition, then the rest of status (observedGeneration, lastHandledReconcileAt; for a source
every third reconcile a new artifact). Every object reconciles every `--interval` seconds, in
a staggered schedule, for `--seconds`, once with manifests/webhooks (conditions) and once with
manifests/components/pre-1.30 (none). Figures: webhook calls per minute per endpoint (our
server's request counters), our server's CPU (master and workers, /proc), writes done.
The real Flux controllers are not run: with sources they cannot fetch, their writes would be
error retries with backoff, not a steady reconcile load.

Then, alternating rounds (none, conditions, no conditions), `--writes` sequential status writes
of an ungated GitRepository: median and p95 latency, and what each variant adds to "none".
Last, with the conditions registered and our server stopped: a status write and an edit of every
object; ungated objects' must succeed, gated ones' must fail closed.
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

from admission.core import kinds, matching, names  # noqa: E402
from admission.kube.client import api_client  # noqa: E402
from tests.builders import gate  # noqa: E402
from tests.e2e.conftest import pre_1_30_webhooks, prepared, register_webhooks  # noqa: E402
from tests.e2e.controlplane import FLUX, GATE_ADMISSION, HELM_CONTROLLER, SOURCE_CONTROLLER, ControlPlane, \
    assets_dir  # noqa: E402
from tests.matching_cases import SPECS, artifact, condition, obj  # noqa: E402
from tests.polling import until  # noqa: E402
from tests.processes import GateServer  # noqa: E402
from tests.procfs import children  # noqa: E402

GATE = "flux-system/bench-open"
WRITER = {"Kustomization": FLUX, "HelmRelease": HELM_CONTROLLER, "GitRepository": SOURCE_CONTROLLER,
          "HelmChart": SOURCE_CONTROLLER}
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
        out.append(obj("HelmChart", f"apps-release-{i}", namespace="flux-system", labels={
            names.HELM_NAME_LABEL: f"release-{i}", names.HELM_NAMESPACE_LABEL: "apps"}))
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
        self.apis = {kind: client.CustomObjectsApi(self._client(plane, user)) for kind, user in WRITER.items()}
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
            first = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                     "status": {"conditions": [condition("Ready", "Unknown", "Progressing"),
                                               condition("Reconciling", "True", "Progressing")]}}
            try:
                api.patch_namespaced_custom_object_status(*where, first)
                break
            except ApiException as err:
                if err.status != 409:
                    raise
                with self.lock:
                    self.conflicts += 1
        rest: dict = {"observedGeneration": 1, "lastHandledReconcileAt": str(n),
                      "conditions": [condition("Ready")]}
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
        fields = stat[stat.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        pending += children(pid)
    return total


def reached(server: GateServer) -> dict[str, float]:
    counts = {matching.VALIDATE: 0.0, matching.MUTATE: 0.0}
    for sample, value in server.metrics().items():
        if sample.startswith(REVIEWS):
            for endpoint in counts:
                if f'endpoint="{endpoint}"' in sample:
                    counts[endpoint] += value
    return counts


def calls(server: GateServer) -> float:
    return sum(reached(server).values())


def switch(plane, server: GateServer, variant: str, work: Path, probes: dict[str, dict], flux: Flux) -> None:
    """Register ``variant`` (none, conditions, all) and wait until the API server uses it."""
    if variant == "none":
        plane.kubectl("delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration", "gate-admission",
                      "--ignore-not-found")
    else:
        register_webhooks(plane, server, kustomization=(pre_1_30_webhooks(work) if variant == "all"
                                                        else plane_root() / "manifests" / "webhooks"))

    def sent(manifest: dict) -> bool:
        before = calls(server)
        flux.reconcile(manifest)
        return calls(server) > before

    # The API server loads configurations asynchronously: until three writes in a row agree.
    want = {"none": (False, False), "conditions": (True, False), "all": (True, True)}[variant]
    agreed = until(lambda: all((sent(probes["gated"]), sent(probes["free"])) == want for _ in range(3)), bool,
                   timeout=30)
    assert agreed, f"the API server did not switch to {variant}"


def plane_root() -> Path:
    return Path(__file__).resolve().parents[1]


def load(plane, server: GateServer, flux: Flux, manifests: list[dict], seconds: float, interval: float) -> dict:
    """Every object reconciled every ``interval`` seconds for ``seconds``, staggered."""
    slot = interval / len(manifests)
    failures: list[str] = []
    before_calls, before_cpu, started = reached(server), server_cpu(server), time.monotonic()
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
    return {"minutes": minutes, "reconciles": done[0], "failures": failures,
            "calls": {e: (after_calls[e] - before_calls[e]) / minutes for e in after_calls},
            "cpu": (after_cpu - before_cpu) / elapsed}


def latencies(flux: Flux, manifest: dict, writes: int) -> list[float]:
    api = flux.apis[manifest["kind"]]
    where = _where(manifest)
    out = []
    for i in range(writes):
        started = time.perf_counter()
        api.patch_namespaced_custom_object_status(*where, {"status": {"lastHandledReconcileAt": f"lat-{i}"}})
        out.append((time.perf_counter() - started) * 1000)
    return out


def outage(plane, flux: Flux, manifests: list[dict]) -> dict[str, list[int]]:
    """With our server stopped: [succeeded, failed] per group, for a status write and an edit."""
    admin = client.CustomObjectsApi(api_client(str(plane.kubeconfig())))
    out: dict[str, list[int]] = {}
    for manifest in manifests:
        group = ("gated " if is_gated(manifest) else "ungated ") + manifest["kind"]
        for what, write in (("status", lambda m=manifest: flux.reconcile(m)),
                            ("edit", lambda m=manifest: admin.patch_namespaced_custom_object(
                                *_where(m), {"metadata": {"labels": {"edited": "yes"}}}))):
            row = out.setdefault(f"{group}, {what}", [0, 0])
            try:
                write()
                row[0] += 1
            except ApiException as err:
                if err.status != 500 or "failed calling webhook" not in str(err.body):
                    raise
                row[1] += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--gated", type=float, default=0.1, help="share of objects that reference a gate")
    parser.add_argument("--seconds", type=float, default=60, help="length of each load phase")
    parser.add_argument("--interval", type=float, default=10, help="seconds between reconciles of one object")
    parser.add_argument("--writes", type=int, default=200, help="sequential writes per latency round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-matchconditions-"))
    server = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            manifests = objects(args.objects, args.gated)
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-open", default="opened")))
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
                [{k: v for k, v in m.items() if k != "status"} for m in manifests]))
            flux = Flux(plane)
            for manifest in manifests:
                flux.reconcile(manifest)  # a first status, before any webhook
            free = obj("GitRepository", "latency", spec=SPECS["GitRepository"])
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(free))
            probes = {"gated": next(m for m in manifests if is_gated(m) and m["kind"] == "GitRepository"),
                      "free": free}
            server = GateServer(work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)))
            server.wait_ready()

            loads = {}
            for variant in ("conditions", "all"):
                switch(plane, server, variant, work, probes, flux)
                loads[variant] = load(plane, server, flux, manifests, args.seconds, args.interval)

            rounds: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                for variant in ("none", "conditions", "all"):
                    switch(plane, server, variant, work, probes, flux)
                    latencies(flux, free, 20)  # the API server's connections to the webhook, warm
                    rounds.setdefault(variant, []).extend(latencies(flux, free, args.writes))

            switch(plane, server, "conditions", work, probes, flux)
            server.stop()
            down = outage(plane, flux, manifests)
        finally:
            if server:
                server.stop()
    report(args, loads, rounds, down, sum(is_gated(m) for m in manifests), len(manifests))


def report(args, loads: dict, rounds: dict, down: dict, gated: int, total: int) -> None:
    print(f"# python bench/matchconditions.py --objects {args.objects} --gated {args.gated} --seconds {args.seconds:g} "
          f"--interval {args.interval:g} --writes {args.writes} --rounds {args.rounds}  |  {os.cpu_count()} cpus, "
          f"kube-apiserver v1.36.3 + etcd on loopback, gate-admission defaults (2 workers x 4 threads); "
          f"writes driven by this script as Flux sends them (no real controllers)")
    print(f"{total} objects, {gated} reference a gate; each reconciles every {args.interval:g} s "
          f"(2 status requests per reconcile)")
    print("variant         reconciles/min  validate calls/min  mutate calls/min  server CPU (cores)  failed")
    for variant, row in loads.items():
        name = "conditions" if variant == "conditions" else "no conditions"
        print(f"{name:<14}  {row['reconciles'] / row['minutes']:14.0f}  {row['calls']['validate']:18.0f}  "
              f"{row['calls']['mutate']:16.0f}  {row['cpu']:18.3f}  {len(row['failures']):6d}")
    print(f"ungated GitRepository status write, {args.rounds} x {args.writes} writes per variant:")
    none = statistics.median(rounds["none"])
    for variant in ("none", "conditions", "all"):
        lat = sorted(rounds[variant])
        median = statistics.median(lat)
        name = {"none": "no webhook", "conditions": "conditions", "all": "no conditions"}[variant]
        print(f"  {name:<14} median {median:6.2f} ms  p95 {lat[int(len(lat) * 0.95)]:6.2f} ms  "
              f"added {median - none:+6.2f} ms")
    print("our server stopped, conditions registered (succeeded / failed closed):")
    for group, (ok, failed) in sorted(down.items()):
        print(f"  {group:<36} {ok:4d} / {failed:4d}")


if __name__ == "__main__":
    main()
