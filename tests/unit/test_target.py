"""The request target read once (admission.transport.target): one spelling per path, or refused."""

from __future__ import annotations

import pytest

from admission.transport.framing import Refused
from admission.transport.target import admit, request_path

ONE_SPELLING = [
    ("/validate", "/validate"),
    ("/validate?timeout=10s", "/validate"),
    ("/", "/"),
    ("/hooks/gates/flux-system/sre.approval/open", "/hooks/gates/flux-system/sre.approval/open"),
    ("/calendar.ics?namespace=a&gate=b&days=7", "/calendar.ics"),
    ("/a/.../b", "/a/.../b"),
]
OTHER_SPELLINGS = [
    "//validate",
    "/./validate",
    "/a/../validate",
    "/a/..",
    "/a/.",
    "/validate/",
    "/%76alidate",
    "/hooks/gates/%2e%2e/validate",
    "https://localhost/validate",
    "localhost:443",
    "*",
    "",
    "validate",
    "/validate#x",
    "/validate?a#b",
    "/vali date",
    "/validate;x",
    "/vällidate",
    "/validate\x00",
    "/validate\n",
]


@pytest.mark.parametrize("target, path", ONE_SPELLING)
def test_a_path_in_its_one_spelling_is_read(target, path):
    assert request_path(target) == path


@pytest.mark.parametrize("target", OTHER_SPELLINGS)
def test_any_other_spelling_is_not_a_path(target):
    assert request_path(target) is None


def head(target: str, *fields: str) -> bytes:
    return "\r\n".join([f"POST {target} HTTP/1.1", "Host: x", *fields]).encode("latin-1")


def refused(target: str, *fields: str, certified: bool) -> tuple[int, str]:
    with pytest.raises(Refused) as caught:
        admit(head(target, *fields), certified)
    return caught.value.status, caught.value.why


def test_without_a_certificate_only_public_paths_pass():
    assert admit(head("/hooks/gates/ns/g/open"), certified=False) == "/hooks/gates/ns/g/open"
    assert admit(head("/healthz"), certified=False) == "/healthz"
    for target in ("/board", "/board?tz=UTC", "/board/fragment", "/board/static/board.js"):  # a team screen
        assert admit(head(target), certified=False) == target.partition("?")[0]
    for target in (
        "/validate",
        "/hooks/gates/../../validate",
        "/hooks/gates/%2e%2e/%2e%2e/mutate",
        "/boardvalidate",
        "/board/../validate",
        "/board/%2e%2e/mutate",
    ):
        assert refused(target, certified=False)[0] == 403, target


@pytest.mark.parametrize(
    "name", ["SCRIPT_NAME", "Script_Name", "script_name", "X_Forwarded_For", "PATH_INFO"]
)
def test_a_header_name_with_an_underscore_is_refused_whoever_sends_it(name):
    for certified in (False, True):
        status, why = refused("/hooks/gates/validate", f"{name}: /hooks/gates", certified=certified)
        assert status == 400 and name in why


def test_a_certified_client_is_told_what_is_wrong_with_its_path():
    status, why = refused("//validate", certified=True)
    assert status == 400 and "path" in why
