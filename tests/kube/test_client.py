"""The API client against an API server that cannot be reached (a closed loopback port): each
failed call is one concise log line, with no retries and no traceback."""

from __future__ import annotations

import logging

import pytest
import yaml
from kubernetes import client

from admission.core.admission.decision import Settings
from admission.kube.client import api_client, describe_error
from admission.kube.events import DenialEvents
from tests.builders import changed, flux, gate, lookup_from, request
from tests.polling import wait_for
from tests.processes import free_port


@pytest.fixture
def unreachable(tmp_path):
    """A kubeconfig whose API server is a loopback port nothing listens on."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dead",
                "clusters": [
                    {
                        "name": "dead",
                        "cluster": {
                            "server": f"https://127.0.0.1:{free_port()}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
            }
        )
    )
    return api_client(str(path))


def test_a_failed_call_is_not_retried_and_logs_nothing_itself(unreachable, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(Exception) as failed:
        client.CoreV1Api(unreachable).list_namespace(_request_timeout=5)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    why = describe_error(failed.value)
    assert why.startswith("NewConnectionError: ") and "Connection refused" in why and "\n" not in why


def test_a_denial_event_the_api_server_cannot_take_is_one_line_without_a_traceback(unreachable, caplog):
    caplog.set_level(logging.INFO)
    events = DenialEvents(unreachable, lookup_from([gate("freeze", default="closed")]), Settings())
    stored = flux(name="shop", gates="flux-system/freeze")
    stored["metadata"]["uid"] = "uid-shop"
    events.record(request("UPDATE", changed(stored, path="./v2"), stored))
    events.start()
    try:
        wait_for(
            lambda: [r for r in caplog.records if r.name == "admission.events"], 15, "the failure's log line"
        )
    finally:
        events.stop()
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    [line] = lines
    assert line.name == "admission.events" and line.exc_info is None
    assert line.object == "Kustomization/apps/shop" and "Connection refused" in line.error
