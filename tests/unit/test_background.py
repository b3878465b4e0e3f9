"""admission.background: one daemon thread, started once, woken and stopped within a bound."""

from __future__ import annotations

import threading

from admission.background import BackgroundThread

BOUND = 10.0  # seconds a stop may wait for the loop: generous, since a woken loop ends at once


def test_it_starts_once_and_a_stop_wakes_a_loop_waiting_for_work():
    background = BackgroundThread("test-loop")
    runs: list[str] = []
    waiting = threading.Event()

    def loop() -> None:
        runs.append(threading.current_thread().name)
        with background.wakeup:
            waiting.set()
            while not background.stopped.is_set():
                background.wakeup.wait(3600)  # only a wake ends this wait in time

    assert not background.started
    assert background.start(loop) is True
    assert background.start(loop) is False  # a second start makes no second loop
    assert waiting.wait(BOUND)
    assert background.stop(timeout=BOUND) is True
    assert runs == ["test-loop"] and background.started


def test_wait_returns_at_once_once_stopped():
    background = BackgroundThread("test-wait")
    background.stop()
    assert background.wait(3600) is True


def test_a_thread_never_started_has_ended_and_a_busy_one_is_not_waited_for_past_the_bound():
    assert BackgroundThread("never").stop(timeout=BOUND) is True
    background = BackgroundThread("busy")
    release = threading.Event()
    background.start(lambda: release.wait(BOUND))  # ignores the stop until released
    try:
        assert background.stop(timeout=0.0) is False
    finally:
        release.set()
    assert background.stop(timeout=BOUND) is True


def test_the_loop_may_stop_itself_without_waiting_on_itself():
    background = BackgroundThread("self-stop")
    answers: list[bool] = []
    background.start(lambda: answers.append(background.stop(timeout=BOUND)))
    assert background.stop(timeout=BOUND) is True
    assert answers == [False]  # still running when it asked: it did not join itself
