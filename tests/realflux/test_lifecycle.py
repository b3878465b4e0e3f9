"""What a hold does over an object's life, with the real source-controller and
kustomize-controller: every way of opening a gate lands what waited at once; a suspend window
holds the same way; audit mode holds nothing and says so; finalizers and allowed deletions are
never blocked; a controller restarted mid-hold stays held; `dependsOn` waits for a held
Kustomization."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from admission.core.base.timefmt import format_distinct_time
from tests.conftest import REPORT
from tests.realflux.conftest import BREAK_GLASS, condition, ready, receiver
from tests.realflux.servers import configmap
from tests.realflux.test_kustomization import gate, git_repository, kustomization

GATED = {"gating.toolkit.fluxcd.io/gates": "freeze"}


def held_app(cluster, git, annotations: dict | None = None, gate_objects=(), **spec):
    """A repository at version 1, applied by Kustomization `app`; then version 2 pushed. Returns
    the repository and the two revisions."""
    ns = cluster.namespace
    repo = git.repository(ns)
    first = repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "1"})}, "version 1")
    cluster.apply(
        *gate_objects,
        git_repository("apps", repo.url),
        kustomization("app", "./app", "apps", annotations, **spec),
    )
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "1"}) == {"version": "1"}
    return repo, first


def wait_held(cluster, revision: str) -> dict:
    held = cluster.wait(
        lambda: cluster.get("kustomization", "app"),
        lambda k: ready(k) == "False" and condition(k, "Approved").get("status") == "False",
    )
    assert condition(held, "Approved").get("status") == "False", held.get("status")
    assert held["status"]["lastAppliedRevision"] == revision and cluster.data("app") == {"version": "1"}
    return held


def now_utc() -> datetime:
    return datetime.now(UTC)


def close_for_a_minute(cluster) -> datetime:
    """A GateKeeper that closes the gate in this minute (and the next, if this one is nearly
    over); when it opens again."""
    now = now_utc().replace(second=0, microsecond=0)
    minutes = [now] + ([now + timedelta(minutes=1)] if now_utc().second > 45 else [])
    cron = " ".join(
        [",".join(str(m.minute) for m in minutes), ",".join(sorted({str(m.hour) for m in minutes})), "* * *"]
    )
    cluster.apply(
        {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "GateKeeper",
            "metadata": {"name": "window"},
            "spec": {"gate": "freeze", "cronjob": {"closed": [cron]}},
        }
    )
    return minutes[-1] + timedelta(minutes=1)


@pytest.mark.parametrize("opener", ["annotation", "kubectl-gate", "receiver", "cron"])
def test_every_way_of_opening_lands_what_waited_at_once(cluster, git, webhook, opener):
    ns = cluster.namespace
    repo, first = held_app(cluster, git, GATED, [gate("freeze", ns)])
    if opener == "cron":
        opens_at = close_for_a_minute(cluster)
    else:
        assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})}, "version 2")
    cluster.plane.kubectl(
        "annotate",
        "--overwrite",
        "gitrepository",
        "apps",
        "-n",
        ns,
        f"reconcile.fluxcd.io/requestedAt={time.time()}",
    )
    wait_held(cluster, first)

    opened = time.monotonic()
    if opener == "annotation":
        stamp = format_distinct_time(now_utc())  # as kubectl gate writes it: later than the close it follows
        cluster.plane.kubectl(
            "annotate", "--overwrite", "gate", "freeze", "-n", ns, f"open.gate.fluxcd.io/requestedAt={stamp}"
        )
    elif opener == "kubectl-gate":
        assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    elif opener == "receiver":
        assert receiver(webhook, ns, "freeze", "open", "CI: release approved") == 200
    else:  # the schedule opens the gate when its minutes are over
        wait = max(0.0, (opens_at - now_utc()).total_seconds())
        cluster.wait(lambda: now_utc() >= opens_at, bool, timeout=wait + 5)
        opened = time.monotonic()
    landed = cluster.wait(
        lambda: cluster.data("app"), lambda d: d == {"version": "2"}, timeout=60 if opener != "cron" else 150
    )
    assert landed == {"version": "2"}, cluster.get("kustomization", "app").get("status")
    REPORT[f"real Flux: a commit lands after the gate opens ({opener})"] = f"{time.monotonic() - opened:.1f}s"


def test_a_suspend_window_holds_like_a_closed_gate(cluster, git):
    ns = cluster.namespace
    repo, first = held_app(cluster, git)
    cluster.plane.kubectl(
        "annotate", "kustomization", "app", "-n", ns, "reconcile.fluxcd.io/suspendDuring=* * * * *"
    )
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})}, "version 2")
    held = wait_held(cluster, first)
    assert held["status"].get("suspended") is True, held.get("status")

    # Ending the window (removing the annotation is metadata: never held) lands the commit.
    cluster.plane.kubectl("annotate", "kustomization", "app", "-n", ns, "reconcile.fluxcd.io/suspendDuring-")
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "2"}, timeout=60) == {
        "version": "2"
    }


def test_an_audit_mode_gate_holds_nothing_and_says_so(cluster, git, webhook):
    ns = cluster.namespace
    audit_gate = gate("freeze", ns, default="closed")
    audit_gate["spec"]["mode"] = "audit"  # closed, but it only records what it would hold
    audited_before = sum(
        v
        for k, v in webhook.metrics().items()
        if k.startswith("gate_admission_holds_total") and 'verdict="audited"' in k
    )
    repo, first = held_app(cluster, git, GATED, [audit_gate])
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})}, "version 2")
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "2"}) == {"version": "2"}
    app = cluster.get("kustomization", "app")
    assert ready(app) == "True" and condition(app, "Approved").get("status") != "False", app.get("status")
    described = cluster.gate("get", "freeze", "-n", ns)
    assert "audit only" in described.stdout, described.stdout
    audited = sum(
        v
        for k, v in webhook.metrics().items()
        if k.startswith("gate_admission_holds_total") and 'verdict="audited"' in k
    )
    assert audited > audited_before, "the would-be holds are recorded"


def test_finalizers_and_allowed_deletions_are_never_blocked_by_a_hold(cluster, git):
    ns = cluster.namespace
    repo, first = held_app(cluster, git, GATED, [gate("freeze", ns)])
    assert cluster.get("kustomization", "app")["metadata"].get("finalizers"), (
        "kustomize-controller added its finalizer"
    )
    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})}, "version 2")
    wait_held(cluster, first)

    refused = cluster.plane.kubectl("delete", "kustomization", "app", "-n", ns, "--wait=false", check=False)
    assert refused.returncode != 0 and "is held" in refused.stderr, refused.stderr
    # Break-glass deletes it: kustomize-controller's finalizer removal (a metadata PATCH of a
    # held object) goes through, the object goes, and prune removes what it applied.
    deleted = cluster.plane.kubectl(
        "delete",
        "kustomization",
        "app",
        "-n",
        ns,
        "--wait=false",
        "--as=oncall",
        f"--as-group={BREAK_GLASS}",
        "--as-group=system:masters",
        check=False,
    )
    assert deleted.returncode == 0, deleted.stderr
    assert cluster.wait(lambda: cluster.get("kustomization", "app"), lambda k: k == {}) == {}
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d is None) is None


def test_a_controller_restarted_mid_hold_stays_held(cluster, git, flux):
    ns = cluster.namespace
    repo, first = held_app(cluster, git, GATED, [gate("freeze", ns)])
    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": "2"})}, "version 2")
    wait_held(cluster, first)

    flux.restart("kustomize-controller")
    cluster.plane.kubectl(
        "annotate",
        "--overwrite",
        "kustomization",
        "app",
        "-n",
        ns,
        f"reconcile.fluxcd.io/requestedAt={time.time()}",
    )
    # The restarted controller reconciles it (the request is handled) and is held again.
    handled = cluster.wait(
        lambda: cluster.get("kustomization", "app"),
        lambda k: (
            k["status"].get("lastHandledReconcileAt")
            == k["metadata"]["annotations"].get("reconcile.fluxcd.io/requestedAt")
        ),
    )
    assert handled["status"]["lastAppliedRevision"] == first and cluster.data("app") == {"version": "1"}
    wait_held(cluster, first)

    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    assert cluster.wait(lambda: cluster.data("app"), lambda d: d == {"version": "2"}, timeout=60) == {
        "version": "2"
    }


def test_depends_on_waits_for_a_held_kustomization(cluster, git):
    ns = cluster.namespace
    repo = git.repository(ns)
    repo.commit({f"{app}/configmap.yaml": configmap(app, ns, {"version": "1"}) for app in ("base", "app")})
    cluster.apply(
        gate("freeze", ns),
        git_repository("apps", repo.url),
        kustomization("base", "./base", "apps", GATED),
        kustomization("app", "./app", "apps", dependsOn=[{"name": "base"}], interval="5s"),
    )
    assert cluster.wait(
        lambda: (cluster.data("base"), cluster.data("app")),
        lambda d: d == ({"version": "1"}, {"version": "1"}),
    ) == ({"version": "1"}, {"version": "1"})

    assert cluster.gate("close", "freeze", "-n", ns).returncode == 0
    repo.commit({f"{app}/configmap.yaml": configmap(app, ns, {"version": "2"}) for app in ("base", "app")})
    # The dependent is not gated, but it waits for what it depends on, as Flux documents.
    waiting = cluster.wait(
        lambda: cluster.get("kustomization", "app"),
        lambda k: "dependency" in condition(k, "Ready").get("message", ""),
    )
    assert "dependency" in condition(waiting, "Ready").get("message", ""), waiting.get("status")
    assert (cluster.data("base"), cluster.data("app")) == ({"version": "1"}, {"version": "1"})

    assert cluster.gate("open", "freeze", "-n", ns).returncode == 0
    both = cluster.wait(
        lambda: (cluster.data("base"), cluster.data("app")),
        lambda d: d == ({"version": "2"}, {"version": "2"}),
        timeout=90,
    )
    assert both == ({"version": "2"}, {"version": "2"})
