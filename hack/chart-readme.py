#!/usr/bin/env python3
"""The values table of charts/gate-admission/README.md, from the chart's values.schema.json
(each value's description, type, allowed values and range) and values.yaml (its default).

  hack/chart-readme.py            rewrite the table between the README's two markers
  hack/chart-readme.py --check    exit 1, saying so, when the README's table is not what it
                                  would write (tests/unit/test_chart_readme.py runs this)
  --chart DIR                     another chart directory (default: charts/gate-admission)"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- values: written by hack/chart-readme.py from values.schema.json; do not edit by hand -->"
END = "<!-- end of values -->"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def kind(schema: dict) -> str:
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    types = schema.get("type", "any")
    text = " or ".join(types) if isinstance(types, list) else types
    if text == "array" and isinstance(schema.get("items"), dict) and "type" in schema["items"]:
        text = f"array of {schema['items']['type']}"
    bounds = [
        f"{word} {schema[key]}" for key, word in (("minimum", ">="), ("maximum", "<=")) if key in schema
    ]
    if "maxLength" in schema:
        bounds.append(f"at most {schema['maxLength']} characters")
    return ", ".join([text, *bounds])


def rows(schema: dict, values: object, path: str = "") -> list[str]:
    """One table row per value: objects with properties are walked, anything else is a row."""
    out = []
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        default = values.get(name) if isinstance(values, dict) else None
        if sub.get("properties"):
            out += rows(sub, default, here)
            continue
        shown = (
            ""
            if default is None and not (isinstance(values, dict) and name in values)
            else json.dumps(default)
        )
        out.append(
            f"| `{here}` | {cell(kind(sub))} | {cell(f'`{shown}`' if shown else '')} | {cell(sub.get('description', ''))} |"
        )
    return out


def table(chart: Path) -> str:
    schema = json.loads((chart / "values.schema.json").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text())
    head = ["| Value | Type | Default | What it does |", "|---|---|---|---|"]
    return "\n".join([BEGIN, "", *head, *rows(schema, values), "", END])


def written(readme: str, chart: Path) -> str:
    """``readme`` with the table between its markers as this script writes it."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(
            f"hack/chart-readme.py: {chart / 'README.md'} lacks the markers {BEGIN!r} and {END!r}"
        )
    before, rest = readme.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return before + table(chart) + after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--chart", type=Path, default=ROOT / "charts" / "gate-admission")
    args = parser.parse_args(argv)
    path = args.chart / "README.md"
    readme = path.read_text()
    want = written(readme, args.chart)
    if args.check:
        if readme != want:
            print(f"{path}: the values table is stale; run hack/chart-readme.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
