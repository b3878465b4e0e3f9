"""The days of a month that a cron expression's day fields match: worked out once per month shape, shared."""

from __future__ import annotations

import calendar
import functools
from datetime import date

from cronsim import CronSim


class DayTable:
    """The days that match one pair of day-of-month and day-of-week fields, month by month.

    A month's matching days depend only on its length and the weekday of its 1st, so at most
    28 are ever worked out (by cronsim's own match_day) per pair of fields. Filled on use,
    never changed, shared by every expression with these day fields; threads that race both
    work out the same tuple."""

    __slots__ = ("by_month", "by_shape")

    def __init__(self) -> None:
        self.by_month: dict[tuple[int, int], tuple[int, ...]] = {}
        self.by_shape: dict[tuple[int, int], tuple[int, ...]] = {}

    def days(self, fields: CronSim, year: int, month: int) -> tuple[int, ...]:
        """The days of ``year-month`` that match (the month field is not checked), ascending."""
        days = self.by_month.get((year, month))
        if days is None:
            first_weekday, length = calendar.monthrange(year, month)
            days = self.by_shape.get((first_weekday, length))
            if days is None:
                days = self.by_shape[(first_weekday, length)] = _matching_days(
                    fields, year, month, first_weekday, length
                )
            self.by_month[(year, month)] = days
        return days


def _matching_days(f: CronSim, year: int, month: int, first_weekday: int, length: int) -> tuple[int, ...]:
    # A superset of the matching days, read off the parsed fields; cronsim's own match_day
    # decides each, so cron's day rules (L, LW, #n, AND or OR of the two fields) stay cronsim's.
    by_dom = {d for d in f.days if isinstance(d, int) and 1 <= d <= length}
    if f.LAST in f.days or f.LAST_WEEKDAY in f.days:
        by_dom.update(range(length - 2, length + 1))
    # Cron numbers Sunday 0 (and 7), Monday 1; day d of the month is cron weekday
    # (first_weekday + d) % 7, with Python's Monday-0 first_weekday.
    weekdays = {(w if isinstance(w, int) else w[0]) % 7 for w in f.weekdays}
    by_dow = {d for d in range(1, length + 1) if (first_weekday + d) % 7 in weekdays}
    candidates = by_dom & by_dow if f.day_and else by_dom | by_dow
    return tuple(d for d in sorted(candidates) if f.match_day(date(year, month, d)))


def next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def previous_month(year: int, month: int) -> tuple[int, int]:
    return (year - 1, 12) if month == 1 else (year, month - 1)


@functools.lru_cache(maxsize=4096)
def day_table(day_of_month: str, day_of_week: str) -> DayTable:
    """The table of matching days shared by the expressions with these day fields."""
    return DayTable()
