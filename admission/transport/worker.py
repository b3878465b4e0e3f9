"""A gunicorn gthread worker whose threads only ever run requests that have fully arrived."""

# gthread gives a new connection to a thread, which does the TLS handshake and reads the request
# blocking: a client that sends nothing (or a byte a second) holds the thread, and a dozen hold a
# pod. Here the loop does the handshake and reads the whole request, non-blocking, under one
# deadline; an idle or slow client costs a descriptor and its bytes, never a thread. Small reviews
# are even answered in the loop: their judgement is far cheaper than the two thread wake-ups a
# round trip through a thread costs (bench/status_overhead.py). gunicorn's internals are reached
# only through admission.transport.gthread_seam.

from __future__ import annotations

import errno
import os
import re
import resource
import selectors
import socket
import ssl
import struct
import time
from functools import partial

from admission.transport.bounded_socket import IO_SECONDS, BoundedSSLSocket
from admission.transport.connections import Conn, ConnectionEnds
from admission.transport.framing import Refused, framing
from admission.transport.gthread_seam import GthreadSeam
from admission.transport.target import admit

REQUEST_SECONDS = (
    10.0  # handshake + headers + body of a request, one deadline; a new connection's clock starts at accept
)
MAX_HEAD = 64 * 1024  # request line and headers; gunicorn's own limits (414/431) apply within this
LARGE_BODY = (
    64 * 1024
)  # whole bodies above this are judged LARGE_AT_ONCE at a time per worker, smallest first
LARGE_AT_ONCE = 1  # decoding a multi-MiB review holds the GIL (orjson): one at a time per worker
BUFFERED_AT_MOST = 64 * 1024 * 1024  # bytes of requests being read or waiting to be judged, per worker
READ_PER_TURN = 64 * 1024  # bytes read from one connection before the loop turns to the others
FD_HEADROOM = 64  # descriptors kept for what a worker opens besides connections: files, pipes, its watches
ACCEPT_PAUSE = 0.5  # after accept() fails for want of descriptors (EMFILE, ENFILE), accept nothing this long
CLIENT_CONNECTIONS = 256  # default connections per client address per worker (--max-client-connections)
WARN_EVERY = 60.0  # seconds between two warnings of a kind (an attacker must not fill the log)

_REVIEW = re.compile(rb"POST /(?:validate|mutate)[ ?]")  # the API server adds ?timeout=...
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class PreReadWorker(ConnectionEnds, GthreadSeam):
    """gthread, but TLS handshakes and request reads happen in the event loop, with deadlines."""

    max_body = 6 * 1024 * 1024  # set by admission.webhook.server.options
    max_client_connections = CLIENT_CONNECTIONS
    shutdown_delay = 0.0
    # Where TLS contexts come from (admission.transport.tls.ReloadingContext). Not gunicorn's
    # certfile/keyfile: gunicorn checks those files exist when a worker starts, so a worker
    # replaced while the files are missing would fail to boot and the master would exit; the
    # context in memory is the last good certificate, and serving with it is what we want.
    tls = None
    # With ``serve --client-ca-file``: a request from a client that did not present a certificate
    # the TLS context verified is refused (403) before it is parsed, unless its path is public
    # (admission.transport.target: the same reading of the path the routes use).
    client_auth = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.arriving: dict = {}  # connection -> None, in arrival order: requests being read
        self.waiting: dict = {}  # whole large requests waiting for a slot
        self.lingering: dict = {}  # refused connections, draining until their deadline
        self.flushing: dict = {}  # connections whose answer (from the loop) is still being written
        self.large_in_use = 0
        self.buffered = 0  # bytes held by the requests in arriving and waiting
        self.clients: dict = {}  # client address -> connections open
        self.client_limit = self.max_client_connections
        self.accept_paused_until = 0.0
        self.warned: dict = {}  # kind of warning -> when it may be logged again
        self.drain_at: float | None = None

    def starting(self) -> None:
        self._fit_connections_to_descriptors()

    def _fit_connections_to_descriptors(self) -> None:
        """At most as many connections as descriptors are left (RLIMIT_NOFILE), keeping
        ``FD_HEADROOM``, and at most half of those for one client address."""
        # With ulimit -n 256, a cap of 1000 made accept() fail with EMFILE, which killed the worker.
        cap = self.configured_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY:
            try:
                in_use = len(os.listdir("/proc/self/fd")) - 1  # not the listing's own
            except OSError:
                in_use = FD_HEADROOM
            room = max(1, soft - in_use - FD_HEADROOM)
            if room < cap:
                self.log.warning(
                    "at most %d connections per worker: the file descriptor limit is %d, %d are in use "
                    "and %d are kept for files and sockets",
                    room,
                    soft,
                    in_use,
                    FD_HEADROOM,
                )
                cap = room
        self.cap_connections(cap)
        self.client_limit = max(1, min(self.max_client_connections, cap // 2))

    # -- connections ------------------------------------------------------------------
    def take_connection(self, listener) -> bool:
        """Take a connection from ``listener``'s backlog; whether there was one."""
        try:
            client, address = listener.accept()
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                return False
            if err.errno in _NO_DESCRIPTORS:
                self._pause_accepting(err)
                return False
            raise
        peer = address[0] if isinstance(address, tuple) else None
        if peer is not None and self.clients.get(peer, 0) >= self.client_limit:
            try:  # reset, not closed: no TIME_WAIT left behind here for each connection refused
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            client.close()
            self._warn(
                "client",
                "closing new connections from %s: it has %d open, the most one client address may "
                "have (--max-client-connections)",
                peer,
                self.client_limit,
            )
            return True
        self.count_connection(+1)
        if peer is not None:
            self.clients[peer] = self.clients.get(peer, 0) + 1
        client.setblocking(False)
        try:
            if self.tls is not None:
                context = self.tls.get()
                context.sslsocket_class = BoundedSSLSocket
                client = context.wrap_socket(
                    client, server_side=True, do_handshake_on_connect=False, suppress_ragged_eofs=True
                )
            conn = Conn(self, client, address, listener, partial(self._gone, peer))
        except (OSError, ValueError):
            self.count_connection(-1)
            self._gone(peer)
            client.close()
            return True
        conn.handshaken = self.tls is None
        self._arrive(conn)
        return True

    def _gone(self, peer) -> None:
        if peer is None:
            return
        left = self.clients.get(peer, 0) - 1
        if left > 0:
            self.clients[peer] = left
        else:
            self.clients.pop(peer, None)

    def _pause_accepting(self, err: OSError) -> None:
        self.accept_paused_until = time.monotonic() + ACCEPT_PAUSE
        self.accept_connections(False)
        self._warn(
            "descriptors",
            "out of file descriptors (%s) with %d connections open: not accepting for %.1fs",
            os.strerror(err.errno or 0),
            self.open_connections,
            ACCEPT_PAUSE,
        )

    def may_accept(self) -> bool:
        # Not while paused for want of descriptors (the loop asks at least once a second).
        return time.monotonic() >= self.accept_paused_until

    def _warn(self, kind: str, message: str, *args) -> None:
        now = time.monotonic()
        if now >= self.warned.get(kind, 0.0):
            self.warned[kind] = now + WARN_EVERY
            self.log.warning(message + f" (logged at most every {WARN_EVERY:.0f}s)", *args)

    def buffered_request(self, conn) -> None:
        # A kept-alive connection that already holds the start of its next request (pipelining):
        # read the rest in the loop, like any other request, on the loop's next turn (answering
        # it now, from inside the last answer, would nest one call per pipelined request and let
        # one client keep the loop).
        self.defer(self._arrive, conn)

    def readable_again(self, conn) -> None:
        conn.watching = 0
        self._arrive(conn)

    def _arrive(self, conn) -> None:
        """Start reading a request on ``conn`` (new, or kept alive after the last one)."""
        conn.buf = bytearray(conn.leftover())
        conn.held = conn.scanned = 0
        conn.need = None
        conn.wants_large = False
        conn.deadline = time.monotonic() + REQUEST_SECONDS
        self.arriving[conn] = None
        self._progress(conn)

    def _progress(self, conn, _fileobj=None) -> None:
        if conn not in self.arriving:
            return  # refused or closed since this call was deferred
        try:
            self._account(conn)
            if not conn.handshaken:
                conn.sock.do_handshake()
                conn.handshaken = True
            budget = READ_PER_TURN
            while not self._complete(conn):
                if (
                    budget <= 0
                ):  # the others' turn; this connection's on the next (its bytes may be in the TLS buffer)
                    self._watch(conn, selectors.EVENT_READ)
                    self.defer(self._progress, conn)
                    return
                data = conn.sock.recv(65536)
                if not data:
                    self._close(conn)
                    return
                conn.buf += data
                budget -= len(data)
                self._account(conn)
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        except BlockingIOError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except Refused as refused:
            self._refuse(conn, refused.status, refused.why)
            return
        except (OSError, ValueError):  # handshake failures, resets
            self._close(conn)
            return
        self._dispatch(conn)

    def _complete(self, conn) -> bool:
        """Whether the whole request is in ``conn.buf``; frames it when its head is."""
        if conn.need is None:
            end = conn.buf.find(b"\r\n\r\n", max(0, conn.scanned - 3))
            if end < 0 or end > MAX_HEAD:
                if len(conn.buf) > MAX_HEAD:
                    raise Refused(431, f"request line and headers larger than {MAX_HEAD} bytes")
                conn.scanned = len(conn.buf)
                return False
            head = bytes(conn.buf[:end])
            admit(head, certified=not self.client_auth or bool(conn.sock.getpeercert()))
            length, without_expect = framing(head)
            if length > self.max_body:
                raise Refused(413, f"body larger than {self.max_body} bytes")
            if without_expect is not None:
                conn.buf[:end] = without_expect
                end = len(without_expect)
                self._account(conn)
                if len(conn.buf) < end + 4 + length:
                    self._continue(conn)
            conn.need = end + 4 + length
            conn.wants_large = length > LARGE_BODY
        return len(conn.buf) >= conn.need

    def _continue(self, conn) -> None:
        """``100 Continue``: the client may send its body now (curl waits a second for this)."""
        try:
            conn.sock.send(_CONTINUE)
        except (OSError, ValueError):
            pass  # not taken at once: the client sends its body when it stops waiting for this

    def _account(self, conn) -> None:
        """Count ``conn.buf`` in the bytes this worker holds; over ``BUFFERED_AT_MOST``, refuse
        the requests holding the most until under it (``conn`` too, if it is one of them)."""
        grown = len(conn.buf) - conn.held
        conn.held += grown
        self.buffered += grown
        while self.buffered > BUFFERED_AT_MOST:
            largest = max((*self.arriving, *self.waiting), key=lambda c: c.held)
            why = f"the server holds {BUFFERED_AT_MOST} bytes of requests at most; this one was the largest"
            if largest is conn:
                raise Refused(503, why)
            self._refuse(largest, 503, why)

    def _release_bytes(self, conn) -> None:
        self.buffered -= conn.held
        conn.held = 0

    def _dispatch(self, conn) -> None:
        self._unwatch(conn)
        self.arriving.pop(conn, None)
        if conn.wants_large and not conn.large:
            if self.large_in_use >= LARGE_AT_ONCE:
                self.waiting[conn] = None  # judged when a slot is free, smallest first
                return
            self.large_in_use += 1
            conn.large = True
        self._release_bytes(conn)
        here = not conn.wants_large and isinstance(conn.sock, BoundedSSLSocket) and _REVIEW.match(conn.buf)
        conn.hand_over(bytes(conn.buf))
        conn.buf = None
        if isinstance(conn.sock, BoundedSSLSocket):
            conn.sock.bound(read_by=conn.deadline)  # a thread never needs to read: if it did, not past this
        if here:
            self._answer_here(conn)
        else:
            self.to_thread(conn)

    def _answer_here(self, conn) -> None:
        """Judge a small review in the loop; collect its answer, then write it without blocking."""
        conn.sock.collected = bytearray()
        try:
            conn.keep = self.answer(conn)  # reads only what is buffered: the whole request is
        except (
            Exception
        ):  # gthread's handle answers its own errors; anything else ends the connection, not the loop
            self.log.exception("answering a review in the loop")
            conn.keep = False
        finally:
            conn.out, conn.sock.collected = conn.sock.collected, None
        self._flush(conn)

    def _flush(self, conn, _fileobj=None) -> None:
        try:
            conn.sock.setblocking(False)
            while conn.out:
                del conn.out[: conn.sock.send(conn.out)]
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError) as err:
            if conn not in self.flushing:
                conn.deadline = time.monotonic() + IO_SECONDS
                self.flushing[conn] = None
            self._watch(
                conn,
                selectors.EVENT_READ if isinstance(err, ssl.SSLWantReadError) else selectors.EVENT_WRITE,
                self._flush,
            )
            return
        except (OSError, ValueError):
            self._close(conn)
            return
        self.flushing.pop(conn, None)
        self._unwatch(conn)
        self.finished(conn, conn.keep)

    def answered(self, conn, closing: bool) -> bool:
        if getattr(conn, "large", False):
            self._release_large(conn)
        if closing:
            # Not kept alive: gthread would close gracefully here, waiting in the loop for up
            # to 2 s until the client closes too; linger without blocking instead.
            self._linger(conn)
            return True
        return False

    def _release_large(self, conn) -> None:
        conn.large = False
        self.large_in_use -= 1
        if self.waiting:
            smallest = min(self.waiting, key=lambda c: c.need)  # the first of equals: in arrival order
            del self.waiting[smallest]
            self._dispatch(smallest)

    # -- selector bookkeeping -----------------------------------------------------------
    def _watch(self, conn, events: int, then=None) -> None:
        if conn.watching == events and then is None:
            return
        callback = partial(then or self._progress, conn)
        if conn.watching:
            self.rewatch(conn.sock, events, callback)
        else:
            self.watch(conn.sock, events, callback)
        conn.watching = events

    def _unwatch(self, conn) -> None:
        if conn.watching:
            try:
                self.unwatch(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.watching = 0

    def _forget(self, conn) -> None:
        """Take ``conn`` out of the loop's requests: its bytes and its large-body slot."""
        self._unwatch(conn)
        self.arriving.pop(conn, None)
        self.waiting.pop(conn, None)
        self._release_bytes(conn)
        if getattr(conn, "large", False):
            self._release_large(conn)

    def tick(self) -> None:
        """Close connections whose request did not arrive in time, and refused ones."""
        now = time.monotonic()
        for conn in [c for c in self.arriving if c.deadline <= now]:
            if conn.handshaken and conn.buf:
                self._refuse(conn, 408, f"request not received within {REQUEST_SECONDS:.0f}s")
            else:
                self._close(conn)
        for conn in [c for c in self.waiting if c.deadline <= now]:
            self._refuse(
                conn, 503, f"not judged within {REQUEST_SECONDS:.0f}s: larger reviews were ahead of it"
            )
        for group in (self.lingering, self.flushing):
            for conn in [c for c in group if c.deadline <= now]:
                self._close(conn)
        if self.drain_at is not None and self.serving and now >= self.drain_at:
            self._stop_accepting()

    # -- shutdown -----------------------------------------------------------------------
    def terminating(self) -> bool:
        """SIGTERM: keep serving for ``shutdown_delay`` with keep-alive off, then drain."""
        # A Pod's endpoint is removed while it is already terminating: "Connection: close" on
        # every answer meanwhile moves clients to another replica.
        if self.drain_at is None and self.serving:
            self.drain_at = time.monotonic() + self.shutdown_delay
            self.close_after_each_response()
            self.defer(lambda: None)  # wake the loop
            return True
        return False

    def _stop_accepting(self) -> None:
        # Take what already waits in the backlog (those clients connected while we served),
        # then stop; gthread's loop then finishes the requests in flight.
        self.accept_paused_until = 0.0
        self.accept_connections(False)
        for listener in self.listeners():
            for _ in range(self.connection_cap):
                try:
                    if not self.take_connection(listener):
                        break
                except OSError:
                    break
            listener.close()  # new connections go to the other replicas (or are refused), not into a dead backlog
        self.stop_serving()
