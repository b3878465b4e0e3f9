#!/usr/bin/env python3
"""The Flux x Kubernetes matrix's results (docs/compatibility.json) and the page made from them
(docs/compatibility.md), for hack/matrix.sh.

  compatibility.py record RESULTS CELL [--junit FILE] [--versions FILE] [--reason TEXT] ...
      store one cell's outcome: the counts from pytest's JUnit XML, or why it was not run
  compatibility.py render RESULTS CELLS_FILE      print the page (CELLS_FILE: matrix.sh --cells)

A cell is "FLUX|K8S_VERSION|ENV|NOTE" (hack/matrix.sh's CELLS); its
id is "FLUX on K8S_VERSION". The page lists every cell of matrix.sh, run or not, so the two
cannot drift (tests/unit/test_compatibility.py holds the page to both)."""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

CONTROLLERS = (
    "source-controller",
    "kustomize-controller",
    "helm-controller",
    "notification-controller",
    "image-reflector-controller",
    "image-automation-controller",
)


class Cell(NamedTuple):
    flux: str
    kubernetes: str
    env: str  # hack/go-binaries.sh's variables, as VAR=value words
    note: str

    @property
    def id(self) -> str:
        return f"{self.flux} on {self.kubernetes}"

    def asked(self) -> str:
        env = dict(word.split("=", 1) for word in self.env.split())
        controllers = env.get("FLUX_CONTROLLERS", "").replace("=", " ").replace(",", ", ")
        return f"`flux` CLI {env.get('FLUX_VERSION', '?')}, " + (
            controllers or "its release's own controllers"
        )


def cells(text: str) -> list[Cell]:
    return [Cell(*line.split("|", 3)) for line in text.splitlines() if line.strip()]


def load(results: Path) -> dict[str, Any]:
    return json.loads(results.read_text()) if results.exists() else {"cells": {}}


def junit_counts(path: Path) -> dict[str, Any]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    bad = counts["failures"] + counts["errors"]
    return {
        "passed": counts["tests"] - bad - counts["skipped"],
        "failed": bad,
        "skipped": counts["skipped"],
        "failed_tests": failed,
    }


def record(args: argparse.Namespace) -> int:
    data = load(args.results)
    entry: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "kubernetes": args.kubernetes,
        "etcd": args.etcd,
        "versions": {},
    }
    if args.versions and args.versions.exists():
        entry["versions"] = dict(
            line.split() for line in args.versions.read_text().splitlines() if line.strip()
        )
    if args.junit and args.junit.exists():
        entry.update(junit_counts(args.junit), status="ran", duration_s=args.duration)
        entry["status"] = "passed" if entry["failed"] == 0 and entry["passed"] > 0 else "failed"
    else:
        entry.update(status="not run", reason=args.reason or "the tests did not run")
    data["cells"][args.cell] = entry
    args.results.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 0


def minutes(seconds: float) -> str:
    return f"{round(seconds / 60)} min"


def summary(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "not run yet"
    if entry["status"] == "not run":
        return f"not run ({entry['date']})"
    total = entry["passed"] + entry["failed"]
    word = "passed" if entry["status"] == "passed" else f"**{entry['failed']} failed**"
    return f"{word}, {entry['passed']}/{total} ({entry['date']})"


def versions_line(cell: Cell, entry: dict[str, Any] | None) -> str:
    have = (entry or {}).get("versions") or {}
    if have:
        parts = [f"{name} {have[name]}" for name in CONTROLLERS if name in have]
        return ", ".join(parts) + (f"; `flux` CLI {have['flux']}" if "flux" in have else "")
    return f"{cell.asked()} (asked for; not built)"


def release_key(label: str) -> tuple[tuple[int, ...], str]:
    """Rows oldest first: "2.10 (source, kustomize)" sorts after 2.9.5 and before "2.10"."""
    number = label.split()[0]
    return tuple(int(part) for part in number.split(".")), "" if label == number else label


def render(results: Path, cell_list: list[Cell]) -> str:
    data = load(results)["cells"]
    kubes = sorted({c.kubernetes for c in cell_list}, key=lambda v: tuple(int(p) for p in v[1:].split(".")))
    fluxes = sorted({c.flux for c in cell_list}, key=release_key)
    by_id = {c.id: c for c in cell_list}
    out = [
        "# Compatibility: which Flux, which Kubernetes",
        "",
        "Made by `hack/matrix.sh` from its results, `docs/compatibility.json`: do not edit by hand",
        "(`tests/unit/test_compatibility.py` holds this page to both). Each cell runs the real-Flux",
        "tier, `tests/realflux`, against the Flux controllers and the `flux` CLI named, built from",
        "their Go modules by `hack/go-binaries.sh`, on kube-apiserver and etcd of the version named.",
        "The README's test command (`hack/test.sh`) runs one cell: the defaults at the top of",
        "`hack/go-binaries.sh`. A version the Go module proxy did not serve is replaced by the",
        "nearest older patch release of its minor that it did, and the cell names what ran.",
        "",
        "| Flux | " + " | ".join(f"Kubernetes {k}" for k in kubes) + " |",
        "|---" * (len(kubes) + 1) + "|",
    ]
    for flux in fluxes:
        row = [summary(data.get(f"{flux} on {k}")) if f"{flux} on {k}" in by_id else "-" for k in kubes]
        out.append(f"| {flux} | " + " | ".join(row) + " |")
    out += ["", "## Cells", ""]
    for cell in cell_list:
        entry = data.get(cell.id)
        out.append(f"### Flux {cell.id}")
        out.append("")
        out.append(f"- Versions: {versions_line(cell, entry)}.")
        if entry is None:
            out.append("- Not run yet: `hack/matrix.sh` has not run this cell on any machine.")
        elif entry["status"] == "not run":
            out.append(f"- Not run on {entry['date']}: {entry['reason']}")
        else:
            out.append(
                f"- Kubernetes {entry['kubernetes']} (kube-apiserver, kubectl), etcd {entry['etcd']}; "
                f"run on {entry['date']} in {minutes(entry['duration_s'])}: {entry['passed']} passed, "
                f"{entry['failed']} failed, {entry['skipped']} skipped."
            )
            out += [f"- Failed: `{name}`" for name in entry.get("failed_tests", [])]
        if cell.note:
            out.append(f"- {cell.note}")
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("results", type=Path)
    rec.add_argument("cell")
    rec.add_argument("--kubernetes", required=True)
    rec.add_argument("--etcd", required=True)
    rec.add_argument("--versions", type=Path)
    rec.add_argument("--junit", type=Path)
    rec.add_argument("--duration", type=int, default=0)
    rec.add_argument("--reason", default="")
    ren = sub.add_parser("render")
    ren.add_argument("results", type=Path)
    ren.add_argument("cells", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        return record(args)
    sys.stdout.write(render(args.results, cells(args.cells.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
