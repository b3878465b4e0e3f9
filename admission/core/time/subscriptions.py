"""GateKeeper calendar subscriptions (``spec.calendars``): what an entry asks for, and how its
fetched intervals are kept in the GateKeeper's status.

The controller fetches and parses each feed (admission.ical) and writes the coming intervals
into ``status.calendars``; admission.core.time.calendarentries reads them back as plain lists,
evaluated at an explicit ``now``, so every webhook replica and worker decides from API-server
state, never from the network. A calendar whose intervals are not known at ``now`` (never fetched, stale, or listed
only up to an earlier time) is *unknown*: it closes its gate, whatever its action, and says why.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from admission.core.base.timefmt import format_duration, format_time, parse_duration
from admission.core.time.cron import ScheduleError, zone

ACTIONS = ("closed", "opened")
MAX_CALENDARS = 4  # per GateKeeper: the CRD's maxItems
MAX_URL = 2048
MAX_NAME = 63
MAX_PATTERN = 256
MAX_CATEGORIES = 16
MAX_CATEGORY = 64
MAX_CA_BUNDLE = 64 * 1024  # base64 characters
MAX_INTERVALS = 500  # per calendar in status: a year of a busy calendar is ~200 in HORIZON
MAX_SUMMARY = 120
MAX_UID = 120
MAX_ERROR = 512
HORIZON = timedelta(days=35)  # how far ahead the controller lists a feed's events
DEFAULT_INTERVAL = timedelta(minutes=15)
MAX_INTERVAL = timedelta(hours=24)
DEFAULT_STALE_AFTER = timedelta(hours=24)
MAX_STALE_AFTER = HORIZON
_FIELDS = {
    "name",
    "url",
    "action",
    "filter",
    "secretRef",
    "caBundle",
    "caSecretRef",
    "interval",
    "staleAfter",
    "allowHTTP",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def clean(text: object, limit: int) -> str:
    """A feed's or a status's string made safe for messages: control characters become a space,
    at most ``limit`` characters."""
    value = _CONTROL.sub(" ", text if isinstance(text, str) else str(text)).strip()
    return value if len(value) <= limit else value[: limit - 1] + "…"


@dataclass(frozen=True)
class CalendarSpec:
    """One ``spec.calendars`` entry, checked."""

    url: str
    action: str = "closed"
    name: str = ""  # how messages call it (default: the URL's host; never the URL, which may hold a secret)
    summary: str | None = None  # a regular expression searched for in each event's SUMMARY
    categories: tuple[str, ...] = ()  # an event passes with any of these CATEGORIES (case-insensitive)
    secret: str | None = None  # a Secret in the GateKeeper's namespace: token, or username and password
    ca_bundle: bytes | None = None  # PEM: the feed server's certificate must chain to it
    ca_secret: tuple[str, str] | None = None  # (Secret name, key) holding such a PEM bundle
    interval: timedelta = DEFAULT_INTERVAL
    stale_after: timedelta = DEFAULT_STALE_AFTER
    allow_http: bool = False
    time_zone: str | None = None  # the GateKeeper's: all-day and floating events are read in it

    @property
    def filter(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.summary is not None:
            found["summary"] = self.summary
        if self.categories:
            found["categories"] = list(self.categories)
        return found

    @property
    def digest(self) -> str:
        """What the fetched intervals depend on (URL, filter, zone): a status entry belongs to
        this spec only when its ``specDigest`` is this, so an edited filter is never answered
        with the intervals of the old one."""
        source = json.dumps([self.url, self.filter, self.time_zone or "UTC"], sort_keys=True)
        return hashlib.sha256(source.encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return f"calendar '{self.name}'"


def _string(item: dict[str, Any], key: str, limit: int, where: str) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ScheduleError(f"{where}.{key} must be a non-empty string")
    if len(value) > limit:
        raise ScheduleError(f"{where}.{key} is {len(value)} characters long, more than {limit}")
    return value


def _ref(item: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    ref = item.get(key)
    if ref is None:
        return None
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not 0 < len(ref["name"]) <= 253:
        raise ScheduleError(f"{where}.{key} must be {{name: <a Secret in the GateKeeper's namespace>}}")
    unknown = set(ref) - ({"name", "key"} if key == "caSecretRef" else {"name"})
    if unknown:
        raise ScheduleError(f"{where}.{key} has unknown fields {sorted(map(str, unknown))}")
    return ref


def _duration(
    item: dict[str, Any], key: str, default: timedelta, low: timedelta, high: timedelta, where: str
) -> timedelta:
    raw = item.get(key)
    if raw is None:
        return default
    try:
        value = parse_duration(raw)
    except ValueError as err:
        raise ScheduleError(f"{where}.{key}: {err}") from None
    if not low <= value <= high:
        raise ScheduleError(
            f"{where}.{key} {raw!r} must be from {format_duration(low)} to {format_duration(high)}"
        )
    return value


def _url(item: dict[str, Any], where: str) -> tuple[str, bool, str]:
    """The feed's URL, whether plain http is allowed, and the name its host gives."""
    url = _string(item, "url", MAX_URL, where)
    if url is None:
        raise ScheduleError(f"{where}.url is required")
    allow_http = item.get("allowHTTP", False)
    if not isinstance(allow_http, bool):
        raise ScheduleError(f"{where}.allowHTTP must be true or false")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as err:
        raise ScheduleError(f"{where}.url is not a URL: {err}") from None
    if parts.scheme not in ("https", "http") or not host:
        raise ScheduleError(f"{where}.url must be an https:// URL")
    if parts.scheme == "http" and not allow_http:
        raise ScheduleError(f"{where}.url is plain http: use https, or set allowHTTP: true")
    if parts.username is not None or parts.password is not None:
        raise ScheduleError(f"{where}.url must not hold credentials: use secretRef")
    return url, allow_http, host if port is None else f"{host}:{port}"


def _filter(item: dict[str, Any], where: str) -> tuple[str | None, tuple[str, ...]]:
    """The summary pattern and the categories an event must have to count."""
    filt = item.get("filter")
    if filt is None:
        return None, ()
    if not isinstance(filt, dict) or set(filt) - {"summary", "categories"}:
        raise ScheduleError(f"{where}.filter must be an object with 'summary' and/or 'categories'")
    summary = _string(filt, "summary", MAX_PATTERN, f"{where}.filter")
    if summary is not None:
        try:
            re.compile(summary)
        except (re.error, RecursionError, OverflowError) as err:
            raise ScheduleError(f"{where}.filter.summary is not a regular expression: {err}") from None
    cats = filt.get("categories")
    if cats is None:
        return summary, ()
    if (
        not isinstance(cats, list)
        or len(cats) > MAX_CATEGORIES
        or not all(isinstance(c, str) and 0 < len(c) <= MAX_CATEGORY for c in cats)
    ):
        raise ScheduleError(
            f"{where}.filter.categories must be a list of at most {MAX_CATEGORIES} "
            f"non-empty strings of at most {MAX_CATEGORY} characters"
        )
    return summary, tuple(cats)


def _ca(item: dict[str, Any], where: str) -> tuple[bytes | None, tuple[str, str] | None]:
    """The CA certificates the feed's server is checked with: given, or a Secret's key."""
    ca_ref = _ref(item, "caSecretRef", where)
    ca_bundle = None
    raw = _string(item, "caBundle", MAX_CA_BUNDLE, where)  # None when absent
    if raw is not None:
        try:
            ca_bundle = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ScheduleError(f"{where}.caBundle must be base64 (of PEM certificates)") from None
        if b"-----BEGIN CERTIFICATE-----" not in ca_bundle:
            raise ScheduleError(f"{where}.caBundle holds no PEM certificate")
    if ca_bundle is not None and ca_ref is not None:
        raise ScheduleError(f"{where}: caBundle and caSecretRef are exclusive")
    ca_key = (ca_ref or {}).get("key", "ca.crt")
    if not isinstance(ca_key, str) or not 0 < len(ca_key) <= 253:
        raise ScheduleError(f"{where}.caSecretRef.key must be a key of the Secret")
    return ca_bundle, (ca_ref["name"], ca_key) if ca_ref else None


def parse_calendar(item: object, where: str = "calendars[0]", time_zone: str | None = None) -> CalendarSpec:
    """Check one ``spec.calendars`` entry; raise ScheduleError saying what is wrong."""
    if not isinstance(item, dict):
        raise ScheduleError(f"{where} must be an object with a url")
    unknown = set(item) - _FIELDS
    if unknown:
        raise ScheduleError(f"{where} has unknown fields {sorted(unknown)}")
    url, allow_http, host = _url(item, where)
    action = item.get("action", "closed")
    if action not in ACTIONS:
        raise ScheduleError(f"{where}.action {action!r} must be 'closed' or 'opened'")
    name = _string(item, "name", MAX_NAME, where) or host
    summary, categories = _filter(item, where)
    secret = _ref(item, "secretRef", where)
    ca_bundle, ca_secret = _ca(item, where)
    interval = _duration(item, "interval", DEFAULT_INTERVAL, timedelta(seconds=1), MAX_INTERVAL, where)
    stale_after = _duration(
        item, "staleAfter", max(DEFAULT_STALE_AFTER, interval), interval, MAX_STALE_AFTER, where
    )
    return CalendarSpec(
        url,
        action,
        name,
        summary,
        categories,
        secret["name"] if secret else None,
        ca_bundle,
        ca_secret,
        interval,
        stale_after,
        allow_http,
        time_zone,
    )


def parse_calendars(spec: dict[str, Any]) -> list[CalendarSpec]:
    """A GateKeeper's ``spec.calendars``, checked; raise ScheduleError."""
    items = spec.get("calendars") or []
    if not isinstance(items, list):
        raise ScheduleError("calendars must be a list")
    if len(items) > MAX_CALENDARS:
        raise ScheduleError(f"calendars has {len(items)} entries, more than {MAX_CALENDARS}")
    tz_name = spec.get("timeZone")
    if tz_name is not None:
        zone(tz_name)
    return [parse_calendar(item, f"calendars[{i}]", tz_name) for i, item in enumerate(items)]


# -- status.calendars: written by the controller, read by every evaluation ---------------------


class FeedEvent(NamedTuple):
    """One occurrence of a feed's event, ``[start, end)`` in UTC. (A tuple: a GateKeeper at the
    bounds holds 2,000, read again at each status write.)"""

    start: datetime
    end: datetime
    uid: object = ""  # as status has it: cleaned when shown (``clean``)
    summary: object = ""


def status_entry(
    cal: CalendarSpec,
    previous: dict[str, Any] | None,
    now: datetime,
    *,
    events: list[FeedEvent] | None = None,
    complete_until: datetime | None = None,
    etag: str | None = None,
    last_modified: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The ``status.calendars`` entry after a fetch at ``now``: with ``events`` (and how far they
    are complete) after a successful parse; with neither after a 304 (the last intervals stay);
    with ``error`` after a failure (the last good intervals stay, for evaluation to judge)."""
    entry: dict[str, Any] = dict(previous) if previous and previous.get("specDigest") == cal.digest else {}
    entry.update(url=cal.url, specDigest=cal.digest, lastFetchTime=format_time(now))
    if error is not None:
        entry["error"] = clean(error, MAX_ERROR)
        return entry
    entry.pop("error", None)
    entry["lastSuccessTime"] = format_time(now)
    for key, value in (("etag", etag), ("lastModified", last_modified)):
        if value:
            entry[key] = clean(value, 256)
    if events is not None:
        kept = sorted(events, key=lambda e: (e.start, e.end))[:MAX_INTERVALS]
        if len(events) > MAX_INTERVALS:  # listed only up to the first that is not kept
            complete_until = min(
                complete_until or now, sorted(events, key=lambda e: e.start)[MAX_INTERVALS].start
            )
        entry["lastParseTime"] = format_time(now)
        entry["completeUntil"] = format_time(complete_until or now)
        entry["intervals"] = [
            {
                "start": format_time(e.start),
                "end": format_time(e.end),
                **({"uid": clean(e.uid, MAX_UID)} if e.uid else {}),
                **({"summary": clean(e.summary, MAX_SUMMARY)} if e.summary else {}),
            }
            for e in kept
        ]
    return entry


def find_status(status: object, cal: CalendarSpec) -> dict[str, Any] | None:
    """The ``status.calendars`` entry fetched for ``cal``, if any."""
    entries = status.get("calendars") if isinstance(status, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("specDigest") == cal.digest:
            return entry
    return None
