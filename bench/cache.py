"""Gate cache figures on a real kube-apiserver: memory with N gates, and toggle-to-review latency.

Usage: python bench/cache.py [--gates 10000] [--toggles 20] [--workers 2]
Starts its own etcd + kube-apiserver (tests/e2e harness), creates N Gates and N GateKeepers,
starts `gate-admission serve` on the cluster store, and reports:
  - RSS of the gunicorn master and each worker once every gate is cached;
  - for each toggle: time from the API server accepting the open annotation to the first
    review (posted straight to our server, keep-alive) that is allowed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import orjson
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.core.base.timefmt import format_time  # noqa: E402
from admission.kube.client import api_client  # noqa: E402
from tests.builders import changed, flux, request, review  # noqa: E402
from tests.e2e.conftest import prepared  # noqa: E402
from tests.e2e.controlplane import ADMIN, GATE_ADMISSION, ControlPlane, assets_dir  # noqa: E402
from tests.polling import until  # noqa: E402
from tests.processes import GateServer  # noqa: E402
from tests.procfs import children, rss_mb  # noqa: E402

NS = "flux-system"


def create_many(api: client.CustomObjectsApi, count: int) -> float:
    started = time.monotonic()

    def create(i: int) -> None:
        gate = {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "Gate",
            "metadata": {
                "name": f"g{i:05d}",
                "namespace": NS,
                "annotations": {"gating.toolkit.fluxcd.io/message": "bench"},
            },
            "spec": {"default": "closed" if i % 2 else "opened", "window": "1h", "interval": "1m"},
        }
        keeper = {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "GateKeeper",
            "metadata": {"name": f"k{i:05d}", "namespace": NS},
            "spec": {
                "gate": f"g{i:05d}",
                "timeZone": "Europe/Berlin",
                "cronjob": {"closed": ["* * 24-26 12 *", {"cron": "0 18 * * 5", "duration": "62h"}]},
            },
        }
        api.create_namespaced_custom_object("gating.toolkit.fluxcd.io", "v1alpha1", NS, "gates", gate)
        api.create_namespaced_custom_object("gating.toolkit.fluxcd.io", "v1alpha1", NS, "gatekeepers", keeper)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gates", type=int, default=10000)
    parser.add_argument("--toggles", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    server = None
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(ADMIN))))
            created_in = create_many(api, args.gates)
            # Toggled gates: closed by default, no keeper, so an open toggle flips them.
            for i in range(args.toggles):
                api.create_namespaced_custom_object(
                    "gating.toolkit.fluxcd.io",
                    "v1alpha1",
                    NS,
                    "gates",
                    {
                        "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                        "kind": "Gate",
                        "metadata": {"name": f"toggle-{i}", "namespace": NS},
                        "spec": {"default": "closed"},
                    },
                )
            server = GateServer(
                work,
                "--kubeconfig",
                str(plane.kubeconfig(GATE_ADMISSION)),
                "--workers",
                str(args.workers),
                "--threads",
                "8",
            )
            started = time.monotonic()
            server.wait_ready(timeout=300)
            want = args.gates + args.toggles
            status, detail = until(
                lambda: server.request("GET", "/readyz"),
                lambda r: r[0] == 200 and r[1].get("gates") == want,
                timeout=300,
                interval=0.2,
            )
            synced_in = time.monotonic() - started
            # The gate-admission process is the gunicorn master; its children are the workers.
            master_pid = server.pid
            worker_pids = children(master_pid)

            latencies = []
            conn = server.connection()
            for i in range(args.toggles):
                obj = flux(gates=f"{NS}/toggle-{i}")
                body = orjson.dumps(review(request("UPDATE", changed(obj, path="./v2"), obj)))
                assert server.request("POST", "/validate", body, conn=conn)[1]["response"]["allowed"] is False
                api.patch_namespaced_custom_object(
                    "gating.toolkit.fluxcd.io",
                    "v1alpha1",
                    NS,
                    "gates",
                    f"toggle-{i}",
                    {
                        "metadata": {
                            "annotations": {"open.gate.fluxcd.io/requestedAt": format_time(datetime.now(UTC))}
                        }
                    },
                )
                written = time.monotonic()
                while not server.request("POST", "/validate", body, conn=conn)[1]["response"]["allowed"]:
                    if time.monotonic() - written > 10:
                        raise RuntimeError(f"toggle {i} not seen after 10s")
                latencies.append((time.monotonic() - written) * 1000)
            conn.close()

            print(
                f"# python bench/cache.py --gates {args.gates} --toggles {args.toggles} --workers {args.workers}"
                f"  |  {os.cpu_count()} cpus, kube-apiserver v1.20.2 on loopback"
            )
            print(
                f"created {args.gates} Gates + {args.gates} GateKeepers in {created_in:.1f}s; "
                f"server ready with all cached {synced_in:.1f}s after start"
            )
            print(
                f"RSS master {rss_mb(master_pid):.1f} MB; workers "
                + ", ".join(f"{rss_mb(p):.1f} MB" for p in worker_pids)
            )
            print(
                f"toggle write -> first review that sees it, {len(latencies)} toggles: "
                f"median {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms"
            )
        finally:
            if server:
                server.stop()


if __name__ == "__main__":
    main()
