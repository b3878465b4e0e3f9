"""Who toggled a Gate (docs/decisions/0096): the webhook's stamp of the API server's user, sealed
for these toggles on this Gate; forged, copied, replayed, moved or stale-key stamps show
unverified, and what the mutating webhook answers a Gate write that toggles it."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

from admission.core.admission.decision import Context, Settings
from admission.core.base import names
from admission.core.gates import approvalseal, togglestamp
from admission.core.gates.gates import evaluate_gate
from admission.core.gates.status import gate_status, transition_message
from admission.webhook.handlers import judge_mutation
from tests.builders import at, gate, request

KEY = b"k" * 64
OTHER_KEY = b"o" * 64
NOW = at("2026-11-29T04:00")
OPENED_AT = "2026-11-29T04:00:00.000000Z"


def stored(name: str = "freeze", uid: str = "uid-1", **annotations: str) -> dict:
    obj = gate(name, "apps", {names.OPEN_ANNOTATION: OPENED_AT, **annotations}, default="closed")
    obj["metadata"].update(uid=uid, creationTimestamp="2026-11-01T00:00:00Z")
    return obj


def stamped(obj: dict, by: str = "alice", key: bytes = KEY, now=NOW) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"][togglestamp.KEY] = togglestamp.stamp(out, by, ["sre"], now, key)
    return out


def test_a_stamp_of_the_webhook_shows_who_toggled_verified():
    found = togglestamp.read(stamped(stored(**{names.REQUESTED_BY_ANNOTATION: "bob"})), KEY)
    assert found is not None and found.verified
    assert (found.by, found.groups, found.claimed) == ("alice", ("sre",), "bob")
    assert found.describe() == "alice (verified)"


def test_a_toggle_without_a_stamp_is_unverified_and_its_claim_counts_for_nothing():
    found = togglestamp.read(stored(**{names.REQUESTED_BY_ANNOTATION: "bob"}), KEY)
    assert found is not None and not found.verified and found.by == ""
    assert found.describe() == f"an unverified identity (requestedBy says 'bob', {togglestamp.UNSTAMPED})"


def test_a_forged_stamp_is_unverified():
    forged = stored(**{togglestamp.KEY: json.dumps({"by": "ceo", "at": OPENED_AT, "seal": "v1:AAAA"})})
    found = togglestamp.read(forged, KEY)
    assert found is not None and found.unverified is not None and found.by == "ceo"
    assert "stamp says 'ceo'" in found.describe()


def test_a_stamp_copied_onto_another_gate_is_unverified():
    original = stamped(stored())
    copied = stored("other", uid="uid-2")
    copied["metadata"]["annotations"][togglestamp.KEY] = original["metadata"]["annotations"][togglestamp.KEY]
    assert togglestamp.read(copied, KEY).unverified == approvalseal.MISMATCH
    # The same name, deleted and created again: another uid.
    recreated = stored(uid="uid-3")
    recreated["metadata"]["annotations"][togglestamp.KEY] = original["metadata"]["annotations"][
        togglestamp.KEY
    ]
    assert togglestamp.read(recreated, KEY).unverified == approvalseal.MISMATCH


def test_a_stamp_beside_another_toggle_is_unverified():
    obj = stamped(stored())
    obj["metadata"]["annotations"][names.CLOSE_ANNOTATION] = "2026-11-29T05:00:00.000000Z"
    assert togglestamp.read(obj, KEY).unverified == togglestamp.MOVED
    # Editing the stamp's own copy of the toggles to match breaks its seal.
    value = json.loads(obj["metadata"]["annotations"][togglestamp.KEY])
    value["close"] = "2026-11-29T05:00:00.000000Z"
    obj["metadata"]["annotations"][togglestamp.KEY] = json.dumps(value)
    assert togglestamp.read(obj, KEY).unverified == approvalseal.MISMATCH


def test_a_stamp_under_another_key_is_unverified():
    assert togglestamp.read(stamped(stored(), key=OTHER_KEY), KEY).unverified == approvalseal.MISMATCH
    assert togglestamp.read(stamped(stored()), None).unverified == approvalseal.NO_KEY


def test_an_earlier_stamp_written_back_is_a_replay():
    obj = stamped(stored(), now=at("2026-11-29T03:00"))
    obj["status"] = {
        names.TOGGLED_BY_FIELD: {"verified": True, "user": "carol", "at": "2026-11-29T04:30:00Z"}
    }
    assert togglestamp.read(obj, KEY).unverified == togglestamp.REPLAYED
    # Another replica's clock a little behind is not a replay.
    obj["status"][names.TOGGLED_BY_FIELD]["at"] = "2026-11-29T03:00:30Z"
    assert togglestamp.read(obj, KEY).verified


def test_a_stamp_made_on_create_verifies_only_on_the_gate_created_then():
    born = stored(uid="")
    born["metadata"].pop("creationTimestamp")
    value = togglestamp.stamp(born, "alice", [], NOW, KEY, created=True)
    created = stored(uid="uid-9", **{togglestamp.KEY: value})
    created["metadata"]["creationTimestamp"] = "2026-11-29T04:00:01Z"
    assert togglestamp.read(created, KEY).verified
    created["metadata"]["creationTimestamp"] = "2026-11-30T04:00:00Z"  # deleted and created again
    assert togglestamp.read(created, KEY).unverified == approvalseal.MISMATCH


def test_status_get_and_events_show_who_toggled():
    obj = stamped(stored(**{names.REQUESTED_BY_ANNOTATION: "bob"}))
    state = evaluate_gate(obj, [], NOW, KEY)
    row = gate_status(obj, state, NOW)[names.TOGGLED_BY_FIELD]
    assert row["verified"] is True and row["user"] == "alice" and row["requestedBy"] == "bob"
    assert "(by alice (verified))" in transition_message(state)
    # A reader without the key believes the status only for exactly this stamp.
    unkeyed = evaluate_gate(obj, [], NOW).toggled_by
    obj["status"] = {names.TOGGLED_BY_FIELD: row}
    assert togglestamp.read_without_key(unkeyed, obj).verified
    obj["status"] = {names.TOGGLED_BY_FIELD: {**row, "seal": "v1:other"}}
    assert togglestamp.read_without_key(unkeyed, obj).unverified == togglestamp.NOT_VOUCHED


CONTEXT = Context(lambda *_: None, NOW, Settings(approval_key=KEY))


def _annotations_after(req: dict, context: Context = CONTEXT) -> dict:
    outcome = judge_mutation(req, context)
    obj = copy.deepcopy(req["object"])
    for op in outcome.patch:
        key = op["path"].rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
        if op["op"] == "remove":
            obj["metadata"]["annotations"].pop(key)
        else:
            obj["metadata"]["annotations"][key] = op["value"]
    return obj


def test_the_webhook_stamps_the_writer_over_a_client_stamp():
    old = stamped(stored(), by="carol")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][names.CLOSE_ANNOTATION] = "2026-11-29T04:01:00.000000Z"
    new["metadata"]["annotations"][togglestamp.KEY] = json.dumps({"by": "ceo"})
    after = _annotations_after(request("UPDATE", new, old, user={"username": "mallory", "groups": ["dev"]}))
    found = togglestamp.read(after, KEY)
    assert found.verified and found.by == "mallory" and found.groups == ("dev",)


def test_a_write_of_the_stamp_alone_gets_the_old_one_back():
    old = stamped(stored(), by="carol")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][togglestamp.KEY] = json.dumps({"by": "ceo"})
    after = _annotations_after(request("UPDATE", new, old))
    assert (
        after["metadata"]["annotations"][togglestamp.KEY] == old["metadata"]["annotations"][togglestamp.KEY]
    )


def test_a_relay_is_recorded_with_the_token_it_authenticated():
    relay = "system:serviceaccount:gate-admission-system:gate-admission"
    old = stored()
    new = stored(**{togglestamp.KEY: togglestamp.relayed("receiver token 'ci'")})
    new["metadata"]["annotations"][names.OPEN_ANNOTATION] = "2026-11-29T04:02:00.000000Z"
    relaying = replace(CONTEXT, settings=Settings(approval_key=KEY, approval_relays=frozenset({relay})))
    after = _annotations_after(request("UPDATE", new, old, user={"username": relay}), relaying)
    assert togglestamp.read(after, KEY).by == f"receiver token 'ci' via {relay}"
    # Not a relay: the account the API server authenticated, whatever the client wrote.
    after = _annotations_after(request("UPDATE", new, old, user={"username": relay}))
    assert togglestamp.read(after, KEY).by == relay


def test_without_a_key_the_toggle_passes_and_a_client_stamp_goes():
    old = stored()
    new = stored(**{togglestamp.KEY: json.dumps({"by": "ceo"})})
    new["metadata"]["annotations"][names.OPEN_ANNOTATION] = "2026-11-29T04:02:00.000000Z"
    outcome = judge_mutation(request("UPDATE", new, old), replace(CONTEXT, settings=Settings()))
    assert outcome.response["allowed"] is True
    assert outcome.patch == [
        {"op": "remove", "path": "/metadata/annotations/gating.toolkit.fluxcd.io~1toggledBy"}
    ]
