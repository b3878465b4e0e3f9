"""The failure policies of the hold points (manifests/webhooks, docs/operations.md): while no
replica answers, Flux's status writes still land for objects that are not labelled
``gating.toolkit.fluxcd.io/fail-closed``; labelled objects' status writes, and edits of gated
objects, fail. Through a real kube-apiserver with the real Flux CRDs and our real server."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core import names
from admission.kube.client import api_client
from tests.builders import flux, gate
from tests.conftest import write_gates
from tests.e2e.conftest import own_plane, register_webhooks, start_server, wait_until_webhooks_answer
from tests.e2e.controlplane import SOURCE_CONTROLLER
from tests.polling import until

pytestmark = pytest.mark.e2e
GROUP, VERSION, PLURAL = "source.toolkit.fluxcd.io", "v1", "gitrepositories"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("failure-policy"))


def artifact(revision: str) -> dict:
    return {"revision": revision, "digest": f"sha256:{revision[-4:] * 16}", "path": f"x/{revision[-4:]}.tar.gz",
            "url": f"http://source-controller/x/{revision[-4:]}.tar.gz", "size": 10,
            "lastUpdateTime": "2026-06-10T10:00:00Z"}


def repository(name: str, gates: str | None = None, labels: dict | None = None) -> dict:
    return flux("GitRepository", name=name, namespace="apps", gates=gates, labels=labels,
                spec={"interval": "1m", "url": "https://example.com/repo.git", "ref": {"branch": "main"}})


def write_status(api, name: str, revision: str) -> dict:
    """What source-controller's end-of-reconcile patch sends for a new artifact."""
    return api.patch_namespaced_custom_object_status(GROUP, VERSION, "apps", PLURAL, name,
                                                     {"status": {"artifact": artifact(revision)}})


def test_a_down_webhook_freezes_no_status_reporting_unless_the_object_is_labelled_fail_closed(plane, tmp_path):
    gates_dir = tmp_path / "gates"
    gates_dir.mkdir()
    write_gates(gates_dir, [gate("freeze", default="closed")])
    # Created before the webhooks are registered: creating a gated object is held.
    objects = [repository("free"), repository("held", gates="flux-system/freeze"),
               repository("strict", gates="flux-system/freeze", labels={names.FAIL_CLOSED_LABEL: "true"})]
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    api = client.CustomObjectsApi(api_client(str(plane.kubeconfig(SOURCE_CONTROLLER))))
    for obj in objects:
        write_status(api, obj["metadata"]["name"], "main@sha1:aaaa")

    (tmp_path / "server").mkdir()
    server = start_server(tmp_path / "server", gates_dir)
    try:
        register_webhooks(plane, server)
        wait_until_webhooks_answer(plane, server)
        # Up: held sources keep their artifact, labelled or not; the free one moves.
        for name in ("held", "strict"):
            stored = until(lambda: write_status(api, name, "main@sha1:bbbb"),
                           lambda s: any(c["type"] == "Blocked" for c in s["status"].get("conditions", [])))
            assert stored["status"]["artifact"]["revision"] == "main@sha1:aaaa", stored["status"]
        assert write_status(api, "free", "main@sha1:bbbb")["status"]["artifact"]["revision"] == "main@sha1:bbbb"
    finally:
        server.stop()

    # Down (connection refused): status reporting goes on for objects that are not labelled...
    assert write_status(api, "free", "main@sha1:cccc")["status"]["artifact"]["revision"] == "main@sha1:cccc"
    lapsed = write_status(api, "held", "main@sha1:cccc")  # ...at the price the docs state: held content passes
    assert lapsed["status"]["artifact"]["revision"] == "main@sha1:cccc"
    # ...and stops for labelled ones, as for every edit of a gated object.
    with pytest.raises(ApiException) as refused:
        write_status(api, "strict", "main@sha1:cccc")
    assert refused.value.status == 500 and "validate-status-fail-closed.gating.toolkit.fluxcd.io" in refused.value.body
    with pytest.raises(ApiException) as edit:
        plane_api = client.CustomObjectsApi(api_client(str(plane.kubeconfig())))
        plane_api.patch_namespaced_custom_object(GROUP, VERSION, "apps", PLURAL, "held", {"spec": {"interval": "2m"}})
    assert edit.value.status == 500 and "validate.gating.toolkit.fluxcd.io" in edit.value.body
