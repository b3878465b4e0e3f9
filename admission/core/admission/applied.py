"""The AdmissionRequest the API server would send for `kubectl apply` of a manifest.

`kubectl gate check` judges this request with the webhook's own handler, so it can only
disagree with the webhook where this reconstruction differs from what the API server builds.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from admission.core.admission.review import AdmissionRequest, UserInfo
from admission.core.base import names
from admission.core.base.objects import annotations as annotations_of
from admission.core.base.objects import metadata
from admission.core.flux import kinds

CHECK_UID = "kubectl-gate-check"


def _merge_patch(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    return _merge_object(target, patch)


def _merge_object(target: object, patch: dict[str, Any]) -> dict[str, Any]:
    """``_merge_patch`` with an object for a patch, which always gives an object."""
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _deletions(original: dict[str, Any], modified: dict[str, Any]) -> dict[str, Any]:
    """Nulls for what the last apply set and this manifest no longer has."""
    out: dict[str, Any] = {}
    for key, value in original.items():
        if key not in modified:
            out[key] = None
        elif isinstance(value, dict) and isinstance(modified[key], dict):
            nested = _deletions(value, modified[key])
            if nested:
                out[key] = nested
    return out


def _last_applied(live: dict[str, Any]) -> dict[str, Any]:
    try:
        value = json.loads(annotations_of(live).get(names.LAST_APPLIED_ANNOTATION) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def applied(live: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """The object after a client-side `kubectl apply` of ``manifest`` over ``live``.

    Custom resources take kubectl's three-way JSON merge patch (last-applied, manifest, live):
    fields the manifest sets win, fields the last apply set and the manifest dropped go, and
    what only the server wrote (defaults, system metadata) stays. Status is the live one: a
    write of the main resource cannot change the status subresource.
    """
    given = copy.deepcopy(manifest)
    given_meta = metadata(given)
    if isinstance(given_meta.get("annotations"), dict):
        given_meta["annotations"].pop(names.LAST_APPLIED_ANNOTATION, None)
    patch = _merge_object(_deletions(_last_applied(live), given), given)
    patch.pop("status", None)
    new = _merge_object(live, patch)
    new.pop("status", None)
    if "status" in live:
        new["status"] = copy.deepcopy(live["status"])
    if not isinstance(new.get("metadata"), dict):
        new["metadata"] = {}
    new["metadata"]["annotations"] = {
        **annotations_of(new),
        names.LAST_APPLIED_ANNOTATION: json.dumps(given, sort_keys=True, separators=(",", ":")),
    }
    return new


def user_info(username: str, groups: tuple[str, ...] | list[str] = ()) -> UserInfo:
    """userInfo as the API server fills it in: every authenticated user is in
    system:authenticated, and a service account without groups given is in its own."""
    groups = list(dict.fromkeys(groups))
    if not groups and username.startswith(names.SERVICE_ACCOUNT_PREFIX):
        namespace = username[len(names.SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
        groups = [names.SERVICE_ACCOUNTS_GROUP, f"{names.SERVICE_ACCOUNTS_GROUP}:{namespace}"]
    if username != names.ANONYMOUS_USER and names.AUTHENTICATED_GROUP not in groups:
        groups.append(names.AUTHENTICATED_GROUP)
    return {"username": username, "groups": groups}


def apply_request(manifest: dict[str, Any], live: dict[str, Any] | None, user: UserInfo) -> AdmissionRequest:
    """The AdmissionRequest for applying ``manifest``: a CREATE, or an UPDATE of ``live``.
    ``manifest`` has a namespace (the caller fills in the default one)."""
    group, _, version = str(manifest.get("apiVersion", "")).rpartition("/")
    kind = str(manifest.get("kind", ""))
    row = kinds.lookup(group, kind)
    meta = metadata(manifest)
    new = applied(live, manifest) if live is not None else copy.deepcopy(manifest)
    return {
        "uid": CHECK_UID,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {
            "group": group,
            "version": version,
            "resource": row.plural if row else kind.lower() + "s",
        },
        "name": str(meta.get("name") or ""),
        "namespace": str(meta.get("namespace") or ""),
        "operation": "UPDATE" if live is not None else "CREATE",
        "userInfo": user,
        "object": new,
        "oldObject": copy.deepcopy(live) if live is not None else None,
        "dryRun": False,
    }
