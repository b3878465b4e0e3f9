"""One gate for a fleet, on real clusters: a hub (our server with ``--gates-dir``, its
/calendar.ics behind a token) and two spoke clusters, each its own etcd + kube-apiserver with our
controller and our webhook registered. Each spoke's GateKeeper follows the hub's gate; closing
it on the hub makes every spoke refuse a gated change within one fetch interval, and opening it
lets the change through again."""

from __future__ import annotations

import base64
import time
from contextlib import ExitStack, contextmanager

import pytest
import yaml

from admission.clock import utcnow
from admission.core.base import names
from admission.core.base.timefmt import format_distinct_time
from tests.builders import gate
from tests.conftest import REPORT, write_gates
from tests.e2e.conftest import controller_running, own_plane, serving, start_server
from tests.e2e.controlplane import GATE_ADMISSION
from tests.e2e.manifests import kustomization
from tests.polling import until
from tests.processes import serving_gates_dir

pytestmark = pytest.mark.e2e
INTERVAL = "2s"  # each spoke fetches the hub's feed every 2 s
TOKEN = "fleet-s3cret"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    (tmp / "calendar-token").write_text(TOKEN + "\n")
    with serving_gates_dir(
        tmp, [gate("freeze", default="opened")], "--calendar-token-file", str(tmp / "calendar-token")
    ) as server:
        yield server


def follow_the_hub(plane, hub) -> None:
    """What a spoke's platform team applies: the token Secret, the controller's right to read it
    (the shipped ClusterRole, bound in this namespace only), the gate and its GateKeeper."""
    ca = base64.b64encode((hub.cert_dir / "ca.crt").read_bytes()).decode()
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "hub-calendar", "namespace": "flux-system"},
                    "stringData": {"token": TOKEN},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {
                        "name": "gate-admission-controller-calendar-secrets",
                        "namespace": "flux-system",
                    },
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "gate-admission-controller-calendar-secrets",
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": "gate-admission-controller",
                            "namespace": "gate-admission-system",
                        }
                    ],
                },
                gate("freeze", default="opened", interval="1s"),
                {
                    "apiVersion": names.GATING_API_VERSION,
                    "kind": names.GATEKEEPER_KIND,
                    "metadata": {"name": "fleet-freeze", "namespace": "flux-system"},
                    "spec": {
                        "gate": "freeze",
                        "calendars": [
                            {
                                "name": "hub",
                                "url": f"{hub.url}/calendar.ics?namespace=flux-system&gate=freeze&days=40",
                                "secretRef": {"name": "hub-calendar"},
                                "caBundle": ca,
                                "interval": INTERVAL,
                            }
                        ],
                    },
                },
            ]
        ),
    )


@pytest.fixture(scope="module")
def spokes(hub, tmp_path_factory):
    with ExitStack() as stack:
        planes = []
        for i in (1, 2):
            tmp = tmp_path_factory.mktemp(f"spoke{i}")
            plane = stack.enter_context(contextmanager(own_plane)(tmp))
            follow_the_hub(plane, hub)
            stack.enter_context(
                serving(plane, start_server(tmp, None, "--kubeconfig", str(plane.kubeconfig(GATE_ADMISSION))))
            )
            stack.enter_context(
                controller_running(
                    plane,
                    tmp,
                    f"spoke{i}",
                    "--no-leader-elect",
                    "--calendar-allow-networks",
                    "127.0.0.0/8",
                    "--calendar-min-interval",
                    "1s",
                )
            )
            planes.append(plane)
        yield planes


def toggle(hub, action: str) -> float:
    """A toggle on the hub's gate, as `kubectl gate` writes it into the hub's gates file."""
    annotation = names.OPEN_ANNOTATION if action == "open" else names.CLOSE_ANNOTATION
    write_gates(
        hub.cert_dir.parent / "gates",
        [
            gate(
                "freeze",
                default="opened",
                annotations={
                    annotation: format_distinct_time(utcnow()),
                    names.REQUESTED_BY_ANNOTATION: "hub-oncall",
                    names.MESSAGE_ANNOTATION: f"fleet {action}",
                },
            )
        ],
    )
    return time.monotonic()


def change(plane):
    """A gated change a spoke's user applies (dry run: only the verdict matters)."""
    return plane.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        check=False,
        input=kustomization("shop", gates="flux-system/freeze"),
    )


def test_a_hub_toggle_reaches_every_spoke_within_one_interval(hub, spokes):
    for plane in spokes:  # the first fetch: until then the spoke's gate is Unknown (closed)
        allowed = until(lambda plane=plane: change(plane), lambda r: r.returncode == 0, timeout=90)
        assert allowed.returncode == 0, allowed.stderr

    closed_at = toggle(hub, "close")
    for i, plane in enumerate(spokes, 1):
        refused = until(lambda plane=plane: change(plane), lambda r: "is held" in r.stderr, timeout=60)
        assert "is held" in refused.stderr and "calendar 'hub'" in refused.stderr, refused.stderr
        REPORT[f"fleet: hub close refused on spoke {i}"] = (
            f"{time.monotonic() - closed_at:.1f}s (interval {INTERVAL})"
        )

    opened_at = toggle(hub, "open")
    for i, plane in enumerate(spokes, 1):
        allowed = until(lambda plane=plane: change(plane), lambda r: r.returncode == 0, timeout=60)
        assert allowed.returncode == 0, allowed.stderr
        REPORT[f"fleet: hub open allowed on spoke {i}"] = (
            f"{time.monotonic() - opened_at:.1f}s (interval {INTERVAL})"
        )
