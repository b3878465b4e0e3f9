"""charts/gate-admission/README.md's values table is what hack/chart-readme.py writes from the
chart's values.schema.json and values.yaml: a value added, renamed or described anew without the
README written again fails here, saying what to run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests import ROOT

CHART = ROOT / "charts" / "gate-admission"
SCRIPT = ROOT / "hack" / "chart-readme.py"


def check(chart=CHART) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--chart", str(chart)], capture_output=True, text=True
    )


def test_the_chart_readme_values_table_is_current():
    done = check()
    assert done.returncode == 0, done.stderr


def test_every_value_of_the_schema_has_a_row_and_a_description():
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()

    def leaves(node: dict, path: str = ""):
        for name, sub in node.get("properties", {}).items():
            here = f"{path}.{name}" if path else name
            if sub.get("properties"):
                yield from leaves(sub, here)
            else:
                yield here, sub

    found = list(leaves(schema))
    assert len(found) > 60
    for path, sub in found:
        assert f"| `{path}` |" in readme, path
        assert sub.get("description"), f"{path}: no description in values.schema.json"


def test_a_stale_table_is_caught_and_rewritten(tmp_path):
    chart = tmp_path / "gate-admission"
    shutil.copytree(CHART, chart)
    schema = json.loads((chart / "values.schema.json").read_text())
    schema["properties"]["logLevel"]["description"] = "how much the Pods log"
    (chart / "values.schema.json").write_text(json.dumps(schema))
    stale = check(chart)
    assert stale.returncode == 1 and "the values table is stale; run hack/chart-readme.py" in stale.stderr
    subprocess.run([sys.executable, str(SCRIPT), "--chart", str(chart)], check=True)
    assert check(chart).returncode == 0
    assert "| how much the Pods log |" in (chart / "README.md").read_text()
