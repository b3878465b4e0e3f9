"""The read limit before denial Events and shown attempts holds for the pod: every worker that
maps the same file spends one budget (admission.kube.limits.SharedWindowCounts)."""

from __future__ import annotations

import multiprocessing

from admission.kube.denials import DenialQueue
from admission.kube.limits import SharedWindowCounts, WindowCounts


def _spend(path: str, tries: int, results) -> None:
    counts = SharedWindowCounts(path, limit=20)
    results.put(sum(counts.charge("apps", 7) for _ in range(tries)))


def test_workers_share_one_budget_per_namespace_and_window(tmp_path):
    path = str(tmp_path / "reads")
    fork = multiprocessing.get_context("fork")
    results = fork.Queue()
    workers = [fork.Process(target=_spend, args=(path, 15, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    granted = sorted(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(60)
    assert sum(granted) == 20, granted  # not 3 x 15, nor 3 x 20
    here = SharedWindowCounts(path, limit=20)
    assert not here.charge("apps", 7) and here.charge("other", 7) and here.charge("apps", 8)


def test_without_a_shared_directory_the_limit_is_the_process_own(tmp_path):
    assert isinstance(DenialQueue("x", 10).reads, WindowCounts)
    shared = DenialQueue("x", 10, reads_per_namespace=1, limits_dir=tmp_path)
    assert isinstance(shared.reads, SharedWindowCounts) and (tmp_path / "x-reads").exists()
    assert shared.may_read("apps") and not shared.may_read("apps")
    assert DenialQueue("x", 10, reads_per_namespace=1, limits_dir=tmp_path).may_read("apps") is False


def test_a_full_queue_drops_new_objects_and_folds_repeats():
    queue: DenialQueue[str, int] = DenialQueue("x", max_pending=2)
    assert queue.put("a", lambda n: (n or 0) + 1) and queue.put("b", lambda n: (n or 0) + 1)
    assert not queue.put("c", lambda n: (n or 0) + 1) and queue.put("a", lambda n: (n or 0) + 1)
    assert queue.take(0) == ("a", 2) and queue.take(0) == ("b", 1) and queue.take(0) is None
