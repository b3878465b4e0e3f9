"""How many approvals a Gate may hold, and its record of those that ended (pure): the list the
controller keeps in the Gate's ``status.endedApprovals``, and what the approval webhook entries
refuse so that the list can never outgrow its cap (docs/decisions/0070).

An ended approval admits nothing more. Its entry stays while its annotation does, and once the
annotation is withdrawn it stays ``REMEMBER`` longer, marked ``withdrawnAt``: a copy of the
annotation written back within that time is still ended, and one written back later has expired
(``approvals.parse`` ends every approval ``approvals.MAX_EXPIRY`` after its stamp at the latest).
A Gate holds at most ``MAX_APPROVALS``, its approval annotations and the withdrawn entries still
remembered counted together; the list holds no other entry, so it stays below its cap. The
webhook refuses a write that would hold more; a Gate that holds more anyway (written while the
webhook was away) has every approval ignored until some are withdrawn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime

from admission.core.base import names
from admission.core.base.objects import Object
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.timefmt import format_duration, format_time, parse_time
from admission.core.gates import approvals

MAX_APPROVALS = 128  # annotations and remembered ended ones; well below the list's cap
# After an ended approval's annotation is withdrawn, how long its entry stays: by then any copy
# of it has expired, on every pod (its stamp may be a clock skew ahead of the controller's, and
# the pod judging it a clock skew behind).
REMEMBER = approvals.MAX_EXPIRY + 2 * approvals.CLOCK_SKEW
Entry = dict[str, str]


def _ids(annotated: Mapping[str, object]) -> set[str]:
    return {k.removeprefix(names.APPROVAL_ANNOTATION_PREFIX) for k in approvals.keys(annotated)}


def count(annotated: Mapping[str, object], ended: Mapping[str, Entry]) -> tuple[int, int]:
    """(approval annotations, ended entries whose annotation is gone): what a Gate holds."""
    ids = _ids(annotated)
    return len(ids), len([i for i in ended if i not in ids])


def _too_many(held: tuple[int, int], verb: str) -> str:
    return (
        f"the gate {verb} {sum(held)} approvals ({held[0]} annotated, {held[1]} ended and withdrawn, "
        f"which count for {format_duration(REMEMBER)} after they ended), at most {MAX_APPROVALS}"
    )


def counting(
    gate: Object, parsed: Iterable[approvals.Approval]
) -> tuple[tuple[approvals.Approval, ...], str | None]:
    """Of a Gate's ``parsed`` approvals, those that may count: none the controller ended (they
    are listed in its status), and none at all when it holds more than the bound (its ended list
    might not take one more ending: one could admit, fail to end, and admit again); and why
    none counts then."""
    held = count(annotations_of(gate), approvals.ended(gate))
    if sum(held) > MAX_APPROVALS:
        return (), f"ignoring every approval: {_too_many(held, 'holds')}; withdraw some"
    over = approvals.ended(gate)
    return tuple(a for a in parsed if a.key.removeprefix(names.APPROVAL_ANNOTATION_PREFIX) not in over), None


def _ended_at(entry: Entry) -> datetime | None:
    try:
        return parse_time(entry.get(approvals.AT))
    except ValueError:
        return None  # not a time we wrote: kept (a forgotten entry could let its approval count)


def record(gate: Object, endings: Iterable[Entry], now: datetime) -> list[Entry]:
    """The Gate's ended list with ``endings`` added: an entry whose annotation is gone is marked
    withdrawn, and dropped once ``REMEMBER`` has passed since it ended."""
    annotated = _ids(annotations_of(gate))
    kept: dict[str, Entry] = {}
    for key, entry in approvals.ended(gate).items():
        if key not in annotated:
            ended_at = _ended_at(entry)
            if ended_at is not None and now >= ended_at + REMEMBER:
                continue  # any copy of it written back has expired
            entry = {
                **entry,
                names.WITHDRAWN_AT_FIELD: entry.get(names.WITHDRAWN_AT_FIELD) or format_time(now),
            }
        kept[key] = entry
    for entry in endings:
        kept[entry["id"]] = entry
    return sorted(kept.values(), key=lambda e: e["id"])


def newly_withdrawn(gate: Object, written: Iterable[Entry]) -> list[Entry]:
    """The entries of ``written`` that ``record`` marked withdrawn and the Gate's list did not."""
    before = approvals.ended(gate)
    return [
        e
        for e in written
        if names.WITHDRAWN_AT_FIELD in e and names.WITHDRAWN_AT_FIELD not in before.get(e["id"], {})
    ]


def stored(gate: Object) -> list[Entry]:
    """The Gate's ended list as stored, in ``record``'s order."""
    return sorted(approvals.ended(gate).values(), key=lambda e: e["id"])


def _expiry_refused(raw: object, now: datetime, stamped: bool) -> str | None:
    try:
        found = json.loads(raw) if isinstance(raw, str) else None
        if not isinstance(found, dict) or approvals.EXPIRES not in found:
            return None
        expires = parse_time(found[approvals.EXPIRES])
        # Stamped: from the stamp (another pod's clock, moments ago); else from now.
        start = parse_time(found[approvals.AT]) if stamped and approvals.AT in found else now
    except ValueError:
        return None  # approvals.refuse, or the stamp's check, says why
    if expires <= start + approvals.MAX_EXPIRY + approvals.CLOCK_SKEW:
        return None
    return (
        f"expires {format_time(expires)} is more than {format_duration(approvals.MAX_EXPIRY)} after it "
        f"was written ({format_time(start)}): an approval lasts at most that long"
    )


def refusals(old: Object | None, new: Object, keys: list[str], now: datetime, stamped: bool) -> list[str]:
    """Why a Gate write whose approvals ``keys`` are new or changed cannot be recorded, besides a
    malformed value: an ``expires`` beyond the bound (measured from the stamp when ``stamped``,
    else from ``now``), a key of an approval that ended, or more approvals than the bound. The
    ended list is read from ``old``: a write of the Gate cannot change its status."""
    ended = approvals.ended(old) if old is not None else {}
    written = annotations_of(new)
    problems = []
    for key in keys:
        entry = ended.get(key.removeprefix(names.APPROVAL_ANNOTATION_PREFIX))
        if entry is not None:
            problems.append(
                f"{key}: this approval ended ({entry.get('reason')} at {entry.get(approvals.AT)}) and "
                "admits nothing more: approve again, under a new key (kubectl gate approve)"
            )
            continue
        if why := _expiry_refused(written[key], now, stamped):
            problems.append(f"{key}: {why}")
    after = count(written, ended)
    before = count(annotations_of(old), ended) if old is not None else (0, 0)
    if sum(after) > MAX_APPROVALS and sum(after) > sum(before):
        problems.append(
            f"{_too_many(after, 'would hold')}: withdraw approvals that ended "
            "(kubectl gate approve NAME --withdraw)"
        )
    return problems
