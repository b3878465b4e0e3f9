"""The timeline drawn as SVG, and its text equivalent: spans placed on a row, nothing decided.

Closed spans are hatched and unknown ones dotted (colour is never the only signal); each
closed or unknown span is focusable and says what it is (``<title>`` and ``aria-label``), so
hover, focus and a screen reader tell the same thing the table does.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from functools import lru_cache
from html import escape

from admission.board.model import SuspendRow, Timeline
from admission.core.base.controls import escaped
from admission.core.base.timefmt import format_label, format_time
from admission.core.gates import timeline as core_timeline
from admission.core.gates.references import SuspendWindow
from admission.core.gates.timeline import Interval

WIDTH = 1000  # the viewBox's width: spans are placed in these units
HEIGHT = 30
BAR = (12, 16)  # the bar's top and height; ticks and labels above it
PATTERNS = """<svg class="defs" aria-hidden="true" focusable="false" width="0" height="0">
<defs>
<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
<rect width="6" height="6" class="closed-fill"/><line x1="0" y1="0" x2="0" y2="6" class="hatch-line"/>
</pattern>
<pattern id="stripes" width="8" height="8" patternUnits="userSpaceOnUse">
<rect width="8" height="8" class="suspended-fill"/><line x1="0" y1="4" x2="8" y2="4" class="stripe-line"/>
</pattern>
<pattern id="dots" width="4" height="4" patternUnits="userSpaceOnUse">
<rect width="4" height="4" class="unknown-fill"/><circle cx="2" cy="2" r="1" class="dot"/>
</pattern>
</defs>
</svg>"""


# Printable ASCII that neither HTML nor a terminal treats specially: most of what a page shows
# (names, times, revisions) is nothing else, and is shown as it is without the two passes.
_PLAIN = re.compile(r"[ !#-%(-;=?-~]*")


def e(value: object) -> str:
    """Text for HTML: markup escaped, control characters shown as escapes (as the CLI shows them).
    Every value a gate, an object or a calendar carries is somebody's text: through here only."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else escape(escaped(text), quote=True)


@lru_cache(maxsize=4096)  # spans meet at the same instants, and most gates at midnights
def when(value: datetime, zone: tzinfo) -> str:
    """A time as the page shows it: in ``zone``, to the minute, with the zone's abbreviation."""
    return format_label(value.astimezone(zone), "zoned")


@lru_cache(maxsize=4096)
def time_tag(value: datetime, zone: tzinfo) -> str:
    return f'<time datetime="{format_time(value)}">{e(when(value, zone))}</time>'


def state_word(interval: Interval) -> str:
    return "unknown" if not interval.known else "open" if interval.open else "closed"


def describe(interval: Interval, zone: tzinfo, word: str | None = None) -> str:
    """What a span is, in words (``word``, else its state's): the same text on hover, on focus
    and in the table."""
    text = f"{word or state_word(interval)} from {when(interval.start, zone)} to {when(interval.end, zone)}"
    why = interval.reason + (f": {interval.message}" if interval.message else "")
    return f"{text} ({why})" if why else text


def _x(at: datetime, line: Timeline) -> float:
    total = (line.end - line.start).total_seconds()
    part = (min(max(at, line.start), line.end) - line.start).total_seconds()
    return round(part / total * WIDTH, 2) if total > 0 else 0.0


def _ticks(line: Timeline) -> tuple[str, ...]:
    # Every row shown in one zone over the same days has the same ticks: drawn once, not once
    # a row. The fold is in the key because equal datetimes of one zone may differ in it.
    return _ticks_of(line.zone, line.start, line.start.fold, line.end, line.end.fold)


@lru_cache(maxsize=64)
def _ticks_of(
    zone: tzinfo, start: datetime, _start_fold: int, end: datetime, _end_fold: int
) -> tuple[str, ...]:
    line = Timeline(zone, start, end, ())
    out = []
    days = (line.end - line.start).days or 1
    step = timedelta(hours=3) if days == 1 else timedelta(days=1)
    cur = line.start
    top = BAR[0] - 2
    while cur < line.end:
        x = _x(cur, line)
        local = cur.astimezone(line.zone)
        text = format_label(local, "hour" if days == 1 else "weekday" if days <= 7 else "day")
        out.append(f'<line class="tick" x1="{x}" y1="{top}" x2="{x}" y2="{HEIGHT}"/>')
        out.append(f'<text class="tick-label" x="{x + 2}" y="{top - 1}">{e(text)}</text>')
        # Wall-clock steps: a day is not always 24 hours where the clocks change.
        cur = (local + step).replace(tzinfo=None)
        cur = datetime.combine(cur.date(), cur.time(), tzinfo=line.zone)
    return tuple(out)


def svg_without_now(line: Timeline, spans: list[tuple[Interval, str]], name: str, closed: str) -> str:
    """One row up to its "now" line (``svg_end`` draws that and closes it): ``spans`` (each with
    its text) and ticks at local midnights (hours when zoomed to a day). ``name`` labels the row
    for assistive technology; ``closed`` is how its closed spans are drawn (``suspended``: an
    object's own suspendDuring, not a gate). Apart, because this part stays the same from one
    look to the next while the spans do."""
    return _svg_head(name) + _svg_body(line, spans, closed)


def _svg_head(name: str) -> str:
    return (
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        f'role="group" aria-label="{e(name)}">'
    )


def _svg_body(line: Timeline, spans: list[tuple[Interval, str]], closed: str) -> str:
    """What follows the row's head: the same for every row with these spans, whoever's it is."""
    parts = [f'<rect class="bar" x="0" y="{BAR[0]}" width="{WIDTH}" height="{BAR[1]}"/>']
    for interval, text in spans:
        x0, x1 = _x(interval.start, line), _x(interval.end, line)
        kind = state_word(interval)
        if kind == "open":
            continue
        kind = closed if kind == "closed" else kind
        label = e(text)
        parts.append(
            f'<rect class="span {kind}" x="{x0}" y="{BAR[0]}" width="{max(x1 - x0, 0.5)}" '
            f'height="{BAR[1]}" tabindex="0" role="img" aria-label="{label}"><title>{label}</title></rect>'
        )
    parts += _ticks(line)
    return "".join(parts)


def svg_end(line: Timeline, now: datetime) -> str:
    """A row's "now" line, if now is in its range, and its end."""
    if not line.start <= now < line.end:
        return "</svg>"
    # Whole units (20 minutes over 14 days, 86 s over one): it moves when it would show, not
    # with every second a poll brings.
    x = round(_x(now, line))
    return f'<line class="now" x1="{x}" y1="0" x2="{x}" y2="{HEIGHT}"><title>now</title></line></svg>'


# Rows remembered, a few per gate of a large board: most rows are the same from one look to
# the next (their spans are remembered too, ``core.gates.timeline``), and drawing them is most of
# the page's cost.
REMEMBERED_ROWS = 2048
# Rows' spans drawn without their gate, for the rows drawn next: gates of one template come
# round again every few rows; kept few, since each row remembered holds its own copy.
REMEMBERED_SPANS_DRAWN = 64


def _suspend_word(span: Interval) -> str:
    # A cron that cannot be read counts as active (core.references), but when is not known.
    return "suspended" if span.known else "unknown"


def _suspend_spans(windows: tuple[SuspendWindow, ...], zone: tzinfo) -> list[tuple[Interval, str]]:
    out = []
    for w in windows:
        why = f"suspended by {w.annotation} '{w.expression}'" + (
            f": cannot be read ({w.error})" if w.error else ""
        )
        span = Interval(w.start, w.end, False, "SuspendDuring", why, known=w.error is None)
        out.append((span, describe(span, zone, _suspend_word(span))))
    return out


def forget() -> None:
    """Forget every row and span remembered: the next page is drawn as a first look (benches and
    tests compare the two)."""
    core_timeline.forget()
    for cache in (_gate_line_of, _gate_spans_of, _suspend_line_of, _suspend_spans_of):
        cache.cache_clear()


def gate_line(key: str, line: Timeline) -> tuple[str, str]:
    """A gate's row of the timeline up to its "now" line (``svg_end``), and its rows of the table."""
    # The folds are in the key because equal datetimes of one zone may differ in them.
    return _gate_line_of(key, line, line.start.fold, line.end.fold)


@lru_cache(maxsize=REMEMBERED_ROWS)
def _gate_line_of(key: str, line: Timeline, start_fold: int, end_fold: int) -> tuple[str, str]:
    body, cells = _gate_spans_of(line, start_fold, end_fold)
    drawn = f'<div class="line"><span class="who" title="{e(key)}">{e(key)}</span>' + _svg_head(f"gate {key}")
    head = f'<tr><th scope="row">gate {e(key)}</th>'
    return drawn + body, "".join(head + row for row in cells)


@lru_cache(maxsize=REMEMBERED_SPANS_DRAWN)
def _gate_spans_of(line: Timeline, _start_fold: int, _end_fold: int) -> tuple[str, tuple[str, ...]]:
    """A gate's row and table rows without the gate: drawn once for every gate with these spans
    (a schedule copied to many namespaces, ``core.gates.timeline``)."""
    spans = [(i, describe(i, line.zone)) for i in line.spans]
    cells = tuple(
        f"<td>{e(state_word(i))}</td>"
        f"<td>{time_tag(i.start, line.zone)}</td><td>{time_tag(i.end, line.zone)}</td>"
        f"<td>{e(i.reason)}{': ' + e(i.message) if i.message else ''}</td></tr>"
        for i, _ in spans
    )
    return _svg_body(line, spans, "closed"), cells


def suspend_line(row: SuspendRow) -> tuple[str, str]:
    """An object's row of suspendDuring windows up to its "now" line (``svg_end``), and its rows
    of the table."""
    return _suspend_line_of(row, row.timeline.start.fold, row.timeline.end.fold)


@lru_cache(maxsize=REMEMBERED_ROWS)
def _suspend_line_of(row: SuspendRow, start_fold: int, end_fold: int) -> tuple[str, str]:
    body, cells = _suspend_spans_of(row.timeline, row.windows, start_fold, end_fold)
    drawn = f'<div class="line"><span class="who" title="{e(row.target)}">{e(row.target)}</span>' + _svg_head(
        f"suspensions of {row.target}"
    )
    head = f'<tr><th scope="row">{e(row.target)}</th>'
    return drawn + body, "".join(head + cell for cell in cells)


@lru_cache(maxsize=REMEMBERED_SPANS_DRAWN)
def _suspend_spans_of(
    line: Timeline, windows: tuple[SuspendWindow, ...], _start_fold: int, _end_fold: int
) -> tuple[str, tuple[str, ...]]:
    """An object's row and table rows without the object: drawn once for every object with these
    windows (the same suspendDuring expression)."""
    spans = _suspend_spans(windows, line.zone)
    cells = tuple(
        f"<td>{_suspend_word(i)}</td>"
        f"<td>{time_tag(i.start, line.zone)}</td><td>{time_tag(i.end, line.zone)}</td>"
        f"<td>{e(i.message)}</td></tr>"
        for i, _ in spans
    )
    return _svg_body(line, spans, "suspended"), cells
