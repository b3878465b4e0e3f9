"""Denied attempts shown on their HelmRelease, in process against FakeKube: Approved=False and
Ready=False written once per denied reconcile, with a resourceVersion precondition that never
overwrites a controller's own condition write, and only while the gate still holds; only for
the object with the review's uid, and never with text from an unauthenticated review."""

from __future__ import annotations

import pytest

from admission.core.admission.decision import Settings
from admission.core.flux import conditions, content, kinds
from admission.kube.attempts import DeniedAttempts
from admission.store import StaticSources
from tests.builders import FLUX_USER, flux, gate, lookup_from, request
from tests.conftest import FIXED_NOW
from tests.doubles.fakekube import FakeKube
from tests.polling import until
from tests.unit.test_content import hr_status

HELD = "flux-system/freeze"
GATES = {"freeze": gate("freeze", default="closed"), "open": gate("open", default="opened")}
EVERY_GATE = tuple(GATES.values())
PATCHES = "patch_namespaced_custom_object_status"
V1, V2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64  # values digests, as helm-controller writes them
WAITS = f"6.5.0 (values {V2}) waits, serving 6.5.0 (values {V1})"
UID = "uid-podinfo"


def release(gates: str = HELD, **status) -> dict:
    obj = flux(
        "HelmRelease",
        name="podinfo",
        namespace="apps",
        gates=gates,
        status={
            **hr_status(attempted=("6.5.0", "", V1), applied=("6.5.0", "", V1)),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "Progressing",
                    "message": "Running 'upgrade' action with timeout of 5m0s",
                    "lastTransitionTime": "2026-06-10T10:00:00Z",
                }
            ],
            **status,
        },
    )
    obj["metadata"]["uid"] = UID
    return obj


def denial(stored: dict, dry_run: bool = False, attempted=("6.5.0", "", V2)) -> dict:
    attempted = {
        **stored,
        "status": {**stored["status"], **hr_status(attempted=attempted, applied=("6.5.0", "", V1))},
    }
    return request("UPDATE", attempted, stored, sub_resource="status", user=FLUX_USER, dry_run=dry_run)


def shown(obj: dict) -> tuple[str, dict]:
    """What record() queues for a review's object: the stored uid and the attempt it carries."""
    return obj["metadata"]["uid"], kinds.content_of("HelmRelease").attempt(obj)


@pytest.fixture
def kube():
    return FakeKube()


def writer(kube, gates=EVERY_GATE, mode="enforce", trust_reviews=True, **kwargs) -> DeniedAttempts:
    """Reviews are trusted (the API server authenticates with a client certificate) unless
    a test says otherwise."""
    return DeniedAttempts(
        None,
        lookup_from(list(gates)),
        Settings(mode=mode),
        StaticSources(),
        clock=lambda: FIXED_NOW,
        custom=kube,
        trust_reviews=trust_reviews,
        **kwargs,
    )


@pytest.fixture
def attempts(kube):
    shower = writer(kube)
    shower.start()
    yield shower
    shower.stop()


def stored(kube) -> dict:
    return kube.get("helmreleases", "apps", "podinfo")


def writes(kube) -> int:
    return sum(1 for method, key in kube.calls if method == PATCHES and key[0] == "helmreleases")


def test_a_denied_values_attempt_shows_on_the_helmrelease(kube, attempts):
    kube.add("helmreleases", release())
    attempts.record(denial(stored(kube)))
    obj = until(lambda: stored(kube), lambda o: conditions.find(o, "Approved"), timeout=10)
    approved, ready = conditions.find(obj, "Approved"), conditions.find(obj, "Ready")
    assert (approved["status"], approved["reason"]) == ("False", "GateClosed")
    assert approved["message"] == f"Reconciliation is waiting approval, gate '{HELD}' is closed. {WAITS}"
    assert (ready["status"], ready["reason"]) == ("False", "GateClosed") and ready["message"].endswith(WAITS)
    assert content.waiting(obj).gates == (HELD,)
    assert obj["status"]["lastAttemptedConfigDigest"] == V1, "only conditions are written"


def test_one_denied_reconcile_makes_one_write_across_workers(kube):
    kube.add("helmreleases", release())
    first, second = writer(kube), writer(kube)
    # The deferred patch sends the denied field again; another worker may see it.
    for shower in (first, first, second):
        shower.record(denial(stored(kube)))
    for shower in (first, second):
        assert shower.show(*shower._next()) in ("written", "current")
    assert writes(kube) == 1 and conditions.find(stored(kube), "Approved")
    assert first.show(("HelmRelease", "apps", "podinfo"), shown(denial(stored(kube))["object"])) == "current"
    assert writes(kube) == 1


def test_a_controller_write_in_between_is_read_again_never_overwritten(kube):
    kube.add("helmreleases", release())
    shower = writer(kube)
    real_read = kube.get_namespaced_custom_object_status
    raced: list[bool] = []

    def read_then_controller_writes(*args):
        obj = real_read(*args)
        if not raced:  # helm-controller's conditions write lands after our read
            raced.append(True)
            kube.patch_namespaced_custom_object_status(
                "",
                "",
                "apps",
                "helmreleases",
                "podinfo",
                {
                    "status": {
                        "conditions": obj["status"]["conditions"]
                        + [{"type": "Reconciling", "status": "True", "reason": "Progressing", "message": "x"}]
                    }
                },
            )
        return obj

    kube.get_namespaced_custom_object_status = read_then_controller_writes
    assert shower.show(("HelmRelease", "apps", "podinfo"), shown(denial(stored(kube))["object"])) == "written"
    types = [c["type"] for c in stored(kube)["status"]["conditions"]]
    assert "Reconciling" in types and "Approved" in types, types


def test_nothing_is_written_once_released_in_audit_mode_for_dry_runs_or_other_kinds(kube):
    kube.add("helmreleases", release(gates="flux-system/open"))
    key = ("HelmRelease", "apps", "podinfo")
    assert (
        writer(kube).show(key, shown(denial(release())["object"])) == "current"
    )  # the gate opened meanwhile
    kube.add("helmreleases", release())
    assert writer(kube, mode="audit").show(key, shown(denial(release())["object"])) == "current"
    shower = writer(kube)
    shower.record(denial(stored(kube), dry_run=True))
    shower.record(
        request(
            "UPDATE",
            flux(name="podinfo", gates=HELD, status={"lastAttemptedRevision": "b"}),
            flux(name="podinfo", gates=HELD),
            sub_resource="status",
            user=FLUX_USER,
        )
    )
    assert shower.pending == {}
    assert writer(kube).show(("HelmRelease", "apps", "gone"), (UID, None)) == "gone"
    assert writes(kube) == 0


def test_the_queue_is_bounded_and_keeps_only_the_attempt(kube):
    shower = writer(kube, max_pending=2)
    for name in ("a", "b", "c"):
        obj = release()
        obj["metadata"]["name"] = name
        obj["spec"] = {"values": {"big": "x" * 10_000}}
        shower.record(denial(obj))
    assert [key[2] for key in shower.pending] == ["a", "b"]
    assert shower.pending[("HelmRelease", "apps", "a")] == (
        UID,
        {"status": dict(hr_status(attempted=("6.5.0", "", V2), applied=None))},
    )


# -- forged reviews: what is written comes from the object the API server returns ---------

FORGED = ("IGNORE THE GATE: call 555-0100", "", "sha256:attacker-text")


def test_an_unauthenticated_review_never_puts_its_text_in_the_conditions(kube):
    """Reviews are not trusted by default: a forged status review of a real, held HelmRelease
    (its uid and all) writes nothing that the stored object does not show."""
    kube.add("helmreleases", release())
    shower = writer(kube, trust_reviews=False)
    for attempted in (FORGED, ("6.5.0", "", V2)):
        shower.record(denial(stored(kube), attempted=attempted))
        assert shower.show(*shower._next()) == "current"
    assert writes(kube) == 0 and not conditions.find(stored(kube), "Approved")


def test_an_unauthenticated_review_shows_what_the_stored_object_records(kube):
    # The stored status records an attempt it has not applied: that is the object's own word.
    kube.add("helmreleases", release(**hr_status(attempted=("6.5.0", "", V2), applied=("6.5.0", "", V1))))
    shower = writer(kube, trust_reviews=False)
    shower.record(denial(stored(kube), attempted=FORGED))
    assert shower.show(*shower._next()) == "written"
    approved = conditions.find(stored(kube), "Approved")
    assert approved["message"] == f"Reconciliation is waiting approval, gate '{HELD}' is closed. {WAITS}"
    assert "555" not in str(stored(kube))


def test_a_trusted_review_is_shown_only_in_the_shapes_flux_writes(kube):
    kube.add("helmreleases", release())
    shower = writer(kube)
    shower.record(denial(stored(kube), attempted=FORGED))
    assert shower.show(*shower._next()) == "current" and writes(kube) == 0


def test_a_review_naming_a_real_object_with_another_uid_writes_nothing(kube):
    kube.add("helmreleases", release())
    other = release()
    other["metadata"]["uid"] = "uid-of-an-object-deleted-or-made-up"
    shower = writer(kube)
    shower.record(denial(other))
    assert shower.show(*shower._next()) == "unverified" and writes(kube) == 0


def test_reads_are_bounded_per_namespace(kube):
    shower = writer(kube, reads_per_namespace=5)
    for i in range(50):
        obj = release()
        obj["metadata"]["name"] = f"made-up-{i}"
        shower.record(denial(obj))
    outcomes = [shower.show(*shower._next()) for _ in range(50)]
    assert (
        outcomes.count("limited") == 45 and len(kube.reads) <= 5 * 3
    )  # each read tries the table's versions
