"""Latency a write gains when our webhooks are registered, through a real kube-apiserver.

Usage: python bench/apiserver_overhead.py [--writes 400] [--rounds 3]
Starts its own etcd + kube-apiserver (tests/e2e harness) and `gate-admission serve` (cluster
store, its defaults), then alternates rounds without and with the webhooks
registered (A/B/A/B...), each round patching a gated Kustomization's labels `--writes` times
with the Python client (one connection, sequential). Both webhooks are called for every write
(mutate, then validate). Reports the median and p95 per round and the median added latency.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.kube.client import api_client  # noqa: E402
from tests.builders import gate  # noqa: E402
from tests.e2e.conftest import prepared, register_webhooks, wait_until_webhooks_answer  # noqa: E402
from tests.e2e.controlplane import ALICE, GATE_ADMISSION, ControlPlane, assets_dir  # noqa: E402
from tests.e2e.manifests import kustomization  # noqa: E402
from tests.polling import until  # noqa: E402
from tests.processes import GateServer  # noqa: E402


def round_latencies(api: client.CustomObjectsApi, writes: int) -> list[float]:
    out = []
    for i in range(writes):
        started = time.perf_counter()
        api.patch_namespaced_custom_object("kustomize.toolkit.fluxcd.io", "v1", "apps", "kustomizations", "bench",
                                           {"metadata": {"labels": {"n": str(i)}}})
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    server = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("bench-gate")))
            plane.kubectl("apply", "-f", "-", input=kustomization("bench", gates="flux-system/bench-gate"), user=ALICE)
            server = GateServer(work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)))
            server.wait_ready()
            api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(ALICE))))
            round_latencies(api, 50)  # warm the client's connection
            rows = []
            for r in range(args.rounds):
                for registered in (False, True):
                    if registered:
                        register_webhooks(plane, server)
                        wait_until_webhooks_answer(plane, server)
                    else:
                        plane.kubectl("delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration",
                                      "gate-admission", "--ignore-not-found")
                        until(lambda: plane.kubectl("get", "validatingwebhookconfigurations", "-o", "name").stdout,
                              lambda out: "gate-admission" not in out)
                    round_latencies(api, 20)  # let the API server open its webhook connections
                    lat = round_latencies(api, args.writes)
                    rows.append((r, registered, statistics.median(lat), sorted(lat)[int(len(lat) * 0.95)]))
            print(f"# python bench/apiserver_overhead.py --writes {args.writes} --rounds {args.rounds}  |  "
                  f"{os.cpu_count()} cpus, kube-apiserver v1.20.2 + etcd on loopback, gate-admission defaults (2 workers x 4 threads)")
            print("round  webhooks  median ms  p95 ms")
            for r, registered, median, p95 in rows:
                print(f"{r:>5}  {'yes' if registered else 'no':>8}  {median:9.2f}  {p95:6.2f}")
            without = statistics.median([m for _, reg, m, _ in rows if not reg])
            with_ = statistics.median([m for _, reg, m, _ in rows if reg])
            print(f"median added latency per write (mutate + validate): {with_ - without:.2f} ms "
                  f"({without:.2f} -> {with_:.2f} ms)")
        finally:
            if server:
                server.stop()


if __name__ == "__main__":
    main()
