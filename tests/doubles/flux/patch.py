"""Double of fluxcd/pkg runtime/patch: how every Flux controller writes status.

One ``patch()`` sends up to two requests to ``<kind>/status``: the conditions as a JSON merge
patch with the object's resourceVersion as a precondition (only Conflict is retried, 5 steps,
each on the latest object), then the rest of status as a merge patch from the "before" copy.
The conditions request is skipped when no condition changed; the rest-of-status request is
skipped only when nothing in status changed, so a conditions-only change still sends an empty
one (as fluxcd/pkg runtime/patch does: tests/realflux/test_doubles.py compares). The before
copy advances only after both succeed, so a denied field is sent again by the next patch in
the same reconcile.
"""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.core.flux.kinds import BY_KIND
from tests.doubles.mergepatch import merge_diff

MERGE = "application/merge-patch+json"
CONFLICT_STEPS = 5


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    """The custom-objects calls the doubles make, at each kind's given (or first) version."""

    def __init__(self, api_client: client.ApiClient, versions: dict[str, str] | None = None):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.versions = versions or {}

    def coords(self, kind: str) -> tuple[str, str, str]:
        row = BY_KIND[kind]
        return row.group, self.versions.get(kind, row.versions[0]), row.plural

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        group, version, plural = self.coords(kind)
        try:
            return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def patch_status(self, kind: str, namespace: str, name: str, body: dict, manager: str) -> dict:
        group, version, plural = self.coords(kind)
        return self.custom.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name, body, field_manager=manager, _content_type=MERGE
        )

    def patch(self, kind: str, namespace: str, name: str, body: dict, manager: str) -> dict:
        group, version, plural = self.coords(kind)
        return self.custom.patch_namespaced_custom_object(
            group, version, namespace, plural, name, body, field_manager=manager, _content_type=MERGE
        )

    def create(self, kind: str, namespace: str, body: dict, manager: str) -> dict:
        group, version, plural = self.coords(kind)
        return self.custom.create_namespaced_custom_object(
            group, version, namespace, plural, body, field_manager=manager
        )

    def put_config_map(self, namespace: str, name: str, data: dict[str, str], manager: str) -> None:
        """What a double "applied" to the cluster, where the tests read it: a ConfigMap."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
        try:
            self.core.replace_namespaced_config_map(name, namespace, body, field_manager=manager)
        except ApiException as err:
            if err.status != 404:
                raise
            self.core.create_namespaced_config_map(namespace, body, field_manager=manager)


def conditions(obj: dict) -> list[dict]:
    return list((obj.get("status") or {}).get("conditions") or [])


def condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in conditions(obj) if c.get("type") == kind), None)


def set_condition(obj: dict, kind: str, status: str, reason: str, message: str) -> None:
    """Set one condition as Flux's conditions.Set does: the transition time moves with the status."""
    status_ = obj.setdefault("status", {})
    found = condition(obj, kind)
    entry = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": (obj.get("metadata") or {}).get("generation"),
        "lastTransitionTime": found["lastTransitionTime"]
        if found and found.get("status") == status
        else now_text(),
    }
    rest = [c for c in conditions(obj) if c.get("type") != kind]
    status_["conditions"] = (
        rest + [entry] if found is None else [entry if c.get("type") == kind else c for c in conditions(obj)]
    )


def delete_condition(obj: dict, kind: str) -> None:
    if condition(obj, kind) is not None:
        obj["status"]["conditions"] = [c for c in conditions(obj) if c.get("type") != kind]


def _by_type(obj: dict) -> dict:
    return {c.get("type"): c for c in conditions(obj)}


def _apply_condition_changes(before: dict, after: dict, latest: dict) -> list[dict]:
    """Our condition changes (before -> after) applied onto the latest stored list: conditions
    we did not change stay as stored, even where someone else removed or rewrote them."""
    mine_before, mine_after = _by_type(before), _by_type(after)
    out = [c for c in conditions(latest) if c.get("type") not in mine_before or c.get("type") in mine_after]
    for kind, cond in mine_after.items():
        if mine_before.get(kind) != cond:
            out = [c for c in out if c.get("type") != kind] + [cond]
    return out


class PatchError(Exception):
    """The API server's answer to one of the two requests (the first error)."""

    def __init__(self, error: ApiException):
        super().__init__(api_message(error))
        self.error = error


def api_message(err: ApiException) -> str:
    import json

    try:
        return json.loads(err.body).get("message") or str(err.reason)
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)


class StatusPatcher:
    """One object's patch helper; ``before`` is what the helper believes is stored."""

    def __init__(self, api: Api, kind: str, obj: dict, manager: str):
        self.api, self.kind, self.manager = api, kind, manager
        self.before = copy.deepcopy(obj)
        meta = obj["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.requests: list[tuple[str, dict, str | None]] = []  # (which, body, error) for tests

    def patch(self, obj: dict) -> None:
        errors: list[ApiException] = []
        status_before, status_after = self.before.get("status") or {}, obj.get("status") or {}
        if status_before == status_after:
            return  # nothing changed: no request at all
        if _by_type(self.before) != _by_type(obj):
            try:
                self._patch_conditions(obj)
            except ApiException as err:
                errors.append(err)
        rest_before = {k: v for k, v in (self.before.get("status") or {}).items() if k != "conditions"}
        rest_after = {k: v for k, v in (obj.get("status") or {}).items() if k != "conditions"}
        body = {"status": merge_diff(rest_before, rest_after)} if rest_before != rest_after else {}
        try:
            stored = self.api.patch_status(self.kind, self.namespace, self.name, body, self.manager)
            obj["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
            self.requests.append(("status", body, None))
        except ApiException as err:
            self.requests.append(("status", body, api_message(err)))
            errors.append(err)
        if errors:
            raise PatchError(errors[0])
        self.before = copy.deepcopy(obj)

    def _patch_conditions(self, obj: dict) -> None:
        for step in range(CONFLICT_STEPS):
            latest = self.api.get(self.kind, self.namespace, self.name)
            if latest is None:
                raise ApiException(status=404, reason="NotFound")
            body = {
                "metadata": {"resourceVersion": latest["metadata"]["resourceVersion"]},
                "status": {"conditions": _apply_condition_changes(self.before, obj, latest)},
            }
            try:
                stored = self.api.patch_status(self.kind, self.namespace, self.name, body, self.manager)
                obj["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
                self.requests.append(("conditions", body, None))
                return
            except ApiException as err:
                self.requests.append(("conditions", body, api_message(err)))
                if err.status != 409 or step == CONFLICT_STEPS - 1:
                    raise
                time.sleep(0.01 * 2**step)  # the helper's exponential backoff between steps


def deferred_patch(patcher: StatusPatcher, obj: dict, error: Exception | None) -> None:
    """The end-of-reconcile patch, sent whatever happened before it (it re-sends refused
    fields); the reconcile's first error wins, else the patch's own."""
    try:
        patcher.patch(obj)
    except PatchError as err:
        error = error or err
    if error is not None:
        raise error
