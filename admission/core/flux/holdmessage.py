"""The hold message: what waits behind closed gates and what is served meanwhile, written and read only here.

``kubectl gate``, the notifications and the Events read back what the webhook wrote in a held
object's conditions, so the words are a wire format: ``NewContent.text`` is its one writer and
``parse`` its one reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from admission.core.base import names

_SEPARATOR = " waits, serving "
# Each condition's sentence: its opening words, and what ends the reasons before what waits.
_FORMS = {
    names.BLOCKED_CONDITION: ("Reconciliation is blocked as ", ": "),
    names.APPROVED_CONDITION: ("Reconciliation is waiting approval, ", ". "),
}
_GATE = re.compile(r"gate '([^']+)' is closed")
# What waits is the shortest run before the separator that crosses no ": " or ". " (a revision
# such as "main@sha1:9f2c" or "6.5.0 (values sha256:v2)" has neither).
_TAIL = re.compile(
    rf"^(?P<why>.*)[:.] (?P<waits>(?:(?![:.] ).)+?){re.escape(_SEPARATOR)}(?P<serves>.*)$", re.S
)


def gate_clause(key: str) -> str:
    """Why a closed gate holds an object, in the words every message uses."""
    return f"gate '{key}' is closed"


class NewContent(NamedTuple):
    """New content a closed gate holds back (``waits``), and what is served or applied meanwhile (``serves``)."""

    waits: str
    serves: str

    def text(self) -> str:
        return f"{self.waits}{_SEPARATOR}{self.serves}"

    def after(self, message: str) -> str:
        """``message`` followed by what waits: a held object's Ready, a decision's message."""
        return f"{message}; {self.text()}"

    def as_change(self) -> str:
        """The change a decision names when a status write carries new content."""
        return f"new content: {self.text()}"


@dataclass(frozen=True)
class HoldMessage:
    """Our Blocked (sources, ImagePolicy) or Approved (Kustomization, HelmRelease) condition's
    message: why the object is held and what waits."""

    condition: str  # names.BLOCKED_CONDITION or names.APPROVED_CONDITION
    why: str  # the clauses, joined: "gate 'ns/a' is closed, <a suspension's reason>"
    content: NewContent

    @classmethod
    def of(cls, condition: str, clauses: tuple[str, ...], content: NewContent) -> HoldMessage:
        return cls(condition, ", ".join(clauses), content)

    @property
    def gates(self) -> tuple[str, ...]:
        """The closed gates it names ("ns/name")."""
        return tuple(_GATE.findall(self.why))

    def format(self) -> str:
        opening, end = _FORMS[self.condition]
        return f"{opening}{self.why}{end}{self.content.text()}"


def parse(message: object) -> HoldMessage | None:
    """The hold a message made by ``HoldMessage.format`` says; None for any other text."""
    if not isinstance(message, str):
        return None
    for condition, (opening, _) in _FORMS.items():
        if message.startswith(opening):
            match = _TAIL.match(message)
            if match is None:
                return None
            return HoldMessage(
                condition, match["why"][len(opening) :], NewContent(match["waits"], match["serves"])
            )
    return None
