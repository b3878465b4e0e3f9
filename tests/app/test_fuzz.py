"""Fuzzing POST /validate and /mutate in process: whatever the body, the answer is a valid
AdmissionReview response or a 4xx with a JSON reason; never a 500, never a handler failure.

The strategies (``cases`` and its parts), the apps (``make_clients``) and the properties
(``check``, ``post``) are shared with bench/fuzz.py, which runs 100,000 and more of them.
"""

from __future__ import annotations

import base64
import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from admission.core.admission.decision import Settings
from admission.core.base import names
from admission.core.flux import kinds
from admission.store.files import FileStore
from admission.webhook.app import MAX_BODY, create_app
from admission.webhook.review import API_VERSIONS, MAX_MESSAGE, OPERATIONS
from tests.builders import FLUX_API, FLUX_KINDS, changed, flux, gate, keeper, request, review
from tests.conftest import FIXED_NOW, write_gates

ORJSON_MAX_DEPTH = 1024  # orjson.loads refuses deeper documents (and orjson.dumps anything over 255)
SERVER_RECURSION_LIMIT = 1000  # CPython's default, which gunicorn workers keep
PATHS = ("/validate", "/mutate")
MODES = ("enforce", "audit")
EXEMPT_USER, EXEMPT_GROUP = "fuzz-exempt", "fuzz-breakglass"
RESPONSE_KEYS = {"uid", "allowed", "status", "patch", "patchType", "warnings", "auditAnnotations"}
AUDIT_PATCH_PATHS = {
    "/metadata",
    "/metadata/annotations",
    "/metadata/annotations/" + names.AUDIT_ANNOTATION.replace("/", "~1"),
}
STATUS_PATCH_PATHS = {"/status", "/status/suspended"}

# A closed gate, an open one, one closed by a GateKeeper at FIXED_NOW (noon), and an audit-mode one.
# None says spec.mode: enforce, so an audit-mode app never denies (a property below).
GATES = [
    gate("sre-approval", default="closed"),
    gate("qa-approval", default="opened"),
    gate("change-freeze", default="opened"),
    keeper("freeze", "change-freeze", closed=["* 11-13 * * *"]),
    gate("audit-gate", default="closed", mode="audit"),
]


# --- the apps -----------------------------------------------------------------------------


def make_clients(directory: Path) -> dict[str, Any]:
    """One Flask test client per server mode, over a FileStore of GATES and a fixed clock."""
    write_gates(directory, GATES)
    clients = {}
    for mode in MODES:
        settings_ = Settings(
            mode=mode, exempt_users=frozenset({EXEMPT_USER}), exempt_groups=frozenset({EXEMPT_GROUP})
        )
        app = create_app(FileStore(directory), settings_, clock=lambda: FIXED_NOW)
        app.testing = True  # an exception that escapes the app's own handlers reaches the caller
        clients[mode] = app.test_client()
    return clients


# --- strategies ---------------------------------------------------------------------------

ODD_CHARS = [
    "\x00",
    "\x7f",
    "\u202e",
    "\u200f",
    "\u200d",
    "\u0301",
    "\ufeff",
    "\u2028",
    "\ufffd",
    "\U0001f600",
    "\U0001f469\u200d\U0001f4bb",
    "\U0010ffff",
    "\\",
    '"',
    "/",
    "~",
    ",",
    " ",
    "\n",
    "\t",
    "a",
    "z",
    "0",
    "-",
    ".",
]
GATE_REFS = [
    "flux-system/sre-approval",
    "flux-system/qa-approval",
    "flux-system/change-freeze",
    "flux-system/audit-gate",
    "sre-approval",
    "flux-system/missing",
    "flux-system/",
    "/",
    "a/b/c",
    "Flux-System/SRE",
    "sre-approval\n",
    " , ,",
    "-bad-/x",
    "x" * 300,
    "flux-system/sre-approval, flux-system/qa-approval",
    "flux-system/qa-approval,flux-system/audit-gate",
]
CRONS = [
    "* * * * *",
    "@always",
    "@never",
    "@daily",
    "@every 1m",
    "@reboot",
    "* * * * * *",
    "* *",
    "61 * * * *",
    "*/0 * * * *",
    "1-0 * * * *",
    "-1 * * * *",
    "*/ * * * *",
    ",,, * * * *",
    "0 0 31 2 *",
    "L * * * *",
    "* * L * *",
    "* * 15W * *",
    "* * * * 5#3",
    "* * * * 5#9",
    "* * * JAN-DEC MON-SUN",
    "* * * FOO *",
    "9999999999999999999 * * * *",
    "* 11-13 * * *",
    "CRON_TZ=Europe/Berlin * * * * *",
    "CRON_TZ= * * * * *",
    "TZ=Mars/Olympus * * * * *",
    "CRON_TZ=../../etc/passwd * * * * *",
    "CRON_TZ=/etc/localtime * * * * *",
    "CRON_TZ=America * * * * *",
    "CRON_TZ=zone.tab * * * * *",
    "CRON_TZ=" + "a" * 300 + " * * * * *",
    "CRON_TZ=Europe/Berlin\x00 * * * * *",
    "CRON_TZ=\U0001f600 * * * * *",
    "\u202e* * * * *",
]
REQUIRES = ["all", "oneOf", "ONEOF", "any", ""]
KEYS = [
    "name",
    "namespace",
    "annotations",
    "labels",
    "spec",
    "status",
    "gates",
    "refs",
    "require",
    "suspend",
    "artifact",
    "revision",
    "digest",
    "suspended",
    "metadata",
    "path",
    "interval",
]
ANNOTATION_KEYS = [
    names.GATES_ANNOTATION,
    names.REQUIRE_ANNOTATION,
    names.SUSPEND_DURING_ANNOTATION,
    names.SUSPENDED_DURING_ANNOTATION,
    names.SUSPENDED_ANNOTATION,
    names.AUDIT_ANNOTATION,
    names.RECONCILE_REQUEST_ANNOTATION,
]
USERS = [
    "alice",
    EXEMPT_USER,
    "system:serviceaccount:flux-system:kustomize-controller",
    *sorted(names.SYSTEM_DELETERS),
]
GROUPS = ["system:authenticated", "developers", EXEMPT_GROUP]
GATED_GROUPS = {kind: FLUX_API[kind].partition("/")[0] for kind in FLUX_KINDS}
FLUX_KIND = st.sampled_from(FLUX_KINDS)
# Kinds we do not gate: other groups, other kinds in Flux groups, near misses in case and spacing.
UNGATED_KINDS = [
    ("apps", "v1", "Deployment"),
    ("", "v1", "ConfigMap"),
    (names.GATING_GROUP, "v1alpha1", "Gate"),
    ("kustomize.toolkit.fluxcd.io", "v1", "HelmRelease"),
    ("source.toolkit.fluxcd.io", "v1", "Kustomization"),
    ("kustomize.toolkit.fluxcd.io", "v1", "kustomization"),
    ("helm.toolkit.fluxcd.io ", "v2", "HelmRelease"),
    ("source.toolkit.fluxcd.io", "v1", "GitRepository "),
    ("notification.toolkit.fluxcd.io", "v1", "Receiver"),
    ("Source.Toolkit.Fluxcd.Io", "v1", "Bucket"),
    ("kustomize.toolkit.fluxcd.io\x00", "v1", "Kustomization"),
]

odd_text = st.one_of(
    st.text(max_size=12),
    st.lists(st.sampled_from(ODD_CHARS), max_size=12).map("".join),
    st.sampled_from(GATE_REFS + CRONS + REQUIRES + ANNOTATION_KEYS),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
)
keys = st.one_of(st.sampled_from(KEYS + ANNOTATION_KEYS), odd_text)
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(keys, kids, max_size=4), max_leaves=8
)


def maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """The strategy, or a random JSON value of any type in its place."""
    return st.one_of(strategy, json_values)


def mostly(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """The strategy three times in four, else a random JSON value: shapes that reach deeper code."""
    return st.one_of(strategy, strategy, strategy, json_values)


gate_lists = st.lists(st.one_of(st.sampled_from(GATE_REFS), odd_text), max_size=4).map(", ".join)
refs = st.one_of(
    st.sampled_from(GATE_REFS),
    odd_text,
    st.fixed_dictionaries(
        {},
        optional={
            "name": maybe(st.sampled_from(["sre-approval", "qa-approval", "audit-gate", "missing"])),
            "namespace": maybe(st.sampled_from(["flux-system", "apps"])),
        },
    ),
)
spec_gates = st.one_of(
    st.lists(maybe(refs), max_size=3),
    st.fixed_dictionaries(
        {},
        optional={
            "require": maybe(st.sampled_from(REQUIRES)),
            "refs": maybe(st.lists(maybe(refs), max_size=3)),
        },
    ),
    json_values,
)
annotations = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            names.GATES_ANNOTATION: maybe(gate_lists),
            names.REQUIRE_ANNOTATION: maybe(st.sampled_from(REQUIRES)),
            names.SUSPEND_DURING_ANNOTATION: maybe(st.sampled_from(CRONS) | odd_text),
            names.SUSPENDED_DURING_ANNOTATION: maybe(st.sampled_from(CRONS)),
            names.SUSPENDED_ANNOTATION: maybe(odd_text),
            names.AUDIT_ANNOTATION: maybe(odd_text),
            "other": json_values,
        },
    ),
)
metadata = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "name": maybe(st.sampled_from(["podinfo", "x"]) | odd_text),
            "namespace": maybe(st.sampled_from(["apps", "flux-system"]) | odd_text),
            "generateName": maybe(odd_text),
            "annotations": annotations,
            "labels": json_values,
        },
    ),
)
specs = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "suspend": maybe(st.booleans()),
            "gates": spec_gates,
            "path": maybe(st.sampled_from(["./a", "./b"])),
            "interval": json_values,
        },
    ),
)
artifacts = st.fixed_dictionaries(
    {},
    optional={
        "revision": maybe(st.sampled_from(["main@sha1:1", "main@sha1:2"])),
        "digest": maybe(st.sampled_from(["sha256:1", "sha256:2"])),
    },
)
statuses = mostly(
    st.fixed_dictionaries(
        {},
        optional={"artifact": maybe(artifacts), "suspended": maybe(st.booleans()), "conditions": json_values},
    ),
)


@st.composite
def flux_objects(draw, kind: str) -> dict:
    """A Flux object of ``kind`` whose metadata, spec and status are of random shapes and types."""
    obj = {"apiVersion": draw(maybe(st.just(FLUX_API[kind]))), "kind": draw(maybe(st.just(kind)))}
    for key, strategy in (("metadata", metadata), ("spec", specs), ("status", statuses)):
        if draw(st.integers(0, 4)):  # mostly present
            obj[key] = draw(strategy)
    return obj


def _near(obj: dict, draw) -> dict:
    """The same object or a small edit of it: most real UPDATEs change little."""
    if draw(st.booleans()):
        return copy.deepcopy(obj)
    other = copy.deepcopy(obj)
    key = draw(st.sampled_from(["metadata", "spec", "status"]))
    other[key] = draw({"metadata": metadata, "spec": specs, "status": statuses}[key])
    return other


@st.composite
def gated_reviews(draw, kinds=FLUX_KIND) -> dict:
    """A well-formed AdmissionReview for a gated Flux kind with random object contents."""
    kind = draw(kinds)
    operation = draw(st.sampled_from(OPERATIONS))
    new = draw(flux_objects(kind))
    old = _near(new, draw) if draw(st.booleans()) else draw(flux_objects(kind))
    if operation == "CREATE":
        old = draw(st.sampled_from([None, old]))
    elif operation in ("DELETE", "CONNECT"):
        new = draw(st.sampled_from([None, new]))
        old = draw(st.sampled_from([old, None]))
    group = GATED_GROUPS[kind]
    user = {"username": draw(st.sampled_from(USERS) | odd_text)}
    if draw(st.booleans()):
        user["groups"] = draw(st.lists(st.sampled_from(GROUPS) | odd_text, max_size=3))
    request = {
        "uid": draw(
            st.text(min_size=1, max_size=40) | st.sampled_from(["7f0d3c55-1d7e-4a53-9b8e-3c1f2a9d8e01"])
        ),
        "kind": {
            "group": group,
            "version": draw(st.sampled_from(["v1", "v1beta2", "v2", ""]) | odd_text),
            "kind": kind,
        },
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "operation": operation,
        "userInfo": user,
        "object": new,
        "oldObject": old,
    }
    for key, strategy in (
        ("subResource", st.sampled_from(["", "status", "scale"]) | odd_text),
        ("name", odd_text),
        ("namespace", odd_text),
        ("dryRun", st.booleans()),
        ("options", st.dictionaries(odd_text, json_values, max_size=2)),
    ):
        if draw(st.booleans()):
            request[key] = draw(st.none() | strategy)
    return {"apiVersion": draw(st.sampled_from(API_VERSIONS)), "kind": "AdmissionReview", "request": request}


# --- what the parser must accept: the AdmissionReview contract (SPEC §6: wrong shapes are 400) ---


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _str_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


def _dict_or_none(value: object) -> bool:
    return value is None or isinstance(value, dict)


FIELD_RULES: dict[tuple, Callable[[object], bool]] = {
    ("apiVersion",): lambda v: isinstance(v, str) and v in API_VERSIONS,
    ("kind",): lambda v: v == "AdmissionReview",
    ("request",): lambda v: isinstance(v, dict),
    ("request", "uid"): lambda v: isinstance(v, str) and 0 < len(v) <= 256,
    ("request", "kind"): lambda v: isinstance(v, dict),
    ("request", "kind", "group"): _is_str,
    ("request", "kind", "version"): _is_str,
    ("request", "kind", "kind"): lambda v: isinstance(v, str) and v != "",
    ("request", "operation"): lambda v: isinstance(v, str) and v in OPERATIONS,
    ("request", "userInfo"): lambda v: isinstance(v, dict),
    ("request", "userInfo", "username"): _is_str,
    ("request", "userInfo", "groups"): lambda v: v is None or (isinstance(v, list) and all(map(_is_str, v))),
    ("request", "object"): _dict_or_none,
    ("request", "oldObject"): _dict_or_none,
    ("request", "options"): _dict_or_none,
    ("request", "subResource"): _str_or_none,
    ("request", "name"): _str_or_none,
    ("request", "namespace"): _str_or_none,
    ("request", "dryRun"): lambda v: v is None or isinstance(v, bool),
    ("request", "resource"): lambda v: True,  # not read
}
# Fields whose absence makes a review malformed; an absent optional field is fine.
REQUIRED = {
    ("apiVersion",),
    ("kind",),
    ("request",),
    ("request", "uid"),
    ("request", "kind"),
    ("request", "kind", "group"),
    ("request", "kind", "version"),
    ("request", "kind", "kind"),
    ("request", "operation"),
    ("request", "userInfo"),
}
OBJECT_FIELDS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "annotations"),
    *[("metadata", "annotations", key) for key in ANNOTATION_KEYS],
    ("metadata", "labels"),
    ("spec",),
    ("spec", "gates"),
    ("spec", "gates", "refs"),
    ("spec", "gates", "require"),
    ("spec", "path"),
    ("spec", "suspend"),
    ("status",),
    ("status", "artifact"),
    ("status", "artifact", "revision"),
    ("status", "suspended"),
]
OBJECT_PATHS = [(root, *field) for root in ("object", "oldObject") for field in OBJECT_FIELDS]
FIELD_PATHS = list(FIELD_RULES)
REQUEST_OBJECT_PATHS = [("request", *p) for p in OBJECT_PATHS]
ALL_PATHS = FIELD_PATHS + REQUEST_OBJECT_PATHS


def envelope_ok(doc: object) -> bool:
    """Whether ``doc`` is a well-formed AdmissionReview by the rules above."""
    if not isinstance(doc, dict):
        return False
    for path, rule in FIELD_RULES.items():
        parent = doc
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if parent is None:
            continue  # a missing parent is judged at its own level
        if not isinstance(parent, dict):
            return False
        if path[-1] in parent and not rule(parent[path[-1]]) or path[-1] not in parent and path in REQUIRED:
            return False
    request = doc["request"]
    needs = {"CREATE": ("object",), "UPDATE": ("object", "oldObject")}.get(request["operation"], ())
    return all(isinstance(request.get(key), dict) for key in needs)


def poke(doc: dict, path: tuple, value: object = None, delete: bool = False) -> dict:
    """A copy of ``doc`` with ``value`` at ``path`` (or the key removed), making parents dicts."""
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        if not isinstance(parent.get(key), dict):
            parent[key] = {}
        parent = parent[key]
    if delete:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return doc


# --- cases: a body and what it must get ---------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request body; ``expect`` is the status it must get (None: 200 or a 4xx)."""

    family: str
    body: bytes
    expect: int | None = None
    content_type: str | None = "application/json"


def _dumps(doc: object) -> bytes:
    return orjson.dumps(doc)


def _expect_for(doc: object, body: bytes) -> int:
    if len(body) > MAX_BODY:
        return 413
    return 200 if envelope_ok(doc) else 400


def review_case(family: str, doc: dict) -> Case:
    body = _dumps(doc)
    return Case(family, body, _expect_for(doc, body))


content_types = st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", None])

malformed_bytes = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"",
            b" ",
            b"null",
            b"[]",
            b"{",
            b"}",
            b"{}",
            b'"AdmissionReview"',
            b"\xff\xfe{}",
            b"\xef\xbb\xbf{}",
            b"NaN",
            b"Infinity",
            b"1e999",
            b"{'kind': 'AdmissionReview'}",
            b'{"kind":"AdmissionReview",}',
        ]
    ),
    st.builds(
        lambda doc, cut: _dumps(doc)[: max(0, min(cut, len(_dumps(doc)) - 1))],
        gated_reviews(),
        st.integers(0, 4000),
    ),  # truncated: never a whole JSON document
    st.builds(
        lambda doc, tail: _dumps(doc) + tail,
        gated_reviews(),
        st.sampled_from([b"x", b"}", b",", b"\x00", b"{}"]),
    ),
).map(lambda body: Case("malformed-bytes", body, 413 if len(body) > MAX_BODY else 400))


@st.composite
def flipped_bytes(draw) -> Case:
    """A valid review with one byte changed: may still parse, may not."""
    body = bytearray(_dumps(draw(gated_reviews())))
    index = draw(st.integers(0, len(body) - 1))
    body[index] = draw(st.integers(0, 255))
    return Case("flipped-byte", bytes(body))


arbitrary_json = json_values.map(lambda v: Case("arbitrary-json", _dumps(v), 400))


@st.composite
def wrong_fields(draw) -> Case:
    """A well-formed review with one field (envelope or object) missing or of a random type."""
    doc = draw(gated_reviews())
    path = draw(st.sampled_from(ALL_PATHS))
    delete = draw(st.booleans())
    return review_case("wrong-field", poke(doc, path, None if delete else draw(json_values), delete))


@st.composite
def wrong_kinds(draw) -> Case:
    """A well-formed review of a kind we do not gate, or with a wrong apiVersion or review kind."""
    doc = draw(gated_reviews())
    what = draw(st.sampled_from(["request.kind", "apiVersion", "kind"]))
    if what == "request.kind":
        group, version, kind = draw(st.sampled_from(UNGATED_KINDS) | st.tuples(odd_text, odd_text, odd_text))
        doc = poke(doc, ("request", "kind"), {"group": group, "version": version, "kind": kind})
        case = review_case("ungated-kind", doc)
        gated = kinds.is_gated_kind(group, kind)
        return Case("gated-kind" if gated else "ungated-kind", case.body, case.expect)
    wrong = draw(
        st.sampled_from(
            [
                "admission.k8s.io/v2",
                "admission.k8s.io",
                "v1",
                "",
                "ADMISSION.K8S.IO/V1",
                "admission.k8s.io/v1 ",
                "AdmissionReview",
                "admissionreview",
            ]
        )
        | odd_text
    )
    return review_case(f"wrong-{what}", poke(doc, (what,), wrong))


HUGE = 1 << 20


@st.composite
def huge_strings(draw) -> Case:
    """A review with a string of 64 KiB to 1 MiB characters (1 to 4 bytes each) somewhere,
    or in both objects (two of 4 MiB are over the 7 MiB limit)."""
    doc = draw(gated_reviews())
    char = draw(st.sampled_from(["a", ",", "a,", "é", "\U0001f600", "a/", "* "]))
    text = char * (draw(st.sampled_from([1 << 16, HUGE])) // len(char))
    path = draw(st.sampled_from(ALL_PATHS))
    if draw(st.booleans()):  # half of them in an annotation: gate references, crons, reasons
        path = (
            "request",
            draw(st.sampled_from(["object", "oldObject"])),
            "metadata",
            "annotations",
            draw(st.sampled_from(ANNOTATION_KEYS)),
        )
    doc = poke(doc, path, text)
    if path[:2] in (("request", "object"), ("request", "oldObject")) and draw(st.booleans()):
        doc = poke(doc, ("request", "oldObject" if path[1] == "object" else "object", *path[2:]), text)
    return review_case("huge-string", doc)


SENTINEL = "\ue000fuzz-sentinel\ue000"
SENTINEL_JSON = orjson.dumps(SENTINEL)
# Raw JSON string forms orjson must refuse (lone surrogates) or decode (pairs, NUL escapes).
SURROGATES = {
    b'"\\ud800"': None,
    b'"\\udfff"': None,
    b'"a\\udc00b"': None,
    b'"\\ud83d"': None,
    b'"\xed\xa0\x80"': None,
    b'"\\ud83d\\ude00"': "\U0001f600",
    b'"\\u0000"': "\x00",
    b'"\\u202e\\u200f"': "\u202e\u200f",
}


def _spliced(doc: dict, path: tuple, raw: bytes) -> bytes:
    return _dumps(poke(doc, path, SENTINEL)).replace(SENTINEL_JSON, raw)


@st.composite
def surrogates(draw) -> Case:
    """A review with a lone surrogate (escaped or raw UTF-8) or other odd escapes in one string."""
    doc = draw(gated_reviews())
    path = draw(st.sampled_from(ALL_PATHS))
    raw, decoded = draw(st.sampled_from(sorted(SURROGATES.items())))
    body = _spliced(doc, path, raw)
    expect = 400 if decoded is None else _expect_for(poke(doc, path, decoded), body)
    return Case("surrogate", body, expect)


def deep(depth: int, shape: str) -> bytes:
    """About ``depth`` levels of nested lists, dicts, or both alternating, as raw JSON bytes."""
    if shape == "list":
        return b"[" * depth + b"]" * depth
    if shape == "dict":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b'[{"spec":' * (depth // 2) + b"[]" + b"}]" * (depth // 2)


def levels(depth: int, shape: str) -> int:
    """How many containers deep ``deep(depth, shape)`` is."""
    return depth if shape in ("list", "dict") else 2 * (depth // 2) + 1


DEPTHS = [2, 100, 500, 900, 950, 980, 1000, 1010, 1015, 1018, 1020, 1024, 1025, 2000, 5000, 20000]
# Just under orjson's limit is where Python's recursion limit (1000) bites: weigh it.
deep_depths = st.sampled_from(DEPTHS) | st.integers(1, 3000) | st.integers(880, 1020)
shapes = st.sampled_from(["list", "dict", "mixed"])


@st.composite
def deep_nesting(draw) -> Case:
    """Thousands of levels of nesting: a bare document, or inside a review (both objects at once)."""
    depth, shape = draw(deep_depths), draw(shapes)
    nested = deep(depth, shape)
    if draw(st.integers(0, 3)) == 0:
        return Case("deep-bare", nested, 413 if len(nested) > MAX_BODY else 400)  # never an AdmissionReview
    doc = draw(gated_reviews(kinds=st.sampled_from(FLUX_KINDS)))
    path = draw(
        st.sampled_from(ALL_PATHS) | st.sampled_from(REQUEST_OBJECT_PATHS)
    )  # mostly where the core looks
    if path[:2] in (("request", "object"), ("request", "oldObject")) and draw(st.booleans()):
        # The same deep value in both objects: comparing them has to descend all the way.
        twin = ("request", "oldObject" if path[1] == "object" else "object", *path[2:])
        body = _dumps(poke(poke(doc, path, SENTINEL), twin, SENTINEL)).replace(SENTINEL_JSON, nested)
    else:
        body = _spliced(doc, path, nested)
    # The review's own dicts down to ``path`` count too.
    too_deep = len(path) + levels(depth, shape) > ORJSON_MAX_DEPTH
    return Case("deep-review", body, 400 if too_deep else None)


gated = gated_reviews().map(lambda doc: review_case("gated-review", doc))
# Every family, weighted towards well-formed reviews, the ones that reach the core.
FAMILIES = [
    (gated, 35),
    (wrong_fields(), 20),
    (wrong_kinds(), 7),
    (malformed_bytes, 6),
    (flipped_bytes(), 5),
    (arbitrary_json, 4),
    (surrogates(), 8),
    (deep_nesting(), 12),
    (huge_strings(), 3),
]
cases = st.sampled_from([family for family, weight in FAMILIES for _ in range(weight)]).flatmap(
    lambda family: family
)
requests = st.tuples(cases, st.sampled_from(MODES), content_types)


# --- the properties -----------------------------------------------------------------------


class FuzzFailure(AssertionError):
    """A property does not hold; the message starts with a short, stable reason."""


def _shown(detail: object) -> str:
    try:
        return str(detail)[:300]
    except RecursionError:  # a deeply nested request
        return f"<{type(detail).__name__} nested too deep to show>"


def _fail_unless(condition: object, reason: str, detail: object = "") -> None:
    if not condition:
        raise FuzzFailure(f"{reason}: {_shown(detail)}" if detail != "" else reason)


def _strings(value: object, what: str) -> None:
    _fail_unless(
        isinstance(value, list)
        and value
        and all(isinstance(w, str) and w and len(w) <= MAX_MESSAGE for w in value),
        f"bad {what}",
        value,
    )


def _check_patch(response: dict, request: dict, path: str) -> None:
    _fail_unless(path == "/mutate", "validate answered with a patch", response.get("patch"))
    _fail_unless(response.get("patchType") == "JSONPatch", "patch without patchType JSONPatch", response)
    try:
        ops = orjson.loads(base64.b64decode(response["patch"], validate=True))
    except (ValueError, TypeError) as err:
        raise FuzzFailure(f"patch is not base64 JSON: {err}") from None
    _fail_unless(isinstance(ops, list) and ops, "patch is not a non-empty JSON list", ops)
    try:
        # In place: the request was decoded afresh for this check, and may be too deep to copy.
        patched = jsonpatch.apply_patch(request.get("object"), ops, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as err:
        raise FuzzFailure(f"patch does not apply to request.object: {err}") from None
    touched = {op.get("path") for op in ops}
    status_write = request.get("subResource") == "status"
    _fail_unless(
        touched <= (STATUS_PATCH_PATHS if status_write else AUDIT_PATCH_PATHS),
        "patch touches other fields",
        touched,
    )
    if status_write:
        _fail_unless(
            isinstance(patched.get("status"), dict) and isinstance(patched["status"].get("suspended"), bool),
            "status patch does not leave status.suspended a boolean",
            patched.get("status"),
        )
    else:
        record = patched["metadata"]["annotations"][names.AUDIT_ANNOTATION]
        _fail_unless(isinstance(orjson.loads(record), dict), "audit record is not a JSON object", record)


def _no_opinion(request: dict, path: str) -> bool:
    """Requests the spec says we have no opinion on: kinds we do not gate, and (mutate) deletes and connects."""
    kind = request["kind"]
    if not kinds.is_gated_kind(kind["group"], kind["kind"]):
        return True
    return path == "/mutate" and request["operation"] in ("DELETE", "CONNECT")


def _check_review(doc: dict, payload: dict, path: str, mode: str) -> None:
    _fail_unless(
        isinstance(payload, dict) and payload.get("kind") == "AdmissionReview",
        "answer is not an AdmissionReview",
        payload,
    )
    _fail_unless(
        payload.get("apiVersion") == doc["apiVersion"],
        "answer apiVersion differs from the request's",
        (payload.get("apiVersion"), doc["apiVersion"]),
    )
    response = payload.get("response")
    _fail_unless(isinstance(response, dict) and set(response) <= RESPONSE_KEYS, "bad response keys", response)
    request = doc["request"]
    _fail_unless(response.get("uid") == request["uid"], "response.uid is not the request uid")
    _fail_unless(isinstance(response.get("allowed"), bool), "response.allowed is not a boolean", response)
    status = response.get("status")
    # A handler that raised: the app answers with code 500 (validate) or a warning (mutate).
    _fail_unless(not (isinstance(status, dict) and status.get("code") == 500), "handler failed", status)
    _fail_unless(
        not any("could not evaluate" in str(w) for w in response.get("warnings") or ()),
        "handler failed",
        response.get("warnings"),
    )
    if not response["allowed"]:
        _fail_unless(path == "/validate", "mutate denied a request", response)
        _fail_unless(mode == "enforce", "audit mode denied a request", response)
        _fail_unless(
            isinstance(status, dict)
            and status.get("code") == 403
            and status.get("reason") == "Forbidden"
            and isinstance(status.get("message"), str)
            and 0 < len(status["message"]) <= MAX_MESSAGE,
            "bad denial status",
            status,
        )
    else:
        _fail_unless(status is None, "an allowed response has a status", status)
    if "warnings" in response:
        _strings(response["warnings"], "warnings")
    audit = response.get("auditAnnotations")
    _fail_unless(
        audit is None
        or (isinstance(audit, dict) and audit and all(isinstance(v, str) for v in audit.values())),
        "bad auditAnnotations",
        audit,
    )
    if "patch" in response or "patchType" in response:
        _check_patch(response, request, path)
    if _no_opinion(request, path):
        _fail_unless(
            set(response) == {"uid", "allowed"} and response["allowed"],
            "an opinion where none is due",
            response,
        )
    kind = request["kind"]
    if (
        path == "/mutate"
        and request.get("subResource") == "status"
        and request["operation"] == "UPDATE"
        and kinds.is_gated_kind(kind["group"], kind["kind"])
        and isinstance(request.get("object"), dict)
        and "patch" not in response
    ):
        # Absent says "not suspended" as false does (admission.core.admission.matching): only a value that
        # is not a boolean must always be rewritten.
        status_ = request["object"].get("status")
        suspended = status_.get("suspended", False) if isinstance(status_, dict) else False
        _fail_unless(
            isinstance(suspended, bool), "no patch although status.suspended is not a boolean", status_
        )


def check(case: Case, path: str, mode: str, status: int, payload: bytes) -> None:
    """The properties every answer must have; raise FuzzFailure naming the first that fails."""
    _fail_unless(status < 500, f"HTTP {status}", payload[:300])
    _fail_unless(
        case.expect is None or status == case.expect,
        f"HTTP {status} where {case.expect} is due",
        payload[:300],
    )
    try:
        answer = orjson.loads(payload)
    except orjson.JSONDecodeError as err:
        raise FuzzFailure(f"answer is not JSON: {err}") from None
    if status != 200:
        _fail_unless(400 <= status < 500, f"HTTP {status}")
        _fail_unless(
            isinstance(answer, dict)
            and set(answer) == {"error"}
            and isinstance(answer["error"], str)
            and answer["error"].strip(),
            "bad error body",
            answer,
        )
        return
    _check_review(orjson.loads(case.body), answer, path, mode)


def post(client, case: Case, path: str) -> tuple[int, bytes]:
    """Send a case through a Flask test client at the server's recursion limit; return the
    status and raw body."""
    headers = {"Content-Type": case.content_type} if case.content_type else {}
    # hypothesis raises the limit while a test runs, which hid the server's RecursionErrors.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(min(limit, SERVER_RECURSION_LIMIT))
    try:
        resp = client.post(path, data=case.body, headers=headers)
    finally:
        sys.setrecursionlimit(limit)
    return resp.status_code, resp.get_data()


# --- the CI subset ------------------------------------------------------------------------

FAST = dict(
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    return make_clients(tmp_path_factory.mktemp("fuzz-gates"))


def run(clients, case: Case, mode: str, content_type: str | None = "application/json") -> None:
    case = Case(case.family, case.body, case.expect, content_type)
    for path in PATHS:
        check(case, path, mode, *post(clients[mode], case, path))


@settings(max_examples=400, **FAST)
@given(case=gated, mode=st.sampled_from(MODES), content_type=content_types)
def test_gated_kinds_with_random_contents(clients, case, mode, content_type):
    run(clients, case, mode, content_type)


@settings(max_examples=250, **FAST)
@given(case=wrong_fields(), mode=st.sampled_from(MODES))
def test_missing_fields_and_wrong_types(clients, case, mode):
    run(clients, case, mode)


@settings(max_examples=120, **FAST)
@given(case=wrong_kinds(), mode=st.sampled_from(MODES))
def test_wrong_kinds_and_api_versions(clients, case, mode):
    run(clients, case, mode)


@settings(max_examples=200, **FAST)
@given(
    case=malformed_bytes | flipped_bytes() | arbitrary_json,
    mode=st.sampled_from(MODES),
    content_type=content_types,
)
def test_malformed_bodies(clients, case, mode, content_type):
    run(clients, case, mode, content_type)


@settings(max_examples=100, **FAST)
@given(case=surrogates(), mode=st.sampled_from(MODES))
def test_surrogates_and_odd_escapes(clients, case, mode):
    run(clients, case, mode)


@settings(max_examples=80, **FAST)
@given(case=deep_nesting(), mode=st.sampled_from(MODES))
@example(case=Case("deep-bare", deep(100_000, "list"), 400), mode="enforce")
def test_deep_nesting(clients, case, mode):
    run(clients, case, mode)


@settings(max_examples=12, **FAST)
@given(case=huge_strings(), mode=st.sampled_from(MODES))
def test_huge_strings(clients, case, mode):
    run(clients, case, mode)


@pytest.mark.parametrize("path", PATHS)
def test_values_nested_too_deep_to_judge_are_a_400(clients, path):
    """Found by bench/fuzz.py: orjson decodes 1024 levels, and comparing two specs ~1000 levels
    deep raised RecursionError in the handler (validate answered code 500, mutate a warning)."""
    # x comes first, so comparing the specs descends all the way before it finds the path change.
    old = flux(gates="flux-system/sre-approval", spec={"x": SENTINEL, "path": "./a"})
    doc = review(request("UPDATE", changed(old, path="./b"), old))
    for depth, expect in ((100, 200), (1000, 400)):
        body = _dumps(doc).replace(SENTINEL_JSON, deep(depth, "list"))
        status, payload = post(clients["enforce"], Case("deep-review", body), path)
        assert status == expect, payload
        if expect == 400:
            assert "too deeply" in orjson.loads(payload)["error"]
        elif path == "/validate":  # a merely deep object is judged as usual
            assert orjson.loads(payload)["response"]["allowed"] is False


def test_the_properties_can_fail():
    """The checker is not vacuous: each kind of wrong answer is caught."""
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "operation": "CREATE",
            "userInfo": {},
            "object": {"spec": {}},
        },
    }
    case = review_case("gated-review", doc)

    def answer(response: dict, api_version: str = "admission.k8s.io/v1") -> bytes:
        return _dumps({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})

    check(case, "/validate", "enforce", 200, answer({"uid": "u", "allowed": True}))
    wrong = [
        (500, b'{"error":"internal error; see the server log"}'),
        (400, b'{"error":"x"}'),  # a well-formed review must be answered
        (200, answer({"uid": "other", "allowed": True})),
        (200, answer({"uid": "u", "allowed": True}, "admission.k8s.io/v1beta1")),
        (200, answer({"uid": "u", "allowed": "yes"})),
        (200, answer({"uid": "u", "allowed": True, "warnings": ["w"]})),  # an opinion on a Deployment
        (
            200,
            answer({"uid": "u", "allowed": False, "status": {"code": 500, "message": "could not evaluate"}}),
        ),
        (200, b"not json"),
    ]
    for status, payload in wrong:
        with pytest.raises(FuzzFailure):
            check(case, "/validate", "enforce", status, payload)
    bad_patch = base64.b64encode(b'[{"op":"replace","path":"/nope/x","value":1}]').decode()
    gated_doc = poke(
        poke(
            doc,
            ("request", "kind"),
            {"group": "source.toolkit.fluxcd.io", "version": "v1", "kind": "GitRepository"},
        ),
        ("request", "subResource"),
        "status",
    )
    with pytest.raises(FuzzFailure, match="patch does not apply"):
        update = poke(poke(gated_doc, ("request", "operation"), "UPDATE"), ("request", "oldObject"), {})
        check(
            review_case("gated-review", update),
            "/mutate",
            "enforce",
            200,
            answer({"uid": "u", "allowed": True, "patchType": "JSONPatch", "patch": bad_patch}),
        )
    with pytest.raises(FuzzFailure, match="400"):
        check(
            Case("malformed-bytes", b"{", 400),
            "/validate",
            "enforce",
            200,
            answer({"uid": "u", "allowed": True}),
        )
