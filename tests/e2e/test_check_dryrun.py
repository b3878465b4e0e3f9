"""`kubectl gate check` against a real API server, with our server as its webhooks: the verdict
and message it prints are what a real `kubectl apply` of the same manifest then gets, over
manifests drawn from the in-process agreement test's corpus (tests/app/test_check.py), for a
developer, an exempt user and a user in an exempt group that a kubeconfig impersonates; and with
the webhook down it never says allowed."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml
from hypothesis import strategies as st

from admission.core.base import names
from tests.app.test_check import GATE_NAMES, manifests
from tests.builders import gate
from tests.e2e.conftest import own_plane, serving_the_cluster
from tests.e2e.controlplane import ADMIN, ALICE, CONTROLLER
from tests.polling import until
from tests.processes import BIN

pytestmark = pytest.mark.e2e

# How many manifests of the corpus are applied for real (each: a check and a kubectl apply; about
# a second each on 2 cores). The server is started with these exemptions.
CASES = 48
EXEMPT_USER, EXEMPT_GROUP = "bob", "release-managers"
# The fixed world the drawn manifests meet: g0 open, g1 closed, g2 closed in audit mode, "gone"
# never defined (closed: NotFound), as in the corpus's GATE_NAMES.
WORLD = [gate("g0"), gate("g1", closed=True), gate("g2", closed=True, mode="audit")]
assert {g["metadata"]["name"] for g in WORLD} | {"gone"} == set(GATE_NAMES)

# The corpus draws interval, path and suspend; each kind gets the fields its schema requires,
# and the drawn path as a field it has, so that a drawn change is a change of that kind.
SPECS = {
    "Kustomization": lambda v: {
        "path": v,
        "prune": False,
        "sourceRef": {"kind": "GitRepository", "name": "p"},
    },
    "HelmRelease": lambda v: {
        "chart": {"spec": {"chart": "p", "version": v, "sourceRef": {"kind": "HelmRepository", "name": "p"}}}
    },
    "GitRepository": lambda v: {"url": "https://example.invalid/repo", "ref": {"branch": v}},
    "OCIRepository": lambda v: {"url": "oci://example.invalid/repo", "ref": {"tag": v}},
    "HelmRepository": lambda v: {"url": f"https://example.invalid/{v}"},
    "HelmChart": lambda v: {"chart": "p", "version": v, "sourceRef": {"kind": "HelmRepository", "name": "p"}},
    "Bucket": lambda v: {"bucketName": "b", "endpoint": "example.invalid", "prefix": v},
    "ImageRepository": lambda v: {"image": f"example.invalid/{v}"},
}
USERS = ("alice", EXEMPT_USER, "carol")  # carol: in the exempt group, through the kubeconfig


def realized(manifest: dict, name: str) -> dict:
    obj = copy.deepcopy(manifest)
    obj["metadata"]["name"] = name
    drawn = obj["spec"]
    variant = "v1" if drawn["path"] == "./a" else "v2"
    obj["spec"] = {"interval": drawn["interval"], **SPECS[obj["kind"]](variant)}
    if "suspend" in drawn:
        obj["spec"]["suspend"] = drawn["suspend"]
    return obj


@st.composite
def cases(draw) -> tuple[dict | None, dict, str, bool]:
    """(the live object's manifest or None, the manifest checked and applied, the user, server-side)."""
    kind = draw(st.sampled_from(sorted(SPECS)))
    manifest = draw(manifests(kind))
    previous = None
    if draw(st.booleans()):
        previous = manifest if draw(st.booleans()) else draw(manifests(kind))
    return previous, manifest, draw(st.sampled_from(USERS)), draw(st.booleans())


def drawn_cases() -> list[tuple[dict | None, dict, str, bool]]:
    # The same draws on every run (seeded), as CI's hypothesis profile draws the corpus's.
    # find() with its generate phase only: called on each draw, it stops at the CASES-th, unshrunk.
    from hypothesis import Phase, find, settings

    found: list = []

    def collect(case) -> bool:
        found.append(case)
        return len(found) >= CASES

    find(
        cases(),
        collect,
        settings=settings(derandomize=True, max_examples=CASES * 10, database=None, phases=[Phase.generate]),
    )
    return found[:CASES]


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    yield from own_plane(tmp_path_factory.mktemp("check-dryrun"))


@pytest.fixture(scope="module")
def server(plane, tmp_path_factory):
    extra = ("--exempt-users", EXEMPT_USER, "--exempt-groups", EXEMPT_GROUP)
    with serving_the_cluster(plane, tmp_path_factory.mktemp("check-dryrun-server"), *extra) as srv:
        yield srv


def kubeconfig_as(plane, user: str, groups: tuple[str, ...] = ()) -> Path:
    """The admin's kubeconfig, its user entry impersonating ``user`` (kubectl's `as`)."""
    config = yaml.safe_load(plane.kubeconfig(ADMIN).read_text())
    config["users"][0]["user"].update({"as": user, **({"as-groups": list(groups)} if groups else {})})
    path = plane.workdir / f"kubeconfig-as-{user}"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def kubeconfigs(plane) -> dict[str, Path]:
    plane.kubectl(
        "create",
        "clusterrolebinding",
        "e2e-check-users",
        "--clusterrole=cluster-admin",
        "--user=bob",
        "--user=carol",
    )
    return {
        "alice": plane.kubeconfig(ALICE),
        EXEMPT_USER: kubeconfig_as(plane, EXEMPT_USER),
        "carol": kubeconfig_as(plane, "carol", ("sre", EXEMPT_GROUP)),
    }


def gate_check(plane, kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [plane.kubectl_path, "gate", "check", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def kubectl_apply(plane, kubeconfig: Path, manifest: dict, server_side: bool) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            plane.kubectl_path,
            f"--kubeconfig={kubeconfig}",
            "apply",
            *(["--server-side"] if server_side else []),
            "-f",
            "-",
        ],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=60,
    )


DENIAL = re.compile(
    rf'admission webhook "{re.escape(names.VALIDATE_WEBHOOK)}" denied the request: (.*)$', re.M
)


def what_apply_got(result: subprocess.CompletedProcess) -> tuple[str, str | None]:
    """kubectl apply's answer as check's verdict and message."""
    if result.returncode == 0:
        audits = [
            line.removeprefix("Warning: ")
            for line in result.stderr.splitlines()
            if line.startswith(f"Warning: {names.AUDIT_WARNING}")
        ]
        return ("audited", "; ".join(audits)) if audits else ("allowed", None)
    denial = DENIAL.search(result.stderr)
    return ("denied", denial.group(1)) if denial else ("unjudged", result.stderr.strip())


def test_check_gives_the_verdict_and_message_kubectl_apply_then_gets_over_the_corpus(
    plane, server, kubeconfigs, tmp_path
):
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(WORLD))
    probe = {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization"}
    probe = realized(
        {
            **probe,
            "metadata": {"namespace": "apps", "annotations": {names.GATES_ANNOTATION: "flux-system/g1"}},
            "spec": {"interval": "1m", "path": "./a"},
        },
        "probe",
    )
    # The server follows the Gates it watches: wait until it holds what g1 (closed) references.
    assert (
        what_apply_got(
            until(
                lambda: kubectl_apply(plane, kubeconfigs["alice"], probe, True), lambda r: r.returncode == 1
            )
        )[0]
        == "denied"
    )

    cases = drawn_cases()
    objects = []
    for number, (previous, manifest, _, server_side) in enumerate(cases):
        name = f"case-{number}"
        if previous is not None:  # made by the exempt user, as the same kind of apply
            made = kubectl_apply(plane, kubeconfigs[EXEMPT_USER], realized(previous, name), server_side)
            assert made.returncode == 0, made.stderr
        objects.append(realized(manifest, name))
    rows = {}
    for user in USERS:  # one check per user, of every manifest that user then applies
        mine = [obj for obj, case in zip(objects, cases, strict=True) if case[2] == user]
        checked = gate_check(
            plane, kubeconfigs[user], "-f", "-", "-o", "json", stdin=yaml.safe_dump_all(mine)
        )
        assert checked.returncode in (0, 1, 10), checked.stderr
        for row in orjson.loads(checked.stdout):
            assert row["as"]["username"] == user, row  # who the API server says the caller is
            assert (EXEMPT_GROUP in row["as"]["groups"]) is (user == "carol"), row
            rows[row["name"]] = row
    seen: dict[tuple[str, str], int] = {}
    requests: dict[tuple[str, str], int] = {}
    for obj, (_, _, user, server_side) in zip(objects, cases, strict=True):
        row = rows[obj["metadata"]["name"]]
        got = what_apply_got(kubectl_apply(plane, kubeconfigs[user], obj, server_side))
        where = f"{obj['metadata']['name']} ({user}, {'server' if server_side else 'client'}-side, {row['operation']}): {obj}"
        if row["verdict"] == "unjudged":
            assert got[0] == "unjudged", f"{where}: check could not judge it ({row}), kubectl apply got {got}"
        else:
            assert (row["verdict"], row["message"]) == got, where
        seen[(row["verdict"], user)] = seen.get((row["verdict"], user), 0) + 1
        how = (row["operation"], "server-side" if server_side else "client-side")
        requests[how] = requests.get(how, 0) + 1
    # The corpus met every answer, and the exempt users were let through where others were held.
    verdicts = {verdict for verdict, _ in seen}
    assert {"denied", "audited", "allowed"} <= verdicts, seen
    assert not any(v in ("denied", "audited") for v, u in seen if u != "alice"), seen
    assert {op for op, _ in requests} == {"CREATE", "UPDATE"}, requests
    print(f"{len(cases)} cases: {dict(sorted(seen.items()))}, {dict(sorted(requests.items()))}")


def gated_kustomization(name: str, gate: str, path: str) -> dict:
    return realized(
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"namespace": "apps", "annotations": {names.GATES_ANNOTATION: gate}},
            "spec": {"interval": "1m", "path": path},
        },
        name,
    )


def test_check_names_who_the_api_server_says_the_caller_is_and_judge_as_impersonates(
    plane, server, kubeconfigs
):
    manifest = gated_kustomization("judged-as", "flux-system/g1", "./b")
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(WORLD[1]))
    text = yaml.safe_dump(manifest)
    as_carol = gate_check(plane, kubeconfigs["carol"], "-f", "-", stdin=text)
    assert as_carol.returncode == 0, as_carol.stderr
    assert as_carol.stdout.splitlines()[-1].startswith(
        "as carol (groups: sre, release-managers, system:authenticated"
    )
    # The admin may impersonate: --judge-as is the dry-run as that user; alice may not: refused.
    as_alice = until(
        lambda: gate_check(
            plane, plane.kubeconfig(ADMIN), "-f", "-", "--judge-as", "alice", "-o", "json", stdin=text
        ),
        lambda r: r.returncode == 1,
    )
    (row,) = orjson.loads(as_alice.stdout)
    assert row["verdict"] == "denied" and row["as"]["username"] == "alice", row
    # Our controller's identity may not impersonate: the command is forbidden (exit 4). dave has
    # no rights: his dry-run is refused by RBAC: not judged (exit 10), never allowed, as his
    # apply is refused.
    forbidden = gate_check(plane, plane.kubeconfig(CONTROLLER), "-f", "-", "--judge-as", "carol", stdin=text)
    assert forbidden.returncode == 4 and "cannot impersonate" in forbidden.stderr, forbidden.stderr
    dave = kubeconfig_as(plane, "dave")
    refused = gate_check(plane, dave, "-f", "-", "-o", "json", stdin=text)
    (row,) = orjson.loads(refused.stdout)
    assert refused.returncode == 10 and (row["verdict"], row["reason"], row["status"]) == (
        "unjudged",
        "forbidden",
        403,
    ), row
    assert row["as"] == {"username": "dave", "groups": ["system:authenticated"]}
    assert kubectl_apply(plane, dave, manifest, True).returncode == 1


def test_with_the_webhook_down_check_says_it_could_not_judge_never_allowed(plane, server, kubeconfigs):
    manifest = gated_kustomization("while-down", "flux-system/g0", "./a")
    server.stop()  # the last test of the module: the fixture's stop then finds it stopped
    result = gate_check(plane, kubeconfigs["alice"], "-f", "-", "-o", "json", stdin=yaml.safe_dump(manifest))
    (row,) = orjson.loads(result.stdout)
    assert (
        result.returncode == 10 and row["verdict"] == "unjudged" and row["reason"] == "webhook-unavailable"
    ), row
    assert names.VALIDATE_WEBHOOK in row["message"], row
    applied = kubectl_apply(plane, kubeconfigs["alice"], manifest, True)
    assert applied.returncode == 1 and "failed calling webhook" in applied.stderr, applied.stderr
    table = gate_check(plane, kubeconfigs["alice"], "-f", "-", stdin=yaml.safe_dump(manifest))
    assert table.returncode == 10 and "could not be judged  webhook-unavailable: " in table.stdout, (
        table.stdout
    )
