"""The read limit before denial Events and shown attempts holds for the pod: every worker that
maps the same file spends one budget (admission.kube.limits.SharedWindowCounts), on the table of
slots it shares with the receiver's rate limits (admission.store.sharedslots.SharedSlots)."""

from __future__ import annotations

import multiprocessing
import struct
import sys
import threading

from admission.kube.denials import DenialQueue
from admission.kube.limits import SharedWindowCounts, WindowCounts
from admission.store.sharedslots import SharedSlots

COUNTER = struct.Struct("<Q")


def _slot(table: SharedSlots, index: int) -> tuple[object, ...]:
    with table.locked():
        return table.read(index)


def _add(table: SharedSlots, times: int) -> None:
    for _ in range(times):
        for index in (0, table.slots - 1):
            with table.locked():
                (count,) = table.read(index)
                table.write(index, count + 1)


def _add_in_threads(table: SharedSlots, times: int, start) -> None:
    start.wait(60)  # all at once, or one may finish before the next begins
    sys.setswitchinterval(1e-6)  # threads switch between a read and its write, if they may
    threads = [threading.Thread(target=_add, args=(table, times)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def test_processes_forked_from_one_table_see_each_other_s_writes(tmp_path):
    table = SharedSlots(tmp_path / "slots", COUNTER, slots=8)
    _add(table, 1)  # mapped here before the fork: each child maps (and locks) the file anew
    fork = multiprocessing.get_context("fork")
    start = fork.Barrier(3)
    workers = [fork.Process(target=_add_in_threads, args=(table, 1000, start)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    # No increment lost between a read and its write, in any thread of any process.
    assert [_slot(table, i) for i in range(8)] == [(6001,), *[(0,)] * 6, (6001,)]
    assert _slot(SharedSlots(tmp_path / "slots", COUNTER, slots=8), 7) == (6001,)


def test_a_file_too_short_for_the_table_is_lengthened_and_a_longer_one_kept(tmp_path):
    short, long = tmp_path / "short", tmp_path / "long"
    short.write_bytes(COUNTER.pack(5))
    long.write_bytes(COUNTER.pack(6) * 20)
    assert _slot(SharedSlots(short, COUNTER, slots=4), 3) == (0,) and short.stat().st_size == 4 * COUNTER.size
    assert _slot(SharedSlots(short, COUNTER, slots=4), 0) == (5,)  # what was there stays
    assert _slot(SharedSlots(long, COUNTER, slots=4), 3) == (6,) and long.stat().st_size == 20 * COUNTER.size


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
