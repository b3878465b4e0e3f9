"""The only module that touches gunicorn's gthread internals; the worker asks it, under our names."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

from gunicorn import http
from gunicorn.workers.gthread import TConn, ThreadWorker

# Everything used here of gunicorn's that is not its documented API. gthread has no public way to
# read a request in its loop, so the worker subclasses it, and a release may rename or drop any of
# these: tests/server/test_gunicorn_seam.py checks each on the installed gunicorn (and that this
# module uses nothing else of it), so an upgrade fails there, naming the part, not in production.
# (owner, name, kind, detail):
#   class, function (parameters), method (parameters after self)
#   hook (parameters, caller): a method gunicorn itself calls from ``caller``, overridden here; were
#     it renamed, the override would silently never run
#   attribute (set in, read in): set by ``set in``; read by ``read in`` where our meaning depends on it
#   setting: a configuration setting read here
RELIES_ON = (
    ("gunicorn", "http", "module", None),
    ("gunicorn.http", "get_parser", "function", ("cfg", "source", "source_addr")),
    ("gunicorn.workers.gthread", "TConn", "class", None),
    ("gunicorn.workers.gthread", "ThreadWorker", "class", None),
    ("TConn", "__init__", "method", ("cfg", "sock", "client", "server")),
    ("TConn", "close", "hook", (("graceful",), "ThreadWorker.finish_request")),
    ("TConn", "cfg", "attribute", ("TConn.__init__", None)),
    ("TConn", "sock", "attribute", ("TConn.__init__", "ThreadWorker.handle")),
    ("TConn", "client", "attribute", ("TConn.__init__", None)),
    ("TConn", "parser", "attribute", ("TConn.__init__", "ThreadWorker.handle")),
    ("TConn", "initialized", "attribute", ("TConn.__init__", "ThreadWorker.handle")),
    ("TConn", "data_ready", "attribute", ("TConn.__init__", "ThreadWorker.handle")),
    ("Parser", "unreader", "attribute", ("Parser.__init__", None)),
    ("Unreader", "take_buffered", "method", ()),
    ("Unreader", "unread", "method", ("data",)),
    ("Worker", "cfg", "attribute", ("Worker.__init__", None)),
    ("Worker", "log", "attribute", ("Worker.__init__", None)),
    ("Worker", "alive", "attribute", ("Worker.__init__", "ThreadWorker.run")),
    ("Worker", "sockets", "attribute", ("Worker.__init__", "ThreadWorker.set_accept_enabled")),
    ("Config", "worker_connections", "setting", None),
    ("Config", "threads", "setting", None),
    (
        "ThreadWorker",
        "poller",
        "attribute",
        ("ThreadWorker.init_process", "ThreadWorker.wait_for_and_dispatch_events"),
    ),
    ("ThreadWorker", "method_queue", "attribute", ("ThreadWorker.__init__", "ThreadWorker.run")),
    ("PollableMethodQueue", "defer", "method", ("callback", "args")),
    (
        "ThreadWorker",
        "keepalived_conns",
        "attribute",
        ("ThreadWorker.__init__", "ThreadWorker.handle_request"),
    ),
    ("ThreadWorker", "nr_conns", "attribute", ("ThreadWorker.__init__", "ThreadWorker.run")),
    ("ThreadWorker", "worker_connections", "attribute", ("ThreadWorker.__init__", "ThreadWorker.run")),
    ("ThreadWorker", "max_keepalived", "attribute", ("ThreadWorker.__init__", "ThreadWorker.handle_request")),
    ("ThreadWorker", "handle", "method", ("conn",)),
    ("ThreadWorker", "run", "hook", ((), "Worker.init_process")),
    ("ThreadWorker", "accept", "hook", (("listener",), "ThreadWorker.set_accept_enabled")),
    ("ThreadWorker", "set_accept_enabled", "hook", (("enabled",), "ThreadWorker.run")),
    ("ThreadWorker", "enqueue_req", "hook", (("conn",), "ThreadWorker.finish_request")),
    (
        "ThreadWorker",
        "on_client_socket_readable",
        "hook",
        (("conn", "client"), "ThreadWorker.finish_request"),
    ),
    ("ThreadWorker", "finish_request", "hook", (("conn", "fs"), "ThreadWorker.enqueue_req")),
    ("ThreadWorker", "murder_pending", "hook", ((), "ThreadWorker.run")),
    ("ThreadWorker", "handle_exit", "hook", (("sig", "frame"), "Worker.init_signals")),
)

# gunicorn's names the worker may use itself: plain objects with stable meanings (a connection's
# socket, the worker's logger, closing a connection), which a wrapper would only rename.
PASSED_THROUGH = ("sock", "log", "close")


class SeamConn(TConn):
    """gthread's connection, plus a callback run once when it closes, by whichever path."""

    def __init__(self, worker: GthreadSeam, sock, address, listener, gone):
        super().__init__(worker.cfg, sock, address, listener.getsockname())
        self.gone = gone

    def close(self, graceful: bool = False) -> None:
        # gthread closes connections itself (kept-alive ones that expire, failed answers): the
        # worker's per-client counts must hear of those too.
        gone, self.gone = self.gone, None
        if gone is not None:
            gone()
        super().close(graceful)

    def leftover(self) -> bytes:
        """Bytes of the next request a thread's parser read past the last one (pipelining)."""
        return _unreader(self.parser).take_buffered() if self.parser is not None else b""

    def hand_over(self, request: bytes) -> None:
        """Give a thread ``request``, read whole by the loop, to parse from memory."""
        if self.parser is None:
            self.parser = http.get_parser(self.cfg, self.sock, self.client)
        _unreader(self.parser).unread(request)
        # The loop did the handshake and holds every byte: left unset, a thread would wrap the
        # socket in TLS again (initialized) and wait for it to turn readable (data_ready).
        self.initialized = self.data_ready = True


def _unreader(parser: object) -> Any:
    """The HTTP/1 parser's unreader (the stubs' parser type also covers HTTP/2, which has none;
    gthread over TLS without h2 makes HTTP/1 parsers only)."""
    return cast(Any, parser).unreader


class GthreadSeam(ThreadWorker):
    """gthread's worker, its loop's parts under our names, and hooks for what the loop decides."""

    # -- hooks the worker defines -----------------------------------------------------
    def starting(self) -> None:
        """Before the loop's first turn, in the worker process."""

    def take_connection(self, listener) -> bool:
        """Accept one connection from ``listener``; whether there was one."""
        raise NotImplementedError

    def may_accept(self) -> bool:
        """Whether accepting may resume now."""
        return True

    def buffered_request(self, conn) -> None:
        """``conn``'s next request has begun and its bytes are in the parser, not the socket."""
        raise NotImplementedError

    def readable_again(self, conn) -> None:
        """A kept-alive ``conn`` has bytes to read (it is no longer watched)."""
        raise NotImplementedError

    def answered(self, conn, closing: bool) -> bool:
        """``conn``'s answer is written; whether the worker takes the connection from here."""
        return False

    def tick(self) -> None:
        """Each turn of the loop, at least once a second."""

    def terminating(self) -> bool:
        """SIGTERM; whether the worker delays stopping."""
        return False

    # -- gthread's hooks, overridden to call ours ---------------------------------------
    def run(self) -> None:
        self.starting()
        super().run()

    def accept(self, listener) -> None:  # the listener's poller callback
        self.take_connection(listener)

    def set_accept_enabled(self, enabled: bool | None) -> None:
        # gthread's loop enables accepting on each turn it is under its connection count.
        if enabled and not self.may_accept():
            return
        super().set_accept_enabled(enabled)

    def enqueue_req(self, conn) -> None:
        # gthread would give the connection to a thread, which reads the request blocking. Only
        # an answer that read ahead into the next request (pipelining) still gets here: gthread's
        # other callers are overridden here, or never run (hand_over keeps threads from deferring).
        self.buffered_request(conn)

    def on_client_socket_readable(self, conn, client) -> None:
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self.readable_again(conn)

    def finish_request(self, conn, fs) -> None:
        # Every answer ends here, a thread's (with its future) and the loop's (``finished``).
        closing = not fs.cancelled() and fs.exception() is None and fs.result() is False
        if not self.answered(conn, closing):
            super().finish_request(conn, fs)

    def murder_pending(self) -> None:  # gthread calls it on every turn of its loop, after the events
        super().murder_pending()
        self.tick()

    def handle_exit(self, sig, frame) -> None:  # SIGTERM: gthread would stop serving at once
        if not self.terminating():
            super().handle_exit(sig, frame)

    # -- gthread's parts, for the worker -------------------------------------------------
    def to_thread(self, conn) -> None:
        """Answer ``conn``'s request in a thread; ``finish_request`` follows in the loop."""
        ThreadWorker.enqueue_req(self, conn)

    def answer(self, conn) -> bool:
        """Answer ``conn``'s request here and now; whether to keep the connection."""
        return self.handle(conn)

    def finished(self, conn, keep: bool) -> None:
        """An answer written by the loop ends as a thread's does (gthread takes a future)."""
        done: Future = Future()
        done.set_result(keep)
        self.finish_request(conn, done)

    def defer(self, callback, *args) -> None:
        """Run ``callback(*args)`` on the loop's next turn (safe from any thread)."""
        self.method_queue.defer(callback, *args)

    # gthread's selector: the worker's connections wait in the one poller its loop turns on.
    def watch(self, sock, events: int, callback) -> None:
        self.poller.register(sock, events, callback)

    def rewatch(self, sock, events: int, callback) -> None:
        self.poller.modify(sock, events, callback)

    def unwatch(self, sock) -> None:
        self.poller.unregister(sock)

    def accept_connections(self, enabled: bool) -> None:
        self.set_accept_enabled(enabled)

    def count_connection(self, delta: int) -> None:
        # gthread's loop stops accepting at its cap, and a stopping worker waits for this to reach 0.
        self.nr_conns += delta

    @property
    def open_connections(self) -> int:
        return self.nr_conns

    @property
    def configured_connections(self) -> int:
        return self.cfg.worker_connections

    @property
    def connection_cap(self) -> int:
        return self.worker_connections

    def cap_connections(self, cap: int) -> None:
        """Take at most ``cap`` connections, keeping room for a thread's worth of new ones."""
        self.worker_connections = cap
        self.max_keepalived = max(1, cap - self.cfg.threads)

    def close_after_each_response(self) -> None:
        # gthread answers "Connection: close" whenever it keeps max_keepalived connections alive.
        self.max_keepalived = 0

    @property
    def serving(self) -> bool:
        return self.alive

    def stop_serving(self) -> None:
        """gthread's loop ends its turns, then finishes the requests in flight."""
        self.alive = False

    def listeners(self) -> list:
        return self.sockets
