"""An approval admits once, however many a gate has seen (docs/decisions/0070), with the real
API server, our webhooks and controller, and the real Flux controllers: the issue's 256
quickly-expiring approvals are refused with the reason; a gate filled to the bound still ends
the approval that lands, and the same commit arriving again (the branch reset to it) waits; a
withdrawn ended approval is announced and stays listed, so the gate stays full."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta

from admission.clock import utcnow
from admission.core.base import names
from admission.core.base.timefmt import format_time
from admission.core.gates import approvalrecord, approvals
from tests.realflux.test_approvals import PREFIX, blocked_waits, events, git_setup
from tests.realflux.test_kustomization import manifests


def add_approvals(cluster, values: dict[str, dict]) -> subprocess.CompletedProcess:
    """One write of the Gate adding ``values`` (what a client writes: the webhook stamps them)."""
    body = {"metadata": {"annotations": {k: json.dumps(v) for k, v in values.items()}}}
    return cluster.plane.kubectl(
        "patch",
        "gate",
        "freeze",
        "-n",
        cluster.namespace,
        "--type",
        "merge",
        "-p",
        json.dumps(body),
        check=False,
    )


def expiring(n: int, tag: str) -> dict[str, dict]:
    soon = format_time(utcnow() + timedelta(seconds=1))
    return {
        f"{PREFIX}{tag}{i:03d}": {
            "content": "main@sha1:0000",
            "for": "*",
            "message": "CHG-0",
            "expires": soon,
        }
        for i in range(n)
    }


def ended(cluster) -> dict[str, dict]:
    return approvals.ended(cluster.get("gate", "freeze"))


def test_an_approval_admits_once_however_many_the_gate_has_seen(cluster, git):
    ns = cluster.namespace
    repo, first = git_setup(cluster, git)

    # The attack: 256 approvals expiring in a second, in one write. Refused, with why.
    flood = add_approvals(cluster, expiring(256, "f"))
    assert flood.returncode != 0, flood.stdout
    assert "approval refused" in flood.stderr and "would hold 256 approvals" in flood.stderr, flood.stderr
    assert f"at most {approvalrecord.MAX_APPROVALS}" in flood.stderr

    # Filled to one below the bound; they expire and the controller ends them all.
    filled = approvalrecord.MAX_APPROVALS - 1
    assert add_approvals(cluster, expiring(filled, "x")).returncode == 0
    assert len(cluster.wait(lambda: ended(cluster), lambda e: len(e) == filled, timeout=60)) == filled

    # The last one the gate may hold lands, and ends as used.
    second = repo.commit(manifests(ns, "2"), "version 2")
    cluster.wait(lambda: blocked_waits(cluster, "gitrepository", "apps"), lambda m: second in m)
    approved = cluster.gate("approve", "freeze", "-n", ns, "-m", "CHG-2")
    assert approved.returncode == 0, approved.stderr
    assert cluster.wait(lambda: cluster.data("app-a"), lambda d: d == {"version": "2"}) == {"version": "2"}
    used = cluster.wait(lambda: events(cluster, "ApprovalUsed"), bool, timeout=60)
    assert len(used) == 1 and second in used[0], used
    assert len(cluster.wait(lambda: ended(cluster), lambda e: len(e) == filled + 1)) == filled + 1

    # One more is refused, with the counts.
    more = add_approvals(cluster, {f"{PREFIX}more": {"content": second, "for": "*", "message": "CHG-3"}})
    assert more.returncode != 0 and f"would hold {approvalrecord.MAX_APPROVALS + 1} approvals" in more.stderr

    # The same commit arriving again (the branch reset to it, after version 3 landed through an
    # opening) waits: the used approval admits nothing more.
    assert cluster.gate("open", "freeze", "-n", ns, "-m", "version 3").returncode == 0
    third = repo.commit(manifests(ns, "3"), "version 3")
    assert cluster.wait(lambda: cluster.data("app-a"), lambda d: d == {"version": "3"}) == {"version": "3"}
    assert cluster.gate("close", "freeze", "-n", ns, "-m", "freeze again").returncode == 0
    sha = second.split("@sha1:", 1)[1]
    subprocess.run(["git", "-C", str(repo.bare), "update-ref", "refs/heads/main", sha], check=True)
    cluster.wait(lambda: blocked_waits(cluster, "gitrepository", "apps"), lambda m: f"{second} waits" in m)
    assert f"{second} waits, serving {third}" in blocked_waits(cluster, "gitrepository", "apps")
    assert cluster.get("gitrepository", "apps")["status"]["artifact"]["revision"] == third
    assert cluster.data("app-a") == {"version": "3"}
    assert len(events(cluster, "ApprovalUsed")) == 1

    # Withdrawn, the ended approvals are announced and stay listed (a copy written back stays
    # ended), so the gate is still full.
    assert cluster.gate("approve", "freeze", "-n", ns, "--withdraw").returncode == 0
    withdrawn = cluster.wait(lambda: events(cluster, "ApprovalWithdrawn"), bool, timeout=60)
    assert "ended approvals withdrawn" in withdrawn[0], withdrawn
    listed = cluster.wait(
        lambda: ended(cluster), lambda e: all(names.WITHDRAWN_AT_FIELD in x for x in e.values()), timeout=60
    )
    assert len(listed) == filled + 1
    again = add_approvals(cluster, {f"{PREFIX}again": {"content": second, "for": "*", "message": "CHG-4"}})
    assert again.returncode != 0 and f"{filled + 1} ended and withdrawn" in again.stderr, again.stderr
