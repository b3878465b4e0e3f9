"""The plan of the package: how many modules each layer holds, and which way its imports point.

Usage: python bench/plan.py [--root DIR]
Reads the layers contracts of DIR/pyproject.toml (import-linter's, the ones
tests/unit/test_architecture.py runs) and the imports of every module under DIR/admission (those
inside functions too, as import-linter counts them), and prints per contract: the modules per
layer, the imports between modules of different layers going down, up and sideways (between
layers side by side), and the circles among the contract's packages. Then per package, its
modules, its lines and the longest chain of imports inside it. ``--root`` reads another tree: a
copy of an earlier commit (``git archive``) gives the figures before a change.
"""

from __future__ import annotations

import argparse
import ast
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "admission").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that ``name`` imports (``from p import m`` counts m when it is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def layer_of(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    best = None
    for index, siblings in enumerate(layers):
        for package in siblings:
            if (module == package or module.startswith(package + ".")) and (
                best is None or len(package) > len(best[1])
            ):
                best = (index, package)
    return best


def circles(nodes: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected groups of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for a, b in edges:
            if a != node:
                continue
            if b not in index:
                visit(b)
                low[node] = min(low[node], low[b])
            elif b in stack:
                low[node] = min(low[node], index[b])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in nodes:
        if node not in index:
            visit(node)
    return found


def longest_chain(members: set[str], graph: dict[str, set[str]]) -> int:
    """The most modules one import chain inside ``members`` passes through (cycles cut)."""
    memo: dict[str, int] = {}

    def depth(module: str, seen: frozenset[str]) -> int:
        if module in memo:
            return memo[module]
        below = [depth(m, seen | {module}) for m in graph[module] & members if m not in seen]
        memo[module] = 1 + max(below, default=0)
        return memo[module]

    return max((depth(m, frozenset()) for m in members), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=HERE, help="the tree to read (default: this one)")
    args = parser.parse_args()
    known = modules(args.root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    config = tomllib.loads((args.root / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] != "layers":
            continue
        layers = [[p.strip() for p in layer.split("|")] for layer in contract["layers"]]
        where = {m: found for m in known if (found := layer_of(m, layers)) is not None}
        down = up = sideways = 0
        for importer, targets in graph.items():
            for target in targets:
                if importer in where and target in where and where[importer][1] != where[target][1]:
                    a, b = where[importer][0], where[target][0]
                    down, up, sideways = down + (a < b), up + (a > b), sideways + (a == b)
        packages = [p for siblings in layers for p in siblings]
        edges = {
            (where[i][1], where[t][1])
            for i, ts in graph.items()
            for t in ts
            if i in where and t in where and where[i][1] != where[t][1]
        }
        print(f"## {contract['name']}")
        for siblings in layers:
            counts = ", ".join(
                f"{p} {sum(1 for m, w in where.items() if w[1] == p and known[m].name != '__init__.py')}"
                for p in siblings
            )
            print(f"  {counts}")
        print(
            f"  imports across layers: {down} down, {up} up, {sideways} sideways; "
            f"circles among its packages: {len(circles(packages, edges))}"
        )
    print("## packages: modules, lines, longest import chain inside")
    for package, path in known.items():
        if path.name != "__init__.py":
            continue
        members = {m for m in known if m.rpartition(".")[0] == package and known[m].name != "__init__.py"}
        lines = sum(len(known[m].read_text().splitlines()) for m in members)
        if members:
            print(
                f"  {package}: {len(members)} modules, {lines} lines, chain {longest_chain(members, graph)}"
            )


if __name__ == "__main__":
    main()
