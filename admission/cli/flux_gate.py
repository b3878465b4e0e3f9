"""``flux gate``: kubectl-gate's commands as a flux CLI plugin.

The flux CLI (2.9+: its plugin system shipped in Flux 2.9) runs an executable ``flux-NAME``
found in ``$FLUXCD_PLUGINS`` (else ``~/.fluxcd/plugins``) as ``flux NAME``: it execs it with
every argument after ``NAME`` verbatim (flags included, its own global flags too when they come
first: ``flux -n NS gate list`` runs ``flux-gate -n NS list``) and the environment unchanged, so
the exit code is ours. For shell
completion it runs ``flux-gate __complete ARGS... PARTIAL`` and reads Cobra's answer: a candidate
a line, then ``:<directive>``; a non-zero exit or an empty answer completes nothing.

Differences from ``kubectl gate``, so that flux users get flux's conventions: without ``-n`` a
command works in flux's namespace (``flux-system``, or ``$FLUX_SYSTEM_NAMESPACE``; the kubeconfig
context's with ``--ns-follows-kube-context`` or ``$FLUX_NS_FOLLOWS_KUBE_CONTEXT``), as every flux
command does. ``gate-admission install-flux-plugin`` links this command into the plugin directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from admission.cli import cluster, kubectl_gate, shellcomplete
from admission.core.base import names
from admission.core.gates.references import is_namespace

PLUGIN = "flux-gate"  # flux finds "flux-" + the command name
PLUGINS_ENV = "FLUXCD_PLUGINS"  # the plugin directory, else ~/.fluxcd/plugins
NAMESPACE_ENV = "FLUX_SYSTEM_NAMESPACE"
FOLLOW_CONTEXT_ENV = "FLUX_NS_FOLLOWS_KUBE_CONTEXT"
FOLLOW_CONTEXT_FLAG = "--ns-follows-kube-context"
COMPLETE, COMPLETE_NO_DESC = "__complete", "__completeNoDesc"  # Cobra's completion requests
# flux's global flags that `flux gate` takes too: Cobra offers them itself when a flag name is
# completed (a plugin's command inherits them), so the plugin does not offer them twice.
FLUX_OFFERS = frozenset({"-n", "--namespace", "--context", "--kubeconfig", FOLLOW_CONTEXT_FLAG})


def default_namespace(args: argparse.Namespace) -> str:
    """flux's namespace without -n: the context's when asked to follow it (and it has one), else
    $FLUX_SYSTEM_NAMESPACE when it is a namespace's name, else flux-system."""
    if getattr(args, "ns_follows_kube_context", False) or os.environ.get(FOLLOW_CONTEXT_ENV):
        try:
            namespace: str | None = (cluster.kubeconfig_context(args).get("context") or {}).get("namespace")
        except Exception:  # noqa: BLE001 (no kubeconfig, or one the client cannot read: flux falls back to its default as well)
            namespace = None
        if namespace:
            return namespace
    configured = os.environ.get(NAMESPACE_ENV, "")
    return configured if is_namespace(configured) else names.FLUX_SYSTEM_NAMESPACE


FLUX = kubectl_gate.Flavor(
    prog="flux gate",
    command=PLUGIN,
    namespace_help=f"namespace (default: ${NAMESPACE_ENV}, else {names.FLUX_SYSTEM_NAMESPACE}, as for flux)",
    default_namespace=default_namespace,
    switches=(
        (FOLLOW_CONTEXT_FLAG, f"without -n, use the kubeconfig context's namespace (${FOLLOW_CONTEXT_ENV})"),
    ),
)


def build_parser() -> argparse.ArgumentParser:
    return kubectl_gate.build_parser(FLUX)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in ([COMPLETE], [COMPLETE_NO_DESC]):
        return shellcomplete.print_completions(
            argv[1:], build_parser(), descriptions=argv[0] == COMPLETE, offered=FLUX_OFFERS
        )
    return kubectl_gate.main(argv, build_parser())


# -- registering with flux -------------------------------------------------------------------


def plugin_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where flux looks for plugins: $FLUXCD_PLUGINS, else ~/.fluxcd/plugins."""
    return Path(environ.get(PLUGINS_ENV) or Path.home() / ".fluxcd" / "plugins")


def installed_command() -> Path | None:
    """The flux-gate command installed with this one: next to the running script (a
    virtualenv's bin), next to the interpreter, else on PATH."""
    for directory in (Path(sys.argv[0]).absolute().parent, Path(sys.executable).parent):
        if os.access(directory / PLUGIN, os.X_OK):
            return directory / PLUGIN
    found = shutil.which(PLUGIN)
    return Path(found).absolute() if found else None


class InstallError(Exception):
    """The plugin cannot be linked; ``str()`` says why."""


def install(directory: Path, command: Path, force: bool = False) -> str:
    """Link ``directory``/flux-gate to ``command``; return what was done, in one line. An
    existing link is replaced; anything else only with ``force``."""
    link = directory / PLUGIN
    target = command.absolute()
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return f"{link} already links to {target}"
    if link.exists() and not link.is_symlink() and not force:
        raise InstallError(f"{link} exists and is not a link; remove it or use --force")
    directory.mkdir(parents=True, exist_ok=True)
    staged = directory / f".{PLUGIN}.{os.getpid()}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(target)
    os.replace(staged, link)  # atomic: flux never sees the plugin missing
    return f"linked {link} -> {target}"


if __name__ == "__main__":
    sys.exit(main())
