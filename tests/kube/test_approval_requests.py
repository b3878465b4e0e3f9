"""The controller and approvals of exact content, against FakeKube: an approval is announced,
what waits for it is asked to reconcile at once and again (bounded) while it still waits, and the
approval ends with an Event when its content has landed or it expires (docs/decisions/0057)."""

from __future__ import annotations

import json
from datetime import timedelta

from admission.core.base import names
from admission.core.base.timefmt import format_distinct_time
from admission.core.gates import approvals
from tests.builders import at, flux, gate, sealed
from tests.doubles.fakekube import FakeFluxCache, FakeKube
from tests.kube.test_controller import controller

NOW = at("2026-06-10T12:00")
GIT_A, GIT_B, GIT_C = "main@sha1:41ab", "main@sha1:9f2c", "main@sha1:77ee"
KEY = names.APPROVAL_ANNOTATION_PREFIX + "a1"


def approval(content: str = GIT_B, target: str = "*", expires: str = "2026-06-11T12:00:00Z") -> str:
    return json.dumps(
        {
            "content": content,
            "for": target,
            "message": "CHG-1",
            "by": "alice",
            "at": "2026-06-10T11:59:00Z",
            "expires": expires,
            "required": 1,
        }
    )


def source(name: str, serves: str, waits: str | None) -> dict:
    """A GitRepository behind gate freeze, serving ``serves``, with ``waits`` held (as the webhook's
    Blocked condition says)."""
    conditions = (
        []
        if waits is None
        else [
            {
                "type": names.BLOCKED_CONDITION,
                "status": "True",
                "reason": names.GATE_CLOSED_REASON,
                "message": f"Reconciliation is blocked as gate 'flux-system/freeze' is closed: {waits} waits, serving {serves}",
            }
        ]
    )
    return flux(
        "GitRepository",
        name,
        gates="flux-system/freeze",
        status={"artifact": {"revision": serves}, "conditions": conditions},
    )


class RecordingKube(FakeKube):
    """FakeKube that keeps each reconcile request's value as sent (a later one overwrites it)."""

    def __init__(self):
        super().__init__()
        self.requested: list[tuple[str, str]] = []

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body) -> dict:
        found = super().patch_namespaced_custom_object(group, version, namespace, plural, name, body)
        value = ((body.get("metadata") or {}).get("annotations") or {}).get(
            names.RECONCILE_REQUEST_ANNOTATION
        )
        if value is not None:
            self.requested.append((name, value))
        return found


def setup(**approval_fields) -> tuple[RecordingKube, object, object]:
    kube = RecordingKube()
    kube.add(
        names.GATE_PLURAL,
        sealed(gate("freeze", default="closed", annotations={KEY: approval(**approval_fields)})),
    )
    kube.add("gitrepositories", source("podinfo", GIT_A, GIT_B))
    kube.add("gitrepositories", source("other", GIT_A, GIT_C))  # other content waits there
    kube.add(
        "gitrepositories",
        flux("GitRepository", "free", gates="flux-system/freeze", status={"artifact": {"revision": GIT_B}}),
    )  # serves it, nothing waits
    ctl, cache = controller(kube)
    return kube, ctl, cache


def requests(kube: RecordingKube) -> list[tuple[str, str]]:
    """(object, requestedAt) of each reconcile request, in order."""
    return kube.requested


def reasons(kube: FakeKube) -> list[str]:
    return [e["reason"] for e in kube.of("events")]


def test_a_new_approval_is_announced_and_what_waits_for_it_is_asked_to_reconcile_at_once():
    kube, ctl, _ = setup()
    wake = ctl.reconcile(NOW)
    assert reasons(kube) == [names.APPROVAL_RECORDED_EVENT]
    assert requests(kube) == [("podinfo", format_distinct_time(NOW))]  # not where other content waits
    assert wake == NOW + approvals.REQUEST_AGAIN_AFTER[0]


def test_requests_repeat_with_new_values_while_the_content_waits_and_then_stop():
    # The webhook pods may deny the held write before their caches see the approval: the
    # controller asks again, each time with a value Flux has not handled, a bounded number of times.
    kube, ctl, _ = setup()
    t, passes = NOW, []
    while t < NOW + timedelta(minutes=30):
        passes.append(t)
        t = max(ctl.reconcile(t), t + timedelta(seconds=1))
    made = requests(kube)
    assert [name for name, _ in made] == ["podinfo"] * (1 + len(approvals.REQUEST_AGAIN_AFTER))
    assert len({value for _, value in made}) == len(made)  # each one new to Flux
    expected, at_ = [NOW], NOW
    for delay in approvals.REQUEST_AGAIN_AFTER:
        at_ += delay
        expected.append(at_)
    assert [value for _, value in made] == [format_distinct_time(e) for e in expected]
    assert all(e in passes for e in expected)  # the loop woke for each one
    assert not ctl.requests and reasons(kube) == [names.APPROVAL_RECORDED_EVENT]  # still live, unused


def test_once_the_content_lands_the_requests_stop_and_the_approval_is_used():
    kube, ctl, cache = setup()
    ctl.reconcile(NOW)
    kube.add("gitrepositories", source("podinfo", GIT_B, None))  # the retry got it through
    ctl.reconcile(NOW + approvals.REQUEST_AGAIN_AFTER[0])
    assert len(requests(kube)) == 1
    assert reasons(kube) == [names.APPROVAL_RECORDED_EVENT, names.APPROVAL_USED_EVENT]
    stored = kube.get(names.GATE_PLURAL, "flux-system", "freeze")
    assert list(approvals.ended(stored)) == [
        KEY.removeprefix(names.APPROVAL_ANNOTATION_PREFIX)
    ]  # in its status
    assert KEY in stored["metadata"]["annotations"]  # the controller does not write the Gate itself
    assert not ctl.requests
    cache.sync()
    ctl.reconcile(NOW + timedelta(minutes=5))
    assert len(requests(kube)) == 1 and len(reasons(kube)) == 2


def test_a_withdrawn_approval_is_not_requested_again():
    kube, ctl, cache = setup()
    ctl.reconcile(NOW)
    kube.patch_namespaced_custom_object(
        names.GATING_GROUP,
        names.GATING_VERSION,
        "flux-system",
        names.GATE_PLURAL,
        "freeze",
        {"metadata": {"annotations": {KEY: None}}},
    )
    cache.sync()
    ctl.reconcile(NOW + timedelta(minutes=5))
    assert len(requests(kube)) == 1 and not ctl.requests


def test_an_approval_for_one_object_requests_only_that_one_and_expiry_ends_it():
    kube, ctl, _ = setup(target="GitRepository/apps/other", content=GIT_C, expires="2026-06-10T12:00:05Z")
    ctl.reconcile(NOW)
    assert requests(kube) == [("other", format_distinct_time(NOW))]
    ctl.reconcile(NOW + timedelta(seconds=5))
    assert reasons(kube) == [names.APPROVAL_RECORDED_EVENT, names.APPROVAL_EXPIRED_EVENT]
    assert len(requests(kube)) == 1 and not ctl.requests


class UntrustedAtFirst(FakeFluxCache):
    trusted = False

    def untrusted(self):
        return None if self.trusted else "not synced"


def test_an_approval_seen_while_the_flux_cache_is_untrusted_is_requested_once_it_is_trusted():
    kube = RecordingKube()
    kube.add(names.GATE_PLURAL, sealed(gate("freeze", default="closed", annotations={KEY: approval()})))
    kube.add("gitrepositories", source("podinfo", GIT_A, GIT_B))
    flux_cache = UntrustedAtFirst(kube)
    ctl, _ = controller(kube, flux=flux_cache)
    wake = ctl.reconcile(NOW)
    assert reasons(kube) == [names.APPROVAL_RECORDED_EVENT] and not requests(kube)
    assert wake >= NOW + timedelta(seconds=1)  # a due request does not spin the loop
    flux_cache.trusted = True
    ctl.reconcile(NOW + timedelta(seconds=2))
    assert requests(kube) == [("podinfo", format_distinct_time(NOW + timedelta(seconds=2)))]


def test_an_approval_the_webhook_did_not_seal_is_shown_unverified_and_never_announced_or_requested():
    # Written while the approval webhook entries were absent: a by and an at, no seal of ours.
    kube = RecordingKube()
    forged = gate("freeze", default="closed", annotations={KEY: approval()})
    forged["metadata"]["uid"] = "uid-freeze"
    kube.add(names.GATE_PLURAL, forged)
    kube.add("gitrepositories", source("podinfo", GIT_A, GIT_B))
    ctl, _ = controller(kube)
    ctl.reconcile(NOW)
    assert reasons(kube) == [] and requests(kube) == []
    status = kube.get(names.GATE_PLURAL, "flux-system", "freeze")["status"]
    assert status.get("approvals") is None
    [row] = status["unverifiedApprovals"]
    assert (row["by"], row["unverified"]) == ("alice", "it carries no seal: the webhook did not record it")
