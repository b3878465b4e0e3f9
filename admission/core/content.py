"""What a Flux object's status says it serves and what new content waits (FLUX-WRITES.md).

Pure: reads plain dicts. ``waiting(obj)`` tells any reader (kubectl gate, the controller) what
a held object waits for, from the condition the webhook wrote (admission.core.holdmessage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from admission.core import holdmessage
from admission.core import kinds
from admission.core import names
from admission.core.conditions import holding_condition, status_of
from admission.core.holdmessage import NewContent
from admission.core.jsonvalues import same
from admission.core.objects import Object, metadata

Get = Callable[[str, str, str], "Object | None"]  # (kind, namespace, name) -> the stored object
NOTHING = "nothing"  # what a source serves before its first artifact
MAX_TEXT = 200  # a revision longer than this is cut in messages (a message must stay readable)


@dataclass(frozen=True)
class Waiting:
    """What waits for a held object and what it serves meanwhile, read from its conditions."""

    kind: str
    waits: str
    serves: str
    gates: tuple[str, ...]  # the closed gates named in the message ("ns/name")
    message: str


def _mapping(value: object) -> Object:
    return value if isinstance(value, dict) else {}


# ---- what a status says it serves ---------------------------------------------------------

def _text(value: object) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def artifact(obj: Object | None) -> Object | None:
    found = status_of(obj).get(names.ARTIFACT_FIELD)
    return found if isinstance(found, dict) else None


def artifact_identity(obj: Object | None) -> tuple[object, object]:
    """What makes an artifact new: its revision and digest (url, size and times follow them)."""
    found = artifact(obj)
    return (found.get("revision"), found.get("digest")) if found else (None, None)


def artifact_text(found: Object | None) -> str:
    if not found:
        return NOTHING
    return _text(found.get("revision") or found.get("digest")) or NOTHING


def image_fields(obj: Object | None) -> dict[str, object]:
    """An ImagePolicy's chosen image: ``latestRef`` (v1) and ``latestImage`` (older), as stored."""
    status = status_of(obj)
    return {f: status.get(f) for f in (names.LATEST_REF_FIELD, names.LATEST_IMAGE_FIELD) if f in status}


def image_text(obj: Object | None) -> str:
    fields = image_fields(obj)
    ref = fields.get(names.LATEST_REF_FIELD)
    if isinstance(ref, dict) and (ref.get("name") or ref.get("tag")):
        text = f"{ref.get('name') or ''}:{ref.get('tag') or ''}"
        return _text(text + (f"@{ref['digest']}" if ref.get("digest") else ""))
    latest = fields.get(names.LATEST_IMAGE_FIELD)
    return _text(latest) if latest else NOTHING


# A HelmRelease's release content: chart version, OCI digest, values digest.
Release = tuple[str, str, str]


def attempted_release(obj: Object | None) -> Release:
    status = status_of(obj)
    return tuple(str(status.get(f) or "") for f in (  # type: ignore[return-value]
        names.LAST_ATTEMPTED_REVISION_FIELD, names.LAST_ATTEMPTED_REVISION_DIGEST_FIELD,
        names.LAST_ATTEMPTED_CONFIG_DIGEST_FIELD))


def applied_release(obj: Object | None) -> Release | None:
    """``status.history[0]``: what the HelmRelease applied last (None before its first release)."""
    history = status_of(obj).get(names.HISTORY_FIELD)
    last = history[0] if isinstance(history, list) and history and isinstance(history[0], dict) else None
    if last is None:
        return None
    return str(last.get("chartVersion") or ""), str(last.get("ociDigest") or ""), str(last.get("configDigest") or "")


def release_text(release: Release | None) -> str:
    if release is None or not any(release):
        return NOTHING
    version, oci_digest, config_digest = release
    text = version or "chart"
    if oci_digest:
        text += f"@{oci_digest}"
    if config_digest:
        text += f" (values {config_digest})"
    return _text(text)


def _revision(obj: Object | None, field: str) -> str:
    value = status_of(obj).get(field)
    return value if isinstance(value, str) else ""


def served_revision(kind: str, obj: Object | None) -> str:
    """What the object serves (sources, ImagePolicy) or last applied (Kustomization, HelmRelease)."""
    row = kinds.BY_KIND.get(kind)
    content = row.content if row else None
    if content == kinds.ARTIFACT:
        return artifact_text(artifact(obj))
    if content == kinds.LATEST_IMAGE:
        return image_text(obj)
    if content == kinds.ATTEMPTED_REVISION:
        return _text(_revision(obj, names.LAST_APPLIED_REVISION_FIELD)) or NOTHING
    if content == kinds.ATTEMPTED_RELEASE:
        return release_text(applied_release(obj))
    return NOTHING


# ---- new content --------------------------------------------------------------------------

def new_content(kind: str, old: Object | None, new: Object | None) -> NewContent | None:
    """``(waits, serves)`` when this status write carries new content, the change a closed gate
    holds: a source's artifact (revision or digest), an ImagePolicy's image, a Kustomization's
    ``lastAttemptedRevision`` moving to a revision other than its ``lastAppliedRevision``, a
    HelmRelease's ``lastAttempted*`` moving to values other than ``history[0]``'s."""
    row = kinds.BY_KIND.get(kind)
    content = row.content if row else None
    if content == kinds.ARTIFACT:
        if not same(artifact_identity(old), artifact_identity(new)):
            return NewContent(artifact_text(artifact(new)), artifact_text(artifact(old)))
    elif content == kinds.LATEST_IMAGE:
        if not same(image_fields(old), image_fields(new)):
            return NewContent(image_text(new), image_text(old))
    elif content == kinds.ATTEMPTED_REVISION:
        field = names.LAST_ATTEMPTED_REVISION_FIELD
        attempted = _revision(new, field)
        applied = _revision(new, names.LAST_APPLIED_REVISION_FIELD)
        if attempted != _revision(old, field) and attempted and attempted != applied:
            return NewContent(_text(attempted), _text(applied) or NOTHING)
    elif content == kinds.ATTEMPTED_RELEASE:
        release, history = attempted_release(new), applied_release(new)
        if release != attempted_release(old) and any(release) and release != history:
            return NewContent(release_text(release), release_text(history))
    return None


def approvable(kind: str, new: Object | None, carried: NewContent) -> tuple[str, ...]:
    """The texts an approval may name to let this write's new content through: what waits, as
    every message shows it; for a HelmRelease whose values stay those it applied, also the chart
    version alone (and ``version@digest``), as its chart source shows it waiting."""
    found = [carried.waits]
    row = kinds.BY_KIND.get(kind)
    if row is not None and row.content == kinds.ATTEMPTED_RELEASE:
        version, oci_digest, config_digest = attempted_release(new)
        history = applied_release(new)
        if version and history is not None and config_digest == history[2]:
            found += [version] + ([f"{version}@{oci_digest}"] if oci_digest else [])
    return tuple(found)


def recorded_attempt(kind: str, obj: Object | None) -> NewContent | None:
    """``(waits, serves)`` when the object's own status shows an attempt it has not applied."""
    if kind == "Kustomization":
        attempted = _revision(obj, names.LAST_ATTEMPTED_REVISION_FIELD)
        applied = _revision(obj, names.LAST_APPLIED_REVISION_FIELD)
        if attempted and attempted != applied:
            return NewContent(_text(attempted), _text(applied) or NOTHING)
    elif kind == "HelmRelease":
        release, history = attempted_release(obj), applied_release(obj)
        if any(release) and release != history:
            return NewContent(release_text(release), release_text(history))
    return None


_ATTEMPT_FIELDS = {
    kinds.ATTEMPTED_REVISION: (names.LAST_ATTEMPTED_REVISION_FIELD,),
    kinds.ATTEMPTED_RELEASE: (names.LAST_ATTEMPTED_REVISION_FIELD, names.LAST_ATTEMPTED_REVISION_DIGEST_FIELD,
                              names.LAST_ATTEMPTED_CONFIG_DIGEST_FIELD),
}


def _attempt_fields(kind: str) -> tuple[str, ...]:
    row = kinds.BY_KIND.get(kind)
    return _ATTEMPT_FIELDS.get(row.content, ()) if row and row.content else ()


def attempt_of(kind: str, obj: Object | None) -> Object:
    """Only the attempt an object's status records (``{"status": {field: value}}``)."""
    recorded = status_of(obj)
    return {"status": {f: recorded.get(f) for f in _attempt_fields(kind)}}


def held_attempt(kind: str, attempted: Object | None, stored: Object | None) -> NewContent | None:
    """``(waits, serves)`` for the attempt a denied status write (``attempted``) recorded,
    against what the object as stored now has applied: None once that is what it applied."""
    if not _attempt_fields(kind):
        return None
    return recorded_attempt(kind, {"status": {**status_of(stored), **status_of(attempt_of(kind, attempted))}})


def upstream(kind: str, obj: Object | None) -> tuple[str, str, str] | None:
    """The source a Kustomization or HelmRelease applies: ``(kind, namespace, name)``."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if obj is None or not isinstance(spec, dict):
        return None
    namespace = str(metadata(obj).get("namespace") or "default")
    if kind == "Kustomization":
        ref = spec.get("sourceRef")
    elif kind == "HelmRelease":
        ref = spec.get("chartRef")
        chart = spec.get("chart")
        if not isinstance(ref, dict) and isinstance(chart, dict):
            return "HelmChart", generated_chart_namespace(obj), f"{namespace}-{metadata(obj).get('name') or ''}"
    else:
        return None
    if not isinstance(ref, dict) or not isinstance(ref.get("kind"), str) or not isinstance(ref.get("name"), str):
        return None
    return ref["kind"], str(ref.get("namespace") or namespace), ref["name"]


def upstream_waits(kind: str, obj: Object | None, source_kind: str, source: Object | None) -> NewContent | None:
    """``(waits, serves)`` when the source a Kustomization or HelmRelease applies serves
    content it has not applied yet (None when they agree, or we cannot tell)."""
    found = artifact(source)
    if not found:
        return None
    revision = found.get("revision")
    if kind == "Kustomization":
        applied = _revision(obj, names.LAST_APPLIED_REVISION_FIELD)
        if isinstance(revision, str) and revision and revision != applied:
            return NewContent(_text(revision), _text(applied) or NOTHING)
        return None
    if kind != "HelmRelease" or not isinstance(revision, str) or not revision:
        return None
    history = applied_release(obj)
    if source_kind == "HelmChart":  # the artifact's revision is the chart version
        if history is None or revision != history[0]:
            return NewContent(_text(revision), release_text(history))
    elif source_kind == "OCIRepository":  # "<tag>@sha256:<digest>": history keeps the digest
        digest = revision.rpartition("@")[2]
        if history is None or (digest and digest != history[1]):
            return NewContent(_text(revision), release_text(history))
    return None


def upstream_of(kind: str, obj: Object | None, get: Get) -> NewContent | None:
    """``upstream_waits`` for the source ``obj`` applies, looked up with ``get`` (a cache)."""
    ref = upstream(kind, obj)
    if ref is None:
        return None
    return upstream_waits(kind, obj, ref[0], get(*ref))


def generated_chart_namespace(release: Object) -> str:
    """Where helm-controller creates a HelmRelease's HelmChart: its sourceRef's namespace."""
    ref = _mapping(_mapping(_mapping(_mapping(release.get("spec")).get("chart")).get("spec")).get("sourceRef"))
    return str(ref.get("namespace") or metadata(release).get("namespace") or "default")


def generator(chart: Object) -> tuple[str, str] | None:
    """(namespace, name) of the HelmRelease that generated ``chart``: helm-controller labels the
    chart it generates with its release (names.HELM_NAME_LABEL/NAMESPACE_LABEL, fluxcd/pkg/ssa
    SetOwnerLabels) and names it ``<namespace>-<name>``. A chart with the labels under another
    name was deployed by that release, not generated. The labels, not the name, say where the
    namespace ends (both may hold dashes), and the webhooks' matchConditions read the same
    (admission.core.matching)."""
    meta = metadata(chart)
    labels = _mapping(meta.get("labels"))
    namespace, name = labels.get(names.HELM_NAMESPACE_LABEL), labels.get(names.HELM_NAME_LABEL)
    if isinstance(namespace, str) and isinstance(name, str) and meta.get("name") == f"{namespace}-{name}":
        return namespace, name
    return None


def generating_releases(chart: Object, get: Get) -> tuple[Object, ...]:
    """The HelmRelease whose generated HelmChart is ``chart`` (FLUX-WRITES.md: one per
    HelmRelease, in its sourceRef's namespace), checked against the HelmRelease found; a
    dictionary lookup."""
    owner = generator(chart)
    release = get("HelmRelease", *owner) if owner else None
    if release is None:
        return ()
    spec = _mapping(release.get("spec"))
    if isinstance(spec.get("chart"), dict) and not spec.get("chartRef") \
            and generated_chart_namespace(release) == str(metadata(chart).get("namespace") or "default"):
        return (release,)
    return ()


def inherits_from(obj: Object, get: Get) -> tuple[Object, ...]:
    """The objects whose gates ``obj`` inherits: a generated HelmChart's HelmRelease."""
    return generating_releases(obj, get) if obj.get("kind") == "HelmChart" else ()


# ---- what a held object shows ----------------------------------------------------------

def waiting(obj: Object | None) -> Waiting | None:
    """What waits for a held object, from the Blocked (sources, ImagePolicy) or Approved
    (Kustomization, HelmRelease) condition the webhook wrote; None when nothing waits."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if not isinstance(kind, str) or kind not in kinds.BY_KIND:
        return None
    found = holding_condition(obj, kind)
    if found is None:
        return None
    message = found.get("message")
    message = message if isinstance(message, str) else ""
    hold = holdmessage.parse(message)
    if hold is None:
        return Waiting(kind, "", served_revision(kind, obj), (), message)
    return Waiting(kind, hold.content.waits, hold.content.serves, hold.gates, message)
