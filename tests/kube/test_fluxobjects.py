"""admission.kube.fluxobjects.first_served: the one probe of the version a Flux kind is served at."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from admission.core.flux.kinds import BY_KIND
from admission.kube.fluxobjects import first_served

ROW = BY_KIND["Kustomization"]


def serving(*served: str, status: int = 404):
    """A call that answers at the ``served`` versions and fails with ``status`` at the others;
    the versions asked, in order."""
    asked: list[str] = []

    def call(version: str) -> str:
        asked.append(version)
        if version not in served:
            raise ApiException(status=status)
        return f"listed at {version}"

    return call, asked


def test_the_table_order_without_a_known_version():
    call, asked = serving(ROW.versions[1])
    assert first_served(ROW, call) == (ROW.versions[1], f"listed at {ROW.versions[1]}")
    assert asked == list(ROW.versions[:2])


def test_the_version_that_answered_last_is_asked_first_then_the_others():
    call, asked = serving(ROW.versions[0])
    assert first_served(ROW, call, known=ROW.versions[2]) == (ROW.versions[0], f"listed at {ROW.versions[0]}")
    assert asked == [ROW.versions[2], ROW.versions[0]]


def test_none_when_no_version_is_served():
    call, asked = serving()
    assert first_served(ROW, call) is None
    assert asked == list(ROW.versions)


def test_only_not_found_moves_on():
    call, asked = serving(*ROW.versions[1:], status=403)
    with pytest.raises(ApiException):
        first_served(ROW, call)
    assert asked == [ROW.versions[0]]
