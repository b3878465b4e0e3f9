"""What installing gate-admission the Flux ways takes, done with the real tools: the chart
packaged by the real helm and pushed to an OCI registry or indexed (`helm repo index`) in a
classic chart repository; the rendered manifests pushed with the real `flux push artifact`; the
release before this one rebuilt from git history (its chart and its image), so an upgrade test
upgrades from what users run today; and the README's own install commands and objects, so what
the README shows is what the tests run."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.e2e.controlplane import ROOT
from tests.polling import until
from tests.realflux.conftest import condition, ready
from tests.realflux.flux import flux_dir
from tests.realflux.servers import Registry, serve_directory

CHART_PATH = Path("charts") / "gate-admission"
CHART = ROOT / CHART_PATH
README = ROOT / "README.md"


def chart_version(chart: Path = CHART) -> str:
    return yaml.safe_load((chart / "Chart.yaml").read_text())["version"]


def helm_binary() -> Path:
    if os.environ.get("HELM_BINARIES"):
        return Path(os.environ["HELM_BINARIES"]) / "helm"
    out = subprocess.run(
        [str(ROOT / "hack" / "go-binaries.sh"), "helm"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out) / "helm"


class Helm:
    """The real helm CLI with its own config, cache and data directories under ``workdir``."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.env = {
            **os.environ,
            **{f"HELM_{k}_HOME": str(workdir / f"helm-{k.lower()}") for k in ("CONFIG", "CACHE", "DATA")},
        }

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [str(helm_binary()), *args], capture_output=True, text=True, env=self.env, timeout=120
        )
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return done.stdout

    def package(self, chart: Path, out: Path) -> Path:
        """`helm package`: the chart's archive, named after its name and version."""
        out.mkdir(parents=True, exist_ok=True)
        self("package", str(chart), "-d", str(out))
        return out / f"gate-admission-{chart_version(chart)}.tgz"

    def push(self, archive: Path, registry: Registry) -> None:
        self("push", str(archive), f"oci://{registry.address}/charts", "--plain-http")


class ChartIndex:
    """A classic Helm chart repository: packaged charts and the index `helm repo index` writes,
    served over plain HTTP."""

    def __init__(self, root: Path, helm: Helm):
        self.root, self.helm = root, helm
        root.mkdir(parents=True, exist_ok=True)
        self.http, self.url = serve_directory(root, "chart-index")

    def add(self, archive: Path) -> None:
        shutil.copy(archive, self.root / archive.name)
        self.helm("repo", "index", str(self.root), "--url", self.url)

    def stop(self) -> None:
        self.http.shutdown()


@dataclass(frozen=True)
class Release:
    """A release of gate-admission: its version, its chart directory and the image it runs."""

    version: str
    chart: Path
    image: str


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def previous_commit() -> str | None:
    """The newest commit whose chart has an older version than this one's: the parent of the
    commit that raised the version. None without the history (a shallow clone)."""
    current = chart_version()
    try:
        commits = git("log", "--format=%H", "--", str(CHART_PATH / "Chart.yaml")).split()
    except subprocess.CalledProcessError:
        return None
    for commit in commits:
        try:
            parent = git("show", f"{commit}^:{CHART_PATH / 'Chart.yaml'}")
        except subprocess.CalledProcessError:
            return None  # the chart was added here: there is no release before it
        if yaml.safe_load(parent)["version"] != current:
            return git("rev-parse", f"{commit}^").strip()
    return None


def previous_release(workdir: Path) -> Release | None:
    """The release before this one, exported from git and its image built by its own
    hack/image.sh (the image layers it shares with this release come from Docker's cache)."""
    commit = previous_commit()
    if commit is None:
        return None
    tree = workdir / f"release-{commit[:12]}"
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    built = subprocess.run([str(tree / "hack" / "image.sh")], capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr
    return Release(chart_version(tree / CHART_PATH), tree / CHART_PATH, built.stdout.strip())


def current_release() -> Release:
    return Release(chart_version(), CHART, os.environ.get("GATE_IMAGE", f"gate-admission:{chart_version()}"))


# -- the README's install section ---------------------------------------------------------------


def readme_blocks(language: str) -> list[str]:
    """The README's fenced blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.M | re.S)


def readme_objects(*kinds: str) -> list[dict]:
    """The first YAML block of the README made of exactly these kinds, as objects."""
    for block in readme_blocks("yaml"):
        objects = [o for o in yaml.safe_load_all(block) if o]
        if [o.get("kind") for o in objects] == list(kinds):
            return objects
    raise AssertionError(f"README.md has no YAML block of {kinds}")


def readme_commands(first: str) -> list[str]:
    """The commands of the README's shell block whose first command starts with ``first``,
    continuation lines joined, comments dropped."""
    for block in readme_blocks("sh"):
        commands = [line.split(" #")[0].strip() for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines()]
        commands = [c for c in commands if c and not c.startswith("#")]
        if commands and commands[0].startswith(first):
            return commands
    raise AssertionError(f"README.md has no shell block starting with {first!r}")


def run_readme_command(
    cluster, command: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 300
) -> str:
    """One README command as a user runs it: bash, in the repository (or ``cwd``), with kubectl,
    flux and helm on PATH and the cluster in $KUBECONFIG."""
    path = os.pathsep.join(
        [
            str(flux_dir()),
            str(Path(cluster.kubectl_path).parent),
            str(helm_binary().parent),
            os.environ["PATH"],
        ]
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env, "PATH": path, "KUBECONFIG": str(cluster.kubeconfig())},
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def over_plain_http(command: str) -> str:
    """A README command against the tests' registry, which speaks plain HTTP (yours has TLS)."""
    if " helm push " in f" {command}":
        return command + " --plain-http"
    if "flux push artifact " in command:
        return command + " --insecure-registry"
    if command.startswith("flux create source oci "):
        return command + " --insecure"
    return command


def push_readme_chart(cluster, helm: Helm, registry: Registry, workdir: Path) -> None:
    """The README's `helm package` and `helm push` of this chart, run beside a link to charts/
    (the package lands in ``workdir``, not in the repository)."""
    (workdir / "charts").symlink_to(ROOT / "charts")
    for command in readme_commands("helm package"):
        run_readme_command(
            cluster, over_plain_http(command), {**helm.env, "REGISTRY": registry.address}, cwd=workdir
        )


# -- what Flux made of it -----------------------------------------------------------------------


def release(cluster, name: str = "gate-admission") -> dict:
    out = cluster.kubectl("get", "helmrelease", name, "-n", "flux-system", "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def running_version(hr: dict) -> str:
    """The chart version a release runs (from an OCIRepository Flux appends the digest: 0.2.0+a6a6...)."""
    return hr.get("status", {}).get("history", [{}])[0].get("chartVersion", "").split("+")[0]


def released(cluster, version: str) -> dict:
    seen = until(
        lambda: release(cluster),
        lambda hr: ready(hr) == "True" and running_version(hr) == version,
        timeout=300,
        interval=1,
    )
    assert ready(seen) == "True", condition(seen, "Ready")
    return seen


def no_webhook_configuration(cluster) -> bool:
    names = cluster.kubectl(
        "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
    ).stdout
    return "gate-admission" not in names
