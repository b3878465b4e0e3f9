"""The annotations written to open or close a gate, and how the core reads them back."""

import pytest

from admission.core.gates import evaluate_gate
from admission.core.names import CLOSE_ANNOTATION, MESSAGE_ANNOTATION, OPEN_ANNOTATION, REQUESTED_BY_ANNOTATION
from admission.core.toggles import toggle_patch
from tests.builders import at, gate

NOW = at("2026-11-21T20:00:00")


def applied(obj, patch):
    annotations = dict(obj["metadata"].get("annotations") or {})
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def test_open_writes_time_message_and_requester():
    patch = toggle_patch("open", NOW, "Patching a CVE", "bob")
    assert patch == {"metadata": {"annotations": {
        OPEN_ANNOTATION: "2026-11-21T20:00:00.000000Z", MESSAGE_ANNOTATION: "Patching a CVE",
        REQUESTED_BY_ANNOTATION: "bob"}}}


def test_open_for_a_duration_plans_the_close():
    obj = applied(gate("g", closed=True), toggle_patch("open", NOW, duration="2h"))
    assert obj["metadata"]["annotations"][CLOSE_ANNOTATION] == "2026-11-21T22:00:00.000000Z"
    assert evaluate_gate(obj, [], at("2026-11-21T21:59")).open
    assert not evaluate_gate(obj, [], at("2026-11-21T22:00")).open


def test_an_open_right_after_a_close_wins():
    obj = applied(gate("g", closed=True), toggle_patch("close", NOW))
    obj = applied(obj, toggle_patch("open", at("2026-11-21T20:00:00.000001")))
    assert evaluate_gate(obj, [], at("2026-11-21T20:00:01")).open


def test_without_a_message_the_old_one_is_removed():
    assert toggle_patch("close", NOW)["metadata"]["annotations"][MESSAGE_ANNOTATION] is None


@pytest.mark.parametrize("args, why", [
    (("toggle", NOW), "action must be open or close"),
    (("open", NOW, None, None, "soon"), "invalid duration"),
    (("open", NOW, None, None, "-1h"), "must be positive"),
    (("close", NOW, None, None, "1h"), "only makes sense when opening"),
])
def test_bad_toggles_say_why(args, why):
    with pytest.raises(ValueError, match=why):
        toggle_patch(*args)
