"""The real Flux controllers (and CLI), built from their Go modules by hack/go-binaries.sh, run
as processes against the test control plane, each as its own service-account user."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path

from tests.e2e.controlplane import FLUX_CONTROLLER_USERS, ROOT, ControlPlane
from tests.polling import wait_for
from tests.processes import Process, free_port

FLUX_NAMESPACE = "flux-system"
CONTROLLERS = tuple(FLUX_CONTROLLER_USERS)


def built(what: str) -> Path:
    """The directory hack/go-binaries.sh built (or had cached) for ``what``."""
    out = subprocess.run(
        [str(ROOT / "hack" / "go-binaries.sh"), what], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def flux_dir() -> Path:
    return Path(os.environ["FLUX_BINARIES"]) if os.environ.get("FLUX_BINARIES") else built("flux")


def tools_dir() -> Path:
    """The directory of $TEST_TOOLS (a list, as PATH) that holds the OCI registry, else built."""
    for directory in filter(None, os.environ.get("TEST_TOOLS", "").split(os.pathsep)):
        if (Path(directory) / "registry").is_file():
            return Path(directory)
    return built("tools")


def _healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
        return resp.status == 200


class FluxControllers:
    """The six controllers side by side: distinct ports, source-controller's storage and
    notification-controller's event receiver on loopback, one log file each."""

    def __init__(self, plane: ControlPlane, binaries: Path, workdir: Path):
        self.plane, self.binaries, self.workdir = plane, binaries, workdir
        self.procs: dict[str, Process] = {}
        self.events_port = free_port()
        self.receiver_port = free_port()
        self.storage_port = free_port()
        self.health: dict[str, int] = {}

    def args(self, name: str) -> list[str]:
        health = self.health.setdefault(name, free_port())
        args = [
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--health-addr=127.0.0.1:{health}",
            "--log-level=debug",
        ]
        events = f"http://127.0.0.1:{self.events_port}"
        if name == "notification-controller":
            return args + [
                f"--events-addr=127.0.0.1:{self.events_port}",
                f"--receiverAddr=127.0.0.1:{self.receiver_port}",
            ]
        args.append(f"--events-addr={events}")
        if name == "source-controller":
            storage = self.workdir / "source-storage"
            storage.mkdir(exist_ok=True)
            args += [
                f"--storage-path={storage}",
                f"--storage-addr=127.0.0.1:{self.storage_port}",
                f"--storage-adv-addr=127.0.0.1:{self.storage_port}",
            ]
        if name == "image-reflector-controller":
            database = self.workdir / "image-reflector-db"
            database.mkdir(exist_ok=True)
            args.append(f"--storage-path={database}")
        if name in ("kustomize-controller", "helm-controller"):
            args.append("--requeue-dependency=2s")  # dependsOn waits are re-checked soon, not in 30 s
        return args

    def start(self, *names: str) -> FluxControllers:
        for name in names or CONTROLLERS:
            env = {
                "KUBECONFIG": str(self.plane.kubeconfig(FLUX_CONTROLLER_USERS[name])),
                "RUNTIME_NAMESPACE": FLUX_NAMESPACE,
            }
            self.procs[name] = Process(
                [str(self.binaries / name), *self.args(name)], self.workdir / f"{name}.log", env=env
            )
        for name in names or CONTROLLERS:
            wait_for(lambda name=name: self._ready(name), 60, f"{name} /readyz")
        return self

    def _ready(self, name: str) -> bool:
        proc = self.procs[name]
        if not proc.alive():
            raise RuntimeError(f"{name} exited:\n{proc.log()[-3000:]}")
        return _healthy(self.health[name])

    def restart(self, name: str) -> None:
        self.procs.pop(name).stop()
        self.start(name)

    def log(self, name: str) -> str:
        return self.procs[name].log()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.procs.clear()


def flux_cli(
    plane: ControlPlane, binaries: Path, *args: str, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """The real flux CLI against the test cluster, as an admin types it."""
    return subprocess.run(
        [str(binaries / "flux"), f"--kubeconfig={plane.kubeconfig()}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
