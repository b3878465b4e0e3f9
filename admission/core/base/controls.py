"""Control characters: refused where a gate's message is written, escaped wherever text is printed."""

from __future__ import annotations

import re

# C0 and C1 controls and DEL (a terminal acts on ESC, CSI and OSC sequences; a carriage return or
# a line break lets text repaint or forge a line), and the Unicode marks that reorder or break a
# line on screen (bidirectional overrides, isolates and marks; line and paragraph separators).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a character ``escaped`` would escape."""
    return _CONTROLS.search(text) is not None


def escaped(text: str) -> str:
    """``text`` with each control character written ``\\uXXXX``: shown, not acted on, and a valid
    escape inside a JSON string too (so printed JSON still reads back as the same data)."""
    return _CONTROLS.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
