"""A Deployment's selector widened at an upgrade without a moment of fewer Pods
(docs/decisions/0074-labels-and-the-selector-change.md).

A Deployment's selector cannot change. To add labels to it, the Pods it runs and their
ReplicaSets are given those labels first, then the Deployment is deleted with its dependents
orphaned: the Pods keep serving. The Deployment created next under the same name, with the wider
selector, finds the old ReplicaSets matching it and adopts them, then rolls them over to its own
template as any rollout does (maxUnavailable, maxSurge). The old ReplicaSets' Pod templates are
left as they are: changed while the old Deployment still ran, they would no longer be its current
revision, and it would start a rollout of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

WAIT_SECONDS = 120.0


class ReselectError(Exception):
    """The Deployment cannot be given that selector; the message says why and what to do."""


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _owned_by(obj: Any, uid: str) -> bool:
    return any(ref.uid == uid for ref in obj.metadata.owner_references or ())


def reselect(
    api_client: client.ApiClient | None,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    wait: float = WAIT_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> str:
    """Make Deployment ``namespace/name``'s selector ready to become ``labels``: one line says
    what was done. Nothing when it is absent or already selects by every one of them."""
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    try:
        # Any: the client's models type every field optional; a stored Deployment has them all.
        deployment: Any = apps.read_namespaced_deployment(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return f"deployment {namespace}/{name}: absent, nothing to do"
        raise
    selector = deployment.spec.selector
    current = dict(selector.match_labels or {})
    if selector.match_expressions:
        raise ReselectError(f"deployment {namespace}/{name} selects by expressions: not ours to change")
    differ = sorted(k for k in labels if k in current and current[k] != labels[k])
    if differ:
        raise ReselectError(
            f"deployment {namespace}/{name} selects {_selector({k: current[k] for k in differ})}, not "
            f"{_selector({k: labels[k] for k in differ})}: a label's value cannot change at an upgrade "
            "(nameOverride?); keep the value it was installed with, or uninstall and install again"
        )
    if current == dict(labels):
        return f"deployment {namespace}/{name}: already selects {_selector(labels)}"
    added = {k: v for k, v in labels.items() if k not in current}
    uid = deployment.metadata.uid
    sets, pods = 0, 0
    patch = {"metadata": {"labels": added}}
    sets_found: list[Any] = apps.list_namespaced_replica_set(
        namespace, label_selector=_selector(current)
    ).items
    for rs in sets_found:
        if not _owned_by(rs, uid):
            continue
        pods_found: list[Any] = core.list_namespaced_pod(
            namespace, label_selector=_selector(rs.spec.selector.match_labels or {})
        ).items
        for pod in pods_found:
            if _owned_by(pod, rs.metadata.uid):
                core.patch_namespaced_pod(pod.metadata.name, namespace, patch)
                pods += 1
        apps.patch_namespaced_replica_set(rs.metadata.name, namespace, patch)
        sets += 1
    apps.delete_namespaced_deployment(
        name,
        namespace,
        body=client.V1DeleteOptions(
            propagation_policy="Orphan", preconditions=client.V1Preconditions(uid=uid)
        ),
    )
    # Gone before the new Deployment is applied: one still being deleted would refuse it. The
    # garbage collector first takes the ReplicaSets' owner references away (the orphaning).
    deadline = monotonic() + wait
    while True:
        try:
            left: Any = apps.read_namespaced_deployment(name, namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            break
        if left.metadata.uid != uid:
            break
        if monotonic() > deadline:
            raise ReselectError(
                f"deployment {namespace}/{name} was deleted (dependents orphaned) but is still there after "
                f"{wait:.0f} s: is the garbage collector (kube-controller-manager) running?"
            )
        time.sleep(0.5)
    return (
        f"deployment {namespace}/{name}: {sets} ReplicaSet(s) and {pods} Pod(s) labelled "
        f"{_selector(added)} and orphaned; the next Deployment selecting {_selector(labels)} adopts them"
    )
