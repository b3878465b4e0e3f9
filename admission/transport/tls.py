"""A server TLS context that picks up renewed certificate files without a restart."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

# The name its log lines carried before the transport left the webhook package: what operators
# filter on does not move with the module.
log = logging.getLogger("admission.webhook.tls")


def server_context(certfile: str, keyfile: str, client_ca: str | None = None) -> ssl.SSLContext:
    """TLS 1.2 or newer, the given key pair. With ``client_ca``, every client is asked for a
    certificate and one that does not chain to that CA (for client use) fails the handshake; a
    client that sends none is let through the handshake, and the worker then refuses it every
    path but the public ones (admission.transport.worker, ``client_auth``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(certfile, keyfile)
    if client_ca:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cafile=client_ca)
    return context


class ReloadingContext:
    """Hands out one shared SSLContext, rebuilt when the files change.

    gunicorn asks for a context on every new connection; building one each time
    would cost a file read and key parse per handshake. A half-rotated pair (new
    certificate, old key) fails to load and the previous context stays in use.
    """

    def __init__(self, certfile: str, keyfile: str, check_every: float = 1.0, client_ca: str | None = None):
        self.certfile, self.keyfile, self.check_every = certfile, keyfile, check_every
        self.client_ca = client_ca
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._context = server_context(certfile, keyfile, client_ca)
        self._checked = time.monotonic()

    def _file_stamp(self) -> tuple[tuple[int, int], ...]:
        paths = (self.certfile, self.keyfile) + ((self.client_ca,) if self.client_ca else ())
        try:
            return tuple((os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in paths)
        except OSError:
            return ()

    def get(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= self.check_every:
            with self._lock:
                if now - self._checked >= self.check_every:
                    self._checked = now
                    stamp = self._file_stamp()
                    if stamp and stamp != self._stamp:
                        try:
                            self._context = server_context(self.certfile, self.keyfile, self.client_ca)
                            self._stamp = stamp
                            log.info("serving certificate reloaded", extra={"certfile": self.certfile})
                        except (OSError, ssl.SSLError, ValueError) as err:
                            log.warning("serving certificate not reloaded yet", extra={"error": str(err)})
        return self._context

    def __call__(self, conf: object, default_factory: object) -> ssl.SSLContext:
        """The gunicorn ``ssl_context`` hook."""
        return self.get()
