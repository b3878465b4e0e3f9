"""One daemon thread's lifecycle: started at most once, woken on demand, stopped within a bound."""

from __future__ import annotations

import threading
from collections.abc import Callable


class BackgroundThread:
    """A daemon thread named ``name`` that runs a loop until ``stopped`` is set.

    ``wakeup`` is the condition the loop waits on for work (callers that queue work notify it
    under its lock, and may guard their queue with it too); ``stop`` sets ``stopped`` and
    notifies it, so a waiting loop ends at once instead of at its next timeout.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopped = threading.Event()
        self.wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, target: Callable[[], None]) -> bool:
        """Run ``target`` in the thread unless it was started before; whether this call started it.

        The loop is given here, not kept from the start: an owner holding this object and never
        started is freed as soon as it is dropped, with what it holds open (a reference cycle
        would keep an inotify descriptor until the next garbage collection)."""
        with self._starting:  # two callers racing must not make two loops over one queue
            if self._thread is not None:
                return False
            self._thread = threading.Thread(target=target, name=self.name, daemon=True)
            self._thread.start()
            return True

    def wait(self, timeout: float) -> bool:
        """Sleep ``timeout`` seconds, or less when stopped meanwhile; whether it is stopped."""
        return self.stopped.wait(timeout)

    def wake(self) -> None:
        with self.wakeup:
            self.wakeup.notify_all()

    def stop(self, timeout: float = 0.0) -> bool:
        """Ask the loop to end, wake it, and wait up to ``timeout`` seconds for it to end; whether
        it has (a thread never started has). Never waits on itself: the loop may call this."""
        self.stopped.set()
        self.wake()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return thread is None
        thread.join(timeout)
        return not thread.is_alive()
