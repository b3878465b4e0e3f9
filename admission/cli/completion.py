"""Completers for ``kubectl gate``'s and ``flux gate``'s arguments (argcomplete): gate names and
namespaces from the API server with a short timeout, or from ``--gates-dir``. They never raise:
completion shows nothing rather than a traceback.

May import what ``admission.cli.kubectl_gate`` imports, and how it reaches the cluster (admission.cli.cluster).
"""

from __future__ import annotations

import argparse

from admission.core.base import names
from admission.core.base.objects import metadata, object_key
from admission.core.gates.references import is_name, is_namespace

COMPLETION_TIMEOUT = 3  # seconds; a slow cluster must not hang the shell


def namespace_of(args: argparse.Namespace) -> str | None:
    """-n, else the namespace the command defaults to (flux gate: flux's); None: the context's."""
    if getattr(args, "namespace", None):
        given: str = args.namespace
        return given
    default = getattr(args, "default_namespace", None)
    return default(args) if default else None


def gate_names(prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    # Only what a name can be: a gates file's names are unchecked, and could hold escape sequences
    # that the shell would print as a candidate.
    try:
        namespace = namespace_of(parsed_args)
        if getattr(parsed_args, "gates_dir", None):
            from admission.cli.cluster import context_namespace
            from admission.store.files import FileStore

            namespace = namespace or context_namespace(parsed_args)  # as `get` will read it
            store = FileStore(parsed_args.gates_dir, inotify=False)  # one read: no watch to set up
            return sorted(
                n for ns, n in map(object_key, store.index.gates()) if ns == namespace and is_name(n)
            )
        from admission.cli.cluster import connect

        cluster = connect(parsed_args)
        listed = cluster.custom.list_namespaced_custom_object(
            names.GATING_GROUP,
            names.GATING_VERSION,
            namespace or cluster.namespace,
            names.GATE_PLURAL,
            _request_timeout=COMPLETION_TIMEOUT,
        )
        return sorted(
            n for n in (metadata(g).get("name", "") for g in listed.get("items") or []) if is_name(n)
        )
    except Exception:  # noqa: BLE001 (completion shows nothing rather than a traceback in the shell)
        return []


def namespaces(prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    try:
        from kubernetes import client

        from admission.cli.cluster import connect

        cluster = connect(parsed_args)
        try:
            listed = client.CoreV1Api(cluster.api).list_namespace(_request_timeout=COMPLETION_TIMEOUT)
            return sorted(
                str(ns.metadata.name) for ns in listed.items if ns.metadata and is_namespace(ns.metadata.name)
            )
        except Exception:  # noqa: BLE001 (may not list namespaces: offer those that hold gates)
            gates = cluster.custom.list_cluster_custom_object(
                names.GATING_GROUP,
                names.GATING_VERSION,
                names.GATE_PLURAL,
                _request_timeout=COMPLETION_TIMEOUT,
            )
            return sorted(
                {
                    ns
                    for ns in (metadata(g).get("namespace", "") for g in gates.get("items") or [])
                    if is_namespace(ns)
                }
            )
    except Exception:  # noqa: BLE001 (completion shows nothing rather than a traceback in the shell)
        return []


def no_candidates(**_: object) -> list[str]:
    """For free text (a message): nothing to offer, not the file names argcomplete would."""
    return []
