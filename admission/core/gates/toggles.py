"""Opening and closing a gate: the annotations the CLI and the receiver write."""

from __future__ import annotations

from datetime import datetime, timedelta

from admission.core.base import names
from admission.core.base.controls import has_controls
from admission.core.base.timefmt import LATEST, bounded, format_distinct_time, parse_duration

ACTIONS = ("open", "close")


def refuse_controls(**fields: str | None) -> None:
    """Raise ValueError naming the first of ``fields`` that holds control characters."""
    # Whoever reads the gate later (kubectl gate get, Events, logs) sees the text as written.
    for name, value in fields.items():
        if value and has_controls(value):
            raise ValueError(
                f"{name} must not hold control characters (escape sequences, line breaks, "
                "direction marks): they would act on the terminal that shows it"
            )


def toggle_patch(
    action: str,
    now: datetime,
    message: str | None = None,
    requested_by: str | None = None,
    duration: str | None = None,
) -> dict[str, dict[str, dict[str, str | None]]]:
    """A merge patch for a Gate's annotations that opens or closes it at ``now``.

    ``duration`` (open only) also plans the close: a close toggle dated ``now + duration``,
    which takes effect when it comes. Raises ValueError for a bad action or duration, or a
    message or requester with control characters.
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be open or close, not {action!r}")
    refuse_controls(message=message, requestedBy=requested_by)
    annotations: dict[str, str | None] = {
        names.OPEN_ANNOTATION if action == "open" else names.CLOSE_ANNOTATION: format_distinct_time(now),
        names.MESSAGE_ANNOTATION: message or None,
        names.REQUESTED_BY_ANNOTATION: requested_by or None,
        # Who did is our webhook's to stamp: an older stamp must not stay beside a new toggle.
        names.TOGGLED_BY_ANNOTATION: None,
    }
    if duration:
        if action != "open":
            raise ValueError("a duration only makes sense when opening")
        length = parse_duration(duration)
        if length <= timedelta(0):
            raise ValueError(f"duration {duration!r} must be positive")
        try:  # a close past the horizon would be ignored when read: the gate would stay open
            until = bounded(now + length)
        except (OverflowError, ValueError):
            raise ValueError(
                f"duration {duration!r} ends too late: the close must come before {LATEST.year}"
            ) from None
        annotations[names.CLOSE_ANNOTATION] = format_distinct_time(until)
    return {"metadata": {"annotations": annotations}}
