"""In-process decisions per second: a Kustomization with 3 gate references and 2 GateKeepers.

Usage: python bench/decisions.py [--seconds 3]   (pin to one core: taskset -c 0 python bench/decisions.py)
Prints one line per layer: the pure decision, the validate handler, and bytes-in/bytes-out
(decode + validate + encode), all single-threaded.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from admission.core.admission.decision import Context, Settings, decide  # noqa: E402
from admission.store.index import GateIndex  # noqa: E402
from admission.webhook import handlers  # noqa: E402
from admission.webhook.review import complete, parse_review  # noqa: E402

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)


def world() -> GateIndex:
    index = GateIndex()
    gates = [
        {
            "kind": "Gate",
            "metadata": {"name": "sre-approval", "namespace": "flux-system"},
            "spec": {"default": "opened"},
        },
        {
            "kind": "Gate",
            "metadata": {"name": "qa-approval", "namespace": "flux-system"},
            "spec": {"window": "1h"},
        },
        {"kind": "Gate", "metadata": {"name": "change-freeze", "namespace": "flux-system"}, "spec": {}},
    ]
    keepers = [
        {
            "kind": "GateKeeper",
            "metadata": {"name": "freeze", "namespace": "flux-system"},
            "spec": {"gate": "change-freeze", "cronjob": {"closed": ["* * 20-30 11 *", "* * 15-31 12 *"]}},
        },
        {
            "kind": "GateKeeper",
            "metadata": {"name": "fridays", "namespace": "flux-system"},
            "spec": {
                "gate": "qa-approval",
                "timeZone": "Europe/Berlin",
                "cronjob": {"closed": [{"cron": "0 18 * * 5", "duration": "62h"}]},
            },
        },
    ]
    index.replace_all(gates, keepers)
    return index


def review() -> dict:
    obj = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {
            "name": "podinfo",
            "namespace": "apps",
            "annotations": {
                "gating.toolkit.fluxcd.io/gates": "flux-system/sre-approval, flux-system/qa-approval, flux-system/change-freeze"
            },
        },
        "spec": {
            "interval": "10m",
            "path": "./kustomize",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": "podinfo", "namespace": "flux-system"},
        },
    }
    new = copy.deepcopy(obj)
    new["spec"]["path"] = "./kustomize/production"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "bench",
            "kind": {"group": "kustomize.toolkit.fluxcd.io", "version": "v1", "kind": "Kustomization"},
            "resource": {
                "group": "kustomize.toolkit.fluxcd.io",
                "version": "v1",
                "resource": "kustomizations",
            },
            "name": "podinfo",
            "namespace": "apps",
            "operation": "UPDATE",
            "userInfo": {
                "username": "system:serviceaccount:flux-system:kustomize-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": new,
            "oldObject": obj,
            "dryRun": False,
        },
    }


def rate(fn, seconds: float) -> float:
    count, start = 0, time.perf_counter()
    tick = timedelta(microseconds=1)
    now = NOW
    while True:
        for _ in range(500):
            fn(now)
            now += tick
        count += 500
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    index, doc, settings = world(), review(), Settings()
    body = orjson.dumps(doc)
    request = doc["request"]
    assert decide(request, Context(index.lookup, NOW, settings)).allowed  # the gates are open at NOW

    def full(now):
        parsed = parse_review(body)
        orjson.dumps(
            complete(
                parsed, handlers.validate(parsed["request"], Context(index.lookup, now, settings)).response
            )
        )

    results = {
        "decide (pure core, gates memoised)": rate(
            lambda now: decide(request, Context(index.lookup, now, settings)), args.seconds
        ),
        "validate handler": rate(
            lambda now: handlers.validate(request, Context(index.lookup, now, settings)), args.seconds
        ),
        "bytes in -> bytes out (decode, validate, encode)": rate(full, args.seconds),
    }
    print(
        f"# {' '.join(['python'] + sys.argv)}  |  {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cpus, single thread"
    )
    for name, value in results.items():
        print(f"{value:>10,.0f} decisions/s  {name}")


if __name__ == "__main__":
    main()
