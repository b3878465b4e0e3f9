"""docs/compatibility.md is what hack/compatibility.py makes from the matrix's results
(docs/compatibility.json) and hack/matrix.sh's cell list: every cell of the matrix appears, run or
not, and every result belongs to a cell, so the page, the results and the script cannot drift."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from types import ModuleType

import pytest

from tests import ROOT

RESULTS = ROOT / "docs" / "compatibility.json"
PAGE = ROOT / "docs" / "compatibility.md"


def compatibility() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compatibility", ROOT / "hack" / "compatibility.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cell_list() -> list:
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "matrix.sh"), "--cells"], capture_output=True, text=True, check=True
    )
    return compatibility().cells(out.stdout)


def test_the_page_is_made_from_the_results_and_the_cell_list(cell_list):
    made = compatibility().render(RESULTS, cell_list)
    assert PAGE.read_text() == made, "docs/compatibility.md is stale: run hack/matrix.sh --render"


def test_a_cell_added_to_the_script_shows_on_the_page(cell_list):
    module = compatibility()
    extra = module.Cell("9.9.9", "v1.99.0", "FLUX_VERSION=v9.9.9", "")
    made = module.render(RESULTS, [*cell_list, extra])
    assert "| 9.9.9 |" in made and "Not run yet" in made.split("### Flux 9.9.9 on v1.99.0")[1]
    assert PAGE.read_text() != made


def test_every_result_is_a_cell_of_the_script_in_the_results_format(cell_list):
    ids = {cell.id for cell in cell_list}
    results = json.loads(RESULTS.read_text())["cells"]
    assert set(results) <= ids, f"results for cells hack/matrix.sh no longer has: {set(results) - ids}"
    for cell_id, entry in results.items():
        assert {"date", "kubernetes", "etcd", "versions", "status"} <= set(entry), cell_id
        assert entry["kubernetes"] == cell_id.rsplit(" on ", 1)[1]
        if entry["status"] == "not run":
            assert entry["reason"], f"{cell_id}: a cell not run says why"
        else:
            assert entry["status"] in ("passed", "failed"), cell_id
            assert entry["failed"] == len(entry["failed_tests"]), cell_id
            assert (entry["status"] == "passed") == (entry["failed"] == 0), cell_id
            assert entry["versions"] and entry["duration_s"] > 0, cell_id
