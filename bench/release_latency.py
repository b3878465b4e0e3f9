"""Time from a gate opening to the first apply of the revision that waited, through a real
kube-apiserver, our server and controller, and the Flux controller doubles (tests/doubles/flux).

Usage: python bench/release_latency.py [--cycles 10]
Each cycle: close the gate, push a new commit to the GitRepository (source-controller double),
wait until kustomize-controller's double fails at the lastAttemptedRevision write, then open
the gate (one PATCH of its toggle annotation: time 0) and wait for the double's apply of the
new revision. The doubles' retry backoff starts at 10 minutes here, so only the controller's
``reconcile.fluxcd.io/requestedAt`` can trigger the apply. Reports, per cycle and as median/max:
open -> the double's reconcile starts (our controller's part: watch, gate evaluation, status,
requestedAt, the double's watch) and open -> applied.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.core.base.timefmt import format_time  # noqa: E402
from admission.kube.client import api_client  # noqa: E402
from tests.builders import gate  # noqa: E402
from tests.doubles.flux.kustomize import KustomizeController  # noqa: E402
from tests.doubles.flux.source import SourceController, Storage  # noqa: E402
from tests.e2e.conftest import prepared, register_webhooks, wait_until_webhooks_answer  # noqa: E402
from tests.e2e.controlplane import (
    ADMIN,
    CONTROLLER,
    FLUX,
    GATE_ADMISSION,
    SOURCE_CONTROLLER,  # noqa: E402
    ControlPlane,
    assets_dir,
)
from tests.e2e.test_content_holds import git_repository, kustomization, wait_server_sees  # noqa: E402
from tests.polling import until, wait_for  # noqa: E402
from tests.processes import BIN, GateServer, Process, free_port  # noqa: E402

RETRY_FIRST = 600.0


def toggle(custom: client.CustomObjectsApi, action: str, at: datetime) -> None:
    custom.patch_namespaced_custom_object(
        "gating.toolkit.fluxcd.io",
        "v1alpha1",
        "flux-system",
        "gates",
        "release",
        {"metadata": {"annotations": {f"{action}.gate.fluxcd.io/requestedAt": format_time(at)}}},
    )


def next_second(after: datetime) -> datetime:
    """Toggles are whole seconds and a tie goes to close: wait for a later second."""
    while True:
        now = datetime.now(UTC)
        if format_time(now) > format_time(after):
            return now
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-release-"))
    procs: list[Process] = []
    doubles = []
    with prepared(ControlPlane(work, assets_dir()), work) as plane:
        try:
            server = GateServer(work, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION)))
            procs.append(server)
            server.wait_ready()
            register_webhooks(plane, server)
            wait_until_webhooks_answer(plane, server)
            port = free_port()
            procs.append(
                Process(
                    [
                        str(BIN / "gate-admission"),
                        "controller",
                        "--kubeconfig",
                        str(plane.kubeconfig(CONTROLLER)),
                        "--health-port",
                        str(port),
                    ],
                    work / "controller.log",
                )
            )
            wait_for(lambda: _ready(port), 30, "controller /readyz")
            storage = Storage()
            git = SourceController(
                api_client(str(plane.kubeconfig(SOURCE_CONTROLLER))),
                "GitRepository",
                storage,
                retry_first=RETRY_FIRST,
            ).start()
            kustomize = KustomizeController(
                api_client(str(plane.kubeconfig(FLUX))), storage, retry_first=RETRY_FIRST
            ).start()
            doubles += [git, kustomize]
            plane.kubectl(
                "apply",
                "-f",
                "-",
                input=yaml.safe_dump_all(
                    [
                        gate("release"),
                        git_repository("bench"),
                        kustomization("bench", "bench", gates="flux-system/release"),
                    ]
                ),
            )
            git.push("flux-system", "bench", "main@sha1:0")
            until(lambda: kustomize.applied_to("apps", "bench"), bool, timeout=30)
            custom = client.CustomObjectsApi(api_client(str(plane.kubeconfig(ADMIN))))
            opened = datetime.now(UTC)
            rows = []
            for cycle in range(1, args.cycles + 1):
                closed = next_second(opened)
                toggle(custom, "close", closed)
                revision = f"main@sha1:{cycle}"
                failures = len(kustomize.errors("apps", "bench"))
                wait_server_sees(plane, "release", held=True)  # a push before that would be applied
                git.push("flux-system", "bench", revision)
                errors = until(
                    lambda: kustomize.errors("apps", "bench"),
                    lambda e, failures=failures: len(e) > failures,
                    timeout=30,
                )
                assert "flux-system/release" in errors[-1], errors[-1]
                applied_before = len(kustomize.applied_to("apps", "bench"))
                opened = next_second(closed)
                started = time.monotonic()
                toggle(custom, "open", opened)
                applied = until(
                    lambda: kustomize.applied_to("apps", "bench"),
                    lambda a, applied_before=applied_before: len(a) > applied_before,
                    timeout=60,
                    interval=0.005,
                )
                assert applied[-1].revision == revision and applied[-1].trigger == "requestedAt", applied[-1]
                reconcile = next(
                    r for r in kustomize.reconciles if r.started >= started and r.trigger == "requestedAt"
                )
                rows.append((cycle, reconcile.started - started, applied[-1].at - started))
            report(args, rows)
        finally:
            for double in doubles:
                double.stop()
            for proc in reversed(procs):
                proc.stop()


def _ready(port: int) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
        return resp.status == 200


def report(args, rows) -> None:
    print(
        f"# python bench/release_latency.py --cycles {args.cycles}  |  {os.cpu_count()} cpus, kube-apiserver v1.20.2 "
        "+ etcd on loopback, gate-admission serve + controller defaults, Flux doubles"
    )
    print("cycle  open->reconcile s  open->applied s")
    for cycle, reconcile, applied in rows:
        print(f"{cycle:>5}  {reconcile:17.3f}  {applied:15.3f}")
    for label, index in (("open->reconcile", 1), ("open->applied", 2)):
        values = [row[index] for row in rows]
        print(f"{label}: median {statistics.median(values):.3f} s, max {max(values):.3f} s")


if __name__ == "__main__":
    main()
