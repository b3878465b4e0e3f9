"""What a Flux status serves, what waits, and the Blocked/Approved messages (core.flux.content)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.core.base import names
from admission.core.base.names import APPROVED_CONDITION as APPROVED
from admission.core.base.names import BLOCKED_CONDITION as BLOCKED
from admission.core.flux import content, contentkinds, holdmessage, kinds
from admission.core.flux.holdmessage import HoldMessage, NewContent
from tests.builders import flux

GIT_A, GIT_B = "main@sha1:41ab", "main@sha1:9f2c"


def art(revision: str, digest: str | None = None) -> dict:
    return {
        "revision": revision,
        "digest": digest or f"sha256:{revision[-4:]}",
        "url": f"http://x/{revision}.tgz",
        "path": f"x/{revision}.tgz",
        "size": 10,
        "lastUpdateTime": "2026-06-10T11:00:00Z",
    }


def hr_status(attempted=("6.5.0", "", "sha256:v1"), applied=("6.5.0", "", "sha256:v1")) -> dict:
    status = dict(
        zip(
            (
                names.LAST_ATTEMPTED_REVISION_FIELD,
                names.LAST_ATTEMPTED_REVISION_DIGEST_FIELD,
                names.LAST_ATTEMPTED_CONFIG_DIGEST_FIELD,
            ),
            attempted,
            strict=True,
        )
    )
    if applied is not None:
        status["history"] = [
            {"chartVersion": applied[0], "ociDigest": applied[1], "configDigest": applied[2]}
        ]
    return status


# ---- new content: the field rules (FLUX-WRITES.md) ---------------------------------------


def test_a_new_artifact_revision_or_digest_is_new_content_other_fields_are_not():
    old = flux("GitRepository", status={"artifact": art(GIT_A)})
    assert kinds.content_of("GitRepository").brings(
        old, flux("GitRepository", status={"artifact": art(GIT_B)})
    ) == (GIT_B, GIT_A)
    assert kinds.content_of("GitRepository").brings(
        old,
        flux("GitRepository", status={"artifact": {**art(GIT_A), "digest": "sha256:other"}}),
    ) == (GIT_A, GIT_A)
    moved = {**art(GIT_A), "url": "http://elsewhere", "lastUpdateTime": "2026-06-10T12:00:00Z"}
    assert (
        kinds.content_of("GitRepository").brings(old, flux("GitRepository", status={"artifact": moved}))
        is None
    )


def test_an_image_policy_choosing_another_image_is_new_content_in_either_field():
    old = flux(
        "ImagePolicy",
        status={"latestRef": {"name": "registry.example/a/b", "tag": "1.0.0", "digest": "sha256:1"}},
    )
    new = flux(
        "ImagePolicy",
        status={"latestRef": {"name": "registry.example/a/b", "tag": "1.1.0", "digest": "sha256:2"}},
    )
    assert kinds.content_of("ImagePolicy").brings(old, new) == (
        "registry.example/a/b:1.1.0@sha256:2",
        "registry.example/a/b:1.0.0@sha256:1",
    )
    older = flux("ImagePolicy", status={"latestImage": "registry.example/a/b:1.0.0"})
    newer = flux("ImagePolicy", status={"latestImage": "registry.example/a/b:1.1.0"})
    assert kinds.content_of("ImagePolicy").brings(older, newer) == (
        "registry.example/a/b:1.1.0",
        "registry.example/a/b:1.0.0",
    )


@pytest.mark.parametrize(
    "old_attempt, new_attempt, applied, carries",
    [
        (GIT_A, GIT_B, GIT_A, True),  # the write that records a new revision
        (GIT_A, GIT_A, GIT_A, False),  # re-applying what was applied
        (GIT_B, GIT_A, GIT_A, False),  # back to the applied revision
        (GIT_B, GIT_B, GIT_A, False),  # an attempt already recorded is not recorded again
        (None, GIT_A, None, True),  # the first revision ever
    ],
)
def test_a_kustomization_attempt_is_new_content_when_it_moves_away_from_the_applied_revision(
    old_attempt, new_attempt, applied, carries
):
    def ks(attempt):
        return flux(
            status={
                k: v for k, v in (("lastAttemptedRevision", attempt), ("lastAppliedRevision", applied)) if v
            }
        )

    assert (kinds.content_of("Kustomization").brings(ks(old_attempt), ks(new_attempt)) is not None) is carries


@pytest.mark.parametrize(
    "new_attempt, carries",
    [
        (("6.5.1", "", "sha256:v1"), True),  # a new chart version
        (("6.5.0", "", "sha256:v2"), True),  # new values
        (("6.5.0", "sha256:o2", "sha256:v1"), True),  # a new OCI digest
        (("6.5.0", "", "sha256:v1"), False),  # the applied release again
    ],
)
def test_a_helmrelease_attempt_is_new_content_when_it_differs_from_history_0(new_attempt, carries):
    old = flux("HelmRelease", status=hr_status(attempted=("6.4.0", "", "sha256:v0")))
    new = flux("HelmRelease", status=hr_status(attempted=new_attempt))
    assert (kinds.content_of("HelmRelease").brings(old, new) is not None) is carries


def test_a_helmrelease_first_install_is_new_content():
    old = flux("HelmRelease", status={})
    new = flux("HelmRelease", status=hr_status(applied=None))
    assert kinds.content_of("HelmRelease").brings(old, new) == ("6.5.0 (values sha256:v1)", "nothing")


def test_kinds_without_content_never_carry_any():
    for kind in ("ImageRepository", "ImageUpdateAutomation"):
        assert kinds.content_of(kind).brings(flux(kind, status={"a": 1}), flux(kind, status={"a": 2})) is None


# ---- what feeds a Kustomization or HelmRelease --------------------------------------------


def test_upstream_of_a_kustomization_and_helmreleases_with_chart_or_chart_ref():
    ks = flux(
        spec={"sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"}}
    )
    assert kinds.content_of("Kustomization").upstream(ks) == ("GitRepository", "flux-system", "flux-system")
    hr = flux(
        "HelmRelease",
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
    assert kinds.content_of("HelmRelease").upstream(hr) == ("HelmChart", "flux-system", "apps-podinfo")
    oci = flux("HelmRelease", spec={"chartRef": {"kind": "OCIRepository", "name": "podinfo"}})
    assert kinds.content_of("HelmRelease").upstream(oci) == ("OCIRepository", "apps", "podinfo")


def test_upstream_waits_compares_what_the_source_serves_with_what_was_applied():
    ks = flux(status={"lastAppliedRevision": GIT_A})
    assert kinds.content_of("Kustomization").upstream_waits(
        ks, "GitRepository", flux("GitRepository", status={"artifact": art(GIT_B)})
    ) == (GIT_B, GIT_A)
    assert (
        kinds.content_of("Kustomization").upstream_waits(
            ks, "GitRepository", flux("GitRepository", status={"artifact": art(GIT_A)})
        )
        is None
    )
    assert kinds.content_of("Kustomization").upstream_waits(ks, "GitRepository", None) is None
    hr = flux("HelmRelease", status=hr_status())
    assert (
        kinds.content_of("HelmRelease").upstream_waits(
            hr, "HelmChart", flux("HelmChart", status={"artifact": art("6.5.1")})
        )[0]
        == "6.5.1"
    )
    assert (
        kinds.content_of("HelmRelease").upstream_waits(
            hr, "HelmChart", flux("HelmChart", status={"artifact": art("6.5.0")})
        )
        is None
    )


def test_the_owner_labels_helm_controller_sets_say_which_helmrelease_generated_a_chart():
    # "a-b-c" splits two ways; both HelmReleases exist and generate into flux-system.
    def release(namespace, name):
        return flux(
            "HelmRelease",
            name=name,
            namespace=namespace,
            spec={
                "chart": {
                    "spec": {
                        "chart": "c",
                        "sourceRef": {"kind": "HelmRepository", "name": "r", "namespace": "flux-system"},
                    }
                }
            },
        )

    store = {
        ("HelmRelease", "a", "b-c"): release("a", "b-c"),
        ("HelmRelease", "a-b", "c"): release("a-b", "c"),
    }

    def get(kind, namespace, name):
        return store.get((kind, namespace, name))

    def chart(name="a-b-c", namespace="flux-system", owner=("a-b", "c")):
        labels = {names.HELM_NAMESPACE_LABEL: owner[0], names.HELM_NAME_LABEL: owner[1]} if owner else None
        return flux("HelmChart", name=name, namespace=namespace, labels=labels)

    assert content.generating_releases(chart(), get) == (store[("HelmRelease", "a-b", "c")],)
    assert content.generating_releases(chart(owner=("a", "b-c")), get) == (
        store[("HelmRelease", "a", "b-c")],
    )
    assert content.inherits_from(chart(), get) == content.generating_releases(chart(), get)
    # Not generated there: another namespace than the release's sourceRef says, no labels, or
    # the labels of the release that deployed it under a name of its own.
    assert content.generating_releases(chart(namespace="other"), get) == ()
    assert content.generating_releases(chart(owner=None), get) == ()
    assert content.generating_releases(chart(owner=("x", "b-c")), get) == ()
    assert content.generating_releases(chart(owner=("a", "missing")), get) == ()
    assert content.inherits_from(flux("HelmRelease", name="a-b-c", namespace="flux-system"), get) == ()


# ---- messages round-trip ------------------------------------------------------------------


def test_the_issue_example_message_and_waiting():
    message = HoldMessage.of(
        BLOCKED, ("gate 'flux-system/change-freeze' is closed",), NewContent(GIT_B, GIT_A)
    ).format()
    assert message == (
        "Reconciliation is blocked as gate 'flux-system/change-freeze' is closed: "
        "main@sha1:9f2c waits, serving main@sha1:41ab"
    )
    obj = flux(
        "GitRepository",
        status={
            "conditions": [{"type": "Blocked", "status": "True", "reason": "GateClosed", "message": message}]
        },
    )
    assert content.waiting(obj) == content.Waiting(
        "GitRepository", GIT_B, GIT_A, ("flux-system/change-freeze",), message
    )


def test_approved_false_says_what_waits_on_kustomizations_and_nothing_else_does():
    message = HoldMessage.of(
        APPROVED, ("gate 'flux-system/sre-approval' is closed",), NewContent(GIT_B, GIT_A)
    ).format()
    assert message.startswith(
        "Reconciliation is waiting approval, gate 'flux-system/sre-approval' is closed."
    )
    ks = flux(
        status={
            "conditions": [
                {"type": "Approved", "status": "False", "reason": "GateClosed", "message": message}
            ]
        }
    )
    assert content.waiting(ks).waits == GIT_B and content.waiting(ks).gates == ("flux-system/sre-approval",)
    approved = flux(
        status={
            "conditions": [{"type": "Approved", "status": "True", "reason": "GateOpened", "message": "ok"}]
        }
    )
    assert content.waiting(approved) is None
    assert content.waiting(flux(status={"conditions": [{"type": "Ready", "status": "True"}]})) is None
    assert content.waiting(flux()) is None and content.waiting(None) is None


_GATE_KEYS = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,8}[a-z0-9])?", fullmatch=True
)
_SEPARATOR = " waits, serving "
_revisions = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda t: (
        ": " not in t
        and ". " not in t
        and _SEPARATOR not in t
        and not t.endswith((".", ":"))
        and t == t.strip()
        and "\n" not in t
    )
)
_serves = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40).filter(
    lambda t: _SEPARATOR not in t
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_GATE_KEYS, min_size=1, max_size=4, unique=True), _revisions, _serves, st.booleans())
def test_messages_round_trip(gates, waits, serves, blocked):
    clauses = tuple(holdmessage.gate_clause(g) for g in gates)
    hold = holdmessage.parse(
        HoldMessage.of(BLOCKED if blocked else APPROVED, clauses, NewContent(waits, serves)).format()
    )
    assert (hold.gates, hold.content.waits, hold.content.serves) == (tuple(gates), waits, serves)


def test_messages_with_suspensions_round_trip_naming_only_gates():
    clauses = (
        "suspended by reconcile.fluxcd.io/suspended ('db migration: step 2. wait')",
        holdmessage.gate_clause("flux-system/a"),
    )
    hold = holdmessage.parse(HoldMessage.of(BLOCKED, clauses, NewContent(GIT_B, GIT_A)).format())
    assert (hold.gates, hold.content.waits, hold.content.serves) == (("flux-system/a",), GIT_B, GIT_A)


def test_other_messages_do_not_parse():
    for text in ("stored artifact for revision 'main@sha1:1'", "", "Reconciliation is blocked as x", None):
        assert holdmessage.parse(text) is None


def test_served_revisions_for_every_kind_with_content():
    assert (
        kinds.content_of("GitRepository").serves(flux("GitRepository", status={"artifact": art(GIT_A)}))
        == GIT_A
    )
    assert kinds.content_of("Bucket").serves(flux("Bucket", status={})) == "nothing"
    assert kinds.content_of("Kustomization").serves(flux(status={"lastAppliedRevision": GIT_A})) == GIT_A
    assert (
        kinds.content_of("HelmRelease").serves(flux("HelmRelease", status=hr_status()))
        == "6.5.0 (values sha256:v1)"
    )
    assert (
        kinds.content_of("ImagePolicy").serves(flux("ImagePolicy", status={"latestImage": "a/b:1"}))
        == "a/b:1"
    )
    assert (
        len(
            kinds.content_of("GitRepository").serves(
                flux("GitRepository", status={"artifact": art("x" * 5000)})
            )
        )
        == content.MAX_TEXT
    )


# ---- each content kind is one value (core.flux.contentkinds) -----------------------------------


def test_each_kind_with_content_holds_one_value_that_the_lookup_by_kind_finds():
    values = {k.kind: k.content for k in kinds.FLUX_KINDS if k.content.holds}
    assert {type(v) for v in values.values()} == {
        contentkinds.Artifact,
        contentkinds.ChartArtifact,  # a HelmChart's artifact: shown and approved as the chart it is
        contentkinds.LatestImage,
        contentkinds.AttemptedRevision,
        contentkinds.AttemptedRelease,
    }
    for kind, value in values.items():
        assert kinds.content_of(kind) is value and value.hold_condition in (BLOCKED, APPROVED)
        assert value.keeps != value.records_attempts  # a held write is rewritten back or denied, never both
        assert set(value.attempt(flux(kind, status={f: "x" for f in value.fields}))["status"]) == (
            set(value.fields) if value.records_attempts else set()
        )
    # Only edits are gated, or the kind is not gated: no content, which serves nothing and
    # which no write brings.
    for kind in ("ExternalArtifact", "ImageRepository", "Gate", None):
        found = kinds.content_of(kind)
        assert found is contentkinds.NO_CONTENT and not found.holds
        assert found.serves(flux()) == "nothing" and found.brings(flux(), flux(status={"a": 1})) is None
    assert (
        kinds.content_of("Gate").attempt(flux()) == {"status": {}}
        and kinds.content_of("GitRepository").upstream(flux()) is None
    )
