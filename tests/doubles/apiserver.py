"""A loopback stand-in for the few API server calls `kubectl gate` / `flux gate` make: list
namespaces, list a namespace's Gates or every namespace's (no GateKeepers, no Flux object),
merge-patch a Gate. It answers over real HTTP, so the CLI
runs unchanged in its own process (also when exec'd by the flux binary), and records each
patch as the API server would receive it (applied as tests/doubles/mergepatch.py says). Used by
tests/app/test_flux_plugin.py and tests/server/test_flux_cli.py; it needs no cluster.

Proven against the real one: tests/e2e/test_operators.py runs the same commands
(`kubectl gate open`, `get`, completion) against a real kube-apiserver."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from admission.core.base import names
from tests.doubles.mergepatch import merged

_GATES = re.compile(
    rf"^/apis/{re.escape(names.GATING_GROUP)}/{names.GATING_VERSION}/namespaces/([^/]+)/{names.GATE_PLURAL}(?:/([^/?]+))?(?:\?.*)?$"
)
_NAMESPACES = re.compile(r"^/api/v1/namespaces(?:\?.*)?$")
_EVERY_NAMESPACE = re.compile(
    rf"^/apis/{re.escape(names.GATING_GROUP)}/{names.GATING_VERSION}/({names.GATE_PLURAL}|{names.GATEKEEPER_PLURAL})(?:\?.*)?$"
)


class ApiServerDouble:
    """Gates by (namespace, name); ``patches`` lists (namespace, name, content type, body)."""

    def __init__(self, gates: list[dict] = ()):
        self.gates = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in gates}
        self.patches: list[tuple[str, str, str, dict]] = []
        # A Gate whose patches the API server refuses: (code, reason), answered as its Status is.
        self.refuse: dict[tuple[str, str], tuple[int, str]] = {}
        # While set, every request is answered with this failure (code, reason): an API server
        # in trouble, for a command that must outlast it.
        self.failing: tuple[int, str] | None = None
        double = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _failure(self, code: int, reason: str, message: str) -> None:
                self._answer(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": reason,
                        "message": message,
                        "code": code,
                    },
                )

            def _not_found(self) -> None:
                self._failure(404, "NotFound", f"{self.path} not found")

            def do_GET(self):  # noqa: N802 (http.server's name)
                if double.failing:
                    return self._failure(*double.failing, "failing on purpose")
                every = _EVERY_NAMESPACE.match(self.path)
                if every:  # Gates in every namespace; no GateKeepers
                    items = (
                        [g for _, g in sorted(double.gates.items())]
                        if every.group(1) == names.GATE_PLURAL
                        else []
                    )
                    return self._answer(
                        200,
                        {
                            "kind": "List",
                            "apiVersion": names.GATING_API_VERSION,
                            "metadata": {},
                            "items": items,
                        },
                    )
                if _NAMESPACES.match(self.path):
                    spaces = sorted({ns for ns, _ in double.gates})
                    return self._answer(
                        200,
                        {
                            "kind": "NamespaceList",
                            "apiVersion": "v1",
                            "metadata": {},
                            "items": [{"metadata": {"name": ns}} for ns in spaces],
                        },
                    )
                found = _GATES.match(self.path)
                if found and not found.group(2):
                    items = [g for (ns, _), g in sorted(double.gates.items()) if ns == found.group(1)]
                    return self._answer(
                        200,
                        {
                            "kind": "GateList",
                            "apiVersion": names.GATING_API_VERSION,
                            "metadata": {},
                            "items": items,
                        },
                    )
                self._not_found()

            def do_PATCH(self):  # noqa: N802
                found = _GATES.match(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if not found or not found.group(2):
                    return self._not_found()
                key = (found.group(1), found.group(2))
                double.patches.append((*key, self.headers.get("Content-Type", ""), body))
                if key not in double.gates:
                    return self._not_found()
                if key in double.refuse:
                    code, reason = double.refuse[key]
                    return self._failure(code, reason, f'gates.{names.GATING_GROUP} "{key[1]}": {reason}')
                double.gates[key] = merged(double.gates[key], body)
                self._answer(200, double.gates[key])

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def kubeconfig(self, path: Path, user: str = "alice", namespace: str | None = None) -> Path:
        """A kubeconfig whose current context is this server (with ``namespace``, when given)."""
        context = {"cluster": "double", "user": user, **({"namespace": namespace} if namespace else {})}
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "double",
                    "clusters": [{"name": "double", "cluster": {"server": self.url}}],
                    "users": [{"name": user, "user": {"token": "not-checked"}}],
                    "contexts": [{"name": "double", "context": context}],
                }
            )
        )
        return path

    def __enter__(self) -> ApiServerDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
