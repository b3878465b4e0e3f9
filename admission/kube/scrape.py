"""What the controller's /metrics reads from its caches when scraped: each GateKeeper calendar's
freshness as its status says, and each gate's approvals still waiting to be used."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from admission.core.base.objects import object_key
from admission.core.base.timefmt import parse_time
from admission.core.time.cron import ScheduleError
from admission.core.time.subscriptions import find_status, parse_calendars
from admission.kube.reflector import ClusterStore
from admission.observability.controllermetrics import CalendarFreshness, ControllerCollector, WaitingApprovals


def calendar_freshness(keepers: list[dict[str, Any]]) -> list[CalendarFreshness]:
    """Every calendar of every GateKeeper, as its status (the leader's last write) says."""
    found = []
    for keeper in keepers:
        namespace, name = object_key(keeper)
        try:
            cals = parse_calendars(keeper.get("spec") or {})
        except (ScheduleError, AttributeError):
            continue  # the gate is Invalid and says why; there is no calendar to be fresh
        seen: set[str] = set()
        for index, cal in enumerate(cals):
            # Two calendars may have one name (the default is the feed's host): one series each.
            label = cal.name if cal.name not in seen else f"{cal.name}#{index}"
            seen.add(label)
            entry = find_status(keeper.get("status"), cal) or {}
            try:
                success = parse_time(entry["lastSuccessTime"]) if entry.get("lastSuccessTime") else None
            except ValueError:
                success = None
            found.append(
                CalendarFreshness(
                    namespace, name, label, success, bool(entry.get("error")), cal.stale_after.total_seconds()
                )
            )
    return found


def waiting_approvals(store: ClusterStore, now: datetime) -> list[WaitingApprovals]:
    """Per gate with any, its live approvals (not used, not expired) and the first to expire."""
    found = []
    for state in store.index.states(now):
        live = [approval for approval in state.approvals if approval.live(now)]
        if live:
            found.append(
                WaitingApprovals(state.namespace, state.name, len(live), min(a.expires for a in live))
            )
    return found


def collector(
    store: ClusterStore,
    is_leader: Callable[[], bool],
    clock: Callable[[], datetime],
    notifications: Callable[[], dict[str, int]] | None = None,
) -> ControllerCollector:
    """The controller's scrape-time gauges, read from ``store`` (the controller's gate cache)."""
    return ControllerCollector(
        is_leader,
        lambda: calendar_freshness(store.index.keepers()),
        lambda: waiting_approvals(store, clock()),
        notifications,
    )
