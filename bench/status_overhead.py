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
see each write. Reports medians per variant and the ratio ours / floor, and where the time
goes: the mean time of each webhook call as the API server measures it
(apiserver_admission_webhook_admission_duration_seconds, per webhook type) and, for ours, the
mean time our server spends from decoding a review to encoding its answer
(gate_admission_review_duration_seconds); the difference is transport (TLS, HTTP, gunicorn).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import re
import ssl
import urllib.request
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


def metric_sums(text: str, name: str, label: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of histogram ``name`` per value of ``label``, added over other labels."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, slot in (("_sum", 0), ("_count", 1)):
            if line.startswith(name + suffix + "{"):
                found = re.search(label + r'="([^"]*)"', line)
                key = found.group(1) if found else ""
                out.setdefault(key, [0.0, 0.0])[slot] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def apiserver_webhooks(plane) -> dict[str, tuple[float, float]]:
    request = urllib.request.Request(f"{plane.server}/metrics", headers={"Authorization": "Bearer admin-token"})
    with urllib.request.urlopen(request, context=ssl._create_unverified_context(), timeout=10) as resp:
        return metric_sums(resp.read().decode(), "apiserver_admission_webhook_admission_duration_seconds", "type")


def ours_handler(server) -> dict[str, tuple[float, float]]:
    with urllib.request.urlopen(f"{server.url}/metrics", context=server.tls(), timeout=10) as resp:
        return metric_sums(resp.read().decode(), "gate_admission_review_duration_seconds", "endpoint")


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
    parser.add_argument("--server-args", default="", help="more `gate-admission serve` flags, e.g. '--threads 1'")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-status-"))
    server = floor = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-gate")))
            plane.kubectl("apply", "-f", "-", input=kustomization("bench", gates="flux-system/bench-gate"), user=ALICE)
            plane.kubectl("apply", "-f", "-", input=git_repository("bench", gates="flux-system/bench-gate"))
            server = GateServer(work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)), *args.server_args.split())
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
            calls: dict[tuple[str, str], list[float]] = {}  # (variant, webhook type) -> [sum, count]
            for _ in range(args.rounds):
                for variant in ("none", "floor", "ours"):
                    switch(plane, server, port, variant)
                    for kind in GROUPS:
                        status_writes(api, kind, 20)  # the API server opens its webhook connections
                    before, handled = apiserver_webhooks(plane), ours_handler(server)
                    for kind in GROUPS:
                        results.setdefault((variant, kind), []).extend(status_writes(api, kind, args.writes))
                    for key, (total, count) in apiserver_webhooks(plane).items():
                        seen = calls.setdefault((variant, key), [0.0, 0.0])
                        seen[0] += total - before.get(key, (0, 0))[0]
                        seen[1] += count - before.get(key, (0, 0))[1]
                    if variant == "ours":
                        for key, (total, count) in ours_handler(server).items():
                            seen = calls.setdefault(("handler", key), [0.0, 0.0])
                            seen[0] += total - handled.get(key, (0, 0))[0]
                            seen[1] += count - handled.get(key, (0, 0))[1]
            report(args, results, calls)
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


def report(args, results: dict[tuple[str, str], list[float]], calls: dict[tuple[str, str], list[float]]) -> None:
    extra = f" --server-args '{args.server_args}'" if args.server_args else ""
    print(f"# python bench/status_overhead.py --writes {args.writes} --rounds {args.rounds}{extra}  |  {os.cpu_count()} cpus, "
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
    print("mean time per webhook call, as the API server sees it (both writes), and in our handler:")
    for (variant, key), (total, count) in sorted(calls.items()):
        if count:
            where = "our handler, decode->encode" if variant == "handler" else f"API server -> {variant}"
            print(f"  {where:<30} {key:<10} {total / count * 1000:7.2f} ms  ({int(count)} calls)")


if __name__ == "__main__":
    main()
