"""The annotations written to open or close a gate, and how the core reads them back."""

import orjson
import pytest

from admission.core.base.controls import escaped, has_controls
from admission.core.base.names import (
    CLOSE_ANNOTATION,
    MESSAGE_ANNOTATION,
    OPEN_ANNOTATION,
    REQUESTED_BY_ANNOTATION,
    TOGGLED_BY_ANNOTATION,
)
from admission.core.gates.gates import evaluate_gate
from admission.core.gates.toggles import toggle_patch
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
    assert patch == {
        "metadata": {
            "annotations": {
                OPEN_ANNOTATION: "2026-11-21T20:00:00.000000Z",
                MESSAGE_ANNOTATION: "Patching a CVE",
                REQUESTED_BY_ANNOTATION: "bob",
                TOGGLED_BY_ANNOTATION: None,  # the webhook stamps who did, never the client
            }
        }
    }


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


@pytest.mark.parametrize(
    "args, why",
    [
        (("toggle", NOW), "action must be open or close"),
        (("open", NOW, None, None, "soon"), "invalid duration"),
        (("open", NOW, None, None, "-1h"), "must be positive"),
        (("close", NOW, None, None, "1h"), "only makes sense when opening"),
        # A close that would be read as "too late" (ignored): the gate would stay open for good.
        (("open", NOW, None, None, "9000000h"), "ends too late"),
        (("open", NOW, None, None, "100000000h"), "ends too late"),  # past datetime's last year
    ],
)
def test_bad_toggles_say_why(args, why):
    with pytest.raises(ValueError, match=why):
        toggle_patch(*args)


@pytest.mark.parametrize(
    "text",
    [
        "a\x1b[2Kb",
        "carriage\rreturn",
        "two\nlines",
        "c1 \x9b csi",
        "del\x7f",
        "rtl \u202e",
        "isolate \u2066",
        "separator \u2028",
    ],
)
def test_a_message_or_requester_with_control_characters_is_refused(text):
    for fields in ({"message": text}, {"requested_by": text}):
        with pytest.raises(ValueError, match="control characters"):
            toggle_patch("close", NOW, **fields)


def test_printed_controls_are_json_escapes_of_the_same_text():
    text = "\x1b]0;t\x07\r\u202e\x9b\x7f ünïcode \\ ok"
    shown = escaped(orjson.dumps(text).decode())
    assert not has_controls(shown) and orjson.loads(shown) == text
    assert escaped("plain text, ünïcode, emoji \U0001f600") == "plain text, ünïcode, emoji \U0001f600"
