"""What a cluster's controllers would do, done by the chart tier's tests on a control plane
without nodes or kube-controller-manager: the Job controller (a Job's command run as its service
account, the Job marked complete) and the garbage collector (a Deployment deleted with its
dependents orphaned)."""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path

import yaml

from tests.chart.test_chart import NS
from tests.e2e.controlplane import CERTS
from tests.polling import until
from tests.processes import BIN

HOOK_JOB = "gate-admission-upgrade"


def get(plane, *what: str) -> dict:
    return json.loads(plane.kubectl("get", *what, "-o", "json").stdout)


def jobs(plane) -> dict[str, str]:
    """The certificate Jobs there are, and the image of each."""
    found = get(plane, "jobs", "-n", NS)["items"]
    return {
        job["metadata"]["name"]: job["spec"]["template"]["spec"]["containers"][0]["image"] for job in found
    }


def run_the_certs_job(plane, name: str, image: str) -> None:
    """Wait for Helm to create the Job ``name`` of ``image``, do its work, and mark it complete."""
    seen = until(lambda: jobs(plane), lambda found: found.get(name) == image, timeout=60)
    assert seen.get(name) == image, seen
    certs = subprocess.run(
        [
            str(BIN / "gate-admission"),
            "certs",
            "--secret",
            "gate-admission-tls",
            "--namespace",
            NS,
            "--inject",
            "--kubeconfig",
            str(plane.kubeconfig(CERTS)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert certs.returncode == 0, certs.stderr  # the chart's RBAC lets the Job's account do it
    plane.kubectl(
        "patch",
        "job",
        name,
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(complete_status()),
    )


def complete_status() -> dict:
    """A Job's status once its one Pod succeeded, as the Job controller writes it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {
            "type": kind,
            "status": "True",
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": "CompletionsReached",
            "message": "Reached expected number of succeeded pods",
        }
        for kind in ("SuccessCriteriaMet", "Complete")
    ]
    return {
        "status": {
            "startTime": now,
            "completionTime": now,
            "succeeded": 1,
            "ready": 0,
            "terminating": 0,
            "conditions": conditions,
        }
    }


def garbage_collect_orphans(plane, stop: threading.Event) -> None:
    """What the garbage collector does for a Deployment deleted with its dependents orphaned."""
    while not stop.wait(0.2):
        for deployment in get(plane, "deployments", "-n", NS)["items"]:
            meta = deployment["metadata"]
            if not meta.get("deletionTimestamp") or "orphan" not in meta.get("finalizers", []):
                continue
            for rs in get(plane, "replicasets", "-n", NS)["items"]:
                refs = rs["metadata"].get("ownerReferences", [])
                if any(r["uid"] == meta["uid"] for r in refs):
                    kept = [r for r in refs if r["uid"] != meta["uid"]]
                    plane.kubectl(
                        "patch",
                        "rs",
                        rs["metadata"]["name"],
                        "-n",
                        NS,
                        "--type=merge",
                        "-p",
                        json.dumps({"metadata": {"ownerReferences": kept or None}}),
                    )
            plane.kubectl(
                "patch",
                "deployment",
                meta["name"],
                "-n",
                NS,
                "--type=json",
                "-p",
                json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]),
                check=False,
            )


def run_the_hook_job(plane, tmp_path: Path) -> str:
    """Wait for the pre-upgrade Job, run its container's arguments as its service account, and
    mark it complete. Its output."""
    job = until(
        lambda: get(plane, "jobs", "-n", NS)["items"],
        lambda jobs: any(j["metadata"]["name"] == HOOK_JOB for j in jobs),
        timeout=60,
    )
    [job] = [j for j in job if j["metadata"]["name"] == HOOK_JOB]
    [container] = job["spec"]["template"]["spec"]["containers"]
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    until(
        lambda: plane.kubectl(
            "auth",
            "can-i",
            "delete",
            "deployment/gate-admission",
            "-n",
            NS,
            f"--as=system:serviceaccount:{NS}:{account}",
            check=False,
        ).stdout.strip(),
        lambda answer: answer == "yes",
        timeout=30,
    )  # its RoleBinding, created just before it
    token = plane.kubectl("create", "token", account, "-n", NS).stdout.strip()
    config = yaml.safe_load(plane.kubeconfig().read_text())
    config["users"][0]["user"] = {"token": token}
    kubeconfig = tmp_path / "hook-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    stop = threading.Event()
    collector = threading.Thread(target=garbage_collect_orphans, args=(plane, stop), daemon=True)
    collector.start()
    try:
        done = subprocess.run(
            [str(BIN / "gate-admission"), *container["args"], "--kubeconfig", str(kubeconfig)],
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        stop.set()
        collector.join(timeout=10)
    assert done.returncode == 0, done.stderr
    plane.kubectl(
        "patch",
        "job",
        HOOK_JOB,
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(complete_status()),
    )
    return done.stdout
