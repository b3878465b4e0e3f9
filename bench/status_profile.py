"""Where our handler's time goes on a Flux status write: in process, bytes in -> bytes out.

Usage: python bench/status_profile.py [--reviews 5000] [--top 15]
Replays AdmissionReviews recorded from a real kube-apiserver (../shared/fixtures: a
Kustomization's and a GitRepository's status UPDATE by Flux, each to /mutate and /validate)
through the same ``Reviews.answer`` the WSGI middleware calls, with open gates for their
references and the GitRepository in the Flux object lookup. Prints microseconds per review,
then a cProfile of all four, by own time and by cumulative time, so the remaining cost is visible.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.core.admission.decision import Settings  # noqa: E402
from admission.core.gates.references import policy_of  # noqa: E402
from admission.store import StaticSources  # noqa: E402
from admission.store.index import GateIndex  # noqa: E402
from admission.webhook.app import MUTATE, VALIDATE, Reviews  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "admission-reviews-k8s-1.20"
CASES = {
    "Kustomization status /mutate": (
        "021-ks-status-update-by-flux-mutate-Kustomization-UPDATE-status.json",
        "mutate",
    ),
    "Kustomization status /validate": (
        "022-ks-status-update-by-flux-validate-Kustomization-UPDATE-status.json",
        "validate",
    ),
    "GitRepository status /mutate": (
        "007-gitrepo-status-conditions-only-mutate-GitRepository-UPDATE-status.json",
        "mutate",
    ),
    "GitRepository status /validate": (
        "008-gitrepo-status-conditions-only-validate-GitRepository-UPDATE-status.json",
        "validate",
    ),
}
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)  # outside the fixture's suspendDuring window


def world(reviews: list[dict]) -> tuple[GateIndex, StaticSources]:
    index = GateIndex()
    refs = set()
    for review in reviews:
        obj = review["request"]["object"]
        refs.update((ref.namespace, ref.name) for ref in policy_of(obj).refs)
    gates = [
        {"kind": "Gate", "metadata": {"namespace": ns, "name": name}, "spec": {"default": "opened"}}
        for ns, name in refs
    ]
    index.replace_all(gates, [])
    sources = [r["request"]["oldObject"] for r in reviews if r["request"]["kind"]["kind"] == "GitRepository"]
    return index, StaticSources(sources)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reviews", type=int, default=5000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if not FIXTURES.is_dir():
        raise SystemExit(f"no fixtures at {FIXTURES}")
    logging.disable(logging.INFO)  # the decision log line is one write; measured by the load bench
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", "")
    loaded = {label: orjson.loads((FIXTURES / name).read_bytes()) for label, (name, _) in CASES.items()}
    index, sources = world(list(loaded.values()))
    reviews = Reviews(index, Settings(), lambda: NOW, None, sources)
    route = {"mutate": MUTATE, "validate": VALIDATE}
    bodies = {label: (route[CASES[label][1]], orjson.dumps(review)) for label, review in loaded.items()}
    print(
        f"# python bench/status_profile.py --reviews {args.reviews}  |  in process, one thread, "
        f"fixtures from {FIXTURES.name}"
    )
    for label, (endpoint, body) in bodies.items():
        status, out = reviews.answer(endpoint, body)
        assert status == 200 and orjson.loads(out)["response"]["allowed"], out
        started = time.perf_counter()
        for _ in range(args.reviews):
            reviews.answer(endpoint, body)
        per = (time.perf_counter() - started) / args.reviews * 1e6
        print(f"{label:<32} {len(body):>6} bytes in  {per:8.1f} us/review")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.reviews // 4):
        for endpoint, body in bodies.values():
            reviews.answer(endpoint, body)
    profile.disable()
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
        print(
            "\n".join(
                line.replace(str(Path(__file__).resolve().parents[1]) + "/", "")
                for line in text.getvalue().splitlines()
                if line.strip()
            )
        )


if __name__ == "__main__":
    main()
