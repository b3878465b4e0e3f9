"""Latency a write gains when our webhooks are registered, through a real kube-apiserver, against
the same write through an allow-all Go webhook pair (bench/floor) and through none, in one run.

Usage: python bench/apiserver_overhead.py [--writes 400] [--rounds 3]
Starts its own etcd + kube-apiserver (tests/e2e harness: hack/control-plane-binaries.sh, or
$KUBEBUILDER_ASSETS), `gate-admission serve` (cluster store, its defaults) and the Go floor
(built once with the installed go command into ~/.cache/flux-gate-admission/tools: standard
library only, no downloads; bench/through_apiserver.py) on our server's certificate. Each round
registers, in turn (the order rotates each round): no webhooks, the floor, ours
(manifests/webhooks, only the URL differs), and patches a gated Kustomization's labels
`--writes` times with the Python client (one connection, sequential). Both webhooks are called
for every write (mutate, then validate). Prints the command, date, code, API server version and
machine load, the median and p95 per variant, the latency each adds to a write without webhooks,
the ratio ours / floor (per write, and of the added latency), and the mean time of each webhook
call as the API server measures it.
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
from tests.e2e.controlplane import ALICE, GATE_ADMISSION, ControlPlane, assets_dir  # noqa: E402
from tests.e2e.manifests import kustomization  # noqa: E402
from tests.processes import GateServer  # noqa: E402


def round_latencies(api: client.CustomObjectsApi, writes: int) -> list[float]:
    out = []
    for i in range(writes):
        started = time.perf_counter()
        api.patch_namespaced_custom_object(
            "kustomize.toolkit.fluxcd.io",
            "v1",
            "apps",
            "kustomizations",
            "bench",
            {"metadata": {"labels": {"n": str(i)}}},
        )
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--server-args", default="", help="more `gate-admission serve` flags, e.g. '--threads 1'"
    )
    args = parser.parse_args()
    started_load = uptime()
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    server = floor = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-gate")))
            plane.kubectl(
                "apply", "-f", "-", input=kustomization("bench", gates="flux-system/bench-gate"), user=ALICE
            )
            server = GateServer(
                work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)), *args.server_args.split()
            )
            server.wait_ready()
            floor = Floor(work, server.cert_dir)
            api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(ALICE))))
            round_latencies(api, 50)  # warm the client's connection
            results: dict[str, list[float]] = {}
            per_round: list[dict[str, tuple[float, float]]] = []
            calls = CallTimes(plane, server)
            for r in range(args.rounds):
                row = {}
                for variant in rotated(r):
                    switch(plane, server, floor, variant)
                    round_latencies(api, 20)  # let the API server open its webhook connections
                    with calls.measure(variant):
                        lat = round_latencies(api, args.writes)
                    results.setdefault(variant, []).extend(lat)
                    row[variant] = (statistics.median(lat), sorted(lat)[int(len(lat) * 0.95)])
                per_round.append(row)
                print(
                    f"# round {r + 1}/{args.rounds}: "
                    + " / ".join(f"{row[v][0]:.2f}" for v in VARIANTS)
                    + " ms (none / floor / ours)",
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


def report(results: dict[str, list[float]], per_round: list[dict[str, tuple[float, float]]]) -> None:
    print("round  variant  median ms  p95 ms")
    for r, row in enumerate(per_round):
        for variant in VARIANTS:
            median, p95 = row[variant]
            print(f"{r + 1:>5}  {variant:>7}  {median:9.2f}  {p95:6.2f}")
    print("all rounds:")
    print("variant  median ms  p95 ms  added ms")
    medians = {}
    for variant in VARIANTS:
        lat = sorted(results[variant])
        medians[variant] = statistics.median(lat)
        print(
            f"{variant:>7}  {medians[variant]:9.2f}  {lat[int(len(lat) * 0.95)]:6.2f}  "
            f"{medians[variant] - medians['none']:8.2f}"
        )
    added_floor, added_ours = medians["floor"] - medians["none"], medians["ours"] - medians["none"]
    print(
        f"median added latency per write (mutate + validate): ours {added_ours:.2f} ms, floor {added_floor:.2f} ms"
    )
    print(
        f"ours/floor: {medians['ours'] / medians['floor']:.2f}x per write, "
        f"{ratio(added_ours, added_floor)} of the added latency"
    )
    per_write = [row["ours"][0] / row["floor"][0] for row in per_round]
    added = [(row["ours"][0] - row["none"][0], row["floor"][0] - row["none"][0]) for row in per_round]
    print(
        "per round, ours/floor per write: "
        + ", ".join(f"{x:.2f}x" for x in per_write)
        + "; of the added latency: "
        + ", ".join(ratio(*pair) for pair in added)
    )
    print(
        f"median over rounds of the per-round ratios: {statistics.median(per_write):.2f}x per write, "
        f"{median_ratio(added)} of the added latency"
    )


if __name__ == "__main__":
    main()
