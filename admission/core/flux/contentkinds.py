"""Each kind of new content a Flux status carries, as one frozen value (FLUX-WRITES.md, docs/design.md "Hold points").

A value knows where its content lives in a status, what an object serves, what a status write
brings, what an attempt records, what an approval may name, and the source it applies.
``admission.core.flux.kinds`` gives each gated kind its value (``NO_CONTENT``: none held) and
looks one up by a stored object's kind; below it, this never looks kinds up. Pure: plain dicts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from admission.core.base import names
from admission.core.base.jsonvalues import same
from admission.core.base.objects import Object, mapping, metadata, namespace_of, status_of
from admission.core.flux.holdmessage import NewContent
from admission.core.flux.sourcerefs import (
    Ref,
    generated_chart_name,
    generated_chart_namespace,
    source_ref,
)

NOTHING = "nothing"  # what a source serves before its first artifact
# A revision longer than this is cut in messages (a message must stay readable). Display only:
# approvals are compared with the whole identity (``approvable``), never with this text, and an
# approval's content is at most as long (admission.core.gates.approvals.MAX_TEXT), so whatever can be
# approved is shown whole, and a cut text names nothing an approval can match.
MAX_TEXT = 512
CUT = "…"

# A HelmRelease's release content: chart version, OCI digest, values digest.
Release = tuple[str, str, str]
Get = Callable[[str, str, str], "Object | None"]  # (kind, namespace, name) -> the stored object


def _whole(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _text(value: object) -> str:
    text = _whole(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + CUT


def cut(text: str) -> bool:
    """Whether a message's text was cut (it names no whole identity)."""
    return len(text) >= MAX_TEXT and text.endswith(CUT)


_CHART = re.compile(
    r"^chart (?:(?P<chart>\S+) )?(?P<version>[^\s@]+)(?:@(?P<digest>\S+))? from (?P<source>\S+)"
    r"(?: \(values (?P<values>\S+)\))?$"
)


@dataclass(frozen=True)
class ChartContent:
    """A chart as an approval names it, whole: its source (``Kind/namespace/name``), its name
    (none for an OCIRepository), version, digest (where one exists) and, for what a release
    applies, the values digest."""

    chart: str
    version: str
    digest: str
    source: str
    values: str = ""

    def text(self) -> str:
        name = f"{self.chart} " if self.chart else ""
        text = f"chart {name}{self.version}" + (f"@{self.digest}" if self.digest else "")
        return f"{text} from {self.source}" + (f" (values {self.values})" if self.values else "")

    @classmethod
    def parse(cls, text: str) -> ChartContent | None:
        found = _CHART.match(text)
        if found is None:
            return None
        parts = found.groupdict()
        return cls(*(parts[k] or "" for k in ("chart", "version", "digest", "source", "values")))

    def applied_as(self) -> tuple[str, ...]:
        """How a HelmRelease shows it applied or waiting (``AttemptedRelease.text``): its
        status names no source, and a digest only for an OCIRepository's chart."""
        if not self.values:
            return ()
        shown = {AttemptedRelease.text((self.version, "", self.values))}
        if self.digest:
            shown.add(AttemptedRelease.text((self.version, self.digest, self.values)))
        return tuple(sorted(shown))


def chart_of(chart: Object | None) -> ChartContent | None:
    """What a HelmChart serves, as an approval names it (no values: a chart has none)."""
    artifact = mapping(status_of(chart).get(names.ARTIFACT_FIELD))
    spec = mapping(mapping(chart).get("spec"))
    ref = source_ref(spec.get("sourceRef"), namespace_of(mapping(chart)))
    revision, name = artifact.get("revision"), spec.get("chart")
    if ref is None or not isinstance(revision, str) or not revision or not isinstance(name, str):
        return None
    digest = artifact.get("digest")
    return ChartContent(name, revision, digest if isinstance(digest, str) else "", "/".join(ref))


def _revision(obj: Object | None, field: str) -> str:
    value = status_of(obj).get(field)
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class ContentKind:
    """Where a kind's new content lives and how a closed gate holds it; the defaults are a kind
    that applies no source and records no attempt."""

    holds: ClassVar[bool] = True  # a closed gate holds this content (NoContent: only edits are gated)
    fields: ClassVar[tuple[str, ...]]  # the status fields that carry it
    where: ClassVar[str]  # the same, for docs, listings and messages
    keeps: ClassVar[bool] = False  # written back while held (Blocked says what waits)
    records_attempts: ClassVar[bool] = False  # the write recording an attempt is denied (Approved=False)
    shows_denied_attempts: ClassVar[bool] = False  # the webhook writes Approved=False itself after a denial
    hold_condition: ClassVar[str]  # the condition that says new content waits on a held object

    def serves(self, obj: Object | None) -> str:
        """What the object serves (sources, ImagePolicy) or last applied (Kustomization, HelmRelease)."""
        raise NotImplementedError

    def brings(self, old: Object | None, new: Object | None) -> NewContent | None:
        """``(waits, serves)`` when this status write carries new content, the change a closed gate holds."""
        raise NotImplementedError

    def recorded(self, obj: Object | None) -> NewContent | None:
        """``(waits, serves)`` when the object's own status shows an attempt it has not applied."""
        return None

    def attempt(self, obj: Object | None) -> Object:
        """Only the attempt an object's status records (``{"status": {field: value}}``)."""
        return {"status": {}}

    def held_attempt(self, attempted: Object | None, stored: Object | None) -> NewContent | None:
        """``(waits, serves)`` for the attempt a denied status write recorded, against what ``stored`` applied."""
        return None

    def identity(self, obj: Object | None) -> str:
        """What the object serves, whole (``serves`` is what messages show of it)."""
        raise NotImplementedError

    def approvable(
        self, new: Object | None, carried: NewContent, get: Get | None, parents: tuple[Object, ...]
    ) -> tuple[str, ...]:
        """The identities an approval may name to let this write's new content through: what
        the write carries, whole (never the text messages show, which may be cut). ``get``
        finds other Flux objects, ``parents`` are those the object inherits gates from."""
        return (self.identity(new),)

    def approval_of(
        self, obj: Object, waits: str, get: Get | None, parents: tuple[Object, ...]
    ) -> str | None:
        """What an approval names to let ``waits`` (as ``obj``'s hold message shows it) through;
        None when that cannot be known (a cut text, a chart whose source is not found)."""
        return None if cut(waits) else waits

    def upstream(self, obj: Object) -> Ref | None:
        """The source the object applies (its spec is a mapping): ``(kind, namespace, name)``."""
        return None

    def upstream_waits(
        self, obj: Object | None, source_kind: str, source: Object | None
    ) -> NewContent | None:
        """``(waits, serves)`` when the source the object applies serves content it has not applied yet."""
        return None

    def upstream_of(self, obj: Object | None, get: Get) -> NewContent | None:
        """``upstream_waits`` for the source ``obj`` applies, looked up with ``get`` (a cache)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
            return None
        ref = self.upstream(obj)
        return self.upstream_waits(obj, ref[0], get(*ref)) if ref is not None else None


@dataclass(frozen=True)
class NoContent(ContentKind):
    """A kind whose content no gate holds (only edits are gated; or a kind we do not gate):
    it serves nothing and no write brings any, so a reader can ask any object's kind."""

    holds: ClassVar[bool] = False
    fields: ClassVar[tuple[str, ...]] = ()
    where: ClassVar[str] = ""
    hold_condition: ClassVar[str] = ""

    def serves(self, obj: Object | None) -> str:
        return NOTHING

    def brings(self, old: Object | None, new: Object | None) -> NewContent | None:
        return None

    def identity(self, obj: Object | None) -> str:
        return NOTHING


@dataclass(frozen=True)
class _Kept(ContentKind):
    """Content a held object keeps serving: a write that changes it gets the stored one back."""

    keeps: ClassVar[bool] = True
    hold_condition: ClassVar[str] = names.BLOCKED_CONDITION

    def _identity(self, obj: Object | None) -> object:
        """What makes the content new (a JSON value compared with ``same``)."""
        raise NotImplementedError

    def brings(self, old: Object | None, new: Object | None) -> NewContent | None:
        if same(self._identity(old), self._identity(new)):
            return None
        return NewContent(self.serves(new), self.serves(old))


@dataclass(frozen=True)
class Artifact(_Kept):
    """A source's ``status.artifact``."""

    fields: ClassVar[tuple[str, ...]] = (names.ARTIFACT_FIELD,)
    where: ClassVar[str] = "status.artifact (revision, digest)"

    @staticmethod
    def of(obj: Object | None) -> Object | None:
        found = status_of(obj).get(names.ARTIFACT_FIELD)
        return found if isinstance(found, dict) else None

    def _identity(self, obj: Object | None) -> object:
        # Its revision and digest make an artifact new (url, size and times follow them).
        found = self.of(obj)
        return (found.get("revision"), found.get("digest")) if found else (None, None)

    def identity(self, obj: Object | None) -> str:
        found = self.of(obj)
        if not found:
            return NOTHING
        return _whole(found.get("revision") or found.get("digest")) or NOTHING

    def serves(self, obj: Object | None) -> str:
        return _text(self.identity(obj))


@dataclass(frozen=True)
class ChartArtifact(Artifact):
    """A HelmChart's ``status.artifact``, shown and approved as the chart it is: source, name,
    version and digest; a generated chart's approval also names the values its HelmRelease
    applies, as that release's own hold point will (one approval lands both)."""

    def identity(self, obj: Object | None) -> str:
        chart = chart_of(obj)
        return chart.text() if chart is not None else super().identity(obj)

    def approvable(
        self, new: Object | None, carried: NewContent, get: Get | None, parents: tuple[Object, ...]
    ) -> tuple[str, ...]:
        chart = chart_of(new)
        if chart is None:
            return ()
        if not parents:
            return (chart.text(),)
        applied = [AttemptedRelease.applied(p) for p in parents]
        return tuple(replace(chart, values=a[2]).text() for a in applied if a is not None and a[2])

    def approval_of(
        self, obj: Object, waits: str, get: Get | None, parents: tuple[Object, ...]
    ) -> str | None:
        chart = ChartContent.parse(waits)
        if chart is None or cut(waits):
            return None
        if not parents:
            return chart.text()
        applied = AttemptedRelease.applied(parents[0])
        return replace(chart, values=applied[2]).text() if applied is not None and applied[2] else None


@dataclass(frozen=True)
class LatestImage(_Kept):
    """An ImagePolicy's chosen image: ``status.latestRef`` (v1), ``status.latestImage`` (older)."""

    fields: ClassVar[tuple[str, ...]] = (names.LATEST_REF_FIELD, names.LATEST_IMAGE_FIELD)
    where: ClassVar[str] = "status.latestRef (older versions: status.latestImage)"

    def _identity(self, obj: Object | None) -> object:
        status = status_of(obj)
        return {f: status.get(f) for f in self.fields if f in status}

    def identity(self, obj: Object | None) -> str:
        status = status_of(obj)
        ref = status.get(names.LATEST_REF_FIELD)
        if isinstance(ref, dict) and (ref.get("name") or ref.get("tag")):
            text = f"{ref.get('name') or ''}:{ref.get('tag') or ''}"
            return text + (f"@{ref['digest']}" if ref.get("digest") else "")
        latest = status.get(names.LATEST_IMAGE_FIELD)
        return _whole(latest) if latest else NOTHING

    def serves(self, obj: Object | None) -> str:
        return _text(self.identity(obj))


@dataclass(frozen=True)
class _Attempted(ContentKind):
    """Content an object records as attempted before it applies it: that write is denied while held."""

    records_attempts: ClassVar[bool] = True
    hold_condition: ClassVar[str] = names.APPROVED_CONDITION

    def _attempted(self, obj: Object | None) -> object:
        """The attempt the status records, as compared across writes."""
        raise NotImplementedError

    def brings(self, old: Object | None, new: Object | None) -> NewContent | None:
        if self._attempted(new) == self._attempted(old):
            return None
        return self.recorded(new)

    def attempt(self, obj: Object | None) -> Object:
        recorded = status_of(obj)
        return {"status": {f: recorded.get(f) for f in self.fields}}

    def held_attempt(self, attempted: Object | None, stored: Object | None) -> NewContent | None:
        return self.recorded({"status": {**status_of(stored), **status_of(self.attempt(attempted))}})

    def upstream(self, obj: Object) -> Ref | None:
        return source_ref(mapping(obj.get("spec")).get("sourceRef"), namespace_of(obj))


@dataclass(frozen=True)
class AttemptedRevision(_Attempted):
    """A Kustomization's ``lastAttemptedRevision``, recorded before it applies, against ``lastAppliedRevision``."""

    fields: ClassVar[tuple[str, ...]] = (names.LAST_ATTEMPTED_REVISION_FIELD,)
    where: ClassVar[str] = "status.lastAttemptedRevision vs status.lastAppliedRevision"

    def _attempted(self, obj: Object | None) -> object:
        return _revision(obj, names.LAST_ATTEMPTED_REVISION_FIELD)

    def identity(self, obj: Object | None) -> str:
        return _revision(obj, names.LAST_APPLIED_REVISION_FIELD) or NOTHING

    def serves(self, obj: Object | None) -> str:
        return _text(self.identity(obj))

    def approvable(
        self, new: Object | None, carried: NewContent, get: Get | None, parents: tuple[Object, ...]
    ) -> tuple[str, ...]:
        attempted = _revision(new, names.LAST_ATTEMPTED_REVISION_FIELD)
        return (attempted,) if attempted else ()

    def recorded(self, obj: Object | None) -> NewContent | None:
        attempted = _revision(obj, names.LAST_ATTEMPTED_REVISION_FIELD)
        if attempted and attempted != _revision(obj, names.LAST_APPLIED_REVISION_FIELD):
            return NewContent(_text(attempted), self.serves(obj))
        return None

    def upstream_waits(
        self, obj: Object | None, source_kind: str, source: Object | None
    ) -> NewContent | None:
        revision = mapping(Artifact.of(source)).get("revision")
        applied = _revision(obj, names.LAST_APPLIED_REVISION_FIELD)
        if isinstance(revision, str) and revision and revision != applied:
            return NewContent(_text(revision), self.serves(obj))
        return None


@dataclass(frozen=True)
class AttemptedRelease(_Attempted):
    """A HelmRelease's ``lastAttempted*`` (chart version, OCI digest, values digest), recorded
    before the Helm action, against ``history[0]``. Only the denied write can carry a values
    digest no source serves, so the webhook shows a denied attempt itself."""

    fields: ClassVar[tuple[str, ...]] = (
        names.LAST_ATTEMPTED_REVISION_FIELD,
        names.LAST_ATTEMPTED_REVISION_DIGEST_FIELD,
        names.LAST_ATTEMPTED_CONFIG_DIGEST_FIELD,
    )
    where: ClassVar[str] = (
        "status.lastAttempted{Revision,RevisionDigest,ConfigDigest} vs "
        "status.history[0].{chartVersion,ociDigest,configDigest}"
    )
    shows_denied_attempts: ClassVar[bool] = True

    def _attempted(self, obj: Object | None) -> Release:
        status = status_of(obj)
        version, oci_digest, config_digest = (str(status.get(f) or "") for f in self.fields)
        return version, oci_digest, config_digest

    @staticmethod
    def applied(obj: Object | None) -> Release | None:
        """``status.history[0]``: what the HelmRelease applied last (None before its first release)."""
        history = status_of(obj).get(names.HISTORY_FIELD)
        last = history[0] if isinstance(history, list) and history and isinstance(history[0], dict) else None
        if last is None:
            return None
        return (
            str(last.get("chartVersion") or ""),
            str(last.get("ociDigest") or ""),
            str(last.get("configDigest") or ""),
        )

    @staticmethod
    def text(release: Release | None) -> str:
        if release is None or not any(release):
            return NOTHING
        version, oci_digest, config_digest = release
        text = version or "chart"
        if oci_digest:
            text += f"@{oci_digest}"
        if config_digest:
            text += f" (values {config_digest})"
        return text

    @staticmethod
    def parse_text(text: str) -> Release | None:
        """``text``'s release back (None for any other text)."""
        found = re.match(r"^([^\s@]+)(?:@(\S+))?(?: \(values (\S+)\))?$", text)
        if found is None or text == NOTHING:
            return None
        version, oci_digest, config_digest = found.groups()
        return version, oci_digest or "", config_digest or ""

    def identity(self, obj: Object | None) -> str:
        return self.text(self.applied(obj))

    def serves(self, obj: Object | None) -> str:
        return _text(self.identity(obj))

    def chart(self, release: Object, version: str, oci_digest: str, get: Get | None) -> ChartContent | None:
        """The chart ``release`` applies at ``version``, whole: from an OCIRepository, its digest
        as the release records it; from a HelmChart (its own, or a chartRef), what that chart
        serves, when it serves that version (None: unknown, so nothing can approve it)."""
        ref = self.upstream(release)
        if ref is None or not version:
            return None
        if ref[0] == "OCIRepository":
            return ChartContent("", version, oci_digest, "/".join(ref)) if oci_digest else None
        chart = chart_of(get(*ref)) if ref[0] == "HelmChart" and get is not None else None
        return chart if chart is not None and chart.version == version else None

    def approvable(
        self, new: Object | None, carried: NewContent, get: Get | None, parents: tuple[Object, ...]
    ) -> tuple[str, ...]:
        # The chart, whole, and the values digest: a chart version alone is not what was reviewed.
        version, oci_digest, config_digest = self._attempted(new)
        chart = self.chart(new, version, oci_digest, get) if isinstance(new, dict) else None
        return (replace(chart, values=config_digest).text(),) if chart is not None and config_digest else ()

    def approval_of(
        self, obj: Object, waits: str, get: Get | None, parents: tuple[Object, ...]
    ) -> str | None:
        release = self.parse_text(waits)
        if release is None or cut(waits):
            return None
        chart = self.chart(obj, release[0], release[1], get)
        return replace(chart, values=release[2]).text() if chart is not None and release[2] else None

    def recorded(self, obj: Object | None) -> NewContent | None:
        release, history = self._attempted(obj), self.applied(obj)
        if any(release) and release != history:
            return NewContent(_text(self.text(release)), _text(self.text(history)))
        return None

    def upstream(self, obj: Object) -> Ref | None:
        spec = mapping(obj.get("spec"))
        if not isinstance(spec.get("chartRef"), dict) and isinstance(spec.get("chart"), dict):
            return (
                "HelmChart",
                generated_chart_namespace(obj),
                generated_chart_name(namespace_of(obj), metadata(obj).get("name") or ""),
            )
        return source_ref(spec.get("chartRef"), namespace_of(obj))

    def upstream_waits(
        self, obj: Object | None, source_kind: str, source: Object | None
    ) -> NewContent | None:
        revision = mapping(Artifact.of(source)).get("revision")
        if not isinstance(revision, str) or not revision:
            return None
        history = self.applied(obj)
        if source_kind == "HelmChart":  # the artifact's revision is the chart version
            if history is None or revision != history[0]:
                chart = chart_of(source)
                shown = chart.text() if chart is not None else revision  # as the chart shows it
                return NewContent(_text(shown), self.serves(obj))
        elif source_kind == "OCIRepository":  # "<tag>@sha256:<digest>": history keeps the digest
            digest = revision.rpartition("@")[2]
            if history is None or (digest and digest != history[1]):
                return NewContent(_text(revision), self.serves(obj))
        return None


NO_CONTENT = NoContent()
ARTIFACT = Artifact()
CHART_ARTIFACT = ChartArtifact()
LATEST_IMAGE = LatestImage()
ATTEMPTED_REVISION = AttemptedRevision()
ATTEMPTED_RELEASE = AttemptedRelease()
