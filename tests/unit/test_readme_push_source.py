"""The README's `flux push artifact` line names its `--source` from any checkout: the remote's
URL when there is one (origin or another), the checkout itself when there is none. `flux push
artifact` refuses an empty `--source` ("--source is required"), which the line used to pass in a
checkout without an `origin` remote. The line's own shell expression is run, in real git
repositories, by bash."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests import ROOT


def source_expression() -> str:
    readme = (ROOT / "README.md").read_text()
    [line] = [line for line in readme.splitlines() if "--source=" in line and "--revision=" in line]
    match = re.search(r'--source="(\$\(.*?\))" --revision', line)
    assert match, line
    return match.group(1)


def evaluated(repo) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f'printf %s "{source_expression()}"'],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def checkout(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "--allow-empty", "-m", "x")
    return tmp_path, git


def test_without_a_remote_the_source_is_the_checkout(checkout):
    repo, _ = checkout
    assert evaluated(repo) == f"file://{repo}"


def test_the_source_is_origin_or_the_one_remote_there_is(checkout):
    repo, git = checkout
    git("remote", "add", "upstream", "https://example.org/platform/flux-gate-admission.git")
    assert evaluated(repo) == "https://example.org/platform/flux-gate-admission.git"
    git("remote", "add", "origin", "https://example.org/me/flux-gate-admission.git")
    assert evaluated(repo) == "https://example.org/me/flux-gate-admission.git"
