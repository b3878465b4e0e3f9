"""Holds and releases reach Flux's notification-controller once each, end to end.

The Flux doubles (tests/doubles/flux) write to our own etcd + kube-apiserver, our server holds
the new revision, and our controller process (``--notify``) POSTs to a double of
notification-controller's event API (tests/doubles/notification.py) that reads the JSON as
Flux does. The controller runs with ``--notify-period 0``: its aggregation of repeated
messages would otherwise hide a notice sent per status write instead of per change. It runs
without leader election, so a restarted controller acts on its first list of the cluster:
with a Lease, that list usually arrives before leadership does, and what is announced then is
decided on becoming leader instead (tests/app/test_flux_notifications.py), which would make
"not announced again" here depend on a race.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from admission.core.base.timefmt import format_time
from tests.builders import gate
from tests.doubles.notification import NotificationControllerDouble
from tests.e2e.conftest import controller_running, own_plane, serving_the_cluster
from tests.e2e.test_content_holds import (
    Flux,
    close_gate,
    cond,
    deployed,
    get,
    git_repository,
    kustomization,
    open_gate,
    put,
    status,
)
from tests.polling import until

pytestmark = pytest.mark.e2e
GROUP = "kustomize.toolkit.fluxcd.io"
ALERT = {"kind": "Kustomization", "namespace": "apps", "name": "*", "eventSeverity": "info"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("hold-notifications"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    with serving_the_cluster(plane, tmp_path_factory.mktemp("notify-server")) as srv:
        yield srv


@pytest.fixture(scope="module")
def notifications():
    """Flux notification-controller's event API, with one Alert for the Kustomizations in apps."""
    with NotificationControllerDouble([ALERT]) as double:
        yield double


class RestartableController:
    """`gate-admission controller --notify` as one process at a time; ``restart()`` stops it and
    starts a new one (same identity, same log), returning once the new one answers /readyz."""

    def __init__(self, plane, log_dir, notifications):
        self.plane, self.log_dir, self.notifications = plane, log_dir, notifications
        self.starts = 0
        self._stack: ExitStack | None = None

    def start(self) -> None:
        self._stack = ExitStack()
        self.proc = self._stack.enter_context(
            controller_running(
                self.plane,
                self.log_dir,
                "e2e-notify",
                "--no-leader-elect",
                "--notify",
                "--notify-address",
                self.notifications.address,
                "--notify-period",
                "0",
            )
        )
        self.starts += 1

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def controller(plane, server, notifications, tmp_path_factory):
    running = RestartableController(plane, tmp_path_factory.mktemp("notify-controller"), notifications)
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def flux(plane, server, controller):
    doubles = Flux(plane).start()
    try:
        yield doubles
    finally:
        doubles.stop()


# -- helpers ---------------------------------------------------------------------------------


def events_for(notifications, name: str, since: int = 0) -> list[dict]:
    """Events received (from the ``since``-th on) about the Kustomization apps/``name``."""
    return [
        e
        for e in notifications.received[since:]
        if e["involvedObject"]["kind"] == "Kustomization" and e["involvedObject"]["name"] == name
    ]


def reasons(events: list[dict]) -> list[str]:
    return [e["reason"] for e in events]


def hold_a_new_revision(
    plane, server, flux, name: str, gate_name: str, repo: str, first: str, second: str
) -> dict:
    """apps/``name`` applies ``first``; the gate closes; ``second`` is pushed and held. Its stored status."""
    put(
        plane,
        gate(gate_name),
        git_repository(repo),
        kustomization(name, repo, gates=f"flux-system/{gate_name}"),
    )
    flux.git.push("flux-system", repo, first)
    deployed(plane, flux, name, first)
    close_gate(plane, server, gate_name)
    flux.git.push("flux-system", repo, second)
    stored = until(
        lambda: status(plane, "kustomization", name, "apps"),
        lambda s: cond(s, "Approved").get("reason") == "GateClosed",
    )
    assert cond(stored, "Approved").get("status") == "False", (stored, flux.kustomize.errors("apps", name))
    return stored


def reconcile_while_held(plane, flux, name: str) -> None:
    """One more reconcile by the kustomize double (requestedAt), denied again at the new revision."""
    before = len(flux.kustomize.errors("apps", name))
    plane.kubectl(
        "annotate",
        "--overwrite",
        "kustomization",
        name,
        "-n",
        "apps",
        # RFC 3339 with nanoseconds, as `flux reconcile` writes it: distinct each time.
        f"reconcile.fluxcd.io/requestedAt={datetime.now(UTC).isoformat(timespec='microseconds')}",
    )
    errors = until(lambda: flux.kustomize.errors("apps", name), lambda e: len(e) > before)
    assert len(errors) > before and errors[-1].startswith("failed to update status: "), errors


# -- a hold and its release, once each --------------------------------------------------------


def test_a_held_kustomization_is_announced_once_and_its_release_once(plane, server, flux, notifications):
    """A Flux Alert fires once when a new commit waits at a closed gate and once when it proceeds."""
    stored = hold_a_new_revision(
        plane, server, flux, "app-n", "freeze-n", "repo-n", "main@sha1:nnnn0001", "main@sha1:nnnn0002"
    )
    held = until(lambda: events_for(notifications, "app-n"), lambda e: len(e) >= 1)
    assert reasons(held) == ["GateClosed"], held
    [event] = held
    assert event["severity"] == "info" and event["reportingController"] == "gate-admission-controller"
    assert event["reportingInstance"] == "e2e-notify"
    ref = event["involvedObject"]
    assert (ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"]) == (
        f"{GROUP}/v1",
        "Kustomization",
        "apps",
        "app-n",
    ), ref
    assert event["message"].startswith("Kustomization apps/app-n is held: "), event["message"]
    assert "gate 'flux-system/freeze-n'" in event["message"], event["message"]
    assert "main@sha1:nnnn0002 waits, serving main@sha1:nnnn0001" in event["message"], event["message"]
    assert event["metadata"] == {
        f"{GROUP}/gates": "flux-system/freeze-n",
        f"{GROUP}/waiting": "main@sha1:nnnn0002",
        f"{GROUP}/serving": "main@sha1:nnnn0001",
    }, event["metadata"]
    # What the user's Alert forwards (notification-controller strips the group prefix).
    assert [
        (alert, e["reason"], e["metadata"])
        for alert, e in notifications.dispatched
        if e["involvedObject"]["name"] == "app-n"
    ] == [
        (
            ALERT,
            "GateClosed",
            {
                "gates": "flux-system/freeze-n",
                "waiting": "main@sha1:nnnn0002",
                "serving": "main@sha1:nnnn0001",
            },
        )
    ]

    # The double keeps reconciling while held: each reconcile writes status (the write that
    # carries the new revision is denied again). None of these writes is a new hold.
    version = get(plane, "kustomization", "app-n", "apps")["metadata"]["resourceVersion"]
    for _ in range(2):
        reconcile_while_held(plane, flux, "app-n")
    assert get(plane, "kustomization", "app-n", "apps")["metadata"]["resourceVersion"] != version, (
        "the double's reconciles while held wrote nothing: the test would prove nothing"
    )
    assert cond(status(plane, "kustomization", "app-n", "apps"), "Approved") == cond(stored, "Approved")

    open_gate(plane, "freeze-n")
    deployed(plane, flux, "app-n", "main@sha1:nnnn0002")
    # Events are POSTed in order: once the release arrived, anything sent for the writes
    # before it has arrived too.
    sent = until(lambda: events_for(notifications, "app-n"), lambda e: "HoldReleased" in reasons(e))
    assert reasons(sent) == ["GateClosed", "HoldReleased"], [(e["reason"], e["message"]) for e in sent]
    released = sent[1]
    assert released["severity"] == "info"
    assert released["message"].startswith(
        "Kustomization apps/app-n released: main@sha1:nnnn0002 proceeds; gate 'flux-system/freeze-n' is open"
    ), released["message"]
    # Who opened it, as our webhook stamped the API server's user: this controller holds no
    # approval key, so it says whom the stamp names and that it cannot verify it.
    assert released["metadata"] == {
        f"{GROUP}/gates": "flux-system/freeze-n",
        f"{GROUP}/released": "main@sha1:nnnn0002",
        f"{GROUP}/openedBy": "an unverified identity (stamp says 'admin', "
        "it cannot be verified here: this reader holds no approval key)",
    }, released["metadata"]
    assert notifications.refused == []


# -- a controller restart ----------------------------------------------------------------------


def test_a_controller_restart_does_not_announce_a_hold_again(plane, server, flux, controller, notifications):
    """Restarting the controller does not repeat an old hold to every Alert; its release still comes once."""
    hold_a_new_revision(
        plane, server, flux, "app-r", "freeze-r", "repo-r", "main@sha1:rrrr0001", "main@sha1:rrrr0002"
    )
    held = until(lambda: events_for(notifications, "app-r"), lambda e: len(e) >= 1)
    assert reasons(held) == ["GateClosed"], held

    # The hold began an hour ago, as if the controller had run all along: conditions are
    # written as Flux writes them (merge patch of the list, resourceVersion as precondition).
    # The webhook keeps a condition's lastTransitionTime while its status stays.
    obj = get(plane, "kustomization", "app-r", "apps")
    an_hour_ago = format_time(datetime.now(UTC) - timedelta(hours=1))
    conditions = [
        dict(c, lastTransitionTime=an_hour_ago) if c.get("reason") == "GateClosed" else c
        for c in obj["status"]["conditions"]
    ]
    flux.kustomize.api.patch_status(
        "Kustomization",
        "apps",
        "app-r",
        {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "status": {"conditions": conditions},
        },
        flux.kustomize.manager,
    )
    approved = cond(status(plane, "kustomization", "app-r", "apps"), "Approved")
    assert (approved.get("status"), approved.get("reason"), approved.get("lastTransitionTime")) == (
        "False",
        "GateClosed",
        an_hour_ago,
    ), approved

    seen = len(notifications.received)
    controller.restart()  # returns once /readyz answers: its caches listed every Flux object
    assert controller.starts == 2
    # Opening the gate now is the restarted controller's doing; its events are POSTed in order,
    # so once the release arrived, a hold announced on its first list would have arrived before.
    open_gate(plane, "freeze-r")
    deployed(plane, flux, "app-r", "main@sha1:rrrr0002")
    after = until(
        lambda: events_for(notifications, "app-r", since=seen), lambda e: "HoldReleased" in reasons(e)
    )
    assert reasons(after) == ["HoldReleased"], [(e["reason"], e["message"]) for e in after]
    assert after[0]["message"].startswith("Kustomization apps/app-r released: main@sha1:rrrr0002 proceeds"), (
        after[0]["message"]
    )
    assert any(
        e["involvedObject"]["kind"] == "Gate"
        and e["involvedObject"]["name"] == "freeze-r"
        and e["reason"] == "GateOpened"
        for e in notifications.received[seen:]
    ), "the restarted controller sent no transition for the gate it opened"
    assert notifications.refused == []
