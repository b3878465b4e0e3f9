#!/usr/bin/env python3
"""For each module `go mod download -json` (on stdin) could not fetch, print a replacement
`path=path@version`: the newest older release of the same minor that the configured proxy
serves. A mirror may hold back a version or two; a patch release of the same minor is the
closest stand-in, and the build log says which were substituted."""

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


def served(path: str, version: str) -> bool:
    out = subprocess.run(["go", "mod", "download", "-json", f"{path}@{version}"], capture_output=True, text=True)
    return out.returncode == 0 and '"Error"' not in out.stdout


def nearest(path: str, version: str) -> str | None:
    wanted = semver(version)
    listed = subprocess.run(["go", "list", "-m", "-versions", path], capture_output=True, text=True).stdout.split()[1:]
    candidates = sorted((v for v in listed if (s := semver(v)) and wanted and s[:2] == wanted[:2] and s < wanted),
                        key=semver, reverse=True)
    return next((v for v in candidates if served(path, v)), None)


def main() -> int:
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
