"""``kubectl gate board``: the gate board on 127.0.0.1, read through the user's own kubeconfig
(like ``kubectl proxy``), its actions made with the user's own credentials; or read-only from a
``--gates-dir``, as ``serve --gates-dir`` reads it (docs/decisions/0072)."""

from __future__ import annotations

import argparse
import sys
import threading
import webbrowser
from collections.abc import Callable
from typing import Any

from admission.board.app import create_app, serve
from admission.board.model import Refused, Snapshot
from admission.cli import approve, gate_commands
from admission.cli.cluster import (
    EXIT_OK,
    EXIT_USAGE,
    Cluster,
    GateError,
    api_errors,
    api_failures,
    api_message,
    connect,
    kubeconfig_context,
)
from admission.clock import utcnow
from admission.core.base import names
from admission.store.index import GateIndex

LOOPBACK = "127.0.0.1"


class ClusterSource:
    """The cluster's Gates, GateKeepers and Flux objects, listed as the kubeconfig's user."""

    def __init__(self, cluster: Cluster, where: str):
        self._cluster, self.where = cluster, where
        self._last = Snapshot(GateIndex(), [])

    def snapshot(self) -> Snapshot:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        from admission.kube.fluxobjects import FluxObjects

        custom = self._cluster.custom
        try:
            gates = custom.list_cluster_custom_object(
                names.GATING_GROUP, names.GATING_VERSION, names.GATE_PLURAL
            )
            keepers = custom.list_cluster_custom_object(
                names.GATING_GROUP, names.GATING_VERSION, names.GATEKEEPER_PLURAL
            )
            objects = FluxObjects(custom).list_all()
        except ApiException as err:  # shown on the page, over the last board that could be read
            return self._last._replace(problems=(f"cannot read the cluster: {api_message(err)}",))
        except HTTPError as err:
            return self._last._replace(problems=(f"cannot reach the cluster: {err}",))
        index = GateIndex()
        index.replace_all(gates.get("items") or [], keepers.get("items") or [])
        self._last = Snapshot(index, objects)
        return self._last


class FilesSource:
    """A gates directory, read as the server reads it (no Flux objects: nothing is held)."""

    def __init__(self, directory: str):
        import logging

        from admission.store.files import FileStore

        logging.getLogger("admission.store").addHandler(logging.NullHandler())  # on the page instead
        self.where = f"--gates-dir {directory} (read-only)"
        self._store = FileStore(directory, inotify=False)

    def snapshot(self) -> Snapshot:
        self._store.check()
        return Snapshot(self._store.index, [], tuple(self._store.problems.values()), reads_objects=False)


class ClusterActions:
    """The page's actions as the kubeconfig's user: the same writes as ``approve``, ``open`` and
    ``close``; what the API server refuses comes back in its words."""

    def __init__(self, cluster: Cluster):
        self._cluster = cluster

    def approve(
        self, namespace: str, gate: str, content: str, target: str, message: str, expires: str
    ) -> list[str]:
        def run() -> list[str]:
            until = approve.expiry(expires, utcnow()) if expires else None
            return approve.approve(
                self._cluster, namespace, gate, content or None, target or None, message, until
            )

        return _refusals(run)

    def withdraw(self, namespace: str, gate: str, content: str, target: str) -> list[str]:
        return _refusals(
            lambda: approve.withdraw(self._cluster, namespace, gate, content or None, target or None)
        )

    def toggle(self, namespace: str, gate: str, action: str, message: str, for_: str) -> list[str]:
        def run() -> list[str]:
            line = gate_commands.toggle(
                self._cluster, namespace, gate, action, message or None, self._cluster.user, for_ or None
            )
            return [line]

        return _refusals(run)


def _refusals(run: Callable[[], list[str]]) -> list[str]:
    """``run``'s lines; Refused with the one line ``kubectl gate`` would print for its failure."""
    try:
        with api_failures():
            return run()
    except (GateError, ValueError) as err:
        raise Refused(str(err)) from None


def local_zone() -> Any:
    """The viewer's time zone: this machine's, as the board runs where its user is."""
    return utcnow().astimezone().tzinfo


@api_errors
def cmd_board(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise GateError(f"--port {args.port}: a port is 0 (any free one) to 65535", EXIT_USAGE)
    if args.gates_dir:
        source: Any = FilesSource(args.gates_dir)
        actions = None
    else:
        cluster = connect(args)
        context = kubeconfig_context(args).get("name") or "(none)"
        source = ClusterSource(cluster, f"context {context}, as its user {cluster.user or '(unnamed)'}")
        actions = None if args.read_only else ClusterActions(cluster)
    app = create_app(source, actions, local_zone(), utcnow)
    try:
        server = serve(app, LOOPBACK, args.port)
    except OSError as err:
        raise GateError(
            f"cannot listen on {LOOPBACK}:{args.port}: {err.strerror or err}", EXIT_USAGE
        ) from None
    url = f"http://{LOOPBACK}:{server.server_port}/" + (
        f"?namespace={args.namespace}" if args.namespace else ""
    )
    gate_commands.show([f"Serving the gate board on {url} (Ctrl-C stops it)"])
    sys.stdout.flush()
    if args.open:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "board",
        parents=[common],
        help="serve the gate board on 127.0.0.1: every gate, its timeline, what waits, and approvals",
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--open", action="store_true", help="open it in the browser")
    p.add_argument("--read-only", action="store_true", help="no actions on the page")
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster (read-only)")
    p.set_defaults(func=cmd_board)
