"""The board as HTML: one server-rendered page that reads without JavaScript.

Every value a gate, an object or a calendar carries is somebody's text (a message is whatever
its writer typed), so each one goes through ``e`` (``timeline.e``), and nowhere is HTML taken from data.
Actions are forms: without JavaScript a POST first answers with a page naming what it will do
and a Confirm button (``confirm_page``); ``board.js`` shows the same words in a dialog instead.
"""

from __future__ import annotations

import hashlib
from base64 import b64encode
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from admission.board import timeline
from admission.board.model import DAY_CHOICES, GATE_ZONE, Board, GateRow, Query
from admission.board.timeline import e
from admission.core.base.objects import label
from admission.core.base.timefmt import parse_time

STATIC = ("board.css", "board.js")
EXPIRY_CHOICES = ("", "1h", "4h", "24h", "72h", "168h")


@dataclass(frozen=True)
class View:
    """What a page needs besides the board: the session's CSRF token, and the path the board is
    served under (``/``, or ``/board/`` beside the webhook) that every link starts with."""

    csrf: str
    root: str = "/"

    @property
    def home(self) -> str:
        """The page itself: ``/``, or ``/board`` beside the webhook, whose paths end without ``/``."""
        return self.root.rstrip("/") or "/"


def static_file(name: str) -> bytes:
    return resources.files("admission.board").joinpath("static", name).read_bytes()


def integrity(name: str) -> str:
    """The Subresource Integrity value of a static file: the browser refuses it if it changed."""
    return "sha384-" + b64encode(hashlib.sha384(static_file(name)).digest()).decode()


_INTEGRITY = {name: integrity(name) for name in STATIC}


def _href(query: Query, **changes: object) -> str:
    params = {"namespace": query.namespace, "q": query.search, "days": query.days, "from": query.offset}
    params["tz"] = query.tz
    params.update(changes)
    return "?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})


def _time(text: object, board: Board) -> str:
    if not text:
        return "-"
    try:
        return timeline.time_tag(parse_time(str(text)), board.zone)
    except ValueError:
        return e(text)


def _hidden(fields: dict[str, str]) -> str:
    # Values a form sends back, not text shown: markup escaped, the characters themselves kept, so
    # what is confirmed or approved is what was typed or what waits, not its display.
    return "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v, quote=True)}">' for k, v in fields.items()
    )


Field = tuple[str, str, str]  # name, label, placeholder: a text input (choices: see _select)


def _form(
    action: str,
    confirm: str,
    fields: dict[str, str],
    inputs: list[Field],
    button: str,
    view: View,
    extra: str = "",
    within: str = "",
) -> str:
    # Ids from what the form does and the row it is in (one withdrawal can be offered on every
    # object an approval for * covers): the same board renders the same ids, so a swap by
    # board.js keeps focus where it was, and two forms never share one.
    scope = hashlib.sha256(repr((action, sorted(fields.items()), within)).encode()).hexdigest()[:12]
    body = "".join(
        f'<label for="{scope}-{name}">{e(text)}</label>'
        f'<input id="{scope}-{name}" name="{name}" type="text" placeholder="{e(hint)}" maxlength="1000">'
        for name, text, hint in inputs
    ) + extra.replace("{scope}", scope)
    return (
        f'<form class="action" method="post" action="{view.root}actions/{action}" data-confirm="{e(confirm)}">'
        + _hidden({"csrf": view.csrf, **fields})
        + body
        # The ellipsis: every action asks before it acts. An entity, so the page stays Latin-1
        # (a str of one byte a character) unless a value it shows is not.
        + f'<button type="submit" id="{scope}-go">{e(button)}&#x2026;</button></form>'
    )


def _select(name: str, text: str, choices: Iterable[tuple[str, str]]) -> str:
    """A choice inside a form: ``{scope}`` becomes the form's id prefix."""
    options = "".join(f'<option value="{e(v)}">{e(t)}</option>' for v, t in choices)
    return (
        f'<label for="{{scope}}-{name}">{e(text)}</label>'
        f'<select id="{{scope}}-{name}" name="{name}">{options}</select>'
    )


def _state(open_: bool) -> str:
    # A word and a symbol: the colour is a third signal, never the only one.
    return (
        '<span class="state open">&#x2713; open</span>'
        if open_
        else '<span class="state closed">&#x2715; closed</span>'
    )


def _gate_actions(row: GateRow, view: View) -> str:
    ns, name = row.state.namespace, row.state.name
    fields = {"namespace": ns, "gate": name}
    opener = _form(
        "open",
        f"Open gate {ns}/{name} now: what waits behind it lands at once",
        fields,
        [("message", "Why", "ticket, reason"), ("for", "Close again after", "e.g. 2h")],
        "Open",
        view,
    )
    closer = _form(
        "close",
        f"Close gate {ns}/{name} now: changes behind it wait",
        fields,
        [("message", "Why", "ticket, reason")],
        "Close",
        view,
    )
    return opener if not row.state.open else closer


def _gates(board: Board, view: View) -> str:
    head = ["Gate", "State", "Reason", "Message", "Requested", "Until", "Held", "Approvals"]
    if board.writable:
        head.append("Actions")
    rows = []
    for row in board.gates:
        s = row.state
        until = (
            timeline.time_tag(s.next_transition, board.zone)
            if s.next_transition
            else f"unknown after {timeline.time_tag(s.transition_unknown_after, board.zone)}"
            if s.transition_unknown_after
            else "-"
        )
        requested = (
            f"{e(s.requested_by or '?')}, {timeline.time_tag(s.requested_at, board.zone) if s.requested_at else '-'}"
            + (f": {e(s.request_message)}" if s.request_message else "")
            if s.requested_by or s.requested_at
            else "-"
        ) + (f"<br>toggled by {e(row.toggled_by)}" if row.toggled_by else "")
        approvals = (
            "".join(
                f"<li>{e(a['by'])}: {e(a['content'])} for {e(a['for'])}, until {_time(a['expires'], board)}</li>"
                for a in row.approvals
            )
            + "".join(
                f"<li>unverified (counts for nothing): {e(a['by'])}: {e(a['content'])}</li>"
                for a in row.unverified
            )
            + "".join(f"<li>{e(a.get('reason', 'ended'))}: {e(a.get('id'))}</li>" for a in row.ended)
        )
        problems = "".join(f"<li>{e(p)}</li>" for p in s.problems)
        cells = [
            f'<th scope="row" id="gate-{e(row.key)}">{e(row.key)}</th>',
            f"<td>{_state(s.open)}</td>",
            f"<td>{e(s.reason)}</td>",
            f"<td>{e(s.message)}" + (f'<ul class="problems">{problems}</ul>' if problems else "") + "</td>",
            f"<td>{requested}</td>",
            f"<td>{until}</td>",
            f"<td>{row.holding}</td>",
            f"<td><ul>{approvals}</ul></td>" if approvals else "<td>-</td>",
        ]
        if board.writable:
            cells.append(f"<td>{_gate_actions(row, view)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        return (
            '<section aria-labelledby="gates-h"><h2 id="gates-h">Gates</h2><p>No gates found.</p></section>'
        )
    return (
        '<section aria-labelledby="gates-h"><h2 id="gates-h">Gates</h2>'
        '<table class="gates"><caption>Every gate: its state now, why, and until when</caption><thead><tr>'
        + "".join(f'<th scope="col">{h}</th>' for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></section>"
    )


def _timeline(board: Board) -> str:
    q = board.query
    zoom = " ".join(
        f'<a href="{e(_href(q, days=d, **{"from": 0}))}"'
        + (' aria-current="true"' if d == q.days else "")
        + f">{d} day{'s' if d > 1 else ''}</a>"
        for d in DAY_CHOICES
    )
    if q.days == 1:
        zoom += " · " + " ".join(
            f'<a href="{e(_href(q, **{"from": d}))}"'
            + (' aria-current="true"' if d == q.offset else "")
            + f">+{d}</a>"
            for d in range(0, 14)
        )
    lines, table = [], []
    for drawn, rows, line in [
        *((*timeline.gate_line(row.key, row.timeline), row.timeline) for row in board.gates),
        *((*timeline.suspend_line(srow), srow.timeline) for srow in board.suspensions),
    ]:
        lines += [drawn, timeline.svg_end(line, board.now), "</div>"]
        table.append(rows)
    zone = "each gate's own zone" if q.tz == GATE_ZONE else e(getattr(board.zone, "key", None) or board.zone)
    # One join of every piece: the rows are most of a page of megabytes, and each ``+`` of them
    # would copy all of it again.
    return "".join(
        [
            '<section aria-labelledby="timeline-h"><h2 id="timeline-h">Timeline</h2>'
            f'<p class="legend">Times in {zone}. <span class="key closed">gate closed</span> '
            '<span class="key unknown">unknown</span> <span class="key open">open</span> '
            '<span class="key suspended">suspended (suspendDuring)</span> '
            f'<span class="key now">now</span> · zoom: {zoom}</p>',
            *lines,
            '<details id="timeline-table"><summary>The timeline as a table</summary><table class="spans"><caption>Open, closed and '
            'suspended spans</caption><thead><tr><th scope="col">Row</th><th scope="col">State</th>'
            '<th scope="col">From</th><th scope="col">To</th><th scope="col">Why</th></tr></thead><tbody>',
            *table,
            "</tbody></table></details></section>",
        ]
    )


def _approval_cell(row: dict[str, Any], board: Board) -> str:
    items = [
        f"<li>{e(a['by'])} at {_time(a.get('at'), board)}: {e(a['content'])} for {e(a['for'])}"
        f" (until {_time(a.get('expires'), board)})"
        + (f" &#x2014; {e(a['message'])}" if a.get("message") else "")
        + "</li>"
        for a in row["approvals"]
    ] + [
        f"<li>unverified (counts for nothing): {e(a['by'])}: {e(a['content'])}</li>"
        for a in row["unverifiedApprovals"]
    ]
    return f"<ul>{''.join(items)}</ul>" if items else "none"


def _held_actions(row: dict[str, Any], view: View) -> str:
    target = label(row["kind"], row["namespace"], row["name"])
    if row.get("content") is None:
        return "cannot be approved: what waits is not known whole; open the gate instead"
    forms = []
    for key in row["gates"]:
        ns, gate = key.split("/", 1)
        fields = {"namespace": ns, "gate": gate, "content": row["content"], "for": target}
        forms.append(
            _form(
                "approve",
                f"Approve {row['content']} for {target} behind gate {key}: it lands at once, nothing newer does",
                fields,
                [("message", "Why", "ticket, reason")],
                f"Approve for {key}",
                view,
                _select("expires", "Expires after", [(c, c or "the gate's default") for c in EXPIRY_CHOICES]),
            )
        )
        # A withdrawal removes every approval of that content for that object on the gate
        # (approve.withdraw), so it is one form per pair, naming everyone whose approval goes.
        approvers: dict[tuple[str, str], list[str]] = {}
        for a in row["approvals"] + row["unverifiedApprovals"]:
            if a.get("gate") == key:
                by = approvers.setdefault((str(a["content"]), str(a["for"])), [])
                by += [] if str(a["by"]) in by else [str(a["by"])]
        for (approved, for_), by in approvers.items():
            forms.append(
                _form(
                    "withdraw",
                    f"Withdraw every approval of {approved} for {for_} on gate {key} (by {', '.join(by)})",
                    {"namespace": ns, "gate": gate, "content": approved, "for": for_},
                    [],
                    f"Withdraw the approval{'s' if len(by) > 1 else ''} of {', '.join(by)}",
                    view,
                    within=target,
                )
            )
    return "".join(forms)


def _held(board: Board, view: View) -> str:
    if not board.held:
        text = (
            "Nothing waits."
            if board.reads_objects
            else "No Flux objects are read here: what waits behind a gate is not known."
        )
        return f'<section aria-labelledby="held-h"><h2 id="held-h">Held</h2><p>{text}</p></section>'
    head = ["Object", "Waits", "Serves", "Since", "Gates", "Approvals", "Warnings"]
    if board.writable:
        head.append("Actions")
    rows = []
    for row in board.held:
        target = label(row["kind"], row["namespace"], row["name"])
        warnings = "".join(f"<li>&#x26a0; {e(w)}</li>" for w in row["warnings"])
        cells = [
            f'<th scope="row">{e(target)}</th>',
            f'<td class="content">{e(row["waits"])}</td>',
            f'<td class="content">{e(row["serves"] or "-")}</td>',
            f"<td>{_time(row['since'], board)}</td>",
            "<td>" + ", ".join(e(g) for g in row["gates"]) + "</td>",
            f"<td>{_approval_cell(row, board)}</td>",
            f"<td><ul>{warnings}</ul></td>" if warnings else "<td>-</td>",
        ]
        if board.writable:
            cells.append(f"<td>{_held_actions(row, view)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(
        [
            '<section aria-labelledby="held-h"><h2 id="held-h">Held</h2>'
            '<table class="held"><caption>New content that waits behind closed gates, and what is served meanwhile'
            "</caption><thead><tr>",
            *(f'<th scope="col">{h}</th>' for h in head),
            "</tr></thead><tbody>",
            *rows,
            "</tbody></table></section>",
        ]
    )


def _fragment(board: Board, view: View) -> list[str]:
    problems = "".join(f"<li>{e(p)}</li>" for p in board.problems)
    return [
        f'<div class="problems" role="alert"><ul>{problems}</ul></div>' if problems else "",
        # To the minute, as it reads: the page polls every second, and a fragment that changed
        # with each second would be sent and swapped in every time (its ETag never matching).
        f'<p class="asof">As of {timeline.time_tag(board.now.replace(second=0, microsecond=0), board.zone)}.</p>',
        _gates(board, view),
        _held(board, view),
        _timeline(board),
    ]


def etag_of(pieces: Iterable[str]) -> str:
    """The ETag of a fragment made of ``pieces``: the page carries its own, so the first poll
    of a page that has not changed is answered 304, and swaps nothing."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece.encode())
    return digest.hexdigest()[:32]


def fragment(board: Board, view: View) -> str:
    """What changes from one look to the next: the part ``board.js`` swaps in."""
    return "".join(_fragment(board, view))


def _head(title: str, view: View) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title>"
        f'<link rel="stylesheet" href="{view.root}static/board.css" integrity="{_INTEGRITY["board.css"]}">'
        f'<script src="{view.root}static/board.js" integrity="{_INTEGRITY["board.js"]}" defer></script>'
        "</head>"
    )


def _filters(board: Board, view: View) -> str:
    q = board.query
    options = '<option value="">all namespaces</option>' + "".join(
        f'<option value="{e(ns)}"' + (" selected" if ns == q.namespace else "") + f">{e(ns)}</option>"
        for ns in board.namespaces
    )
    days = "".join(
        f'<option value="{d}"' + (" selected" if d == q.days else "") + f">{d}</option>" for d in DAY_CHOICES
    )
    return (
        f'<form class="filters" method="get" action="{view.home}" role="search">'
        f'<label for="ns">Namespace</label><select id="ns" name="namespace">{options}</select>'
        f'<label for="q">Search</label><input id="q" name="q" type="search" value="{e(q.search)}">'
        f'<label for="days">Days</label><select id="days" name="days">{days}</select>'
        f'<label for="tz">Time zone</label><input id="tz" name="tz" value="{e(q.tz)}" '
        'placeholder="yours; or gate, or Europe/Berlin" list="zones">'
        f'<datalist id="zones"><option value="{GATE_ZONE}"><option value="UTC"></datalist>'
        '<button type="submit">Show</button></form>'
    )


def page(board: Board, view: View) -> str:
    """The whole page."""
    mode = "" if board.writable else '<p class="readonly">Read-only: no actions here.</p>'
    pieces = _fragment(board, view)
    return "".join(
        [
            _head("Gate board", view),
            "<body><header><h1>Gate board</h1>",
            f'<p class="where">{e(board.where)}</p>{mode}',
            _filters(board, view),
            "</header>",
            timeline.PATTERNS,
            '<div id="status" role="status" aria-live="polite"></div>',
            f'<main id="board" data-fragment="{view.root}fragment{e(_href(board.query))}" '
            f'data-etag="{etag_of(pieces)}">',
            # Its pieces, not the fragment joined: a page is megabytes, and each join copies it.
            *pieces,
            "</main>",
            '<dialog id="confirm" aria-labelledby="confirm-text"><form method="dialog">'
            '<p id="confirm-text"></p><button value="confirm" id="confirm-yes">Confirm</button> '
            '<button value="cancel" id="confirm-no">Cancel</button></form></dialog>',
            "</body></html>",
        ]
    )


def confirm_page(action: str, what: str, fields: dict[str, str], view: View) -> str:
    """Without JavaScript, an action's first POST: what it will do, and a Confirm button."""
    return (
        _head("Confirm: gate board", view)
        + "<body><main><h1>Confirm</h1>"
        + f'<p id="confirm-what">{e(what)}</p>'
        + f'<form method="post" action="{view.root}actions/{e(action)}">'
        + _hidden({**fields, "csrf": view.csrf, "confirmed": "yes"})
        + '<button type="submit">Confirm</button></form>'
        + f'<p><a href="{view.home}">Cancel, back to the board</a></p></main></body></html>'
    )


def result_page(ok: bool, lines: list[str], view: View) -> str:
    """Without JavaScript, what an action did, or the refusal as the API server worded it."""
    title = "Done" if ok else "Refused"
    return (
        _head(f"{title}: gate board", view)
        + f"<body><main><h1>{title}</h1><ul>"
        + "".join(f"<li>{e(line)}</li>" for line in lines)
        + f'</ul><p><a href="{view.home}">Back to the board</a></p></main></body></html>'
    )
