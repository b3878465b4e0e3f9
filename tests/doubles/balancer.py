"""A TCP load balancer on loopback, standing in for a Service in front of two replicas.

Like kube-proxy, it spreads new connections over the backends round-robin, leaves
established connections alone, and skips a backend that refuses connections (a
terminating pod is removed from the endpoints). TLS passes through untouched. Used by
tests/e2e/test_faults.py, to drain two replicas in turn.

Proven against the real one: tests/cluster/test_operations.py rolls the Deployment out, and
deletes and kills its Pods, behind the real Service and kube-proxy, under a steady write load.
"""

from __future__ import annotations

import itertools
import socket
import threading


class Balancer:
    def __init__(self, backends: list[int]):
        self.backends = list(backends)
        self._next = itertools.cycle(range(len(self.backends)))
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.connections = {port: 0 for port in self.backends}
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _connect(self) -> socket.socket | None:
        for _ in range(len(self.backends)):
            port = self.backends[next(self._next)]
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
                upstream.settimeout(None)
                self.connections[port] += 1
                return upstream
            except OSError:
                continue
        return None

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = self._connect()
            if upstream is None:
                client.close()
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def stop(self) -> None:
        self._stopped = True
        self.listener.close()
