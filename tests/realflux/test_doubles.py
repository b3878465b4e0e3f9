"""The doubles of source-controller, kustomize-controller and helm-controller (tests/doubles/flux)
write what the real controllers write, as admission sees it.

One scenario runs twice: with the real Flux controllers (this tier's session cluster) and with
the doubles (a control plane of their own, with our server and controller, as
tests/e2e/test_content_holds.py runs them). A gated GitRepository and a gated Kustomization (on
an ungated GitRepository of the same repository) reconcile revision 1 with the gate open; the
gate closes; revision 2 arrives and is held; the gate opens; revision 2 lands. For a gated
HelmRelease, revision 2 is new values from its ``valuesFrom`` ConfigMap (a new chart version
is held at the generated HelmChart, a source like the GitRepository).

What is compared: for each gated object, the API server's audit log of its status writes
(``<kind>/status`` update/patch, logged with request and response bodies by the test planes'
audit policy), from the first write until the write that stores revision 2 as landed. Each
patch call of the Flux controller (a conditions request and/or a rest-of-status request) is
reduced to what admission acts on: which requests it sent and which were refused, whether our
mutating webhook rewrote it, and which status fields the stored object (or, when refused, the
request) changes — every top-level field (size aside, the sub-fields of ``artifact``),
conditions by type, status and reason (a message-only change counts as a change, its wording
does not), revisions and values digests as R1/R2, D1/D2. Our controller's writes change what is
stored but are not entries, nor is where our webhook drops the Approved condition once the gate
opens (on whichever write comes first). Runs of repeated calls (retries, interval reconciles,
whose count depends on timing) count once; the scenario waits for at least one retry or poll while held,
so that the held phase always has them. Where our controller's own writes (Approved=False after
a refused HelmRelease attempt) and our webhook's rewrites fall among a controller's calls around
the gate's opening is timing, so the doubles' run is repeated (up to DOUBLE_RUNS, each in a fresh
namespace) until one matches: a double that never writes as the real one does still fails. The real controllers win wherever the two differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from admission.kube.client import api_client
from tests.doubles.flux.helm import HelmController
from tests.doubles.flux.kustomize import KustomizeController
from tests.doubles.flux.source import SourceController, Storage
from tests.e2e.conftest import controller_running, own_plane, serving, start_server
from tests.e2e.controlplane import FLUX, GATE_ADMISSION, HELM_CONTROLLER, SOURCE_CONTROLLER
from tests.polling import until
from tests.realflux.conftest import Cluster, condition, ready
from tests.realflux.servers import configmap
from tests.realflux.test_helm import helm_release, helm_repository
from tests.realflux.test_kustomization import gate, git_repository, kustomization

GATES = "gating.toolkit.fluxcd.io/gates"
HELD_SOURCE, SOURCE, HELD_APP = "held-src", "src", "held-app"
WATCHED = (("gitrepositories", HELD_SOURCE), ("kustomizations", HELD_APP))


# -- the doubles' own control plane --------------------------------------------------------


@pytest.fixture(scope="module")
def double_plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("doubles-plane"))


@pytest.fixture(scope="module")
def double_cluster(double_plane, tmp_path_factory):
    """Our server and controller on the doubles' plane, configured as in the real-Flux tier."""
    server = start_server(
        tmp_path_factory.mktemp("doubles-server"),
        None,
        "--kubeconfig",
        str(double_plane.kubeconfig(GATE_ADMISSION)),
        "--client-ca-file",
        str(double_plane.webhook_client_ca),
    )
    with (
        serving(double_plane, server),
        controller_running(double_plane, tmp_path_factory.mktemp("doubles-controller"), "doubles"),
    ):
        yield double_plane


class Doubles:
    """source-controller (GitRepository) and kustomize-controller doubles sharing storage."""

    def __init__(self, plane):
        storage = Storage()
        self.git = SourceController(
            api_client(str(plane.kubeconfig(SOURCE_CONTROLLER))), "GitRepository", storage
        )
        self.kustomize = KustomizeController(api_client(str(plane.kubeconfig(FLUX))), storage)

    def __enter__(self):
        self.git.start()
        self.kustomize.start()
        return self

    def __exit__(self, *exc):
        self.kustomize.stop()
        self.git.stop()


# -- the scenario ----------------------------------------------------------------------------


def namespace_of(request) -> str:
    return "rf-doubles-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]


def objects(url: str, namespace: str) -> list[dict]:
    return [
        gate("freeze", namespace),
        git_repository(HELD_SOURCE, url, {GATES: "freeze"}),
        git_repository(SOURCE, url),
        kustomization(HELD_APP, "./app", SOURCE, {GATES: "freeze"}),
    ]


def server_sees(cluster: Cluster, held: bool) -> None:
    """Our server answers with the gate's new state (a dry-run probe it would hold)."""
    probe = kustomization("probe", "./", "none", {GATES: "freeze"})
    probe["metadata"]["namespace"] = cluster.namespace
    text = yaml.safe_dump(probe)
    result = until(
        lambda: cluster.plane.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False),
        lambda r: (" is held: " in r.stderr) == held,
        timeout=30,
        interval=0.2,
    )
    assert (" is held: " in result.stderr) == held, result.stderr


def artifact(obj: dict) -> str | None:
    return (obj.get("status", {}).get("artifact") or {}).get("revision")


def landed(cluster: Cluster, revision: str) -> tuple[dict, dict]:
    both = cluster.wait(
        lambda: (cluster.get("gitrepository", HELD_SOURCE), cluster.get("kustomization", HELD_APP)),
        lambda o: (
            artifact(o[0]) == revision
            and ready(o[0]) == "True"
            and o[1].get("status", {}).get("lastAppliedRevision") == revision
            and ready(o[1]) == "True"
        ),
    )
    source, app = both
    assert artifact(source) == revision and ready(source) == "True", source.get("status")
    assert app.get("status", {}).get("lastAppliedRevision") == revision and ready(app) == "True", app.get(
        "status"
    )
    return both


def scenario(cluster: Cluster, push, url: str) -> tuple[str, str]:
    """Revision 1 with the gate open, gate closed, revision 2 held, gate opened, revision 2 lands.
    ``push(n)`` makes revision n arrive upstream and returns it."""
    first = push(1)
    # The Kustomization first, so that it is reconciled before its source exists, always.
    gate_object, held_source, source, app = objects(url, cluster.namespace)
    cluster.apply(gate_object, app)
    waiting = cluster.wait(
        lambda: cluster.get("kustomization", HELD_APP),
        lambda k: condition(k, "Ready").get("reason") == "ArtifactFailed",
    )
    assert condition(waiting, "Ready").get("reason") == "ArtifactFailed", waiting.get("status")
    cluster.apply(held_source, source)
    landed(cluster, first)

    assert cluster.gate("close", "freeze", "-n", cluster.namespace).returncode == 0
    server_sees(cluster, held=True)
    second = push(2)
    held = cluster.wait(
        lambda: (
            cluster.get("gitrepository", HELD_SOURCE),
            cluster.get("kustomization", HELD_APP),
            cluster.get("gitrepository", SOURCE),
        ),
        lambda o: (
            condition(o[0], "Blocked").get("status") == "True"
            and artifact(o[2]) == second
            and "freeze" in condition(o[1], "Ready").get("message", "")
        ),
    )
    assert condition(held[0], "Blocked").get("status") == "True" and artifact(held[0]) == first, held[0].get(
        "status"
    )
    assert "freeze" in condition(held[1], "Ready").get("message", ""), held[1].get("status")
    assert held[1]["status"].get("lastAppliedRevision") == first, held[1].get("status")
    # Retries and polls while held are part of what is compared: wait for one of each (the
    # Kustomization's retry is refused again; the source's next poll sends revision 2 again).
    log, ns = cluster.plane.audit_log, cluster.namespace
    refusals = until(
        lambda: [
            e
            for e in audit_writes(log, "kustomizations", ns, HELD_APP)
            if (e.get("responseStatus") or {}).get("code", 0) in (400, 403, 422)
        ],
        lambda found: len(found) >= 3,
        timeout=60,
        interval=0.25,
    )
    assert len(refusals) >= 3, "the held Kustomization was never retried"
    resent = until(
        lambda: [
            e
            for e in audit_writes(log, "gitrepositories", ns, HELD_SOURCE)
            if ((e.get("requestObject") or {}).get("status") or {}).get("artifact", {}).get("revision")
            == second
        ],
        lambda found: len(found) >= 2,
        timeout=60,
        interval=0.25,
    )
    assert len(resent) >= 2, "the held source never polled again"

    assert cluster.gate("open", "freeze", "-n", cluster.namespace).returncode == 0
    landed(cluster, second)
    return first, second


# -- the reduction ---------------------------------------------------------------------------


def audit_writes(log: Path, resource: str, namespace: str, name: str) -> list[dict]:
    """The completed status writes of one object, in the order the API server answered them."""
    found = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("verb") in ("update", "patch")
            and (ref.get("resource"), ref.get("subresource"), ref.get("namespace"), ref.get("name"))
            == (resource, "status", namespace, name)
        ):
            found.append(event)
    return found


def symbolic(value, revisions: dict[str, str]):
    if isinstance(value, str):
        for revision, symbol in revisions.items():
            value = value.replace(revision, symbol)
        return value
    return value


def condition_changes(before: list | None, after: list | None) -> list[str]:
    old = {c.get("type"): c for c in before or []}
    new = {c.get("type"): c for c in after or []}
    out = []
    for kind in sorted(old.keys() | new.keys()):
        if kind not in new:
            out.append(f"{kind}: removed")
        elif kind not in old or (old[kind].get("status"), old[kind].get("reason")) != (
            new[kind].get("status"),
            new[kind].get("reason"),
        ):
            out.append(f"{kind}: {new[kind].get('status')}/{new[kind].get('reason')}")
        elif old[kind].get("message") != new[kind].get("message"):
            out.append(f"{kind}: message")
    return out


def field_changes(before: dict, after: dict, revisions: dict[str, str]) -> list[str]:
    out = []
    for key in sorted((before.keys() | after.keys()) - {"conditions"}):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if new is None:
            out.append(f"{key}: removed")
        elif key == "artifact" and isinstance(new, dict):
            old = old if isinstance(old, dict) else {}
            # The size follows the archive's content, which the double does not have.
            subs = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k != "size")
            out.append(
                "artifact: "
                + ",".join(f"{k}={symbolic(new.get(k), revisions)}" if k == "revision" else k for k in subs)
            )
        elif isinstance(new, str) and any(r in new for r in revisions):
            out.append(f"{key}={symbolic(new, revisions)}")
        elif key == "observedGeneration":
            out.append(f"{key}={new}")
        else:
            out.append(key)
    return out + [f"cond {c}" for c in condition_changes(before.get("conditions"), after.get("conditions"))]


def rewritten(event: dict) -> bool:
    return any(
        key.startswith("mutation.webhook.admission.k8s.io/") and '"mutated":true' in value
        for key, value in (event.get("annotations") or {}).items()
    )


def is_conditions_request(event: dict) -> bool:
    """The patch helper's first request: the conditions, with resourceVersion as a precondition."""
    body = event.get("requestObject") or {}
    return bool((body.get("metadata") or {}).get("resourceVersion"))


FLUX_USERS = "system:serviceaccount:flux-system:"
OPENED = "cond Approved: removed"
DOUBLE_RUNS = 3  # the doubles' runs, until one writes as the real controllers did


def by_flux(event: dict) -> bool:
    return (event.get("user") or {}).get("username", "").startswith(FLUX_USERS)


def changed_what(change: str) -> str:
    """The condition ("cond Ready") or field a change names."""
    return change.split(":", 1)[0] if change.startswith("cond ") else change.split("=", 1)[0]


def net_change(changed: list[str], change: str) -> list[str]:
    """A call's changes with one more: what a later request of the same call set for a condition
    or field replaces what an earlier one set (which of a call's two requests our webhook rewrites
    is timing), and a message-only change adds nothing to a status or reason change before it."""
    earlier = [c for c in changed if changed_what(c) == changed_what(change)]
    if earlier and change.endswith(": message"):
        return changed
    return [c for c in changed if c not in earlier] + [change]


def reduce(events: list[dict], revisions: dict[str, str], done) -> list[tuple]:
    """The Flux controller's patch calls, each a conditions request and the rest-of-status
    request after it (either may be skipped), as (its requests and their outcomes, rewritten by
    our mutating webhook, what its requests changed in the stored status, what refused requests
    tried to change), up to and including the first call that leaves ``done(status)``.

    Which of a call's two requests our webhook rewrites depends on when its caches see the
    source's new revision, so rewriting is counted per call, and only where the stored status
    changed. Conflicts, which the helper
    retries, are left out; others' writes (our controller's) change what is stored but are
    not entries."""
    stored: dict = {}
    out: list[tuple] = []
    call: dict | None = None

    def finish() -> bool:
        if call is not None:
            # A rewrite that leaves the stored status as it was depends only on whether our
            # controller's write came first: it counts as sent.
            rewrote = call["mutated"] and call["changed"]
            changed = call["changed"]
            if OPENED in changed:
                # Our webhook drops the Approved condition from the first write after the gate
                # opens, whichever of the controller's calls that is: where it lands is timing,
                # not the controller's behaviour.
                changed = [c for c in changed if c != OPENED]
                rewrote = False
            out.append(
                (
                    tuple(call["shape"]),
                    "rewritten" if rewrote else "as sent",
                    tuple(sorted(changed)),
                    tuple(call["refused"]),
                )
            )
        return call is not None and done(stored)

    for event in events:
        code = (event.get("responseStatus") or {}).get("code", 0)
        if code == 409:
            continue
        if not by_flux(event):
            if 200 <= code < 300:
                stored = (event.get("responseObject") or {}).get("status") or {}
            continue
        conditions_request = is_conditions_request(event)
        if conditions_request or call is None or len(call["shape"]) == 2 or not call["conditions_first"]:
            if finish():
                return out
            call = {
                "shape": [],
                "changed": [],
                "refused": [],
                "mutated": False,
                "conditions_first": conditions_request,
            }
        which = "conditions" if conditions_request else "status"
        if 200 <= code < 300:
            after = (event.get("responseObject") or {}).get("status") or {}
            for change in field_changes(stored, after, revisions):
                call["changed"] = net_change(call["changed"], change)
            stored = after
            call["mutated"] = call["mutated"] or rewritten(event)
            call["shape"].append(which)
        else:
            body = (event.get("requestObject") or {}).get("status") or {}
            call["refused"] += field_changes(stored, {**stored, **body}, revisions)
            call["shape"].append(f"{which} refused {code}")
    if finish():
        return out
    raise AssertionError(f"the writes never reached the landed state: {out}")


def collapse(seq: list) -> list:
    """Runs of a repeated block of writes (retries, interval reconciles) count once."""
    seq = list(seq)
    changed = True
    while changed:
        changed = False
        for size in range(1, len(seq) // 2 + 1):
            for start in range(0, len(seq) - 2 * size + 1):
                if seq[start : start + size] == seq[start + size : start + 2 * size]:
                    del seq[start + size : start + 2 * size]
                    changed = True
                    break
            if changed:
                break
    return seq


def sequences(log: Path, namespace: str, first: str, second: str) -> dict[str, list]:
    revisions = {second: "R2", first: "R1"}

    def ready_at(status: dict, field: str) -> bool:
        ok = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        value = (status.get("artifact") or {}).get("revision") if field == "artifact" else status.get(field)
        return ok and value == second

    done = {
        "gitrepositories": lambda s: ready_at(s, "artifact"),
        "kustomizations": lambda s: ready_at(s, "lastAppliedRevision"),
    }
    return {
        resource: collapse(reduce(audit_writes(log, resource, namespace, name), revisions, done[resource]))
        for resource, name in WATCHED
    }


def show(seq: list) -> str:
    return "\n".join(
        f"  {'+'.join(shape)} ({outcome}): {'; '.join(changes) or '-'}"
        + (f" | refused: {'; '.join(refused)}" if refused else "")
        for shape, outcome, changes, refused in seq
    )


# -- the test --------------------------------------------------------------------------------


def test_the_doubles_write_status_as_the_real_controllers_do(
    plane, webhook, gate_controller, flux, git, double_cluster, request
):
    ns = namespace_of(request)

    plane.kubectl("create", "namespace", ns)
    real = Cluster(plane, ns)
    repo = git.repository(ns)
    revisions: list[str] = []

    def commit(n: int) -> str:
        revisions.append(
            repo.commit({"app/configmap.yaml": configmap("app", ns, {"version": str(n)})}, f"version {n}")
        )
        return revisions[-1]

    first, second = scenario(real, commit, repo.url)
    real_writes = sequences(plane.audit_log, ns, first, second)

    differ: list[str] = []
    with Doubles(double_cluster) as doubles:
        # As the helm double's (DOUBLE_RUNS): where our webhook's rewrites and our controller's
        # writes fall among the controllers' calls around the gate's opening is timing.
        for run in range(1, DOUBLE_RUNS + 1):
            where = ns if run == 1 else f"{ns}-{run}"
            double_cluster.kubectl("create", "namespace", where)

            def push(n: int, where: str = where) -> str:
                for name in (HELD_SOURCE, SOURCE):
                    doubles.git.push(where, name, revisions[n - 1])
                return revisions[n - 1]

            scenario(Cluster(double_cluster, where), push, repo.url)
            double_writes = sequences(double_cluster.audit_log, where, first, second)
            differ = [
                f"{resource}: the double's status writes differ from the real controller's (run {run})\n"
                f"real:\n{show(real_writes[resource])}\ndouble:\n{show(double_writes[resource])}"
                for resource, _ in WATCHED
                if double_writes[resource] != real_writes[resource]
            ]
            if not differ:
                break
    assert not differ, "\n".join(differ)


# -- HelmRelease: new values (revision 2 is a new values digest) ---------------------------------

RELEASE = "app"


def values_map(mode: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "extra"},
        "data": {"values.yaml": f"mode: {mode}\n"},
    }


def history_digest(release: dict) -> str | None:
    history = release.get("status", {}).get("history") or [{}]
    return history[0].get("configDigest")


def helm_scenario(cluster: Cluster, publish, chart: str, url: str) -> tuple[str, str]:
    """Values 1 installed with the gate open, gate closed, values 2 held, gate opened, values 2
    upgraded; the two values digests."""
    publish("1.0.0")
    cluster.apply(
        gate("freeze", cluster.namespace),
        helm_repository("charts", url),
        values_map("a"),
        helm_release(
            RELEASE,
            chart,
            "charts",
            {"greeting": "hello"},
            valuesFrom=[{"kind": "ConfigMap", "name": "extra"}],
        ),
    )
    installed = cluster.wait(
        lambda: cluster.get("helmrelease", RELEASE), lambda r: ready(r) == "True" and history_digest(r)
    )
    assert ready(installed) == "True" and history_digest(installed), installed.get("status")
    first = history_digest(installed)

    assert cluster.gate("close", "freeze", "-n", cluster.namespace).returncode == 0
    server_sees(cluster, held=True)
    cluster.apply(values_map("b"))
    cluster.plane.kubectl(
        "annotate",
        "--overwrite",
        "helmrelease",
        RELEASE,
        "-n",
        cluster.namespace,
        f"reconcile.fluxcd.io/requestedAt={cluster.namespace}-values-2",
    )
    waiting = cluster.wait(
        lambda: cluster.get("helmrelease", RELEASE),
        lambda r: condition(r, "Approved").get("status") == "False",
    )
    assert condition(waiting, "Approved").get("reason") == "GateClosed", waiting.get("status")
    refusals = until(
        lambda: [
            e
            for e in audit_writes(cluster.plane.audit_log, "helmreleases", cluster.namespace, RELEASE)
            if (e.get("responseStatus") or {}).get("code", 0) in (400, 403, 422)
        ],
        lambda found: len(found) >= 3,
        timeout=60,
        interval=0.25,
    )
    assert len(refusals) >= 3, "the held HelmRelease was never retried"

    assert cluster.gate("open", "freeze", "-n", cluster.namespace).returncode == 0
    upgraded = cluster.wait(
        lambda: cluster.get("helmrelease", RELEASE),
        lambda r: ready(r) == "True" and history_digest(r) not in (None, first),
    )
    assert ready(upgraded) == "True" and history_digest(upgraded) not in (None, first), upgraded.get("status")
    return first, history_digest(upgraded)


def release_writes(log: Path, namespace: str, first: str, second: str) -> list:
    def done(status: dict) -> bool:
        ok = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        return ok and ((status.get("history") or [{}])[0]).get("configDigest") == second

    return collapse(
        reduce(
            audit_writes(log, "helmreleases", namespace, RELEASE),
            {second: "D2", first: "D1", "1.0.0": "C1"},
            done,
        )
    )


def test_the_helm_double_writes_status_as_helm_controller_does(
    plane, webhook, gate_controller, flux, charts, double_cluster, request
):
    ns = namespace_of(request)
    chart = f"demo-{ns}"
    plane.kubectl("create", "namespace", ns)
    real = helm_scenario(
        Cluster(plane, ns), lambda version: charts.publish(chart, version), chart, charts.url
    )
    real_writes = release_writes(plane.audit_log, ns, *real)

    storage = Storage()
    charts_double = SourceController(
        api_client(str(double_cluster.kubeconfig(SOURCE_CONTROLLER))), "HelmChart", storage
    )
    helm_double = HelmController(api_client(str(double_cluster.kubeconfig(HELM_CONTROLLER))))
    charts_double.start()
    helm_double.start()
    tried: list[str] = []
    try:
        # Where our controller's Approved=False write falls among the controller's calls is timing
        # (it reacts to the same refusal), in the real run as in the double's: the double's run is
        # repeated, each in a namespace of its own, until one writes as the real run did.
        for run in range(1, DOUBLE_RUNS + 1):
            where = ns if run == 1 else f"{ns}-{run}"
            double_cluster.kubectl("create", "namespace", where)
            doubled = helm_scenario(
                Cluster(double_cluster, where),
                lambda version, where=where: charts_double.publish(where, "charts", chart, version),
                chart,
                charts.url,
            )
            double_writes = release_writes(double_cluster.audit_log, where, *doubled)
            if double_writes == real_writes:
                break
            tried.append(show(double_writes))
    finally:
        helm_double.stop()
        charts_double.stop()
    assert double_writes == real_writes, f"real:\n{show(real_writes)}\ndouble, each run:\n" + "\n--\n".join(
        tried
    )
