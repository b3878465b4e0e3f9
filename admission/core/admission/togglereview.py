"""What the mutating webhook records on a Gate write that toggles it (pure; docs/decisions/0096):
who the API server authenticated, sealed for these toggles on this Gate
(admission.core.gates.togglestamp).

Its entry fails open and there is no validating one: opening and closing never wait for the
webhook (break-glass). A stamp the client wrote is never kept while the webhook answers: a
write that toggles gets the writer's; a write that only touches the stamp gets the old one back.
"""

from __future__ import annotations

from admission.core.admission.decision import Context
from admission.core.admission.review import AdmissionRequest
from admission.core.base.objects import annotations as annotations_of
from admission.core.gates import togglestamp

# The value to record (None: remove the annotation), or nothing to change.
Recorded = dict[str, str | None]


def judge(request: AdmissionRequest, context: Context) -> Recorded:
    """The ``toggledBy`` annotation a Gate write must be stored with, if it must change."""
    new, old = request.get("object"), request.get("oldObject")
    if request["operation"] not in ("CREATE", "UPDATE") or not isinstance(new, dict):
        return {}
    written, before = annotations_of(new), annotations_of(old)
    if togglestamp.toggles(written) == togglestamp.toggles(before):
        if written.get(togglestamp.KEY) == before.get(togglestamp.KEY):
            return {}
        kept = before.get(togglestamp.KEY)  # the stamp is ours to write, never the client's
        return {togglestamp.KEY: kept if isinstance(kept, str) else None}
    secret = context.settings.approval_key
    if not secret:  # nothing sealed here would verify: the client's stamp goes, the toggle stays
        return {togglestamp.KEY: None}
    info = request["userInfo"]
    user = info.get("username", "")
    # A relay (the receiver) toggles for a caller it authenticated, a token: both are recorded.
    caller = togglestamp.claim(written.get(togglestamp.KEY))
    by = f"{caller} via {user}" if caller and user in context.settings.approval_relays else user
    created = request["operation"] == "CREATE"
    return {
        togglestamp.KEY: togglestamp.stamp(new, by, info.get("groups") or [], context.now, secret, created)
    }
