"""The walk of one admission request through our modules: which it enters, in order, and how often it comes back.

Usage: python bench/walk.py [--show]
Traces (sys.settrace) the validate and mutate handlers over two representative requests, a
status write of a held GitRepository carrying a new artifact and a spec edit of a held
Kustomization, and prints per walk: stays (runs in one module), returns to a module already left,
and climbs from admission.core back up to admission.webhook. ``--show`` prints each walk.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import FrameType
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from admission.core.decision import Context, Settings  # noqa: E402
from admission.webhook import handlers  # noqa: E402
from tests.builders import ALICE, FLUX_USER, flux, gate, lookup_from, request  # noqa: E402
from tests.conftest import FIXED_NOW  # noqa: E402

HELD = "flux-system/change-freeze"
LOOKUP = lookup_from([gate("change-freeze", default="closed")])
ENFORCE, AUDIT = Context(LOOKUP, FIXED_NOW, Settings()), Context(LOOKUP, FIXED_NOW, Settings(mode="audit"))


def _artifact(revision: str) -> dict:
    return {"revision": revision, "digest": "sha256:" + revision[-1] * 8, "url": "http://s/a.tar.gz"}


def requests() -> list[tuple[str, dict, Context]]:
    """The representative requests (as in tests/unit/test_holdpoints.py and tests/unit/test_decision.py),
    the spec edit also in audit mode, where the mutating webhook records the would-be hold."""
    old_src = flux("GitRepository", name="flux-system", namespace="flux-system", gates=HELD,
                   status={"artifact": _artifact("main@sha1:a")})
    new_src = flux("GitRepository", name="flux-system", namespace="flux-system", gates=HELD,
                   status={"artifact": _artifact("main@sha1:b")})
    old_ks = flux(gates=HELD, spec={"interval": "10m", "path": "./deploy"})
    new_ks = flux(gates=HELD, spec={"interval": "10m", "path": "./other"})
    status_write = request("UPDATE", new_src, old_src, sub_resource="status", user=FLUX_USER)
    spec_edit = request("UPDATE", new_ks, old_ks, user=ALICE)
    return [("held GitRepository status write", status_write, ENFORCE),
            ("held Kustomization spec edit", spec_edit, ENFORCE),
            ("held Kustomization spec edit, audit mode", spec_edit, AUDIT)]


def _ours(frame: FrameType | None) -> str | None:
    """The innermost of our modules on the stack (a call into the standard library stays where it was made)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("admission."):
            return name
        frame = frame.f_back
    return None


def walk(handler: Callable[..., Any], req: dict, context: Context) -> list[str]:
    """The modules the handler's call passes through, one entry per stay."""
    stays: list[str] = []

    def note(module: str | None) -> None:
        if module is not None and (not stays or stays[-1] != module):
            stays.append(module)

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call":
            note(_ours(frame))
        elif event == "return":
            note(_ours(frame.f_back))
        return trace

    sys.settrace(trace)
    try:
        handler(req, context)
    finally:
        sys.settrace(None)
    return stays


def summary(stays: list[str]) -> str:
    left: set[str] = set()
    returns = climbs = 0
    for before, after in zip(stays, stays[1:]):
        left.add(before)
        returns += after in left
        climbs += before.startswith("admission.core.") and after.startswith("admission.webhook.")
    return f"{len(stays)} stays, {returns} returns to a module already left, {climbs} climbs core->webhook"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print each walk, one module per stay")
    args = parser.parse_args()
    for label, req, context in requests():
        handlers.validate(req, context), handlers.mutate(req, context)  # warm: lazy imports, caches
        for name, handler in (("validate", handlers.validate), ("mutate", handlers.mutate)):
            stays = walk(handler, req, context)
            print(f"{name:8} {label}: {summary(stays)}")
            if args.show:
                print("    " + " > ".join(s.removeprefix("admission.") for s in stays))


if __name__ == "__main__":
    main()
