#!/usr/bin/env python3
"""Stand-ins for modules the configured proxy does not serve (a mirror may hold back a version
or two, or a fork), printed for hack/go-binaries.sh to apply; the build log says which.

  nearest-served.py < `go mod download -json`   for each module that could not be fetched,
      `path=path@version`: the newest older release of the same minor that is served
  nearest-served.py --forks < `go mod edit -json`   for each `replace` pointing at a module
      version that is not served (a fork), `path@version`: the upstream release the fork's
      version is based on (v4.2.4-flux.1 -> v4.2.4), to build with instead
  nearest-served.py --release PATH VERSION   the version of a module to build: VERSION when
      served, else the newest older patch of its minor that is; `vX.Y.x` asks for the newest
      served patch of that minor. Exit 1 (and why, on stderr) when none is"""

from __future__ import annotations

import json
import subprocess
import sys


def downloads(stream: str):
    decoder, i = json.JSONDecoder(), 0
    while True:
        while i < len(stream) and stream[i].isspace():
            i += 1
        if i >= len(stream):
            return
        obj, i = decoder.raw_decode(stream, i)
        yield obj


def semver(version: str) -> tuple[int, ...] | None:
    core = version.lstrip("v").split("-")[0].split("+")[0]
    try:
        return tuple(int(part) for part in core.split("."))
    except ValueError:
        return None


def refusal(path: str, version: str) -> str | None:
    """Why ``path@version`` cannot be fetched (None: it can)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{path}@{version}"], capture_output=True, text=True
    )
    try:
        error = json.loads(out.stdout).get("Error")
    except ValueError:
        error = out.stderr.strip() or "no answer"
    return error or (None if out.returncode == 0 else out.stderr.strip() or "failed")


def served(path: str, version: str) -> bool:
    return refusal(path, version) is None


def nearest(path: str, version: str) -> str | None:
    wanted = semver(version)
    listed = subprocess.run(
        ["go", "list", "-m", "-versions", path], capture_output=True, text=True
    ).stdout.split()[1:]
    candidates = sorted(
        (v for v in listed if (s := semver(v)) and wanted and s[:2] == wanted[:2] and s < wanted),
        key=semver,
        reverse=True,
    )
    return next((v for v in candidates if served(path, v)), None)


# How far a `vX.Y.x` request looks when the proxy does not list the module's versions (several
# of Flux's controllers are served at some versions but not listed): patch releases of one minor
# rarely pass this.
HIGHEST_PATCH_TRIED = 9


def release(path: str, version: str) -> int:
    """Print the version of ``path`` to build for ``version`` (see the module's docstring)."""
    newest = version.endswith(".x")
    wanted = semver(version.replace(".x", f".{HIGHEST_PATCH_TRIED}"))
    if wanted is None or len(wanted) != 3:
        print(f"not a release version: {version}", file=sys.stderr)
        return 2
    if not newest and served(path, version):
        print(version)
        return 0
    listed = subprocess.run(
        ["go", "list", "-m", "-versions", path], capture_output=True, text=True
    ).stdout.split()[1:]
    same_minor = {v for v in listed if (s := semver(v)) and s[:2] == wanted[:2] and s <= wanted}
    if not listed:  # not listed: try each patch release of the minor, newest first
        same_minor = {f"v{wanted[0]}.{wanted[1]}.{patch}" for patch in range(wanted[2] + 1)}
    same_minor.discard(version)
    toolchain = None
    for candidate in sorted(same_minor, key=lambda v: semver(v) or (), reverse=True):
        why = refusal(path, candidate)
        if why is None:
            if not newest:
                print(f"substituted {path} {version} -> {candidate} (not served here)", file=sys.stderr)
            print(candidate)
            return 0
        if "requires go" in why:  # served, but not buildable with this Go: say so, not "missing"
            toolchain = toolchain or f"{path}@{candidate}: {why.split(': ', 1)[-1]}"
    if toolchain:
        print(toolchain, file=sys.stderr)
        return 1
    tried = (
        f"v{wanted[0]}.{wanted[1]}.0 to {version if not newest else f'v{wanted[0]}.{wanted[1]}.{wanted[2]}'}"
    )
    print(f"{path}: no release from {tried} is served", file=sys.stderr)
    return 1


def forks(gomod: dict) -> int:
    for replace in gomod.get("Replace") or []:
        old, new = replace["Old"], replace["New"]
        version = new.get("Version")
        if not version or served(new["Path"], version):
            continue  # a local directory, or served
        base = "v" + ".".join(str(part) for part in semver(version) or ())
        if not served(old["Path"], base):
            print(f"neither {new['Path']}@{version} nor {old['Path']}@{base} is served", file=sys.stderr)
            return 1
        print(f"{old['Path']}@{base}")
        print(
            f"building with {old['Path']} {base} instead of {new['Path']} {version} (not served here)",
            file=sys.stderr,
        )
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--release"] and len(sys.argv) == 4:
        return release(sys.argv[2], sys.argv[3])
    if sys.argv[1:] == ["--forks"]:
        return forks(json.loads(sys.stdin.read()))
    missing = 0
    for obj in downloads(sys.stdin.read()):
        if not obj.get("Error"):
            continue
        path, version = obj["Path"], obj["Version"]
        stand_in = nearest(path, version)
        if stand_in is None:
            print(f"no served release of {path} near {version}: {obj['Error'][-120:]}", file=sys.stderr)
            missing += 1
        else:
            print(f"{path}={path}@{stand_in}")
            print(f"substituted {path} {version} -> {stand_in} (not served here)", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
