"""The failure policies of manifests/webhooks (docs/operations.md, "When the webhook is down"),
through a real kube-apiserver with the real Flux CRDs and our real server. With matchConditions,
only objects that reference a gate reach the entries that fail closed: while no replica
answers, their edits and status writes fail, and every other Flux object's writes go on.
Without them (manifests/components/pre-1.30), the label gating.toolkit.fluxcd.io/fail-closed
chooses which status writes fail, and every edit of a gated kind fails."""

from __future__ import annotations

import itertools

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core.base import names
from admission.kube.client import api_client
from tests.builders import flux, gate
from tests.conftest import write_gates
from tests.e2e.conftest import (
    own_plane,
    pre_1_30_webhooks,
    register_webhooks,
    start_server,
    wait_until_webhooks_answer,
)
from tests.e2e.controlplane import SOURCE_CONTROLLER
from tests.matching_cases import OWNER, SPECS, artifact
from tests.polling import until

pytestmark = pytest.mark.e2e
GROUP, VERSION, PLURAL = "source.toolkit.fluxcd.io", "v1", "gitrepositories"
WORLDS = itertools.count(1)  # each test's objects have names of their own


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("failure-policy"))


def repository(name: str, gates: str | None = None, labels: dict | None = None, **spec) -> dict:
    return flux(
        "GitRepository",
        name=name,
        namespace="apps",
        gates=gates,
        labels=labels,
        spec={**SPECS["GitRepository"], **spec},
    )


def write_status(api, name: str, revision: str, plural: str = PLURAL, namespace: str = "apps") -> dict:
    """What source-controller's end-of-reconcile patch sends for a new artifact."""
    return api.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, plural, name, {"status": {"artifact": artifact(revision)}}
    )


def refused(call) -> str:
    """The webhook entry the API server names when ``call`` fails closed."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 500 and "failed calling webhook" in err.value.body, err.value.body
    return err.value.body


@pytest.fixture
def world(plane, tmp_path):
    """Objects created before the webhooks are registered (creating a gated object is held),
    with a first artifact; a server with a closed gate; the source-controller's client."""
    gates_dir = tmp_path / "gates"
    gates_dir.mkdir()
    write_gates(gates_dir, [gate("freeze", default="closed")])
    suffix = next(WORLDS)
    objects = {
        "free": repository(f"free-{suffix}"),
        "held": repository(f"held-{suffix}", gates="flux-system/freeze"),
        "strict": repository(
            f"strict-{suffix}", gates="flux-system/freeze", labels={names.FAIL_CLOSED_LABEL: "true"}
        ),
        "suspended": repository(f"suspended-{suffix}", suspend=True),
        "chart": flux(
            "HelmChart", name="apps-podinfo", namespace="flux-system", labels=OWNER, spec=SPECS["HelmChart"]
        ),
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects.values()))
    api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(SOURCE_CONTROLLER))))
    for key, obj in objects.items():
        if key != "chart":
            write_status(api, obj["metadata"]["name"], "main@sha1:aaaa")
    write_status(api, "apps-podinfo", "6.0.0", "helmcharts", "flux-system")
    (tmp_path / "server").mkdir()
    server = start_server(tmp_path / "server", gates_dir)
    try:
        yield {k: o["metadata"]["name"] for k, o in objects.items()}, api, server
    finally:
        server.stop()
        # Unregistered first: a webhook that fails closed would keep the gated objects.
        plane.kubectl(
            "delete",
            "validatingwebhookconfiguration,mutatingwebhookconfiguration",
            "gate-admission",
            "--ignore-not-found",
        )
        plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(objects.values()))


def edit(plane, name: str):
    admin = client.CustomObjectsApi(api_client(str(plane.kubeconfig())))
    return lambda: admin.patch_namespaced_custom_object(
        GROUP, VERSION, "apps", PLURAL, name, {"spec": {"interval": "2m"}}
    )


def held_while_up_then_stop(api, objects, server) -> None:
    """While the webhook is up, held sources keep their artifact and the free one moves; then it goes down."""
    for key in ("held", "strict"):
        stored = until(
            lambda key=key: write_status(api, objects[key], "main@sha1:bbbb"),
            lambda s: any(c["type"] == "Blocked" for c in s["status"].get("conditions", [])),
        )
        assert stored["status"]["artifact"]["revision"] == "main@sha1:aaaa", stored["status"]
    assert (
        write_status(api, objects["free"], "main@sha1:bbbb")["status"]["artifact"]["revision"]
        == "main@sha1:bbbb"
    )
    server.stop()


def test_with_match_conditions_a_down_webhook_stops_only_the_writes_of_objects_that_reference_a_gate(
    plane, world
):
    objects, api, server = world
    register_webhooks(plane, server)
    wait_until_webhooks_answer(plane, server)
    held_while_up_then_stop(api, objects, server)

    # Down (connection refused): objects that reference no gate never reach a webhook...
    assert (
        write_status(api, objects["free"], "main@sha1:cccc")["status"]["artifact"]["revision"]
        == "main@sha1:cccc"
    )
    edit(plane, objects["free"])()
    # ...nor do suspended ones (the mutating entry fails open), nor a generated HelmChart
    # whose HelmRelease is not there to say it is gated (validate-status-inherited fails open).
    assert (
        write_status(api, objects["suspended"], "main@sha1:cccc")["status"]["artifact"]["revision"]
        == "main@sha1:cccc"
    )
    assert (
        write_status(api, "apps-podinfo", "6.0.1", "helmcharts", "flux-system")["status"]["artifact"][
            "revision"
        ]
        == "6.0.1"
    )
    # Objects that reference a gate: new content and edits fail closed, labelled or not.
    for key in ("held", "strict"):
        assert names.VALIDATE_STATUS_WEBHOOK in refused(
            lambda key=key: write_status(api, objects[key], "main@sha1:cccc")
        )
        assert names.VALIDATE_WEBHOOK in refused(edit(plane, objects[key]))


def test_without_match_conditions_the_fail_closed_label_chooses_which_status_writes_fail(
    plane, world, tmp_path
):
    objects, api, server = world
    register_webhooks(plane, server, kustomization=pre_1_30_webhooks(tmp_path))
    wait_until_webhooks_answer(plane, server)
    # Every status write now reaches the server (no conditions); its answers are the same.
    held_while_up_then_stop(api, objects, server)

    # Down: status reporting goes on for objects that are not labelled...
    assert (
        write_status(api, objects["free"], "main@sha1:cccc")["status"]["artifact"]["revision"]
        == "main@sha1:cccc"
    )
    lapsed = write_status(api, objects["held"], "main@sha1:cccc")  # ...at the price the docs state
    assert lapsed["status"]["artifact"]["revision"] == "main@sha1:cccc"
    # ...and stops for labelled ones; every edit of a gated kind fails, referencing or not.
    assert names.VALIDATE_FAIL_CLOSED_WEBHOOK in refused(
        lambda: write_status(api, objects["strict"], "main@sha1:cccc")
    )
    for key in ("held", "free"):
        assert names.VALIDATE_WEBHOOK in refused(edit(plane, objects[key]))
