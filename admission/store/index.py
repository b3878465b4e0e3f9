"""Gates and GateKeepers in memory, each gate's state memoised until it can next change."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from admission.core.base.objects import Key, object_key
from admission.core.gates.gates import GateState, evaluate, invalid, not_found, unknown
from admission.core.gates.gatespec import CompiledGate, compile_gate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unknowns:
    """Gates whose state cannot be known, and why: every gate, the gates of a namespace, or
    single gates (a gates file that may define or schedule them was never read whole). They are
    closed, reason Unknown, whether they are defined elsewhere or not found at all."""

    everything: str | None = None
    namespaces: Mapping[str, str] = field(default_factory=dict)
    gates: Mapping[Key, str] = field(default_factory=dict)

    def why(self, key: Key) -> str | None:
        return self.gates.get(key) or self.namespaces.get(key[0]) or self.everything

    def __bool__(self) -> bool:
        return bool(self.everything or self.namespaces or self.gates)


NOTHING_UNKNOWN = Unknowns()


class _Slot:
    """One gate, compiled; readers memoise its latest state here.

    Writers never change a slot's gate: they publish a new slot, so a reader that
    finishes with an old slot only writes into a slot nobody looks at any more.
    """

    __slots__ = ("compiled", "state", "computed_at")

    def __init__(self, compiled: CompiledGate):
        self.compiled = compiled
        self.state: GateState | None = None
        self.computed_at: datetime | None = None


class GateIndex:
    """Thread-safe for one writer and many readers; readers take no lock."""

    def __init__(self, approval_key: bytes | None = None) -> None:
        # The webhook's approval key (admission.core.gates.approvalseal): without it no approval counts.
        self._approval_key = approval_key
        self._lock = threading.Lock()
        self._gates: dict[Key, dict[str, Any]] = {}
        self._keepers: dict[Key, dict[str, Any]] = {}
        self._broken: dict[Key, str] = {}
        self._unknowns = NOTHING_UNKNOWN
        self._slots: dict[Key, _Slot] = {}
        self.version = 0  # moves on every change: what was built from a snapshot is current while it stays

    def __len__(self) -> int:
        return len(self._gates)

    def lookup(self, namespace: str, name: str, now: datetime) -> GateState:
        """The state of gate ``namespace/name`` at ``now``."""
        slot = self._slots.get((namespace, name))
        if slot is None:
            why = self._unknowns.why((namespace, name)) if self._unknowns else None
            return not_found(namespace, name) if why is None else unknown(namespace, name, why)
        state, since = slot.state, slot.computed_at
        # computed_at is set right after state: a reader in between computes the state again.
        if (
            state is not None
            and since is not None
            and since <= now
            and (state.valid_until is None or now < state.valid_until)
        ):
            return state
        try:
            state = evaluate(slot.compiled, now)
        except Exception as err:  # a bug: this gate is closed and says so, every other is answered
            log.exception("evaluating a gate failed", extra={"gate": f"{namespace}/{name}"})
            return invalid(namespace, name, f"cannot be evaluated ({type(err).__name__})")
        slot.state, slot.computed_at = state, now
        return state

    def states(self, now: datetime) -> list[GateState]:
        """Every gate's state at ``now``, for metrics and listings."""
        return [self.lookup(namespace, name, now) for namespace, name in list(self._slots)]

    def gates(self) -> list[dict[str, Any]]:
        """Every gate object, for status and listings."""
        return list(self._gates.values())

    def keepers(self) -> list[dict[str, Any]]:
        """Every GateKeeper object (the controller fetches their calendars)."""
        return list(self._keepers.values())

    def snapshot(
        self, namespace: str | None = None
    ) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, str, str]], list[tuple[str, str, str]]
    ]:
        """The gates, keepers, broken gates and gates of unknown state (of ``namespace`` only,
        when given) as plain data, from which ``replace_all`` rebuilds an index that answers the
        same for every gate it holds elsewhere (the calendar's builder)."""
        with self._lock:  # writers change these dicts in place
            gates, keepers, broken = dict(self._gates), dict(self._keepers), dict(self._broken)
            unknowns = self._unknowns
        wanted = (lambda key: key[0] == namespace) if namespace else (lambda key: True)
        return (
            [g for key, g in gates.items() if wanted(key)],
            [k for key, k in keepers.items() if wanted(key)],
            [(ns, name, why) for (ns, name), why in broken.items() if wanted((ns, name))],
            [
                (ns, name, why)
                for ns, name in gates
                if wanted((ns, name))
                if (why := unknowns.why((ns, name))) is not None
            ],
        )

    def compiled(self, namespace: str, name: str) -> CompiledGate | None:
        slot = self._slots.get((namespace, name))
        return slot.compiled if slot else None

    def _keepers_of(self, key: Key) -> list[dict[str, Any]]:
        namespace, name = key
        return [
            k
            for (ns, _), k in self._keepers.items()
            if ns == namespace and isinstance(k.get("spec"), dict) and k["spec"].get("gate") == name
        ]

    def _publish(self, key: Key) -> None:
        self.version += 1
        gate = self._gates.get(key)
        if gate is None:
            self._slots.pop(key, None)
            return
        self._slots[key] = _Slot(
            self._compile(key, gate, self._keepers_of(key), self._broken, self._unknowns, self._approval_key)
        )

    @staticmethod
    def _compile(
        key: Key,
        gate: dict[str, Any],
        keepers: Iterable[dict[str, Any]],
        broken: dict[Key, str],
        unknowns: Unknowns,
        approval_key: bytes | None = None,
    ) -> CompiledGate:
        if key in broken:
            return CompiledGate(key[0], key[1], errors=(broken[key],))
        why = unknowns.why(key) if unknowns else None
        if why is not None:
            return CompiledGate(key[0], key[1], unknown=why)
        try:
            return compile_gate(gate, keepers, approval_key)
        except Exception as err:  # a bug: this gate is closed and says so, the others are read
            log.exception("compiling a gate failed", extra={"gate": f"{key[0]}/{key[1]}"})
            return CompiledGate(key[0], key[1], errors=(f"cannot be evaluated ({type(err).__name__})",))

    def put_gate(self, gate: dict[str, Any]) -> None:
        with self._lock:
            key = object_key(gate)
            self._gates[key] = gate
            self._publish(key)

    def delete_gate(self, namespace: str, name: str) -> None:
        with self._lock:
            self._gates.pop((namespace, name), None)
            self._publish((namespace, name))

    def _gate_of(self, keeper: dict[str, Any] | None) -> Key | None:
        if keeper is None or not isinstance(keeper.get("spec"), dict):
            return None
        return object_key(keeper)[0], str(keeper["spec"].get("gate") or "")

    def put_keeper(self, keeper: dict[str, Any]) -> None:
        with self._lock:
            key = object_key(keeper)
            before = self._gate_of(self._keepers.get(key))
            self._keepers[key] = keeper
            for gate_key in {key for key in (before, self._gate_of(keeper)) if key is not None}:
                self._publish(gate_key)

    def delete_keeper(self, namespace: str, name: str) -> None:
        with self._lock:
            before = self._gate_of(self._keepers.pop((namespace, name), None))
            if before is not None:
                self._publish(before)

    def replace_all(
        self,
        gates: Iterable[dict[str, Any]] | None,
        keepers: Iterable[dict[str, Any]] | None,
        broken: dict[Key, str] | None = None,
        unknowns: Unknowns | None = None,
    ) -> None:
        """Swap in a complete new set of gates, of keepers, or both (None keeps the current
        set): a relist, or a reload of the gates directory. ``broken`` gates are Invalid and
        ``unknowns`` Unknown (both closed), whatever their definitions say."""
        unknowns = unknowns or NOTHING_UNKNOWN
        with self._lock:
            gate_map = self._gates if gates is None else {object_key(g): g for g in gates}
            keeper_map = self._keepers if keepers is None else {object_key(k): k for k in keepers}
            broken = dict(broken or {})
            by_gate: dict[Key, list[dict[str, Any]]] = {}
            for keeper in keeper_map.values():
                gate_key = self._gate_of(keeper)
                if gate_key is not None:
                    by_gate.setdefault(gate_key, []).append(keeper)
            slots = {
                key: _Slot(
                    self._compile(key, gate, by_gate.get(key, ()), broken, unknowns, self._approval_key)
                )
                for key, gate in gate_map.items()
            }
            # Lookups read _slots, then (for a gate not found) _unknowns: set in this order, a
            # lookup between the two sees the old unknowns, closed either way.
            self._gates, self._keepers, self._broken, self._slots = gate_map, keeper_map, broken, slots
            self._unknowns = unknowns
            self.version += 1
