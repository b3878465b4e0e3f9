"""No file of the repository names a package or image registry's host: builds, scripts and
tests use the sources the machine is configured with (pip's index, apt's sources, the
container runtime's registries), and manifests name images without a registry.

Every tracked file is read, this one included: the hosts below are written in pieces, so this
file does not name them either. A failure lists every offending file, line and host.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Package registries (Python, Go, Debian, JavaScript, Rust, Java, Ruby, PHP, .NET) and container
# registries; each as (name, top-level domain), joined below.
_HOSTS = [
    ("pypi", "org"),
    ("files.pythonhosted", "org"),
    ("pythonhosted", "org"),
    ("test.pypi", "org"),
    ("proxy.golang", "org"),
    ("sum.golang", "org"),
    ("goproxy", "io"),
    ("deb.debian", "org"),
    ("security.debian", "org"),
    ("ftp.debian", "org"),
    ("archive.ubuntu", "com"),
    ("registry.npmjs", "org"),
    ("registry.yarnpkg", "com"),
    ("crates", "io"),
    ("static.crates", "io"),
    ("index.crates", "io"),
    ("repo.maven.apache", "org"),
    ("repo1.maven", "org"),
    ("central.sonatype", "com"),
    ("rubygems", "org"),
    ("packagist", "org"),
    ("nuget", "org"),
    ("ghcr", "io"),
    ("docker", "io"),
    ("registry-1.docker", "io"),
    ("index.docker", "io"),
    ("quay", "io"),
    ("gcr", "io"),
    ("registry.k8s", "io"),
    ("public.ecr", "aws"),
    ("mcr.microsoft", "com"),
]
HOSTS = sorted({".".join(parts) for parts in _HOSTS}, key=len, reverse=True)
# A host, not part of a longer name ("my-crates.iox" or "notdocker.io.example.com" do not count).
_PATTERN = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(h) for h in HOSTS) + r")(?![\w-])", re.I)


# Debian's package of the Docker engine is named like Docker's registry host: the name is allowed
# where the line says it is a package.
_PACKAGE_NAMES = {".".join(("docker", "io"))}
_PACKAGE_CONTEXT = re.compile(r"\b(apt-get|Debian|package)\b", re.I)


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git work tree: the tracked files are unknown")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in listed.decode().split("\0") if name]


def offenders(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except (IsADirectoryError, FileNotFoundError):  # a submodule, or deleted but not yet staged
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{number}: {host}" for host in offenders_in(line)]
    return found


def test_the_pattern_finds_each_host_and_only_as_a_host():
    for host in HOSTS:
        assert _PATTERN.search(f"fetch https://{host}/simple/x"), host
        assert _PATTERN.search(f"image: {host.upper()}/team/app:1.0"), host
    for innocent in (
        "registry.example/a/b",
        "example.org",
        "flux-gate-admission",
        "my-crates.iox",
        "notdocker.io.example.com",
        "dockerfile",
        "quay",
    ):
        assert not _PATTERN.search(innocent), innocent


def test_a_debian_package_named_like_a_host_is_allowed_only_as_a_package():
    package = ".".join(("docker", "io"))
    assert not offenders_in(f"apt-get install -y {package}") and not offenders_in(f"# Debian's {package}")
    assert offenders_in(f"image: {package}/library/app:1")


def offenders_in(line: str) -> list[str]:
    return [
        m.group(1)
        for m in _PATTERN.finditer(line)
        if not (m.group(1).lower() in _PACKAGE_NAMES and _PACKAGE_CONTEXT.search(line))
    ]


def test_no_tracked_file_names_a_registry_host():
    found = offenders(tracked_files())
    assert not found, (
        "registry hosts in the repository (use the machine's configured sources):\n" + "\n".join(found)
    )
