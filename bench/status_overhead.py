"""Latency of a Flux status write through a real kube-apiserver: our webhooks vs an allow-all
Go webhook pair (bench/floor) vs none, alternating in one run.

Usage: python bench/status_overhead.py [--writes 300] [--rounds 3]
Starts its own etcd + kube-apiserver (tests/e2e harness: hack/control-plane-binaries.sh, or
$KUBEBUILDER_ASSETS), `gate-admission serve` (cluster store, its defaults) and the Go floor
(built once with the installed go command into ~/.cache/flux-gate-admission/tools: standard
library only, no downloads; bench/through_apiserver.py) on our server's certificate. Each round
registers, in turn (the order rotates each round): no webhooks, the floor, ours
(manifests/webhooks, only the URL differs), and times `--writes` status writes of each of two
gated objects (an open gate): a Kustomization's conditions-only merge patch with a
resourceVersion precondition (Flux's first request of every status patch), and a GitRepository's
status write that keeps its artifact (the second request). Both webhooks see each write. Prints
the command, date, code, API server version and machine load, medians per variant and the ratio
ours / floor (per write, and of the latency added to a write without webhooks), and where the
time goes: the mean time of each webhook call as the API server measures it
(apiserver_admission_webhook_admission_duration_seconds, per webhook type) and, for ours, the
mean time our server spends from decoding a review to encoding its answer
(gate_admission_review_duration_seconds); the difference is transport (TLS, HTTP, the worker).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.kube.client import api_client  # noqa: E402
from bench.through_apiserver import (
    VARIANTS,
    CallTimes,
    Floor,
    median_ratio,
    print_header,
    ratio,
    rotated,  # noqa: E402
    switch,
    uptime,
)
from tests.builders import gate  # noqa: E402
from tests.e2e.conftest import prepared  # noqa: E402
from tests.e2e.controlplane import ALICE, FLUX, GATE_ADMISSION, ControlPlane, assets_dir  # noqa: E402
from tests.e2e.manifests import artifact_patch, git_repository, kustomization  # noqa: E402
from tests.processes import GateServer  # noqa: E402

GROUPS = {
    "Kustomization": ("kustomize.toolkit.fluxcd.io", "v1", "apps", "kustomizations", "bench"),
    "GitRepository": ("source.toolkit.fluxcd.io", "v1", "flux-system", "gitrepositories", "bench"),
}


def status_writes(api: client.CustomObjectsApi, kind: str, writes: int) -> list[float]:
    group, version, namespace, plural, name = GROUPS[kind]
    out = []
    for i in range(writes):
        if kind == "Kustomization":
            current = api.get_namespaced_custom_object_status(group, version, namespace, plural, name)
            body = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "Unknown",
                            "reason": "Progressing",
                            "message": f"Reconciliation in progress {i}",
                            "lastTransitionTime": "2026-11-22T00:00:00Z",
                        }
                    ]
                },
            }
        else:
            body = {"status": {"observedGeneration": 1, "lastHandledReconcileAt": str(i)}}
        started = time.perf_counter()
        api.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name, body, _content_type="application/merge-patch+json"
        )
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--server-args", default="", help="more `gate-admission serve` flags, e.g. '--threads 1'"
    )
    args = parser.parse_args()
    started_load = uptime()
    work = Path(tempfile.mkdtemp(prefix="bench-status-"))
    server = floor = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-gate")))
            plane.kubectl(
                "apply", "-f", "-", input=kustomization("bench", gates="flux-system/bench-gate"), user=ALICE
            )
            plane.kubectl("apply", "-f", "-", input=git_repository("bench", gates="flux-system/bench-gate"))
            server = GateServer(
                work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)), *args.server_args.split()
            )
            server.wait_ready()
            floor = Floor(work, server.cert_dir)
            api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(FLUX))))
            group, version, namespace, plural, name = GROUPS["GitRepository"]
            api.patch_namespaced_custom_object_status(
                group, version, namespace, plural, name, yaml.safe_load(artifact_patch("main@sha1:1"))
            )
            for kind in GROUPS:
                status_writes(api, kind, 30)  # warm the client's connection
            results: dict[tuple[str, str], list[float]] = {}
            per_round: list[dict[tuple[str, str], float]] = []
            calls = CallTimes(plane, server)
            for r in range(args.rounds):
                medians = {}
                for variant in rotated(r):
                    switch(plane, server, floor, variant)
                    for kind in GROUPS:
                        status_writes(api, kind, 20)  # the API server opens its webhook connections
                    with calls.measure(variant):
                        for kind in GROUPS:
                            lat = status_writes(api, kind, args.writes)
                            results.setdefault((variant, kind), []).extend(lat)
                            medians[(variant, kind)] = statistics.median(lat)
                per_round.append(medians)
                print(
                    f"# round {r + 1}/{args.rounds}: "
                    + ", ".join(
                        f"{kind} {'/'.join(f'{medians[(v, kind)]:.2f}' for v in VARIANTS)} ms"
                        for kind in GROUPS
                    ),
                    file=sys.stderr,
                    flush=True,
                )
            print_header(
                plane,
                "gate-admission serve defaults"
                + (f" + {args.server_args}" if args.server_args else "")
                + "; floor: bench/floor (Go, allow-all)",
                started_load,
            )
            report(results, per_round)
            calls.report()
        finally:
            for proc in (floor, server):
                if proc:
                    proc.stop()


def report(
    results: dict[tuple[str, str], list[float]], per_round: list[dict[tuple[str, str], float]]
) -> None:
    print("write                      variant  median ms  p95 ms   added ms   (all writes of all rounds)")
    for kind in GROUPS:
        base = statistics.median(results[("none", kind)])
        medians = {}
        for variant in VARIANTS:
            lat = sorted(results[(variant, kind)])
            medians[variant] = statistics.median(lat)
            print(
                f"{kind + ' status':<26} {variant:>7}  {medians[variant]:9.2f}  {lat[int(len(lat) * 0.95)]:6.2f}"
                f"  {medians[variant] - base:9.2f}"
            )
        added_floor, added_ours = medians["floor"] - base, medians["ours"] - base
        print(
            f"{'':<26} ours/floor: {medians['ours'] / medians['floor']:.2f}x per write, "
            f"{added_ours / added_floor if added_floor > 0 else float('nan'):.2f}x of the added latency "
            f"(ours adds {added_ours:.2f} ms, the floor {added_floor:.2f} ms)"
        )
        per_write = [m[("ours", kind)] / m[("floor", kind)] for m in per_round]
        added = [
            (m[("ours", kind)] - m[("none", kind)], m[("floor", kind)] - m[("none", kind)]) for m in per_round
        ]
        print(
            f"{'':<26} per round, ours/floor per write: "
            + ", ".join(f"{x:.2f}x" for x in per_write)
            + "; of the added latency: "
            + ", ".join(ratio(*pair) for pair in added)
        )
        print(
            f"{'':<26} median over rounds of the per-round ratios: {statistics.median(per_write):.2f}x per write, "
            f"{median_ratio(added)} of the added latency"
        )


if __name__ == "__main__":
    main()
