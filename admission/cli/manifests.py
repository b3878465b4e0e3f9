"""The objects ``kubectl gate check`` is asked about, read as ``kubectl apply`` reads them: ``-f``
files, directories (``-R``: and the directories within) and stdin, or ``-k``: what
``kubectl kustomize`` renders (docs/decisions/0080-the-cli-as-kubectl-users-expect-it.md).
Every failure is a usage error (exit 2), found before the cluster is asked."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from admission.cli.cluster import EXIT_USAGE, GateError
from admission.core.base.objects import Object
from admission.store.yamldocs import objects

# The extensions kubectl reads in a directory; it skips every other file there, and so does check.
EXTENSIONS = (".json", ".yaml", ".yml")


def read(args: argparse.Namespace) -> list[Object]:
    """Every object (a mapping) that -f or -k gives, in kubectl's order."""
    if args.kustomize is not None:
        if args.recursive:
            raise GateError("-R goes with -f DIR, not -k", EXIT_USAGE)
        return _parsed(f"-k {args.kustomize}", kustomized(args.kustomize))
    if args.filename.count("-") > 1:
        raise GateError("-f -: stdin can be read once", EXIT_USAGE)
    found = []
    for given in args.filename:
        for path in files(given, args.recursive):
            found += _parsed(path, _text(path))
    return found


def files(given: str, recursive: bool) -> list[str]:
    """``given`` itself, or the manifests of the directory it names (sorted, as kubectl walks
    it; -R: its subdirectories' too)."""
    if given == "-" or not Path(given).is_dir():
        return [given]
    root = Path(given)
    found = sorted(
        str(path)
        for path in (root.rglob("*") if recursive else root.iterdir())
        if path.suffix in EXTENSIONS and path.is_file()
    )
    if not found:
        raise GateError(
            f"{given}: no {', '.join(EXTENSIONS)} files in it{'' if recursive else ' (-R: in its subdirectories)'}",
            EXIT_USAGE,
        )
    return found


def _text(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise GateError(f"cannot read {path}: {' '.join(str(err).split())}", EXIT_USAGE) from None


def _parsed(where: str, text: str) -> list[Object]:
    try:
        docs = objects(text)
    except yaml.YAMLError as err:
        raise GateError(f"cannot read {where}: {' '.join(str(err).split())}", EXIT_USAGE) from None
    except RecursionError:
        raise GateError(f"cannot read {where}: values nest too deeply", EXIT_USAGE) from None
    return [doc for doc in docs if isinstance(doc, dict)]


def kustomized(directory: str) -> str:
    """What ``kubectl kustomize DIR`` renders: the kustomize that ``kubectl apply -k`` would run
    is the one in the kubectl on PATH (this command is found by that kubectl); without one, a
    standalone ``kustomize build``."""
    if not Path(directory).is_dir():
        raise GateError(f"-k {directory}: not a directory", EXIT_USAGE)
    if kubectl := shutil.which("kubectl"):
        command = [kubectl, "kustomize", directory]
    elif kustomize := shutil.which("kustomize"):
        command = [kustomize, "build", directory]
    else:
        raise GateError("-k needs kubectl (or kustomize) on PATH, to render the directory", EXIT_USAGE)
    try:
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as err:
        raise GateError(f"-k {directory}: cannot run {command[0]}: {err}", EXIT_USAGE) from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        raise GateError(f"-k {directory}: {' '.join(command[1:2])} failed: {said}", EXIT_USAGE)
    return done.stdout
