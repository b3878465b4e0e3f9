"""Denials queued by request threads for one background thread to look at: what the denial
Events (admission.kube.events) and the shown attempts (admission.kube.attempts) share."""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from admission.background import BackgroundThread
from admission.kube.client import CALL_ERRORS, describe_error
from admission.kube.limits import READS_PER_NAMESPACE, read_window, window_counts

K = TypeVar("K")
V = TypeVar("V")


class DenialQueue(Generic[K, V]):
    """The objects denials named, oldest first, each once (a repeat is folded into its entry),
    at most ``max_pending`` (more are dropped: a review never waits); the background thread
    that takes them; the reads of the API server it may make per namespace (per pod with
    ``limits_dir``, a directory every worker shares, as the receiver's limits are); and the
    API version each kind answered at last."""

    def __init__(
        self,
        name: str,
        max_pending: int,
        reads_per_namespace: int = READS_PER_NAMESPACE,
        limits_dir: str | os.PathLike[str] | None = None,
    ):
        self.max_pending = max_pending
        self.pending: OrderedDict[K, V] = OrderedDict()
        self.reads = window_counts(reads_per_namespace, limits_dir, f"{name}-reads")
        self.versions: dict[str, str] = {}  # kind -> the API version that answered last
        self._background = BackgroundThread(name)
        self._cond = self._background.wakeup  # guards ``pending`` too: a queued denial wakes the thread

    def put(self, key: K, entry: Callable[[V | None], V]) -> bool:
        """Queue ``key`` with ``entry(the entry it has, or None)``; False when the queue is full."""
        with self._cond:
            if key not in self.pending and len(self.pending) >= self.max_pending:
                return False
            self.pending[key] = entry(self.pending.get(key))
            self._cond.notify()
            return True

    def take(self, timeout: float) -> tuple[K, V] | None:
        """The oldest entry, after waiting up to ``timeout`` seconds for one; None when there is
        none, or the thread is stopped."""
        with self._cond:
            if not self.pending and not self.stopped:
                self._cond.wait(timeout)
            if not self.pending or self.stopped:
                return None
            key = next(iter(self.pending))
            return key, self.pending.pop(key)

    def may_read(self, namespace: str) -> bool:
        """Count one read in ``namespace``; False when its reads for this window are spent."""
        return self.reads.charge(namespace, read_window())

    @property
    def stopped(self) -> bool:
        return self._background.stopped.is_set()

    def run(self) -> None:
        raise NotImplementedError

    @staticmethod
    def shown(show: Callable[[], str], log: logging.Logger, failed: str, named: str) -> str:
        """What ``show`` (one denial looked at: a call or two to the API server) answered;
        "failed" when it failed, said in one line of ``log`` (``failed``, the object ``named``):
        no traceback for an API error (kube.client retries nothing), and never a dead thread."""
        try:
            return show()
        except CALL_ERRORS as err:
            log.warning(failed, extra={"object": named, "error": describe_error(err)})
        except Exception:  # nothing one denial brings is worth the thread
            log.exception(failed, extra={"object": named})
        return "failed"

    def start(self) -> None:
        self._background.start(self.run)

    def stop(self) -> None:
        self._background.stop()
