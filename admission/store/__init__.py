"""Where gates come from: the GateStore protocol, the in-memory index, and YAML files.

The cluster's list+watch store lives with the Kubernetes code (admission.kube.reflector).
May import core, observability, pki and clock; never webhook, kube or cli.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from admission.core.gates import GateState


class GateStore(Protocol):
    """What the HTTP layer needs of a store: gate states from memory, and readiness."""

    def lookup(self, namespace: str, name: str, now: datetime) -> GateState:
        """The state of a gate at ``now``, never touching the network."""

    def readiness(self) -> tuple[bool, dict]:
        """Whether decisions can be trusted, with details for /readyz."""

    def cache_age(self, now_monotonic: float) -> float:
        """Seconds since the store last confirmed its gates are current."""

    def start(self) -> None:
        """Begin keeping the gates current (threads, watches)."""

    def stop(self) -> None:
        """Stop what ``start`` began."""
