"""Memory the Flux object cache (admission/kube/fluxcache.py) holds per object, in process.

Usage: python bench/fluxcache_memory.py [--objects 5000]
Fills a FluxCache with ``--objects`` copies (distinct names) of each Flux object recorded from
a real kube-apiserver (../shared/fixtures: a Kustomization, a GitRepository, a HelmRelease,
managedFields included, as a list or watch delivers them) through the reflectors' own path
(stamp + trim), and reports the bytes tracemalloc sees per object. The controller caches every
gated kind; each server worker caches the sources and HelmReleases.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tracemalloc
from pathlib import Path

import orjson
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.kube.fluxcache import FluxCache  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "admission-reviews-k8s-1.20"
SAMPLES = {
    "Kustomization": "021-ks-status-update-by-flux-mutate-Kustomization-UPDATE-status.json",
    "GitRepository": "005-gitrepo-status-artifact-advance-mutate-GitRepository-UPDATE-status.json",
    "HelmRelease": "041-hr-status-update-by-flux-mutate-HelmRelease-UPDATE-status.json",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=5000)
    args = parser.parse_args()
    print(f"# python bench/fluxcache_memory.py --objects {args.objects}  |  fixtures from {FIXTURES.name}")
    print("kind            JSON bytes  cached bytes/object  for all")
    for kind, name in SAMPLES.items():
        sample = orjson.loads((FIXTURES / name).read_bytes())["request"]["object"]
        encoded = []
        for i in range(args.objects):
            obj = copy.deepcopy(sample)
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
            encoded.append(orjson.dumps(obj))
        cache = FluxCache(client.ApiClient(), [kind])
        reflector = cache.reflectors[0]
        reflector.version = "v1"
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        items = [orjson.loads(raw) for raw in encoded]  # as decoding a list response gives them
        reflector._replace(items)
        del items
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert len(cache.objects(kind)) == args.objects
        print(
            f"{kind:<15} {len(orjson.dumps(sample)):>10}  {held / args.objects:>19,.0f}  {held / 2**20:6.1f} MiB"
        )


if __name__ == "__main__":
    main()
