"""The controller's part in approvals of exact content: announce them, have what they approve land, end them."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from admission.core.base import names
from admission.core.base.objects import Object, mapping, metadata
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.timefmt import format_distinct_time, format_duration
from admission.core.flux import content, kinds
from admission.core.gates import approvalrecord, approvals
from admission.core.gates.gates import GateState
from admission.kube.client import CALL_ERRORS, describe_error
from admission.observability.controllermetrics import API_ERRORS, APPROVALS

if TYPE_CHECKING:
    from kubernetes import client

    from admission.kube.fluxcache import FluxCache
    from admission.kube.notifications import FluxNotifier

log = logging.getLogger("admission.controller")
Key = tuple[str, str, str]  # kind, namespace, name
CONFLICT_RETRIES = 5  # writes of a Gate's ended approvals, each after reading the Gate again
_COUNTED = {  # the announcements /metrics counts (gate_admission_controller_approvals_total's event)
    names.APPROVAL_RECORDED_EVENT: "recorded",
    names.APPROVAL_USED_EVENT: "used",
    names.APPROVAL_EXPIRED_EVENT: "expired",
    names.APPROVAL_WITHDRAWN_EVENT: "withdrawn",
}


def kind_key(kind: str, obj: dict[str, Any] | None) -> Key:
    meta = metadata(obj)
    return kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ApprovalLanding:
    """Approvals of exact content (docs/decisions/0057), for the Controller: its Flux cache,
    its Gate writes, Events and notifications, and the reconcile requests it makes."""

    custom: client.CustomObjectsApi
    flux: FluxCache
    notifier: FluxNotifier | None
    approvals_seen: dict[tuple[str, str], dict[str, approvals.Approval]]  # announced, per gate
    gone: dict[tuple[str, str], set[str]]  # per gate: approvals this process ended, until its cache shows it
    # (gate "ns/name", approval key) -> (reconcile requests made for it - 1, when the next is due)
    requests: dict[tuple[str, str], tuple[int, datetime]]

    if TYPE_CHECKING:  # the Controller's

        def _held_by_gate(self, obj: Object, gate_key: str) -> bool: ...
        def _event(
            self, obj: Object, reason: str, message: str, now: datetime, kind: str = "Normal"
        ) -> None: ...
        def _annotate(self, kind: str, namespace: str, name: str, value: str) -> bool: ...

    def _behind(self, gate_key: str) -> list[tuple[str, Object, approvals.Behind]]:
        """The objects behind a gate, what each serves, and what waits for it (at its own hold
        point, or served by its source and not applied yet)."""
        found = []
        for kind in self.flux.kinds():
            of_kind = kinds.content_of(kind)
            for obj in self.flux.objects(kind):
                if not self._held_by_gate(obj, gate_key):
                    continue
                waiting = content.waiting(obj)
                upstream = of_kind.upstream_of(obj, self.flux.get)
                waits = tuple(
                    w for w in (waiting.waits if waiting else "", upstream.waits if upstream else "") if w
                )
                target = "/".join(kind_key(kind, obj))
                found.append((kind, obj, approvals.Behind(target, of_kind.serves(obj), waits)))
        return found

    def _approvals(self, key: tuple[str, str], gate: Object, state: GateState, now: datetime) -> None:
        """Announce new (and rewritten) approvals and have what they approve land at once; end
        the used and the expired ones (in the Gate's status), announce the withdrawn ones, each
        with an Event."""
        gone = self.gone.setdefault(key, set())
        gone &= {a.key for a in state.approvals}  # this gate's own: the others' caches may lag
        live = {a.key: a for a in state.approvals if a.key not in gone}
        seen = self.approvals_seen.setdefault(key, {})
        annotated = set(approvals.keys(annotations_of(gate)))
        over = approvals.ended(gate)
        for withdrawn in [seen.pop(k) for k in list(seen) if k not in annotated]:
            if withdrawn.key.removeprefix(names.APPROVAL_ANNOTATION_PREFIX) not in over:
                self._announce(
                    key, gate, names.APPROVAL_WITHDRAWN_EVENT, "approval withdrawn", withdrawn, now
                )
        fresh = [a for k, a in live.items() if seen.get(k) != a]  # new, or rewritten under its key
        seen.update((k, a) for k, a in live.items() if a.live(now))
        gate_key = f"{key[0]}/{key[1]}"
        for request in [r for r in self.requests if r[0] == gate_key and r[1] not in live]:
            del self.requests[request]  # withdrawn, or removed by an earlier pass
        behind = self._behind(gate_key) if live and self.flux.untrusted() is None else None
        for approval in fresh:
            if approval.live(now):
                self._announce(key, gate, names.APPROVAL_RECORDED_EVENT, "", approval, now)
                self.requests[(gate_key, approval.key)] = (-1, now)  # due at once (or once Flux is trusted)
        if behind is not None:
            self._request_reconciles_for(gate_key, list(live.values()), behind, now)
        endings = []
        for approval in live.values():
            if approval.expired(now):
                endings.append((approval, names.APPROVAL_EXPIRED_EVENT, "approval expired unused"))
            elif (
                behind is not None
                and approval.live(now)
                and approvals.landed(approval, [b for _, _, b in behind])
            ):
                endings.append((approval, names.APPROVAL_USED_EVENT, "approval used"))
        self._keep_record(key, gate, endings, now)

    def _announce(
        self,
        key: tuple[str, str],
        gate: Object,
        reason: str,
        what: str,
        approval: approvals.Approval,
        now: datetime,
    ) -> None:
        message = f"{what}: {approval.describe()}" if what else approval.describe()
        if reason in _COUNTED:
            APPROVALS.labels(_COUNTED[reason]).inc()
        log.info(message, extra={"Gate": {"namespace": key[0], "name": key[1]}, "reason": reason})
        self._event(gate, reason, message, now)
        self._notify(gate, reason, message, approval, now)

    def _request_reconciles_for(
        self,
        gate_key: str,
        live: list[approvals.Approval],
        behind: list[tuple[str, Object, approvals.Behind]],
        now: datetime,
    ) -> None:
        """Ask Flux to reconcile the objects where a live approval's content waits, when its
        request is due: at once, then after each of ``approvals.REQUEST_AGAIN_AFTER`` while it
        still waits (the webhook pods may have denied the write before their caches saw it).
        Each request's value is new, so Flux reconciles again each time."""
        wanted: dict[str, tuple[str, Object]] = {}
        for approval in live:
            request = (gate_key, approval.key)
            if request not in self.requests or now < self.requests[request][1]:
                continue
            targets = approvals.waiting_for(approval, [b for _, _, b in behind])
            made = self.requests.pop(request)[0] + 1
            if not targets or not approval.live(now):
                continue  # nothing waits for it any more: it landed, or other content came
            if made < len(approvals.REQUEST_AGAIN_AFTER):
                self.requests[request] = (made, now + approvals.REQUEST_AGAIN_AFTER[made])
            wanted.update({b.target: (kind, obj) for kind, obj, b in behind if b.target in targets})
        value = format_distinct_time(now)
        done = [
            target
            for target, (kind, obj) in sorted(wanted.items())
            if self._annotate(kind, *kind_key(kind, obj)[1:], value)
        ]
        if done:
            log.info("reconcile requested", extra={"reason": "content approved", "objects": done})

    def next_request(self) -> datetime | None:
        """When a reconcile request for approved content is due next (the loop wakes then)."""
        return min((at for _, at in self.requests.values()), default=None)

    def _keep_record(
        self,
        key: tuple[str, str],
        gate: Object,
        endings: list[tuple[approvals.Approval, str, str]],
        now: datetime,
    ) -> None:
        """End ``endings`` in the Gate's ``status.endedApprovals`` and keep that list
        (``approvalrecord.record``: withdrawn entries marked, long-withdrawn ones dropped), in one
        write made only if the Gate is still the one they were judged on (its resourceVersion):
        another writer (a leader before this one, a withdrawal) makes it conflict, and the Gate
        is read again and the write redone, so no entry is lost and no rewritten approval ended."""
        # Ended in the Gate's status, not by removing the annotation: the controller may write a
        # Gate's status, never the Gate itself (that would let it open gates).
        judged = annotations_of(gate)
        for attempt in range(CONFLICT_RETRIES):
            current, over = annotations_of(gate), approvals.ended(gate)
            ending = [
                (approval, approvals.ended_entry(approval, reason, now), what)
                for approval, reason, what in endings
                if current.get(approval.key) == judged.get(approval.key)
                and approval.key.removeprefix(names.APPROVAL_ANNOTATION_PREFIX) not in over
            ]
            written = approvalrecord.record(gate, [entry for _, entry, _ in ending], now)
            if written == approvalrecord.stored(gate):
                return
            version = metadata(gate).get("resourceVersion")
            body: Object = {"status": {names.ENDED_APPROVALS_FIELD: written}}
            if version:
                body["metadata"] = {"resourceVersion": version}
            try:
                self.custom.patch_namespaced_custom_object_status(
                    names.GATING_GROUP, names.GATING_VERSION, key[0], names.GATE_PLURAL, key[1], body
                )
            except CALL_ERRORS as err:
                if getattr(err, "status", None) == 409 and attempt + 1 < CONFLICT_RETRIES:
                    try:
                        gate = mapping(
                            self.custom.get_namespaced_custom_object(
                                names.GATING_GROUP, names.GATING_VERSION, key[0], names.GATE_PLURAL, key[1]
                            )
                        )
                        continue
                    except CALL_ERRORS as reread:
                        err = reread
                API_ERRORS.labels("approval_record").inc()
                log.warning(
                    "approvals not ended",
                    extra={"Gate": {"namespace": key[0], "name": key[1]}, "error": describe_error(err)},
                )
                return
            for approval, entry, what in ending:
                self.gone.setdefault(key, set()).add(approval.key)
                self.requests.pop((f"{key[0]}/{key[1]}", approval.key), None)
                self.approvals_seen.get(key, {}).pop(approval.key, None)
                self._announce(key, gate, entry["reason"], what, approval, now)
            withdrawn = approvalrecord.newly_withdrawn(gate, written)
            if withdrawn:  # one Event for all: withdrawing many at once is one act
                APPROVALS.labels("withdrawn").inc(len(withdrawn))
                shown = ", ".join(f"{e['id']} ({e['reason']} at {e[approvals.AT]})" for e in withdrawn[:10])
                more = f" and {len(withdrawn) - 10} more" if len(withdrawn) > 10 else ""
                message = (
                    f"ended approval{'s' if len(withdrawn) > 1 else ''} withdrawn: {shown}{more}; listed in "
                    f"{names.ENDED_APPROVALS_FIELD} until {format_duration(approvalrecord.REMEMBER)} after "
                    "they ended, so a copy written back stays ended"
                )
                log.info(message, extra={"Gate": {"namespace": key[0], "name": key[1]}})
                self._event(gate, names.APPROVAL_WITHDRAWN_EVENT, message, now)
            return

    def _notify(
        self, gate: Object, reason: str, message: str, approval: approvals.Approval, now: datetime
    ) -> None:
        if self.notifier is not None:
            details = {"approvedBy": approval.by, "content": approval.content, "for": approval.target}
            self.notifier.notify(gate, reason, message, details, now, self.notifier.gates_address)
