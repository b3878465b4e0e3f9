"""Where gates come from: the GateStore protocol, the in-memory index, and YAML files.

The cluster's list+watch store lives with the Kubernetes code (admission.kube.reflector).
May import core, observability, pki and clock; never webhook, kube or cli.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from admission.core.base.objects import object_key
from admission.core.gates.gates import GateState
from admission.store.index import GateIndex


class GateStore(Protocol):
    """What the HTTP layer needs of a store: gate states from memory, and readiness."""

    def lookup(self, namespace: str, name: str, now: datetime) -> GateState:
        """The state of a gate at ``now``, never touching the network."""

    @property
    def index(self) -> GateIndex:
        """The gates and GateKeepers held: listings, metrics, and the calendar's builder."""

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether decisions can be trusted, with details for /readyz."""

    def cache_age(self, now_monotonic: float) -> float:
        """Seconds since the store last confirmed its gates are current."""

    def start(self) -> None:
        """Begin keeping the gates current (threads, watches)."""

    def stop(self) -> None:
        """Stop what ``start`` began."""


class Sources(Protocol):
    """The Flux objects the webhook looks up (``admission.core.flux.kinds.CACHED_KINDS``), read-only:
    what each source serves, and HelmReleases (whose gates their generated HelmCharts inherit).
    In a cluster a watch cache (admission.kube.fluxcache.FluxCache); never an API call per review."""

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object, or None when it is not known."""

    def untrusted(self) -> str | None:
        """Why the objects may be out of date (not synced, watch down), or None."""


class StaticSources:
    """Sources from a fixed set of objects: tests, and none at all with ``--gates-dir``."""

    def __init__(self, objects: Iterable[dict[str, Any]] = ()):
        self._objects: dict[tuple[object, str, str], dict[str, Any]] = {}
        for obj in objects:
            self._objects[(obj.get("kind"), *object_key(obj))] = obj

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((kind, namespace, name))

    def untrusted(self) -> str | None:
        return None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
