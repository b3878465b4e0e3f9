"""matchConditions on a real kube-apiserver: each request of tests/matching_cases.py is made
against the API server with manifests/webhooks registered, and what reached our server (its
request counters, per endpoint) must be what admission.core.admission.matching says, and what the table
says. The objects are the real Flux CRDs with manifests/flux-crd-patches; the server runs in
audit mode so that every write in the table lands whatever it references."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from admission.core.admission import matching
from admission.core.base import names
from admission.core.flux import kinds
from admission.kube.client import api_client
from tests.builders import gate
from tests.e2e.conftest import own_plane, serving_the_cluster
from tests.matching_cases import CASES, TIME, Case, condition, obj
from tests.polling import until

pytestmark = pytest.mark.e2e
REVIEWS = "gate_admission_reviews_total{"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("match-conditions"))


def reached(server) -> dict[str, float]:
    """How many reviews each endpoint has answered so far."""
    counts = {matching.VALIDATE: 0.0, matching.MUTATE: 0.0}
    for sample, value in server.metrics().items():
        if sample.startswith(REVIEWS):
            for endpoint in counts:
                if f'webhook="{endpoint}"' in sample:
                    counts[endpoint] += value
    return counts


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    # On the cluster (its Gates), as installed: approvals are recorded only by a server that
    # holds the approval key, which a --gates-dir server never does (docs/decisions/0064).
    tmp = tmp_path_factory.mktemp("server")
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(gate("open", default="opened")))
    with serving_the_cluster(plane, tmp, "--mode", "audit") as running:
        # The API server loads each configuration on its own: wait for the mutating one too.
        api = custom(plane)
        probe = obj("ImageRepository", "probe", spec={"suspend": True})
        create(api, probe)
        before = reached(running)[matching.MUTATE]
        seen = until(
            lambda: (
                status_patch(api, probe, {"status": {"canonicalImageName": "x"}}),
                reached(running)[matching.MUTATE],
            )[1],
            lambda n: n > before,
            timeout=30,
        )
        assert seen > before, "the mutating webhook never answered"
        yield running


def custom(plane) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client(str(plane.kubeconfig())))


def _plural(manifest: dict) -> str:
    return (
        names.GATE_PLURAL if manifest["kind"] == names.GATE_KIND else kinds.BY_KIND[manifest["kind"]].plural
    )


def create(api, manifest: dict) -> dict:
    group, version = manifest["apiVersion"].split("/")
    body = {k: v for k, v in manifest.items() if k != "status"}
    return api.create_namespaced_custom_object(
        group, version, manifest["metadata"]["namespace"], _plural(manifest), body
    )


def patch(api, manifest: dict, body: dict) -> dict:
    group, version = manifest["apiVersion"].split("/")
    return api.patch_namespaced_custom_object(
        group,
        version,
        manifest["metadata"]["namespace"],
        _plural(manifest),
        manifest["metadata"]["name"],
        body,
    )


def status_patch(api, manifest: dict, body: dict) -> dict:
    group, version = manifest["apiVersion"].split("/")
    return api.patch_namespaced_custom_object_status(
        group,
        version,
        manifest["metadata"]["namespace"],
        _plural(manifest),
        manifest["metadata"]["name"],
        body,
    )


def read(api, manifest: dict) -> dict:
    group, version = manifest["apiVersion"].split("/")
    return api.get_namespaced_custom_object(
        group, version, manifest["metadata"]["namespace"], _plural(manifest), manifest["metadata"]["name"]
    )


def delete(api, manifest: dict) -> None:
    group, version = manifest["apiVersion"].split("/")
    api.delete_namespaced_custom_object(
        group, version, manifest["metadata"]["namespace"], _plural(manifest), manifest["metadata"]["name"]
    )


def set_up(api, case: Case) -> dict | None:
    """``case.stored`` in the cluster, read back as the API server keeps it. A Gate is approved
    once it exists (docs/decisions/0064): it is created bare and its approvals written after."""
    if case.stored is None:
        return None
    found = case.stored["metadata"].get("annotations") or {}
    approvals_of = {k: v for k, v in found.items() if k.startswith(names.APPROVAL_ANNOTATION_PREFIX)}
    bare = {
        **case.stored,
        "metadata": {
            **case.stored["metadata"],
            "annotations": {k: v for k, v in found.items() if k not in approvals_of},
        },
    }
    create(api, bare)
    if approvals_of:
        patch(api, case.stored, {"metadata": {"annotations": approvals_of}})
    steps = case.setup or (((True, {"status": case.stored["status"]}),) if "status" in case.stored else ())
    for on_status, body in steps:
        (status_patch if on_status else patch)(api, case.stored, body)
    return read(api, case.stored)


def make(api, case: Case) -> str:
    """Make the case's write; the name of the entry that refused it ("" when none did)."""
    try:
        if case.operation == "CREATE":
            create(api, case.change)
        elif case.operation == "DELETE":
            delete(api, case.stored)
        else:
            (status_patch if case.status else patch)(api, case.stored, case.change)
    except client.ApiException as err:
        refusing = [w for w in (names.MUTATE_APPROVALS_WEBHOOK,) if w in str(err.body)]
        if err.status != 403 or not refusing:
            raise
        return refusing[0]
    return ""


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_api_server_calls_our_endpoints_exactly_when_the_python_predicate_says(plane, server, case):
    api = custom(plane)
    stored = set_up(api, case)
    before = reached(server)
    refused_by = make(api, case)
    after = reached(server)
    by_api_server = {endpoint: after[endpoint] > before[endpoint] for endpoint in before}
    req = case.request(stored)
    by_python = {endpoint: matching.concerns(endpoint, req) for endpoint in before}
    if refused_by:  # the mutating entry refused it (a Gate created with an approval): none runs after it
        assert by_api_server.pop(matching.VALIDATE) is False and by_python[matching.MUTATE], case.id
        assert by_api_server == {k: v for k, v in by_python.items() if k != matching.VALIDATE}, case.id
    else:
        assert by_api_server == by_python, f"{case.id}: {req}"
    assert by_python == {matching.VALIDATE: case.validate, matching.MUTATE: case.mutate}, case.id


def test_the_longest_conditions_list_an_object_can_hold_is_walked_within_the_api_servers_cel_budget(
    plane, server
):
    # mutate-status walks status.conditions: with a Blocked condition last, the API server must
    # finish the walk (an evaluation past the budget is an error, and the entry is skipped).
    api = custom(plane)
    big = obj("GitRepository", "big-status")
    create(api, big)
    filler = [
        {"type": f"T{i}", "status": "True", "reason": "R", "message": "", "lastTransitionTime": TIME}
        for i in range(9000)
    ]
    before = reached(server)
    status_patch(api, big, {"status": {"conditions": [*filler, condition(names.BLOCKED_CONDITION)]}})
    after = reached(server)
    assert (
        after[matching.MUTATE] > before[matching.MUTATE]
        and after[matching.VALIDATE] == before[matching.VALIDATE]
    )
