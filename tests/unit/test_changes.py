"""The table of SPEC §5: which requests are changes a closed gate holds back."""

import copy

import pytest

from admission.core.admission.changes import gated_change
from tests.builders import FLUX_KINDS, flux

SOURCES = ["GitRepository", "OCIRepository", "HelmRepository", "HelmChart", "Bucket"]


def artifact(revision, digest="sha256:1"):
    return {"artifact": {"revision": revision, "digest": digest, "path": "x.tar.gz"}}


def with_meta(obj, **changes):
    new = copy.deepcopy(obj)
    new["metadata"].update(changes)
    return new


@pytest.mark.parametrize("kind", FLUX_KINDS)
def test_create_and_delete_are_changes(kind):
    obj = flux(kind, gates="g")
    assert gated_change(kind, "CREATE", "", None, obj) == "creation"
    assert gated_change(kind, "DELETE", "", obj, None) == "deletion"


@pytest.mark.parametrize("kind", FLUX_KINDS)
def test_spec_updates_are_changes_except_suspend_alone(kind):
    old = flux(kind, gates="g", spec={"interval": "10m", "path": "./a"})
    new = copy.deepcopy(old)
    new["spec"]["path"] = "./b"
    assert gated_change(kind, "UPDATE", "", old, new) == "spec change"
    suspended = copy.deepcopy(old)
    suspended["spec"]["suspend"] = True
    assert gated_change(kind, "UPDATE", "", old, suspended) is None
    assert gated_change(kind, "UPDATE", "", suspended, old) is None


@pytest.mark.parametrize("kind", FLUX_KINDS)
@pytest.mark.parametrize(
    "meta",
    [
        {"labels": {"team": "web"}},
        {"annotations": {"gating.toolkit.fluxcd.io/gates": "g", "note": "x"}},
        {
            "annotations": {
                "gating.toolkit.fluxcd.io/gates": "g",
                "reconcile.fluxcd.io/requestedAt": "2026-11-21T12:00:00Z",
            }
        },
        {"finalizers": ["finalizers.fluxcd.io"]},
        {"managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        {"annotations": {"gating.toolkit.fluxcd.io/gates": "g", "reconcile.fluxcd.io/suspended": "x"}},
    ],
)
def test_metadata_only_updates_are_never_changes(kind, meta):
    old = flux(kind, gates="g")
    assert gated_change(kind, "UPDATE", "", old, with_meta(old, **meta)) is None


def test_removing_references_or_loosening_require_is_a_change():
    old = flux(gates="a, b")
    assert (
        gated_change("Kustomization", "UPDATE", "", old, flux(gates="a"))
        == "removes gate references 'apps/b'"
    )
    assert (
        gated_change("Kustomization", "UPDATE", "", old, flux())
        == "removes gate references 'apps/a', 'apps/b'"
    )
    assert (
        gated_change("Kustomization", "UPDATE", "", old, flux(gates="a, b", require="oneOf"))
        == "loosens require from all to oneOf"
    )
    assert gated_change("Kustomization", "UPDATE", "", old, flux(gates="a, b, c")) is None


def test_spec_gates_edits_are_judged_as_policy_not_spec():
    old = flux(spec={"interval": "1m", "gates": [{"name": "a"}]})
    tighter = flux(spec={"interval": "1m", "gates": [{"name": "a"}, {"name": "b"}]})
    assert gated_change("Kustomization", "UPDATE", "", old, tighter) is None
    assert gated_change("Kustomization", "UPDATE", "", tighter, old) == "removes gate references 'apps/b'"


@pytest.mark.parametrize("kind", SOURCES)
def test_source_status_artifact_changes_are_changes(kind):
    old = flux(kind, status=artifact("main@sha1:aaa"))
    new = flux(kind, status=artifact("main@sha1:bbb"))
    assert (
        gated_change(kind, "UPDATE", "status", old, new)
        == "new content: main@sha1:bbb waits, serving main@sha1:aaa"
    )
    digest_only = flux(kind, status=artifact("main@sha1:aaa", "sha256:2"))
    assert gated_change(kind, "UPDATE", "status", old, digest_only)
    first = flux(kind, status={"conditions": []})
    assert gated_change(kind, "UPDATE", "status", first, old)


@pytest.mark.parametrize("kind", SOURCES)
def test_other_source_status_updates_are_not_changes(kind):
    old = flux(kind, status={**artifact("main@sha1:aaa"), "conditions": []})
    new = flux(
        kind,
        status={
            **artifact("main@sha1:aaa"),
            "conditions": [{"type": "Ready", "status": "True"}],
            "observedGeneration": 2,
        },
    )
    assert gated_change(kind, "UPDATE", "status", old, new) is None


@pytest.mark.parametrize("kind", ["Kustomization", "HelmRelease"])
def test_status_updates_of_syncs_are_never_changes(kind):
    old = flux(kind, status={"lastAppliedRevision": "a"})
    new = flux(kind, status={"lastAppliedRevision": "b"})
    assert gated_change(kind, "UPDATE", "status", old, new) is None


def test_connect_and_other_subresources_are_not_changes():
    obj = flux()
    assert gated_change("Kustomization", "CONNECT", "", None, obj) is None
    assert gated_change("Kustomization", "UPDATE", "scale", obj, obj) is None


def values_release(values):
    return flux(
        "HelmRelease",
        gates="g",
        spec={"interval": "10m", "chart": {"spec": {"chart": "podinfo"}}, "values": values},
    )


# Helm renders each of these pairs differently (`{{ if .Values.debug }}`, `{{ .Values.replicas }}`).
@pytest.mark.parametrize(
    "before, after",
    [
        (False, 0),
        (True, 1),
        (1, True),
        (0, False),
        (0, -0.0),
        (0.0, -0.0),
        (1, 1.0),
        (1.0, 1),
        ("1", 1),
        (None, False),
    ],
)
def test_a_values_edit_that_changes_only_a_type_or_sign_is_a_spec_change(before, after):
    old = values_release({"debug": before, "list": [before], "nested": {"deep": [{"v": before}]}})
    for new in (
        values_release({"debug": after, "list": [before], "nested": {"deep": [{"v": before}]}}),
        values_release({"debug": before, "list": [after], "nested": {"deep": [{"v": before}]}}),
        values_release({"debug": before, "list": [before], "nested": {"deep": [{"v": after}]}}),
    ):
        assert gated_change("HelmRelease", "UPDATE", "", old, new) == "spec change"
        assert gated_change("HelmRelease", "UPDATE", "", new, old) == "spec change"


def test_the_same_values_in_another_key_order_are_not_a_change():
    old = values_release({"a": 1, "b": {"x": True, "y": [0.5, "s", None]}})
    new = values_release({"b": {"y": [0.5, "s", None], "x": True}, "a": 1})
    assert gated_change("HelmRelease", "UPDATE", "", old, with_meta(new, labels={"team": "web"})) is None


OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "1"}
OTHER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": "2"}


@pytest.mark.parametrize("kind", FLUX_KINDS)
@pytest.mark.parametrize(
    "before, after",
    [
        (None, [OWNER]),  # a dangling owner: the garbage collector deletes the object at once
        ([OWNER], [OWNER, OTHER]),
        ([OWNER], [dict(OWNER, uid="3")]),
        ([OWNER, OTHER], [OTHER]),  # the owner left may be gone
    ],
)
def test_adding_or_changing_owner_references_is_a_change(kind, before, after):
    old = flux(kind, gates="g")
    if before is not None:
        old = with_meta(old, ownerReferences=before)
    new = with_meta(old, ownerReferences=after)
    assert gated_change(kind, "UPDATE", "", old, new) == "owner references change"
    assert gated_change(kind, "UPDATE", "", old, new, by_kubernetes=True) is None


@pytest.mark.parametrize("after", [[], None])
def test_removing_every_owner_reference_or_keeping_them_is_not_a_change(after):
    old = with_meta(flux(gates="g"), ownerReferences=[OWNER, OTHER])
    assert gated_change("Kustomization", "UPDATE", "", old, with_meta(old, ownerReferences=after)) is None
    assert gated_change("Kustomization", "UPDATE", "", old, with_meta(old, labels={"a": "b"})) is None


# ---- the request read once, the change as a type (docs/decisions/0090-the-request-read-once.md) ----


def test_a_request_on_a_gated_kind_is_read_once_into_an_immutable_value():
    import dataclasses

    from admission.core.admission.admitted import admission_of
    from admission.core.flux import kinds
    from tests.builders import ALICE, request

    old = flux(gates="g")
    new = flux(gates="g", spec={"path": "./other"})
    admission = admission_of(request("UPDATE", new, old, user=dict(ALICE, groups=["dev"])))
    assert admission.row is kinds.BY_KIND["Kustomization"] and admission.operation == "UPDATE"
    assert (admission.old, admission.new, admission.sub_resource) == (old, new, "")
    assert (admission.user.name, admission.user.groups) == (ALICE["username"], ("dev",))
    assert admission.about.name == new["metadata"]["name"] and admission.carried is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        admission.operation = "DELETE"
    ungated = request("UPDATE", new, old)
    ungated["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert admission_of(ungated) is None


def test_each_change_is_one_type_that_says_its_words_and_what_a_held_message_adds():
    from admission.core.admission import changes
    from admission.core.admission.admitted import admission_of
    from admission.core.gates.references import policy_of
    from tests.builders import request

    def classify(operation, new, old, sub_resource=""):
        found = admission_of(request(operation, new, old, sub_resource=sub_resource))
        return changes.classify(found, lambda: (policy_of(old), policy_of(new)))

    old = flux(gates="a, b", spec={"path": "./a"})
    edited = flux(gates="a, b", spec={"path": "./b"})
    spec = classify("UPDATE", edited, old)
    assert isinstance(spec, changes.SpecChange) and spec.paths() == (["spec.path"], 1)
    assert (spec.text, spec.explain("held")) == ("spec change", "held; changed: spec.path")
    loosened = classify("UPDATE", flux(gates="a", spec={"path": "./a"}), old)
    assert isinstance(loosened, changes.PolicyLoosened)
    assert loosened.explain("held") == f"held; {loosened.text}"
    assert isinstance(classify("CREATE", old, None), changes.Creation)
    assert isinstance(classify("DELETE", None, old), changes.Deletion)
    assert classify("UPDATE", old, old) is None
    source_old = flux("GitRepository", gates="a", status=artifact("main@sha1:1"))
    source_new = flux("GitRepository", gates="a", status=artifact("main@sha1:2", "sha256:2"))
    carried = classify("UPDATE", source_new, source_old, "status")
    assert isinstance(carried, changes.ContentChange) and carried.text == carried.carried.as_change()
    assert carried.explain("held") == carried.carried.after("held")
