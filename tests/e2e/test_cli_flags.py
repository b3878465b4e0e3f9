"""`kubectl gate`'s kubectl flags against a real API server: `--request-timeout` when the API
server itself is slow (a webhook of its own that never answers, for one Gate), `--watch` seeing
a write, `--no-headers`. Run as typed: kubectl finds the plugin on PATH. tests/app/test_cli_flags.py
has the rest, against ports that count or never answer."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time

import pytest
import yaml

from tests.builders import gate
from tests.e2e.controlplane import ADMIN
from tests.polling import until
from tests.processes import BIN, SilentPort

pytestmark = pytest.mark.e2e
NAMESPACE = "flux-system"


def plugin_env(cluster) -> dict:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig(ADMIN)),
    }


def kubectl_gate(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [cluster.kubectl_path, "gate", *args],
        capture_output=True,
        text=True,
        env=plugin_env(cluster),
        timeout=120,
    )


def hanging_webhook(port: int, label: str) -> str:
    """A validating webhook for the Gates labelled ``label``, at a port that never answers: the
    API server waits its timeoutSeconds on every write of them, then ignores it."""
    return yaml.safe_dump(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": f"e2e-{label}"},
            "webhooks": [
                {
                    "name": f"{label}.e2e.example",
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/never"},
                    "rules": [
                        {
                            "apiGroups": ["gating.toolkit.fluxcd.io"],
                            "apiVersions": ["*"],
                            "operations": ["UPDATE"],
                            "resources": ["gates"],
                        }
                    ],
                    "objectSelector": {"matchLabels": {label: "true"}},
                    "failurePolicy": "Ignore",
                    "timeoutSeconds": 10,
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        }
    )


def test_request_timeout_gives_up_on_a_slow_api_server(cluster):
    never = SilentPort(hold=60)
    label = "slow-answer"
    try:
        slow = gate("slow", NAMESPACE, default="closed")
        slow["metadata"]["labels"] = {label: "true"}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(slow))
        cluster.kubectl("apply", "-f", "-", input=hanging_webhook(never.sock.getsockname()[1], label))
        # The webhook is in force once the API server calls it (it reads configurations as they come).
        until(
            lambda: kubectl_gate(cluster, "open", "slow", "-n", NAMESPACE, "--request-timeout", "1s"),
            lambda _: never.connections > 0,
            timeout=60,
        )
        assert never.connections, "the API server never called the hanging webhook"
        started = time.monotonic()
        gave_up = kubectl_gate(cluster, "close", "slow", "-n", NAMESPACE, "--request-timeout", "1s")
        took = time.monotonic() - started
        assert gave_up.returncode == 5, gave_up.stderr
        assert (
            "did not answer in time (--request-timeout)" in gave_up.stderr
            and "Traceback" not in gave_up.stderr
        )
        assert took < 8, f"{took:.1f}s with --request-timeout 1s and a webhook that waits 10s"
        # The default (30 s) outlasts the webhook's 10 s: the write is made, as the API server answers.
        waited = kubectl_gate(cluster, "open", "slow", "-n", NAMESPACE)
        assert waited.returncode == 0 and waited.stdout.startswith(f"gate {NAMESPACE}/slow opened"), (
            waited.stderr
        )
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", f"e2e-{label}", "--ignore-not-found")
        never.close()


def test_watch_prints_the_answer_again_after_a_write(cluster):
    cluster.kubectl("create", "namespace", "watch-ns")  # its own: no other test's gate changes in it
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("watched", "watch-ns", default="opened")))
    # Just after the CRDs are made, a list of a Flux kind can be answered 429 (its storage starting).
    ready = until(
        lambda: kubectl_gate(cluster, "list", "-n", "watch-ns"), lambda r: r.returncode == 0, timeout=60
    )
    assert ready.returncode == 0, ready.stderr
    watching = subprocess.Popen(
        [cluster.kubectl_path, "gate", "list", "-n", "watch-ns", "--watch", "--no-headers"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=plugin_env(cluster),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watching.stdout], daemon=True).start()
    seen: list[str] = []

    def read() -> list[str]:
        while not lines.empty():
            seen.append(lines.get())
        return seen

    try:
        until(read, lambda s: any("Opened" in line for line in s) or watching.poll() is not None, timeout=30)
        closed = kubectl_gate(cluster, "close", "watched", "-n", "watch-ns", "-m", "seen by the watch")
        assert closed.returncode == 0, closed.stderr
        until(read, lambda s: any("Closed" in line for line in s), timeout=30)
        assert [line.split()[:3] for line in seen if line.strip()] == [
            ["watched", "Opened", "Default"],
            ["watched", "Closed", "CloseRequested"],
        ], seen
    finally:
        # kubectl execs the plugin: the signal reaches it, as a terminal's Ctrl-C does.
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=30)
    assert "Traceback" not in err, err
