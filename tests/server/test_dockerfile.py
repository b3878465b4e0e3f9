"""The Dockerfile, without Docker (tests/cluster builds the image with Docker and runs it as Pods;
this tier needs neither, and says which step broke).

The static checks read the Dockerfile, .dockerignore and requirements.lock. The rest replays the
builder stage for real: its COPY steps into a scratch tree (filtered by .dockerignore), its RUN
steps (the same `python -m venv` and `pip` commands, the same lock, --require-hashes) with the
container's /opt/venv mapped to a fresh venv; then starts ENTRYPOINT + CMD from that venv with
the final stage's ENV, as the image would, and talks to it over TLS. So a Dockerfile whose
install steps, lock or entrypoint no longer work fails here. Needs PyPI (skipped without it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from admission.cli.gate_admission import build_parser
from tests.processes import GateServer, Process, free_port

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"


# --- reading the Dockerfile: instructions one per logical line, stages split at FROM ---------


@dataclass
class Stage:
    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def args(self, instruction: str) -> list[str]:
        return [rest for name, rest in self.steps if name == instruction]

    def env(self) -> dict[str, str]:
        """ENV in the KEY=value form only (values without spaces or quotes): all we use."""
        env = {}
        for rest in self.args("ENV"):
            for word in rest.split():
                assert "=" in word, f"ENV {rest!r}: write ENV KEY=value"
                key, value = word.split("=", 1)
                env[key] = value
        return env

    def exec_form(self, instruction: str) -> list[str]:
        (rest,) = self.args(instruction)[-1:] or [None]
        assert rest and rest.startswith("["), (
            f"{instruction} must be in exec form (a JSON array), not {rest!r}"
        )
        return json.loads(rest)


def instructions(text: str) -> list[tuple[str, str]]:
    steps, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        name, _, rest = current.strip().partition(" ")
        steps.append((name.upper(), " ".join(rest.split())))
        current = ""
    return steps


def stages() -> list[Stage]:
    """The Dockerfile's stages; ARGs before the first FROM are substituted into the FROM lines."""
    defaults, found = {}, []
    for name, rest in instructions(DOCKERFILE.read_text()):
        if name == "ARG" and not found:
            key, _, value = rest.partition("=")
            defaults[key] = value
        elif name == "FROM":
            words = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults[m[1] or m[2]], rest).split()
            found.append(Stage(words[0], words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            found[-1].steps.append((name, rest))
    return found


def builder_and_final() -> tuple[Stage, Stage]:
    found = stages()
    assert len(found) == 2, "expected two stages: a builder and the runtime image"
    return found[0], found[1]


def venv_path() -> str:
    """The virtualenv the final stage takes from the builder: /opt/venv."""
    copies = builder_and_final()[1].args("COPY")
    assert len(copies) == 1, f"the final stage must copy only the venv from the builder, not {copies}"
    words = copies[0].split()
    assert words[0] == "--from=builder" and words[1] == words[2], copies[0]
    return words[1]


# --- .dockerignore, Docker's rule simplified: last matching pattern wins, `!` re-includes,
# --- a pattern matching a parent directory matches everything under it ---------------------


def _glob(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            out += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(out)


def dockerignored(relative: str) -> bool:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for line in lines:
        if not line or line.startswith("#"):
            continue
        regex = _glob(line.lstrip("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not line.startswith("!")
    return ignored


# --- static checks --------------------------------------------------------------------------


def test_both_stages_are_the_same_slim_python_base():
    builder, final = builder_and_final()
    assert builder.name == "builder"
    assert builder.base == final.base, "the venv links to the base's python: both stages need the same image"
    # The lock is resolved for the base's Python, and the base made where no registry answers is
    # made from the same Debian suite.
    python = re.search(r"^PYTHON_VERSION=(\S+)", (REPO / "hack/lock-requirements.sh").read_text(), re.M)[1]
    suite = re.search(r"^SUITE=(\w+)", (REPO / "hack/debian-base.sh").read_text(), re.M)[1]
    pattern = rf"python:{re.escape(python)}-slim-{suite}(@sha256:[0-9a-f]{{64}})?"
    assert re.fullmatch(pattern, final.base), (final.base, pattern)


def test_final_stage_runs_as_a_numeric_non_root_user():
    (user,) = builder_and_final()[1].args("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, (
        f"USER {user}: numeric, so runAsNonRoot can check it, and not root"
    )
    assert gid.isdigit() and int(gid) != 0, f"USER {user}: a numeric, non-root group too"


def test_no_compilers_or_build_tools_in_the_final_stage():
    final = builder_and_final()[1]
    for run in final.args("RUN"):
        if re.search(r"apt-get\s.*\binstall\b|apk\s+add", run):
            assert not re.search(r"\b(build-essential|gcc|g\+\+|clang|make|cmake|[\w.+-]+-dev)\b", run), run
    assert venv_path() == "/opt/venv"  # and nothing but the venv comes from the builder


def test_entrypoint_serves_on_the_exposed_port_with_certs_from_the_mount():
    final = builder_and_final()[1]
    assert final.exec_form("ENTRYPOINT") == ["gate-admission"]
    assert final.exec_form("CMD") == ["serve"]
    serve = build_parser().parse_args(["serve"])
    assert final.args("EXPOSE") == [str(serve.port)]
    env = final.env()
    assert env["PATH"].split(":")[0] == f"{venv_path()}/bin"
    assert env["GATE_ADMISSION_CERT_DIR"] == "/certs"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"


def _lock() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from requirements.lock."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"#.*", "", LOCK.read_text()).replace("\\\n", " ")
    for line in filter(None, map(str.strip, text.splitlines())):
        spec, *options = line.split()
        name, _, version = spec.partition("==")
        assert version, f"requirements.lock: {spec!r} is not an exact pin"
        hashes = [option.removeprefix("--hash=") for option in options if option.startswith("--hash=sha256:")]
        assert hashes and len(hashes) == len(options), (
            f"requirements.lock: {name}: only --hash options, at least one"
        )
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def test_lock_pins_every_runtime_dependency_with_hashes():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = _lock()
    for dependency in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dependency.name)
        assert name in lock, f"{dependency} is not in requirements.lock: run hack/lock-requirements.sh"
        assert dependency.specifier.contains(lock[name][0], prereleases=True), (
            f"requirements.lock pins {name}=={lock[name][0]}, outside {dependency}: run hack/lock-requirements.sh"
        )
    for extra in project.get("optional-dependencies", {}).values():
        for dependency in map(Requirement, extra):
            assert canonicalize_name(dependency.name) not in lock, (
                f"test extra {dependency.name} is in the image lock"
            )


def test_dockerignore_sends_what_the_build_copies_and_nothing_private():
    builder = builder_and_final()[0]
    for copy in builder.args("COPY"):
        for source in copy.split()[:-1]:
            assert not dockerignored(source), f"COPY {source}: excluded by .dockerignore"
    assert not dockerignored("admission/__init__.py")
    for private in (
        ".git/config",
        ".venv/bin/python",
        "certs/ca.key",
        ".pytest_cache/v",
        ".hypothesis/x",
        "bench/results/x.json",
        "admission/__pycache__/app.cpython-311.pyc",
        "build/lib/x.py",
    ):
        assert dockerignored(private), f"{private} would be sent to the builder"


# --- replaying the builder, then running the image's command ------------------------------

# The machine's package sources stay (pip.conf, PIP_INDEX_URL, find-links, certificates, proxy):
# the image's pip gets its packages from the registry its builder is configured with, and the
# replay from the one this machine is; no address is named here. What would change *what* is
# installed rather than where from (constraints, --user, a target) is dropped.
PIP_DROPPED = {
    "PIP_CONSTRAINT",
    "PIP_REQUIREMENT",
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_ROOT",
    "PIP_REQUIRE_VIRTUALENV",
    "PIP_NO_BINARY",
    "PIP_ONLY_BINARY",
    "PIP_PRE",
    "PIP_UPGRADE",
}


def _clean_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and key not in PIP_DROPPED
    }


def _packages_unreachable() -> str | None:
    """Why pip cannot fetch a pinned package of the lock from this machine's sources, if so."""
    name, (version, _) = next(iter(_lock().items()))
    with tempfile.TemporaryDirectory() as scratch:
        fetched = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--quiet",
                "--dest",
                scratch,
                f"{name}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env=_clean_env(),
        )
    if fetched.returncode != 0:
        return (
            f"pip cannot fetch {name}=={version} from this machine's configured sources; the image's "
            f"install step cannot be replayed: {fetched.stderr.strip()[-500:]}"
        )
    return None


@dataclass
class Image:
    root: Path  # stands for the container's /
    venv: Path  # the container's /opt/venv
    final: Stage
    python: Path  # stands for the base image's python (and its pip)

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.python), "-m", "pip", "--python", str(self.venv / "bin" / "python"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=_clean_env(),
        )

    def rooted(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def env(self) -> dict[str, str]:
        """The final stage's ENV, with container paths mapped into this tree."""
        env = {}
        for key, value in self.final.env().items():
            value = value.replace("$PATH", os.environ["PATH"]).replace(venv_path(), str(self.venv))
            env[key] = str(self.rooted(value)) if value.startswith("/") and ":" not in value else value
        return env

    def command(self) -> list[str]:
        entrypoint, *rest = self.final.exec_form("ENTRYPOINT") + self.final.exec_form("CMD")
        found = shutil.which(entrypoint, path=self.env()["PATH"])
        assert found and Path(found).parent == self.venv / "bin", (
            f"{entrypoint} resolves to {found}, not the image's venv"
        )
        return [found, *rest]


def _replay_builder(builder: Stage, root: Path, python: Path) -> None:
    """The builder's WORKDIR, COPY and RUN steps, for real; /opt/venv is mapped under ``root``."""
    venv = venv_path()
    shim = root.parent / "shim"  # `python` in the builder is the base image's interpreter
    shim.mkdir()
    for name in ("python", "python3"):
        (shim / name).write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
        (shim / name).chmod(0o755)
    env = {**_clean_env(), **builder.env()}
    env["PATH"] = f"{shim}:{env['PATH']}"
    workdir = root
    for name, rest in builder.steps:
        if name == "WORKDIR":
            workdir = root / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif name == "COPY":
            *sources, dest = rest.split()
            assert not any(source.startswith("--") for source in sources), f"COPY {rest}: flags not replayed"
            target = root / dest.lstrip("/") if dest.startswith("/") else workdir / dest
            for source in sources:
                if (REPO / source).is_dir():
                    shutil.copytree(
                        REPO / source,
                        target,
                        dirs_exist_ok=True,
                        ignore=lambda d, names: [
                            n for n in names if dockerignored(str((Path(d) / n).relative_to(REPO)))
                        ],
                    )
                else:
                    if dest.endswith("/"):
                        target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / source, target / source if target.is_dir() else target)
        elif name == "RUN":
            for part in rest.split("&&"):
                words = shlex.split(part)
                pruned = words[:2] == ["rm", "-rf"] and all(w.startswith(venv + "/") for w in words[2:])
                assert (
                    pruned
                    or words[0] in ("python", "python3")
                    and words[1:2] == ["-m"]
                    and words[2] in ("venv", "pip")
                ), (
                    f"RUN {rest}: this test replays only `python -m venv`, `python -m pip` and "
                    f"`rm -rf` inside the venv; teach it this one"
                )
            command = re.sub(rf"(?<![\w/.]){re.escape(venv)}(?=/|\s|$)", str(root / venv.lstrip("/")), rest)
            result = subprocess.run(
                ["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=480
            )
            assert result.returncode == 0, f"RUN {rest}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        elif name not in ("ENV", "ARG", "LABEL"):
            pytest.fail(f"builder step {name} {rest}: not replayed by this test; teach it")


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Image:
    builder, final = builder_and_final()
    # The image's Python may be newer than this machine's: the steps are replayed with this one
    # (the lock pins versions whose wheels serve both; tests/cluster runs the image itself).
    reason = _packages_unreachable()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("image")
    root = tmp / "root"
    root.mkdir()
    python = Path(getattr(sys, "_base_executable", sys.executable))
    _replay_builder(builder, root, python)
    return Image(root, root / venv_path().lstrip("/"), final, python)


@pytest.fixture(scope="module")
def served(image: Image, tmp_path_factory):
    """``gate-admission serve`` as the image runs it, plus the example gates, on a loopback port.
    Certificates come from the image's own ``gate-admission certs`` into the (mapped) /certs."""
    env = image.env()
    cert_dir = Path(env["GATE_ADMISSION_CERT_DIR"])
    env["TMPDIR"] = str(image.rooted("/tmp"))  # the writable /tmp the Dockerfile asks for (an emptyDir)
    Path(env["TMPDIR"]).mkdir()
    made = subprocess.run(
        [image.command()[0], "certs"],
        env={**_clean_env(), **env},
        cwd=image.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0 and (cert_dir / "tls.crt").exists(), made.stdout + made.stderr

    class ImageServer(GateServer):  # GateServer's TLS client and readiness, around our command
        def __init__(self):
            self.port, self.cert_dir = free_port(), cert_dir
            self.url = f"https://127.0.0.1:{self.port}"
            args = image.command() + [
                "--address",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--gates-dir",
                str(REPO / "examples" / "gates"),
            ]
            # Process adds os.environ: empty PYTHONPATH/PYTHONHOME count as unset, so this tree's
            # sources cannot shadow the installed wheel.
            Process.__init__(
                self,
                args,
                tmp_path_factory.mktemp("image-serve") / "serve.log",
                env={**_clean_env(), "PYTHONPATH": "", "PYTHONHOME": "", **env},
                cwd=image.root,
            )

    server = ImageServer()
    try:
        server.wait_ready(timeout=60)
        yield server
    finally:
        server.stop()


def pruned() -> set[str]:
    """The distributions the builder removes whole after installing the lock (a package and its
    ``<name>-*`` metadata, both named by its ``rm -rf``): what only code we never import needs."""
    builder, _ = builder_and_final()
    return {
        canonicalize_name(m[1])
        for rest in builder.args("RUN")
        for m in re.finditer(r"site-packages/([A-Za-z0-9_.]+)-\*", rest)
    }


def test_the_builder_prunes_only_what_the_lock_installs_and_never_what_the_server_imports():
    lock = set(_lock())
    assert pruned() and pruned() <= lock, pruned() - lock
    for name in pruned():
        imported = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys, admission.cli.gate_admission, kubernetes; print({name.replace('-', '_')!r} in sys.modules)",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert imported.stdout.strip() == "False", (name, imported.stdout, imported.stderr)


@pytest.mark.timeout(900)  # the first test pays for the pip install (a minute or two)
def test_image_venv_holds_exactly_the_lock_plus_the_project_wheel(image: Image):
    check = image.pip("check")
    # A complete closure (installed with --no-deps), but for what the builder prunes on purpose.
    unmet = re.findall(r"^\S+ \S+ requires (\S+?), which is not installed\.$", check.stdout, re.M)
    assert len(unmet) == len(check.stdout.splitlines()), f"pip check:\n{check.stdout}"
    assert {canonicalize_name(n) for n in unmet} <= pruned(), (
        f"the lock is not a complete closure:\n{check.stdout}"
    )
    installed = image.pip("list", "--format=json")
    assert installed.returncode == 0, installed.stderr
    names = {canonicalize_name(p["name"]): p["version"] for p in json.loads(installed.stdout)}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {name: version for name, (version, _) in _lock().items() if name not in pruned()}
    assert names == {**wanted, canonicalize_name(project["name"]): project["version"]}
    where = subprocess.run(
        [str(image.venv / "bin" / "python"), "-c", "import admission; print(admission.__file__)"],
        cwd=image.root,
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_env(),
    )
    assert Path(where.stdout.strip()).is_relative_to(image.venv / "lib"), (
        f"not installed from a wheel: {where}"
    )


@pytest.mark.timeout(900)
def test_entrypoint_serves_healthz_over_tls_verified_against_the_generated_ca(served):
    status, body = served.request("GET", "/healthz")
    assert status == 200, body


@pytest.mark.timeout(900)
def test_entrypoint_answers_the_example_review(served):
    sent = (REPO / "examples" / "reviews" / "kustomization-spec-change.json").read_bytes()
    status, out = served.request("POST", "/validate", sent)
    assert status == 200, out
    assert out["response"]["uid"] == orjson.loads(sent)["request"]["uid"]
    assert out["response"]["allowed"] is False
    assert "gate 'flux-system/sre-approval' is closed" in out["response"]["status"]["message"]
