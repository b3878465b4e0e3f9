"""Latency of a Flux status write through a real kube-apiserver: our webhooks vs an allow-all
Go webhook pair (bench/floor) vs none, alternating in one run.

Usage: python bench/status_overhead.py [--writes 300] [--rounds 3]
Starts its own etcd + kube-apiserver (tests/e2e harness), `gate-admission serve` (cluster
store, its defaults) and the Go floor (built here with GO111MODULE=off: standard library
only, no downloads) on our server's certificate. Each round registers, in turn: no webhooks,
the floor, ours (manifests/webhooks, only the URL differs), and times `--writes` status
writes of each of two gated objects (an open gate): a Kustomization's conditions-only merge
patch with a resourceVersion precondition (Flux's first request of every status patch), and
a GitRepository's status write that keeps its artifact (the second request). Both webhooks
see each write. Reports medians per variant and the ratio ours / floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import ssl
from pathlib import Path

import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.kube.client import api_client  # noqa: E402
from tests.builders import gate  # noqa: E402
from tests.e2e.conftest import SENTINEL, prepared, register_webhooks  # noqa: E402
from tests.e2e.controlplane import ALICE, FLUX, GATE_ADMISSION, ControlPlane, assets_dir  # noqa: E402
from tests.e2e.manifests import artifact_patch, git_repository, kustomization  # noqa: E402
from tests.polling import until  # noqa: E402
from tests.processes import GateServer, Process, free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
GROUPS = {"Kustomization": ("kustomize.toolkit.fluxcd.io", "v1", "apps", "kustomizations", "bench"),
          "GitRepository": ("source.toolkit.fluxcd.io", "v1", "flux-system", "gitrepositories", "bench")}


def build_floor(out: Path) -> Path:
    binary = out / "admission-floor"
    subprocess.run(["go", "build", "-o", str(binary), str(HERE / "floor" / "main.go")], check=True,
                   env={**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "GOCACHE": str(out / "gocache")})
    return binary


def floor_count(port: int, cert_dir: Path) -> int:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/count", context=context, timeout=2) as resp:
        return int(resp.read())


def status_writes(api: client.CustomObjectsApi, kind: str, writes: int) -> list[float]:
    group, version, namespace, plural, name = GROUPS[kind]
    out = []
    for i in range(writes):
        if kind == "Kustomization":
            current = api.get_namespaced_custom_object_status(group, version, namespace, plural, name)
            body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                    "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "Progressing",
                                               "message": f"Reconciliation in progress {i}",
                                               "lastTransitionTime": "2026-11-22T00:00:00Z"}]}}
        else:
            body = {"status": {"observedGeneration": 1, "lastHandledReconcileAt": str(i)}}
        started = time.perf_counter()
        api.patch_namespaced_custom_object_status(group, version, namespace, plural, name, body,
                                                  _content_type="application/merge-patch+json")
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-status-"))
    server = floor = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-gate")))
            plane.kubectl("apply", "-f", "-", input=kustomization("bench", gates="flux-system/bench-gate"), user=ALICE)
            plane.kubectl("apply", "-f", "-", input=git_repository("bench", gates="flux-system/bench-gate"))
            server = GateServer(work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)))
            server.wait_ready()
            port = free_port()
            floor = Process([str(build_floor(work)), "-addr", f"127.0.0.1:{port}", "-cert",
                             str(server.cert_dir / "tls.crt"), "-key", str(server.cert_dir / "tls.key")],
                            work / "floor.log")
            until(lambda: _alive(port, server.cert_dir), bool, timeout=10)
            api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(FLUX))))
            group, version, namespace, plural, name = GROUPS["GitRepository"]
            api.patch_namespaced_custom_object_status(group, version, namespace, plural, name,
                                                      yaml.safe_load(artifact_patch("main@sha1:1")))
            for kind in GROUPS:
                status_writes(api, kind, 30)  # warm the client's connection
            results: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.rounds):
                for variant in ("none", "floor", "ours"):
                    switch(plane, server, port, variant)
                    for kind in GROUPS:
                        status_writes(api, kind, 20)  # the API server opens its webhook connections
                        results.setdefault((variant, kind), []).extend(status_writes(api, kind, args.writes))
            report(args, results)
        finally:
            for proc in (floor, server):
                if proc:
                    proc.stop()


def _alive(port: int, cert_dir: Path) -> bool:
    try:
        floor_count(port, cert_dir)
        return True
    except OSError:
        return False


def switch(plane, server, port: int, variant: str) -> None:
    """Register ``variant``'s webhooks and wait until the API server calls them."""
    plane.kubectl("delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration", "gate-admission",
                  "--ignore-not-found")

    def held() -> bool:
        return "is held" in plane.kubectl("apply", "--dry-run=server", "-f", "-", input=SENTINEL, check=False).stderr

    if variant == "none":
        until(held, lambda h: not h, timeout=30)
        return
    register_webhooks(plane, server, port=port if variant == "floor" else None)
    if variant == "ours":
        until(held, bool, timeout=30)
        return
    before = floor_count(port, server.cert_dir)
    until(lambda: (held(), floor_count(port, server.cert_dir))[1], lambda n: n > before, timeout=30)


def report(args, results: dict[tuple[str, str], list[float]]) -> None:
    print(f"# python bench/status_overhead.py --writes {args.writes} --rounds {args.rounds}  |  {os.cpu_count()} cpus, "
          "kube-apiserver v1.20.2 + etcd on loopback, gate-admission defaults; floor: bench/floor (Go, allow-all)")
    print("write                      variant  median ms  p95 ms   added ms")
    for kind in GROUPS:
        base = statistics.median(results[("none", kind)])
        medians = {}
        for variant in ("none", "floor", "ours"):
            lat = sorted(results[(variant, kind)])
            medians[variant] = statistics.median(lat)
            print(f"{kind + ' status':<26} {variant:>7}  {medians[variant]:9.2f}  {lat[int(len(lat) * 0.95)]:6.2f}"
                  f"  {medians[variant] - base:9.2f}")
        added_floor, added_ours = medians["floor"] - base, medians["ours"] - base
        print(f"{'':<26} ours/floor: {medians['ours'] / medians['floor']:.2f}x per write, "
              f"{added_ours / added_floor if added_floor > 0 else float('nan'):.2f}x of the added latency")


if __name__ == "__main__":
    main()
