"""The board's rows (``board.timeline``): what a row shows of its spans is drawn once for every gate
(or object) with the same spans, and each row is the one drawn for it alone."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

from admission.board import timeline as board_timeline
from admission.board.model import SuspendRow, Timeline
from admission.core.base import names
from admission.core.gates.references import suspend_windows
from admission.core.gates.timeline import intervals
from admission.store.index import GateIndex
from tests.builders import at, flux, gate, keeper

BERLIN = ZoneInfo("Europe/Berlin")
START = at("2026-10-19T22:00")  # midnight in Berlin; its clocks change on the 25th
END = START + timedelta(days=14)


def alone(key: str, line: Timeline) -> tuple[str, str]:
    """The row as drawn for this gate alone, from the row's public parts."""
    spans = [(i, board_timeline.describe(i, line.zone)) for i in line.spans]
    drawn = (
        f'<div class="line"><span class="who" title="{key}">{key}</span>'
        + board_timeline.svg_without_now(line, spans, f"gate {key}", "closed")
    )
    table = "".join(
        f'<tr><th scope="row">gate {key}</th><td>{board_timeline.state_word(i)}</td>'
        f"<td>{board_timeline.time_tag(i.start, line.zone)}</td><td>{board_timeline.time_tag(i.end, line.zone)}</td>"
        f"<td>{i.reason}: {board_timeline.e(i.message)}</td></tr>"
        for i, _ in spans
    )
    return drawn, table


def test_gates_with_the_same_spans_each_get_their_own_row_drawn_once():
    index = GateIndex()
    namespaces = ["team-a", "team-b", "team-c"]
    index.replace_all(
        [gate("canary", ns, default="opened") for ns in namespaces],
        [
            keeper("canary-schedule", "canary", [{"cron": "0 */4 * * *", "duration": "30m"}], namespace=ns)
            for ns in namespaces
        ],
    )
    board_timeline.forget()
    rows = {}
    for ns in namespaces:
        compiled = index.compiled(ns, "canary")
        assert compiled is not None
        line = Timeline(BERLIN, START, END, intervals(compiled, START, END))
        rows[ns] = board_timeline.gate_line(f"{ns}/canary", line)
        assert rows[ns] == alone(f"{ns}/canary", line)
        assert f'aria-label="gate {ns}/canary"' in rows[ns][0] and f"gate {ns}/canary</th>" in rows[ns][1]
    assert len(set(rows.values())) == 3  # each names its gate
    assert board_timeline._gate_spans_of.cache_info().misses == 1  # the spans drawn once


def test_objects_with_the_same_suspendDuring_each_get_their_own_row_drawn_once():
    board_timeline.forget()
    drawn = []
    for name in ("api", "web"):
        obj = flux("Kustomization", name, annotations={names.SUSPEND_DURING_ANNOTATION: "* 22-23 * * *"})
        target = f"Kustomization/flux-system/{name}"
        row = SuspendRow(target, Timeline(BERLIN, START, END, ()), tuple(suspend_windows(obj, START, END)))
        line, table = board_timeline.suspend_line(row)
        board_timeline.forget()
        assert (line, table) == board_timeline.suspend_line(row)  # as drawn with nothing remembered
        assert f'aria-label="suspensions of {target}"' in line and f">{target}</th>" in table
        assert table.count("<tr>") == 14 and "suspended by" in table
        drawn.append((line, table))
    assert drawn[0] != drawn[1]
    board_timeline.forget()
    for name in ("api", "web", "db"):
        obj = flux("Kustomization", name, annotations={names.SUSPEND_DURING_ANNOTATION: "* 22-23 * * *"})
        windows = tuple(suspend_windows(obj, START, END))
        board_timeline.suspend_line(SuspendRow(name, Timeline(BERLIN, START, END, ()), windows))
    assert board_timeline._suspend_spans_of.cache_info().misses == 1
