"""Who toggled a Gate (docs/decisions/0096), through a real kube-apiserver, our server and the
controller holding the key: `kubectl gate close` as alice shows alice, verified, in `get` and the
Gate's Events; a stamp the client forged is replaced by the webhook; and with our webhook down
(its address answers nothing) a toggle still lands and shows its identity as unverified.
"""

from __future__ import annotations

import json

import pytest

from admission.core.base import names
from tests.e2e.conftest import controller_running, own_plane, register_webhooks, serving_the_cluster
from tests.e2e.controlplane import ALICE
from tests.e2e.test_operators import kubectl_gate
from tests.polling import until
from tests.processes import free_port

pytestmark = pytest.mark.e2e
NS = "apps"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("toggle-identity"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    with serving_the_cluster(plane, tmp_path_factory.mktemp("toggle-server")) as srv:
        # alice may toggle Gates in apps, and nothing more.
        plane.kubectl(
            "create", "role", "gate-toggler", "-n", NS, "--verb=get,list,watch,patch", "--resource=gates"
        )
        plane.kubectl(
            "create", "rolebinding", "gate-toggler", "-n", NS, "--role=gate-toggler", "--user=alice"
        )
        yield srv


@pytest.fixture(scope="module")
def controller(plane, server, tmp_path_factory):
    key = server.cert_dir / "approval.key"
    with controller_running(
        plane, tmp_path_factory.mktemp("toggle-controller"), "e2e-toggles", "--approval-key-file", str(key)
    ) as proc:
        yield proc


def make_gate(plane, name: str) -> None:
    body = {
        "apiVersion": names.GATING_API_VERSION,
        "kind": names.GATE_KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"default": "opened"},
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(body))
    assert until(lambda: state(plane, name), lambda s: s == names.STATE_OPENED, timeout=30)


def state(plane, name: str) -> str | None:
    got = plane.kubectl("get", "gate", name, "-n", NS, "-o", "json", check=False)
    return json.loads(got.stdout).get("status", {}).get("state") if got.returncode == 0 else None


def shown(plane, name: str) -> dict:
    got = kubectl_gate(plane, "get", name, "-n", NS, "-o", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def event(plane, name: str, reason: str) -> str:
    def messages() -> list[str]:
        got = plane.kubectl(
            "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        return [e["message"] for e in json.loads(got.stdout)["items"] if e["reason"] == reason]

    found = until(messages, bool, timeout=30)
    assert found, f"no {reason} Event for {name}"
    return found[-1]


def stored_stamp(plane, name: str) -> dict | None:
    got = json.loads(plane.kubectl("get", "gate", name, "-n", NS, "-o", "json").stdout)
    raw = got["metadata"].get("annotations", {}).get(names.TOGGLED_BY_ANNOTATION)
    return json.loads(raw) if raw else None


def test_kubectl_gate_close_as_alice_shows_alice_verified_in_get_and_events(plane, server, controller):
    make_gate(plane, "by-alice")
    closed = kubectl_gate(
        plane, "close", "by-alice", "-n", NS, "-m", "incident 7", kubeconfig=plane.kubeconfig(ALICE)
    )
    assert closed.returncode == 0, closed.stderr
    info = until(
        lambda: shown(plane, "by-alice"),
        lambda i: (i.get(names.TOGGLED_BY_FIELD) or {}).get("verified") is True,
        timeout=30,
    )
    who = info[names.TOGGLED_BY_FIELD]
    assert who["user"] == "alice" and "developers" in who["groups"], who
    human = kubectl_gate(plane, "get", "by-alice", "-n", NS).stdout
    assert "Toggled by:    alice (verified)" in human, human
    assert "(by alice (verified))" in event(plane, "by-alice", names.GATE_CLOSED_EVENT)


def test_a_stamp_the_client_forged_is_replaced_by_the_webhook(plane, server, controller):
    make_gate(plane, "forged")
    forged = {"by": "the-ceo", "groups": ["system:masters"], "at": "2026-01-01T00:00:00Z", "seal": "v1:AAAA"}
    patch = {
        "metadata": {
            "annotations": {
                names.CLOSE_ANNOTATION: "2026-01-01T00:00:00.000000Z",
                names.TOGGLED_BY_ANNOTATION: json.dumps(forged),
            }
        }
    }
    written = plane.kubectl(
        "patch", "gate", "forged", "-n", NS, "--type=merge", "-p", json.dumps(patch), user=ALICE, check=False
    )
    assert written.returncode == 0, written.stderr
    assert stored_stamp(plane, "forged")["by"] == "alice"
    # Touching the stamp alone: the webhook puts the one it wrote back.
    again = {"metadata": {"annotations": {names.TOGGLED_BY_ANNOTATION: json.dumps(forged)}}}
    plane.kubectl("patch", "gate", "forged", "-n", NS, "--type=merge", "-p", json.dumps(again), user=ALICE)
    assert stored_stamp(plane, "forged")["by"] == "alice"
    info = until(
        lambda: shown(plane, "forged"),
        lambda i: (i.get(names.TOGGLED_BY_FIELD) or {}).get("verified") is True,
        timeout=30,
    )
    assert info[names.TOGGLED_BY_FIELD]["user"] == "alice"


def test_with_our_webhook_down_a_toggle_lands_and_shows_unverified(plane, server, controller):
    make_gate(plane, "break-glass")
    # Every entry now points at an address where nothing answers: our webhook is down.
    register_webhooks(plane, server, port=free_port())

    # The API server loads the configuration a moment later: until a write is no longer stamped.
    def unstamped_close():
        got = plane.kubectl(
            "patch",
            "gate",
            "break-glass",
            "-n",
            NS,
            "--type=merge",
            "--dry-run=server",
            "-o",
            "json",
            "-p",
            json.dumps(
                {"metadata": {"annotations": {names.CLOSE_ANNOTATION: "2026-01-02T00:00:00.000000Z"}}}
            ),
            check=False,
        )
        return got.returncode == 0 and names.TOGGLED_BY_ANNOTATION not in json.loads(got.stdout)[
            "metadata"
        ].get("annotations", {})

    assert until(unstamped_close, bool, timeout=30), "the API server kept calling our webhook"
    closed = kubectl_gate(plane, "close", "break-glass", "-n", NS, kubeconfig=plane.kubeconfig(ALICE))
    assert closed.returncode == 0, closed.stderr
    assert until(lambda: state(plane, "break-glass"), lambda s: s == names.STATE_CLOSED, timeout=30)
    info = until(
        lambda: shown(plane, "break-glass"),
        lambda i: (i.get(names.TOGGLED_BY_FIELD) or {}).get("verified") is False,
        timeout=30,
    )
    who = info[names.TOGGLED_BY_FIELD]
    assert "user" not in who and who["requestedBy"] == "alice", who  # her own words, beside
    human = kubectl_gate(plane, "get", "break-glass", "-n", NS).stdout
    assert "Toggled by:    an unverified identity (requestedBy says 'alice'" in human, human
    assert "(by an unverified identity (requestedBy says 'alice'" in event(
        plane, "break-glass", names.GATE_CLOSED_EVENT
    )
    assert stored_stamp(plane, "break-glass") is None
