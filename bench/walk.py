"""The walk of one admission request through our modules: which it enters, in order, and how often it comes back.

Usage: python bench/walk.py [--show]
Traces (sys.settrace) the validate and mutate handlers over two representative requests, a
status write of a held GitRepository carrying a new artifact and a spec edit of a held
Kustomization, and prints per walk: stays (runs in one module), returns to a module already left,
and climbs from admission.core back up to admission.webhook; then the same with plumbing folded
(a call into the accessor modules, or one that calls no other module of ours but those, is no stay). ``--show`` prints each folded walk;
``--calls NAME,...`` counts the calls of our functions of those names (say, ``suspension_of``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from admission.core.admission.decision import Context, Settings  # noqa: E402
from admission.core.base import names  # noqa: E402
from admission.store.index import GateIndex  # noqa: E402
from admission.webhook import handlers  # noqa: E402
from tests.builders import ALICE, FLUX_USER, flux, gate, request  # noqa: E402
from tests.conftest import FIXED_NOW  # noqa: E402

HELD = "flux-system/change-freeze"


def _store() -> GateIndex:
    """The gate as the server's store holds it: compiled once, its state memoised."""
    index = GateIndex()
    index.put_gate(gate("change-freeze", default="closed"))
    return index


LOOKUP = _store().lookup
ENFORCE, AUDIT = (
    Context(LOOKUP, FIXED_NOW, Settings()),
    Context(LOOKUP, FIXED_NOW, Settings(mode=names.AUDIT)),
)


def _artifact(revision: str) -> dict:
    return {"revision": revision, "digest": "sha256:" + revision[-1] * 8, "url": "http://s/a.tar.gz"}


def _source(revision: str) -> dict:
    return flux(
        "GitRepository",
        name="flux-system",
        namespace="flux-system",
        gates=HELD,
        status={"artifact": _artifact(revision)},
    )


def requests() -> list[tuple[str, dict, Context]]:
    """The representative requests (as in tests/unit/test_holdpoints.py and tests/unit/test_decision.py),
    the spec edit also in audit mode, where the mutating webhook records the would-be hold."""
    old_src, new_src = _source("main@sha1:a"), _source("main@sha1:b")
    old_ks = flux(gates=HELD, spec={"interval": "10m", "path": "./deploy"})
    new_ks = flux(gates=HELD, spec={"interval": "10m", "path": "./other"})
    status_write = request("UPDATE", new_src, old_src, sub_resource="status", user=FLUX_USER)
    spec_edit = request("UPDATE", new_ks, old_ks, user=ALICE)
    return [
        ("held GitRepository status write", status_write, ENFORCE),
        ("held Kustomization spec edit", spec_edit, ENFORCE),
        ("held Kustomization spec edit, audit mode", spec_edit, AUDIT),
    ]


def _ours(frame: FrameType | None) -> str | None:
    """The innermost of our modules on the stack (a call into the standard library stays where it was made)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("admission."):
            return name
        frame = frame.f_back
    return None


# Where every module reads a field or builds a string: folded, a walk shows the design's moves.
# The request's value (core.admission.admitted) is one: its properties are the request's fields,
# some read on first use (as core.base.lazy read them before the value kept them itself).
ACCESSORS = {f"admission.core.base.{m}" for m in ("objects", "lazy", "jsonvalues", "timefmt", "controls")} | {
    "admission.core.admission.admitted"
}


class Visit:
    """One call into one of our modules from another, and the visits it makes in turn."""

    def __init__(self, module: str):
        self.module, self.visits = module, []  # type: str, list[Visit]

    def plumbing(self) -> bool:
        """A call into the accessor modules, or one that calls no other module of ours but those."""
        return self.module in ACCESSORS or all(v.module in ACCESSORS for v in self.visits)

    def stays(self, fold: bool) -> list[str]:
        """This visit's walk: its module, each visit's walk, and its module again after each.
        ``fold``: plumbing (an accessor, a Lazy, a helper that calls only those) is no stay."""
        walked = [self.module]
        for visit in self.visits:
            if fold and visit.plumbing():
                continue
            walked += visit.stays(fold) + [self.module]
        return walked


def walk(handler: Callable[..., Any], req: dict, context: Context, calls: dict[str, int]) -> Visit:
    """The visits the handler's call makes through our modules; ``calls`` counts the named functions' calls."""
    root = Visit(handler.__module__)
    stack: list[tuple[FrameType, Visit]] = []  # frames that entered a module, innermost last

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        module = frame.f_globals.get("__name__", "")
        if event == "call":
            if frame.f_code.co_name in calls and module.startswith("admission."):
                calls[frame.f_code.co_name] += 1
            here = stack[-1][1] if stack else root
            if module.startswith("admission.") and module != here.module:
                visit = Visit(module)
                here.visits.append(visit)
                stack.append((frame, visit))
        elif event == "return" and stack and stack[-1][0] is frame:
            stack.pop()
        return trace

    sys.settrace(trace)
    try:
        handler(req, context)
    finally:
        sys.settrace(None)
    return root


def _merged(stays: list[str]) -> list[str]:
    """One stay per run of the same module (a visit's walk ends where the next begins)."""
    return [m for i, m in enumerate(stays) if i == 0 or stays[i - 1] != m]


def summary(stays: list[str]) -> str:
    left: set[str] = set()
    returns = climbs = 0
    for before, after in itertools.pairwise(stays):
        left.add(before)
        returns += after in left
        climbs += before.startswith("admission.core.") and after.startswith("admission.webhook.")
    return f"{len(stays)} stays, {returns} returns to a module already left, {climbs} climbs core->webhook"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print each walk, one module per stay")
    parser.add_argument(
        "--calls", default="", help="count the calls of our functions of these names (comma-separated)"
    )
    args = parser.parse_args()
    for label, req, context in requests():
        handlers.validate(req, context), handlers.mutate(req, context)  # warm: lazy imports, caches
        for name, handler in (("validate", handlers.validate), ("mutate", handlers.mutate)):
            calls = dict.fromkeys(filter(None, args.calls.split(",")), 0)
            root = walk(handler, req, context, calls)
            stays, folded = _merged(root.stays(fold=False)), _merged(root.stays(fold=True))
            counted = "".join(f", {n}() {c}x" for n, c in calls.items())
            print(f"{name:8} {label}: {summary(stays)}; plumbing folded: {summary(folded)}{counted}")
            if args.show:
                print("    " + " > ".join(s.removeprefix("admission.") for s in folded))


if __name__ == "__main__":
    main()
