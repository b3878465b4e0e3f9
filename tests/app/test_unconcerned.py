"""A request the API server would not send us (admission.core.admission.matching) gets the answer the
server would give it anyway: a plain "allowed", no patch, no warning, no audit annotation. An
API server without matchConditions (older than 1.30) sends everything, so the fast answer must
be the judged one. Checked for generated requests while every gate is closed (exempt users
aside: an exemption is recorded only for requests that concern us)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.core.admission import matching
from admission.core.admission.decision import Context, Settings
from admission.core.base import names
from admission.core.flux import kinds
from admission.store import StaticSources
from admission.webhook import handlers
from tests.builders import at, flux, generated_chart, lookup_from, request
from tests.matching_cases import OWNER, artifact, condition

NOW = at("2026-06-10T12:00")
CLOSED = lookup_from([])  # every gate is missing, so closed
# A HelmRelease that a closed gate holds, whose generated chart is flux-system/apps-podinfo.
SOURCES = StaticSources(
    [
        flux(
            "HelmRelease",
            name="podinfo",
            namespace="apps",
            gates="flux-system/closed",
            spec={
                "chart": {
                    "spec": {
                        "chart": "podinfo",
                        "sourceRef": {
                            "kind": "HelmRepository",
                            "name": "podinfo",
                            "namespace": "flux-system",
                        },
                    }
                }
            },
        )
    ]
)

ANNOTATIONS = {
    names.GATES_ANNOTATION: st.sampled_from(["flux-system/closed", "a, b"]),
    names.REQUIRE_ANNOTATION: st.sampled_from(["oneOf", "all"]),
    names.SUSPENDED_ANNOTATION: st.just("maintenance"),
    names.SUSPEND_DURING_ANNOTATION: st.sampled_from(["* * * * *", "@never", "not a cron"]),
    names.SUSPENDED_DURING_ANNOTATION: st.sampled_from(["* * * * *", "@never"]),
    "example.com/other": st.just("x"),
    names.RECONCILE_REQUEST_ANNOTATION: st.just("2026-06-10T11:00:00Z"),
}
CONDITIONS = [
    condition("Ready"),
    condition(names.BLOCKED_CONDITION, reason=names.GATE_CLOSED_REASON),
    condition(names.APPROVED_CONDITION, "False", names.GATE_CLOSED_REASON),
]


@st.composite
def objects(draw, kind: str, name: str, namespace: str) -> dict:
    annotations = draw(st.fixed_dictionaries({}, optional=ANNOTATIONS))
    labels = draw(st.sampled_from([None, OWNER, {"team": "a"}]))
    spec = draw(
        st.fixed_dictionaries(
            {"interval": st.sampled_from(["1m", "2m"])},
            optional={
                "suspend": st.booleans(),
                "gates": st.just([{"name": "closed", "namespace": "flux-system"}]),
            },
        )
    )
    status = draw(
        st.none()
        | st.fixed_dictionaries(
            {},
            optional={
                "suspended": st.booleans(),
                "conditions": st.lists(
                    st.sampled_from(CONDITIONS), max_size=2, unique_by=lambda c: c["type"]
                ),
                "artifact": st.sampled_from([artifact("main@sha1:a"), artifact("main@sha1:b")]),
                "lastAttemptedRevision": st.sampled_from(["main@sha1:a", "main@sha1:b"]),
                "lastAppliedRevision": st.just("main@sha1:a"),
            },
        )
    )
    return flux(
        kind, name=name, namespace=namespace, annotations=annotations, labels=labels, spec=spec, status=status
    )


@st.composite
def requests(draw) -> dict:
    kind = draw(st.sampled_from([k.kind for k in kinds.FLUX_KINDS]))
    name, namespace = draw(st.sampled_from([("apps-podinfo", "flux-system"), ("podinfo", "apps")]))
    operation, sub_resource = draw(
        st.sampled_from([("CREATE", ""), ("UPDATE", ""), ("UPDATE", "status"), ("DELETE", "")])
    )
    old = None if operation == "CREATE" else draw(objects(kind, name, namespace))
    new = None if operation == "DELETE" else draw(objects(kind, name, namespace))
    user = draw(
        st.sampled_from(
            [
                {"username": "alice", "groups": ["system:authenticated"]},
                {"username": "system:serviceaccount:kube-system:generic-garbage-collector"},
            ]
        )
    )
    return request(operation, new, old, sub_resource=sub_resource, user=user)


@settings(max_examples=600, deadline=None)
@given(requests(), st.sampled_from(["enforce", "audit"]))
def test_what_the_api_server_would_not_send_is_allowed_unchanged_when_judged_in_full(req, mode):
    policy = Settings(mode=mode)
    if not matching.concerns(matching.VALIDATE, req):
        assert handlers.judge_validation(req, Context(CLOSED, NOW, policy, SOURCES.get)).response == {
            "allowed": True
        }
        assert handlers.validate(req, Context(CLOSED, NOW, policy, SOURCES.get)).response == {"allowed": True}
    if not matching.concerns(matching.MUTATE, req):
        assert handlers.judge_mutation(req, Context(CLOSED, NOW, policy, SOURCES.get)).response == {
            "allowed": True
        }
        assert handlers.mutate(req, Context(CLOSED, NOW, policy, SOURCES.get)).response == {"allowed": True}


def test_the_generated_requests_include_both_kinds():
    # Not vacuous: a gated status write is judged (denied), an ungated one is not ours.
    gated = flux("GitRepository", gates="flux-system/closed", status={"artifact": artifact("main@sha1:a")})
    moved = flux("GitRepository", gates="flux-system/closed", status={"artifact": artifact("main@sha1:b")})
    req = request("UPDATE", moved, gated, sub_resource="status")
    assert matching.concerns(matching.VALIDATE, req)
    assert handlers.validate(req, Context(CLOSED, NOW, Settings(), SOURCES.get)).response["allowed"] is False
    chart = generated_chart(artifact("6.5.0"))
    newer = generated_chart(artifact("6.5.1"))
    req = request("UPDATE", newer, chart, sub_resource="status")
    assert (
        handlers.validate(req, Context(CLOSED, NOW, Settings(), SOURCES.get)).response["allowed"] is False
    )  # inherited
