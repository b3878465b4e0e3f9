"""What a platform team does to a running installation, measured under a steady write load:
rollouts, a Pod deleted or killed, certificate rotation, scaling to zero, an API server restart.
Each operation prints its figures (failed admissions, wrong verdicts, time to recover)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import (
    FIGURES,
    NS,
    no_webhook_pod,
    pod_objects,
    pods,
    wait_installed,
    wait_webhook_ready,
)
from tests.cluster.load import Window, WriteLoad, steady_load
from tests.polling import until

RATE = 24  # writes per second, both identities together
# Writes a rollout's window must hold to say "no admission failed": a rollout can end in five
# seconds, and a window of a few dozen writes would say little.
ENOUGH = 10 * RATE


@pytest.fixture(scope="module")
def load(cluster, installed):
    with steady_load(cluster, "load", RATE) as running:
        yield running


def window_of(load: WriteLoad):
    """The window being measured now (the innermost)."""
    return load.windows[-1]


def measured(load: WriteLoad, name: str, operation, settle) -> Window:
    """Run ``operation`` under load, wait for ``settle``, keep writing a few more seconds of
    steady state, and record the figures."""
    with load.window(name) as window:
        operation()
        settle()
        tail = max(len(window.outcomes) + 3 * RATE, ENOUGH + 1)
        until(lambda: len(window.outcomes), lambda n: n >= tail, timeout=60, interval=0.2)
    FIGURES.append(window.summary())
    FIGURES.extend(f"  e.g. {entry}" for entry in describe(window))
    return window


def rollout(cluster) -> None:
    cluster.kubectl("rollout", "status", "-n", NS, "deployment/gate-admission", "--timeout=300s", timeout=320)
    wait_webhook_ready(cluster)


def describe(window) -> list:
    """The first three writes of each kind that did not get their verdict, for the failure message."""
    shown: dict[str, list] = {}
    for o in window.failed():
        shown.setdefault(o.kind, [])
        if len(shown[o.kind]) < 3:
            shown[o.kind].append((round(o.at - window.started, 1), o.target.name, o.status, o.message[:300]))
    return [entry for entries in shown.values() for entry in entries]


def test_a_rollout_restart_fails_no_admission(cluster, load):
    window = measured(
        load,
        "rollout restart",
        lambda: cluster.kubectl("rollout", "restart", "-n", NS, "deployment/gate-admission"),
        lambda: rollout(cluster),
    )
    assert len(window.outcomes) > ENOUGH and not window.failed(), describe(window)


def test_an_image_change_fails_no_admission(cluster, load):
    # The same image under a new tag, loaded as a user loads a new build (kind load).
    subprocess.run(
        ["docker", "tag", os.environ.get("GATE_IMAGE", "gate-admission:0.2.0"), "gate-admission:0.2.1"],
        check=True,
        capture_output=True,
    )
    cluster.load_docker_image("gate-admission:0.2.1")

    def change() -> None:
        cluster.kubectl("set", "image", "-n", NS, "deployment/gate-admission", "webhook=gate-admission:0.2.1")

    window = measured(load, "image change (a new tag)", change, lambda: rollout(cluster))
    assert not window.failed(), describe(window)
    images = [pod["spec"]["containers"][0]["image"] for pod in pod_objects(cluster)]
    assert images == ["gate-admission:0.2.1"] * 2


def test_deleting_a_webhook_pod_fails_no_admission(cluster, load):
    victim = pods(cluster)[0]

    def replaced() -> None:
        gone = until(
            lambda: cluster.kubectl("get", "pod", "-n", NS, victim, check=False).returncode,
            bool,
            timeout=120,
            interval=1,
        )
        assert gone, f"{victim} still exists"
        wait_webhook_ready(cluster)

    window = measured(
        load,
        "delete one webhook Pod",
        lambda: cluster.kubectl("delete", "pod", "-n", NS, victim, "--wait=false"),
        replaced,
    )
    assert victim not in pods(cluster)
    assert not window.failed(), describe(window)


def serving_masters() -> list[int]:
    """The webhook containers' PID 1 (the gunicorn master) as the machine sees them."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_name = Path(f"/proc/{parent}/comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue
        if (
            b"serve" in cmdline
            and any(part.endswith(b"gate-admission") for part in cmdline)
            and parent_name.startswith("containerd-shim")
        ):
            found.append(int(proc.name))
    return found


def test_a_sigkilled_webhook_process_is_measured(cluster, load):
    """SIGKILL gives the server no chance to drain: connections to it break until the kubelet
    restarts it and the endpoints drop it. Measured and documented (docs/operations.md)."""
    masters = until(serving_masters, lambda found: len(found) == 2, timeout=30)
    assert len(masters) == 2, masters

    def restarts() -> int:
        return sum(pod["status"]["containerStatuses"][0]["restartCount"] for pod in pod_objects(cluster))

    before = restarts()
    window = measured(
        load,
        "SIGKILL of one webhook process",
        lambda: os.kill(masters[0], signal.SIGKILL),
        lambda: (until(restarts, lambda n: n > before, timeout=60), wait_webhook_ready(cluster)),
    )
    assert restarts() > before
    assert not [o for o in window.failed() if o.kind == "wrong"], describe(window)
    assert all(o.target.gated for o in window.failed()), describe(window)  # ungated writes never see us


def test_certificate_rotation_by_the_cronjob_fails_no_admission(cluster, load):
    before = cluster.kubectl(
        "get", "secret", "gate-admission-tls", "-n", NS, "-o", "jsonpath={.data.tls\\.crt}"
    ).stdout
    # The documented one-line command (docs/operations.md, "Rotating the certificate"): a Job from
    # the suspended CronJob whose Job template carries --renew.
    rotate = ("create", "job", "rotate-now", "-n", NS, "--from=cronjob/gate-admission-certs-renew")

    def rotated() -> bool:
        now = cluster.kubectl(
            "get", "secret", "gate-admission-tls", "-n", NS, "-o", "jsonpath={.data.tls\\.crt}"
        ).stdout
        return now != before and all(
            "serving certificate reloaded" in cluster.kubectl("logs", "-n", NS, pod, check=False).stdout
            for pod in pods(cluster)
        )

    window = measured(
        load,
        "certificate rotation (kubectl create job --from=cronjob/gate-admission-certs-renew)",
        lambda: cluster.kubectl(*rotate),
        lambda: until(rotated, bool, timeout=180, interval=2),
    )
    assert rotated(), cluster.kubectl("logs", "-n", NS, "job/rotate-now", check=False).stdout
    assert not window.failed(), describe(window)


def test_scaled_to_zero_gated_writes_fail_closed_and_ungated_pass(cluster, load):
    def scale(replicas: int) -> None:
        cluster.kubectl("scale", "-n", NS, "deployment/gate-admission", f"--replicas={replicas}")

    with load.window("scaled to zero") as down:
        scale(0)
        gone = until(lambda: no_webhook_pod(cluster), bool, timeout=120, interval=1)
        assert gone, cluster.kubectl("get", "pods", "-n", NS).stdout
        seen = len(down.outcomes)
        until(lambda: len(down.outcomes), lambda n: n >= seen + 5 * RATE, timeout=60, interval=0.2)
        at_zero = down.outcomes[seen:]
    FIGURES.append(down.summary())
    gated = [o for o in at_zero if o.target.gated]
    assert gated and all(o.kind == "webhook" for o in gated), describe(down)  # fail closed, never allowed
    ungated = [o for o in at_zero if not o.target.gated]
    assert ungated and all(o.kind == "ok" for o in ungated), describe(down)

    window = measured(load, "scaled back to two", lambda: scale(2), lambda: wait_webhook_ready(cluster))
    recovered = [o for o in window.outcomes if o.at > window.started + window.recovery()]
    assert recovered and all(o.kind == "ok" for o in recovered)
    assert not [o for o in window.failed() if o.kind == "wrong"], describe(window)


def test_an_api_server_restart_recovers(cluster, load):
    """While it restarts, writes fail at the API server (connection refused, then refusals while
    its caches fill); our pods' watches broke meanwhile, so for a while after its /readyz they
    refuse gated writes as "gate state unknown" (failed closed, never allowed), until the watch
    is back. Then every write gets its verdict again."""
    ready: list[float] = []

    def restart() -> None:
        cluster.restart_apiserver()  # returns once /readyz is ok
        ready.append(time.monotonic())

    def settled() -> None:
        wait_installed(cluster)
        tail = until(
            lambda: window_of(load).outcomes[-2 * RATE :],
            lambda last: len(last) == 2 * RATE and all(o.kind == "ok" for o in last),
            timeout=120,
            interval=1,
        )
        assert all(o.kind == "ok" for o in tail), describe(window_of(load))

    window = measured(load, "API server restart", restart, settled)
    after = [o for o in window.outcomes if o.at > ready[0]]
    failed_after = [o for o in after if o.kind != "ok"]
    last = max((o.at for o in failed_after), default=ready[0]) - ready[0]
    FIGURES.append(
        f"  after its /readyz ({ready[0] - window.started:.1f}s after the restart began): {len(after)} "
        f"writes, {len(failed_after)} without their verdict, the last {last:.1f}s after it"
    )
    assert not [o for o in window.outcomes if o.kind == "wrong"], describe(window)
