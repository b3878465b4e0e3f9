"""One release version: the package, the chart, the image the manifests run and the docs agree."""

from __future__ import annotations

import re
import tomllib

import yaml

import admission
from tests import ROOT

CHART = ROOT / "charts" / "gate-admission"


def release() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_package_the_chart_and_its_image_have_one_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {admission.__version__, chart["version"], chart["appVersion"]} == {release()}
    assert values["image"]["tag"] == ""  # the chart's appVersion (templates/_helpers.tpl)
    [image] = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
    assert image["image"] == f"gate-admission:{release()}"


def test_the_manifests_run_the_release_image():
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    assert [image["newTag"] for image in kustomization["images"]] == [release()]
    named = {
        match
        for path in (ROOT / "manifests").rglob("*.yaml")
        for match in re.findall(r"image: gate-admission:(\S+)", path.read_text())
    }
    assert named == {release()}


def test_the_docs_name_the_release():
    for doc in ("README.md", "docs/operations.md"):
        text = (ROOT / doc).read_text()
        named = set(re.findall(r"gate-admission[:-](\d+\.\d+\.\d+)", text)) | set(
            re.findall(r"ref=v(\d+\.\d+\.\d+)", text)
        )
        assert named <= {release()}, doc
