"""The hold points: what status writes of held Flux objects become (handlers over core.admission.holdpoints)."""

from __future__ import annotations

import base64
import copy

import jsonpatch
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.core.admission import holdpoints, mutation
from admission.core.admission.decision import Context, Settings, standing
from admission.core.base import names
from admission.core.flux import conditions, content, contentkinds, kinds
from admission.core.gates import references
from admission.store import StaticSources
from admission.webhook import handlers
from tests.builders import FLUX_USER, flux, gate, generated_chart, lookup_from, request
from tests.conftest import FIXED_NOW
from tests.unit.test_content import GIT_A, GIT_B, art, hr_status

FREEZE = gate("change-freeze", default="closed")
OPEN = gate("open-gate", default="opened")
AUDITED = gate("audited", default="closed", mode="audit")
LOOKUP = lookup_from([FREEZE, OPEN, AUDITED])
HELD = "flux-system/change-freeze"


def run(handler, old, new, sources=None, mode="enforce"):
    req = request("UPDATE", new, old, sub_resource="status", user=FLUX_USER)
    return handler(req, Context(LOOKUP, FIXED_NOW, Settings(mode=mode), sources.get if sources else None))


def mutated(old, new, **kwargs) -> dict:
    """``new`` as the mutating webhook leaves it (status.suspended, tested elsewhere, left out)."""
    outcome = run(handlers.mutate, old, new, **kwargs)
    ops = orjson.loads(base64.b64decode(outcome.response["patch"])) if "patch" in outcome.response else []
    out = jsonpatch.apply_patch(copy.deepcopy(new), ops)
    if "suspended" not in (new.get("status") or {}):
        out.get("status", {}).pop("suspended", None)
    return out


def cond(obj, kind):
    return conditions.find(obj, kind)


def ready(message, status="True", reason="Succeeded"):
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-06-10T10:00:00Z",
        "observedGeneration": 3,
    }


def source(status, gates=HELD, kind="GitRepository", **kw):
    return flux(kind, name="flux-system", namespace="flux-system", gates=gates, status=status, **kw)


# ---- sources ------------------------------------------------------------------------------


def test_a_held_source_keeps_its_artifact_shows_blocked_and_ready_keeps_its_status():
    old = source({"artifact": art(GIT_A), "conditions": [ready(f"stored artifact for revision '{GIT_A}'")]})
    new = source(
        {
            "artifact": art(GIT_B),
            "observedGeneration": 4,
            "conditions": [ready(f"stored artifact for revision '{GIT_B}'")],
        }
    )
    out = mutated(old, new)
    assert out["status"]["artifact"] == art(GIT_A)  # every field, not just the revision
    assert out["status"]["observedGeneration"] == 4  # the rest of status moves on
    blocked = cond(out, "Blocked")
    assert blocked["status"] == "True" and blocked["reason"] == "GateClosed"
    assert blocked["message"] == (
        f"Reconciliation is blocked as gate '{HELD}' is closed: {GIT_B} waits, serving {GIT_A}"
    )
    assert cond(out, "Ready")["status"] == "True" and GIT_A in cond(out, "Ready")["message"]
    assert f"{GIT_B} waits" in cond(out, "Ready")["message"]
    # what reached the validating webhook carries no change: it passes
    assert run(handlers.validate, old, out).response["allowed"] is True


def test_the_conditions_write_before_the_artifact_keeps_blocked_and_ready_honest():
    # source-controller sends the conditions first ("stored artifact for revision B"), then the artifact.
    stored = mutated(source({"artifact": art(GIT_A)}), source({"artifact": art(GIT_B)}))
    conditions_first = copy.deepcopy(stored)
    conditions_first["status"]["conditions"] = [
        c for c in stored["status"]["conditions"] if c["type"] != "Ready"
    ] + [ready(f"stored artifact for revision '{GIT_B}'")]
    out = mutated(stored, conditions_first)
    assert cond(out, "Blocked") == cond(stored, "Blocked")
    assert cond(out, "Ready")["status"] == "True" and f"serving {GIT_A}" in cond(out, "Ready")["message"]


def test_blocked_goes_on_the_first_status_write_after_release():
    held = mutated(source({"artifact": art(GIT_A)}), source({"artifact": art(GIT_B)}))
    released = source(held["status"], gates="flux-system/open-gate")
    moved = copy.deepcopy(released)
    moved["status"]["artifact"] = art(GIT_B)
    out = mutated(released, moved)
    assert cond(out, "Blocked") is None and out["status"]["artifact"] == art(GIT_B)


def test_the_validating_webhook_is_the_backstop_for_an_artifact_change_that_was_not_rewritten():
    outcome = run(handlers.validate, source({"artifact": art(GIT_A)}), source({"artifact": art(GIT_B)}))
    assert outcome.response["allowed"] is False
    assert outcome.decision.held_what == "content"
    assert outcome.response["status"]["message"].endswith(f"; {GIT_B} waits, serving {GIT_A}")


def test_a_status_write_is_judged_by_the_policy_it_leaves_whenever_that_names_other_gates():
    # The API server keeps metadata and spec on a status write, so the policy left is the one
    # entered and is judged once; a review whose old object names other gates (none a real API
    # server sends) is judged by both, as any UPDATE is.
    old, new = source({"artifact": art(GIT_A)}), source({"artifact": art(GIT_B)})
    same = run(handlers.validate, old, new).decision
    assert not same.allowed and same.message.count("change-freeze") == 1
    leaving = source({"artifact": art(GIT_A)}, gates=HELD)
    entering = source({"artifact": art(GIT_B)}, gates="flux-system/open-gate")
    assert not run(handlers.validate, leaving, entering).decision.allowed
    assert run(handlers.validate, entering, leaving).decision.message.count("change-freeze") == 1
    opened = source({"artifact": art(GIT_A)}, gates="flux-system/open-gate")
    assert run(
        handlers.validate, opened, source({"artifact": art(GIT_B)}, gates="flux-system/open-gate")
    ).decision.allowed
    for differs in ({"spec": {"suspend": True}}, {"annotations": {names.SUSPENDED_ANNOTATION: "x"}}):
        assert not references.same_gating(old, source({"artifact": art(GIT_A)}, **differs))
    assert references.same_gating(old, new)


def test_a_first_artifact_is_held_too_and_nothing_is_served():
    out = mutated(source({}), source({"artifact": art(GIT_B)}))
    assert "artifact" not in out["status"]
    assert cond(out, "Blocked")["message"].endswith(f"{GIT_B} waits, serving nothing")


def test_audit_mode_holds_nothing_the_validating_webhook_records_it():
    old, new = source({"artifact": art(GIT_A)}), source({"artifact": art(GIT_B)})
    assert mutated(old, new, mode="audit")["status"]["artifact"] == art(GIT_B)
    outcome = run(handlers.validate, old, new, mode="audit")
    assert outcome.response["allowed"] is True and outcome.decision.held
    assert "would be denied" in outcome.response["warnings"][0]
    assert outcome.response["auditAnnotations"]["mode"] == "audit"
    # a gate in audit mode of its own, under an enforcing server
    audited = source({"artifact": art(GIT_A)}, gates="flux-system/audited")
    moved = source({"artifact": art(GIT_B)}, gates="flux-system/audited")
    assert (
        mutated(audited, moved)["status"]["artifact"] == art(GIT_B)
        and cond(mutated(audited, moved), "Blocked") is None
    )


def test_a_generated_helmchart_inherits_its_helmreleases_gates():
    release = flux(
        "HelmRelease",
        name="podinfo",
        namespace="apps",
        gates=HELD,
        spec={
            "chart": {
                "spec": {
                    "chart": "podinfo",
                    "version": "6.x",
                    "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"},
                }
            }
        },
    )
    sources = StaticSources([release])
    old = generated_chart(art("6.5.0"))
    new = generated_chart(art("6.5.1"))
    out = mutated(old, new, sources=sources)
    assert out["status"]["artifact"] == art("6.5.0") and "6.5.1 waits" in cond(out, "Blocked")["message"]
    assert run(handlers.validate, old, new, sources=sources).response["allowed"] is False
    # without the HelmRelease (or another chart) nothing is inherited
    assert mutated(old, new)["status"]["artifact"] == art("6.5.1")


# ---- ImagePolicy --------------------------------------------------------------------------


def test_a_held_image_policy_keeps_its_latest_ref_and_latest_image():
    def policy(tag):
        return flux(
            "ImagePolicy",
            gates=HELD,
            status={
                "latestRef": {"name": "registry.example/a/b", "tag": tag},
                "latestImage": f"registry.example/a/b:{tag}",
                "observedPreviousRef": {"name": "registry.example/a/b", "tag": "0.9"},
            },
        )

    out = mutated(policy("1.0"), policy("1.1"))
    assert (
        out["status"]["latestRef"]["tag"] == "1.0"
        and out["status"]["latestImage"] == "registry.example/a/b:1.0"
    )
    assert cond(out, "Blocked")["message"].endswith(
        "registry.example/a/b:1.1 waits, serving registry.example/a/b:1.0"
    )
    assert run(handlers.validate, policy("1.0"), policy("1.1")).response["allowed"] is False


# ---- Kustomization and HelmRelease --------------------------------------------------------


def ks(status, gates=HELD):
    return flux(
        gates=gates,
        spec={
            "interval": "10m",
            "path": "./deploy",
            "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"},
        },
        status=status,
    )


def test_the_write_that_records_a_new_revision_is_denied_and_others_pass():
    applied = {"lastAppliedRevision": GIT_A, "lastAttemptedRevision": GIT_A}
    attempt = {"lastAppliedRevision": GIT_A, "lastAttemptedRevision": GIT_B}
    denied = run(handlers.validate, ks(applied), ks(attempt))
    assert denied.response["allowed"] is False and denied.decision.held_what == "content"
    message = denied.response["status"]["message"]
    assert message.startswith(f"Kustomization apps/podinfo is held: gate '{HELD}' is closed")
    assert message.endswith(f"{GIT_B} waits, serving {GIT_A}")
    # conditions only, re-applying, the end-of-reconcile write of the applied revision: all pass
    reapply = {**applied, "lastHandledReconcileAt": "x", "conditions": [ready(f"Applied revision: {GIT_A}")]}
    assert run(handlers.validate, ks(applied), ks(reapply)).response["allowed"] is True
    assert (
        run(handlers.validate, ks(attempt), ks({**attempt, "conditions": [ready("x")]})).response["allowed"]
        is True
    )
    # not held: the same write passes
    assert (
        run(
            handlers.validate,
            ks(applied, gates="flux-system/open-gate"),
            ks(attempt, gates="flux-system/open-gate"),
        ).response["allowed"]
        is True
    )


def test_ready_and_approved_say_gate_closed_only_while_something_waits():
    git = flux("GitRepository", name="flux-system", namespace="flux-system", status={"artifact": art(GIT_B)})
    applied = {
        "lastAppliedRevision": GIT_A,
        "lastAttemptedRevision": GIT_A,
        "conditions": [ready(f"Applied revision: {GIT_A}")],
    }
    progress = {**applied, "conditions": [ready("Reconciliation in progress", "Unknown", "Progressing")]}
    out = mutated(ks(applied), ks(progress), sources=StaticSources([git]))
    assert cond(out, "Ready")["status"] == "False" and cond(out, "Ready")["reason"] == "GateClosed"
    assert cond(out, "Ready")["message"].startswith(
        f"Kustomization apps/podinfo is held: gate '{HELD}' is closed"
    )
    assert cond(out, "Ready")["observedGeneration"] == 3
    approved = cond(out, "Approved")
    assert approved["status"] == "False" and approved["reason"] == "GateClosed"
    assert approved["message"] == (
        f"Reconciliation is waiting approval, gate '{HELD}' is closed. {GIT_B} waits, serving {GIT_A}"
    )
    assert content.waiting(out) == content.Waiting(
        "Kustomization", GIT_B, GIT_A, (HELD,), approved["message"]
    )
    # the source serves what was applied: a held object re-applying keeps its normal Ready
    same = flux("GitRepository", name="flux-system", namespace="flux-system", status={"artifact": art(GIT_A)})
    assert mutated(ks(applied), ks(progress), sources=StaticSources([same])) == ks(progress)
    # released: Approved goes, Ready is the controller's
    released = ks(out["status"], gates="flux-system/open-gate")
    after = mutated(
        released,
        ks({**progress, "conditions": out["status"]["conditions"]}, gates="flux-system/open-gate"),
        sources=StaticSources([git]),
    )
    assert cond(after, "Approved") is None


def test_a_helmrelease_attempt_at_new_values_is_denied_the_applied_release_passes():
    old = flux("HelmRelease", gates=HELD, status=hr_status())
    values = flux("HelmRelease", gates=HELD, status=hr_status(attempted=("6.5.0", "", "sha256:v2")))
    outcome = run(handlers.validate, old, values)
    assert outcome.response["allowed"] is False
    assert (
        "6.5.0 (values sha256:v2) waits, serving 6.5.0 (values sha256:v1)"
        in outcome.response["status"]["message"]
    )
    again = flux("HelmRelease", gates=HELD, status={**hr_status(), "lastAttemptedGeneration": 4})
    assert run(handlers.validate, old, again).response["allowed"] is True


def test_a_helmrelease_shows_a_new_chart_waiting_in_its_helmchart():
    release = flux(
        "HelmRelease",
        gates=HELD,
        status=hr_status(),
        spec={
            "chart": {
                "spec": {
                    "chart": "podinfo",
                    "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"},
                }
            }
        },
    )
    chart = flux("HelmChart", name="apps-podinfo", namespace="flux-system", status={"artifact": art("6.5.1")})
    out = mutated(release, release, sources=StaticSources([chart]))
    assert cond(out, "Approved")["message"].endswith("6.5.1 waits, serving 6.5.0 (values sha256:v1)")


# ---- a HelmRelease held for new values: the webhook shows the denied attempt --------------

V1, V2 = ("6.5.0", "", "sha256:v1"), ("6.5.0", "", "sha256:v2")
VALUES_WAIT = "6.5.0 (values sha256:v2) waits, serving 6.5.0 (values sha256:v1)"


def hr(status, gates=HELD):
    return flux("HelmRelease", gates=gates, status=status)


def held_now(obj) -> holdpoints.Held | None:
    """The hold as admission.kube.attempts judges it when it writes."""
    return holdpoints.enforced(standing(obj, Context(LOOKUP, FIXED_NOW, Settings())))


def shown(stored, attempted):
    """``stored`` after the webhook showed the denied ``attempted`` write (None: nothing written)."""
    changes = holdpoints.show_denied_attempt("HelmRelease", stored, attempted, held_now(stored), FIXED_NOW)
    if not changes:
        return None
    out = copy.deepcopy(stored)
    out["status"]["conditions"] = changes["conditions"]
    return mutated(stored, out)  # our write goes through the mutating webhook too


def controller_write(stored, ready_status="Unknown", applied=V1):
    """helm-controller's conditions-first request (its attempt fields match history[0])."""
    new = copy.deepcopy(stored)
    new["status"].update(hr_status(attempted=applied, applied=applied))
    others = [c for c in new["status"]["conditions"] if c["type"] not in ("Ready", "Reconciling")]
    new["status"]["conditions"] = others + [ready("Fulfilling prerequisites", ready_status, "Progressing")]
    return new


STORED = hr({**hr_status(), "conditions": [ready("Running 'upgrade' action", "Unknown", "Progressing")]})
DENIED = hr(hr_status(attempted=V2))


def test_a_denied_values_attempt_is_shown_as_approved_false_and_ready_false():
    assert run(handlers.validate, STORED, DENIED).response["allowed"] is False  # what it follows
    out = shown(STORED, DENIED)
    approved, ready_ = cond(out, "Approved"), cond(out, "Ready")
    assert (approved["status"], approved["reason"]) == ("False", "GateClosed")
    assert (
        approved["message"] == f"Reconciliation is waiting approval, gate '{HELD}' is closed. {VALUES_WAIT}"
    )
    assert (ready_["status"], ready_["reason"]) == ("False", "GateClosed")
    assert ready_["message"].startswith(f"HelmRelease apps/podinfo is held: gate '{HELD}' is closed")
    assert ready_["message"].endswith(VALUES_WAIT)
    assert content.waiting(out) == content.Waiting(
        "HelmRelease", "6.5.0 (values sha256:v2)", "6.5.0 (values sha256:v1)", (HELD,), approved["message"]
    )
    assert out["status"]["history"] == STORED["status"]["history"]  # only conditions are written
    # once shown, a second denial of the same reconcile writes nothing
    assert shown(out, DENIED) is None


def test_nothing_is_shown_when_not_held_already_applied_reconciled_or_not_a_helmrelease():
    assert shown(hr(STORED["status"], gates="flux-system/open-gate"), DENIED) is None
    assert (
        shown(hr(STORED["status"], gates="flux-system/audited"), DENIED) is None
    )  # audit mode holds nothing
    assert shown(hr(hr_status(attempted=V2, applied=V2)), DENIED) is None  # applied since
    assert (
        shown(hr({**hr_status(), "conditions": [ready("Release in-sync")]}), DENIED) is None
    )  # Ready=True since
    assert (
        holdpoints.show_denied_attempt(
            "Kustomization", ks({}), ks({"lastAttemptedRevision": GIT_B}), held_now(STORED), FIXED_NOW
        )
        == {}
    )


def test_the_shown_attempt_stays_on_the_controllers_writes_while_held_and_waiting():
    out = shown(STORED, DENIED)
    for write in (controller_write(out), controller_write(out, "False")):
        kept = mutated(out, write)
        assert cond(kept, "Approved") == cond(out, "Approved")
        assert (cond(kept, "Ready")["status"], cond(kept, "Ready")["reason"]) == ("False", "GateClosed")
        assert cond(kept, "Ready")["message"].endswith(VALUES_WAIT)
        assert mutated(out, kept) == kept  # idempotent
    # the rest of status after it, and a write that drops the condition: it stays
    rest = copy.deepcopy(out)
    rest["status"]["lastHandledReconcileAt"] = "now"
    assert cond(mutated(out, rest), "Approved") == cond(out, "Approved")
    dropped = copy.deepcopy(out)
    dropped["status"]["conditions"] = [c for c in out["status"]["conditions"] if c["type"] != "Approved"]
    assert cond(mutated(out, dropped), "Approved") == cond(out, "Approved")


def test_the_shown_attempt_goes_when_applied_reconciled_without_it_or_released():
    out = shown(STORED, DENIED)
    # history[0] reaches the waiting values (the upgrade ran)
    upgraded = controller_write(out, applied=V2)
    assert cond(mutated(out, upgraded), "Approved") is None
    # helm-controller reports Ready=True: it reconciled without them (the values went back)
    in_sync = mutated(out, controller_write(out, "True"))
    assert cond(in_sync, "Approved") is None and cond(in_sync, "Ready")["status"] == "True"
    # the gate opens: the first status write removes it
    released = hr(out["status"], gates="flux-system/open-gate")
    assert cond(mutated(released, controller_write(released)), "Approved") is None


def test_a_helmrelease_whose_source_serves_a_new_chart_shows_the_chart_not_the_values():
    # what the mutating webhook shows on every write wins, so the two never rewrite each other
    release = hr(STORED["status"])
    release["spec"] = {
        "chart": {
            "spec": {
                "chart": "podinfo",
                "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"},
            }
        }
    }
    chart = flux("HelmChart", name="apps-podinfo", namespace="flux-system", status={"artifact": art("6.5.1")})
    upstream_ = kinds.content_of("HelmRelease").upstream_of(release, StaticSources([chart]).get)
    changes = holdpoints.show_denied_attempt(
        "HelmRelease", release, DENIED, held_now(release), FIXED_NOW, upstream_
    )
    approved = conditions.find({"status": changes}, "Approved")
    assert approved["message"].endswith("6.5.1 waits, serving 6.5.0 (values sha256:v1)")


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([V1, V2, ("6.5.1", "", "sha256:v2")]),
    st.sampled_from(["True", "False", "Unknown", None]),
    st.sampled_from([HELD, "flux-system/open-gate"]),
    st.booleans(),
)
def test_a_shown_attempt_stays_exactly_while_held_waiting_and_not_reported_ready(
    applied, ready_status, gates, keeps_conditions
):
    out = hr(shown(STORED, DENIED)["status"], gates=gates)
    write = controller_write(out, ready_status or "Unknown", applied=applied)
    if ready_status is None:
        write["status"]["conditions"] = [c for c in write["status"]["conditions"] if c["type"] != "Ready"]
    if not keeps_conditions:
        write["status"]["conditions"] = [c for c in write["status"]["conditions"] if c["type"] != "Approved"]
    after = mutated(out, write)
    expected = gates == HELD and applied != V2 and ready_status != "True"
    assert (conditions.holding_condition(after, "HelmRelease") is not None) == expected
    assert mutated(out, after) == after


# ---- properties ---------------------------------------------------------------------------

CONTENT_KINDS = [
    "GitRepository",
    "OCIRepository",
    "HelmRepository",
    "HelmChart",
    "Bucket",
    "ExternalArtifact",
    "ImagePolicy",
    "Kustomization",
    "HelmRelease",
    "ImageRepository",
    "ImageUpdateAutomation",
]
revisions = st.sampled_from([GIT_A, GIT_B, "main@sha1:77", "6.5.0", "6.5.1"])
foreign_conditions = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["Ready", "Reconciling", "Healthy", "Stalled", "ArtifactInStorage"]),
            "status": st.sampled_from(["True", "False", "Unknown"]),
            "reason": st.sampled_from(["Succeeded", "Progressing", "Failed"]),
            "message": st.one_of(revisions, st.text(max_size=20)),
        }
    ),
    max_size=3,
    unique_by=lambda c: c["type"],
)


@st.composite
def statuses(draw):
    status = {}
    if draw(st.booleans()):
        status["artifact"] = art(draw(revisions))
    if draw(st.booleans()):
        status["latestRef"] = {
            "name": "registry.example/a/b",
            "tag": draw(st.sampled_from(["1.0", "1.1", "2.0"])),
        }
    if draw(st.booleans()):
        status["latestImage"] = f"registry.example/a/b:{draw(st.sampled_from(['1.0', '1.1']))}"
    if draw(st.booleans()):
        status["lastAppliedRevision"] = draw(revisions)
    if draw(st.booleans()):
        status["lastAttemptedRevision"] = draw(revisions)
    if draw(st.booleans()):
        status.update(
            hr_status(attempted=(draw(revisions), "", draw(st.sampled_from(["sha256:v1", "sha256:v2"]))))
        )
    status["observedGeneration"] = draw(st.integers(1, 5))
    status["conditions"] = draw(foreign_conditions)
    return status


upstream = StaticSources(
    [
        flux("GitRepository", name="flux-system", namespace="flux-system", status={"artifact": art(GIT_B)}),
        flux(
            "HelmRelease",
            name="podinfo",
            namespace="apps",
            gates=HELD,
            spec={"chart": {"spec": {"chart": "podinfo"}}},
        ),
    ]
)


def write(kind, gates, old_status, new_status):
    name = "apps-podinfo" if kind == "HelmChart" else "podinfo"
    spec = {
        "interval": "1m",
        "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"},
    }
    return (
        flux(kind, name=name, namespace="apps", gates=gates, spec=spec, status=old_status),
        flux(kind, name=name, namespace="apps", gates=gates, spec=spec, status=new_status),
    )


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(CONTENT_KINDS),
    st.sampled_from([None, "flux-system/open-gate"]),
    statuses(),
    statuses(),
    st.sampled_from(["enforce", "audit"]),
)
def test_a_status_write_of_an_object_that_is_not_held_is_never_changed_or_denied(
    kind, gates, before, after, mode
):
    old, new = write(kind, gates, before, after)
    if kind == "HelmChart":  # a chart generated for a held HelmRelease is held: this one is not generated
        old["metadata"]["name"] = new["metadata"]["name"] = "podinfo"
    assert mutated(old, new, sources=upstream, mode=mode) == new
    assert run(handlers.validate, old, new, sources=upstream, mode=mode).response["allowed"] is True


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(
        ["GitRepository", "OCIRepository", "HelmRepository", "HelmChart", "Bucket", "ImagePolicy"]
    ),
    statuses(),
    statuses(),
    statuses(),
)
def test_a_held_sources_stored_content_never_changes(kind, stored, first, second):
    # any sequence of status writes, each through the mutating webhook then stored
    old, _ = write(kind, HELD, stored, stored)
    for following in (first, second):
        _, new = write(kind, HELD, stored, following)
        out = mutated(old, new, sources=upstream)
        for field in ("latestRef", "latestImage") if kind == "ImagePolicy" else ("artifact",):
            assert out["status"].get(field) == old["status"].get(field)
        assert run(handlers.validate, old, out, sources=upstream).response["allowed"] is True
        old = out


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(CONTENT_KINDS),
    st.sampled_from([HELD, None, "flux-system/open-gate"]),
    statuses(),
    statuses(),
)
def test_the_rewrite_is_idempotent(kind, gates, before, after):
    old, new = write(kind, gates, before, after)
    once = mutated(old, new, sources=upstream)
    assert mutated(old, once, sources=upstream) == once


@settings(max_examples=100, deadline=None)
@given(statuses(), statuses())
def test_an_external_artifacts_new_artifact_is_never_held(stored, following):
    # Its producer (source-watcher) server-side applies status with force and garbage-collects
    # old artifacts without reading the stored status: one written back could name a deleted
    # file. So a gate holds only edits of an ExternalArtifact (docs/design.md, "Hold points").
    old, new = write("ExternalArtifact", HELD, stored, following)
    out = mutated(old, new, sources=upstream)
    assert out["status"].get("artifact") == new["status"].get("artifact")
    assert run(handlers.validate, old, out, sources=upstream).response["allowed"] is True


def test_a_held_content_write_of_a_suspended_source_is_judged_once(monkeypatch):
    # suspension_of and new_content each ran twice on such a write: once in the verdict, once
    # more for status.suspended and for the decision's change.
    from admission.core.admission import decision

    calls = {"suspension_of": 0, "new_content": 0}

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(decision, "suspension_of", counted("suspension_of", decision.suspension_of))
    monkeypatch.setattr(mutation, "suspension_of", counted("suspension_of", mutation.suspension_of))
    # (what a write brings: the content kind's one reading of it)
    brings = contentkinds.Artifact.brings
    monkeypatch.setattr(contentkinds.Artifact, "brings", counted("new_content", brings))
    suspended = {names.SUSPENDED_ANNOTATION: "maintenance"}
    old = source({"artifact": art(GIT_A)}, annotations=suspended)
    new = source({"artifact": art(GIT_B)}, annotations=suspended)
    outcome = run(handlers.mutate, old, new)
    assert outcome.decision.held and outcome.decision.held_what == decision.CONTENT
    assert {"op": "add", "path": "/status/suspended", "value": True} in outcome.patch
    assert calls == {"suspension_of": 1, "new_content": 1}, calls


# ---- the whole mutation, decided in the core (core.admission.mutation) ------------------------------


def test_the_core_returns_every_change_as_plain_data_and_the_webhook_only_spells_it():
    suspended = flux(name="flux-system", namespace="flux-system", spec={"suspend": True}, status={})
    found = mutation.judge(
        request("UPDATE", suspended, suspended, sub_resource="status", user=FLUX_USER),
        Context(LOOKUP, FIXED_NOW, Settings()),
    )
    assert found.status == {"suspended": True} and found.annotations == {} and found.decision.allowed
    old, new = flux(gates=HELD), flux(gates=HELD, spec={"interval": "1m", "path": "./other"})
    found = mutation.judge(request("UPDATE", new, old), Context(LOOKUP, FIXED_NOW, Settings(mode="audit")))
    record = orjson.loads(found.annotations[names.AUDIT_ANNOTATION])
    assert found.status == {} and found.decision.held and record["change"] == "spec change"
    assert record["message"] == found.decision.message and record["user"] == "alice"
    assert (
        mutation.judge(request("UPDATE", new, old), Context(LOOKUP, FIXED_NOW, Settings())).annotations == {}
    )


def test_a_held_status_written_whole_says_suspended_too():
    # Found by tests/app/test_fuzz.py: a status write whose object carries no status at all got
    # the kept artifact and Blocked, but no status.suspended.
    old = source({"artifact": art(GIT_A), "suspended": False})
    new = source({})
    del new["status"]
    outcome = run(handlers.mutate, old, new)
    [op] = outcome.patch
    assert op["path"] == "/status" and op["value"]["suspended"] is False
    assert op["value"]["artifact"]["revision"] == GIT_A


def test_both_webhooks_act_on_one_judgement_of_a_status_write():
    # docs/decisions/0090-the-request-read-once.md: the validating webhook's verdict and the hold
    # points' rewrite come from decision.judge_status, so they cannot disagree on what is held.
    from admission.core.admission import decision
    from admission.core.admission.admitted import admission_of

    old, new = source({"artifact": art(GIT_A)}), source({"artifact": art(GIT_B)})
    req = request("UPDATE", new, old, sub_resource="status", user=FLUX_USER)
    context = Context(LOOKUP, FIXED_NOW, Settings())
    write = decision.judge_status(admission_of(req), context)
    validated, mutated_ = decision.decide(req, context), mutation.judge(req, context).decision
    assert write.stands.value.held and validated.held and mutated_.held
    assert validated.message == mutated_.message == write.carried.after(write.stands.value.message)
    assert validated.change == mutated_.change == write.carried.as_change()
