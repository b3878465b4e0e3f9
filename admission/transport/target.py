"""The request target read once: the path the client-certificate check and the routes both use."""

from __future__ import annotations

import re

from admission.transport.framing import Refused

# A path in its one spelling: segments of unreserved characters, none empty, "." or "..". Any
# other spelling (percent-encoding, dot segments, "//", absolute-form, "*") is refused, not
# normalised: a spelling the certificate check and the router could read apart is exactly what a
# forged request needs, and the API server, the kubelet, Prometheus and the receiver's clients
# never send one (names and namespaces are DNS-1123).
_PATH = re.compile(r"/|(?:/(?!\.\.?(?:/|\Z))[A-Za-z0-9._~-]+)+")
_QUERY = re.compile(r"[\x21-\x7e]*")  # what gunicorn accepts; the query never routes

# Where ``serve --board`` mounts the read-only gate board: the page is ``/board`` itself (a path
# has no trailing ``/`` here), its parts are under ``/board/``.
BOARD_PATH = "/board"
# What a client without a certificate may still ask for when client certificates are required
# (``client_auth``): the kubelet's probes, Prometheus, calendar apps, the receiver (which has
# its own bearer token), and a team screen's board (read-only, with the calendar's token if it
# has one). Public whether or not they are served: an unserved one answers 404, and says nothing.
PUBLIC_PATHS = ("/healthz", "/readyz", "/metrics", "/calendar.ics", BOARD_PATH)
PUBLIC_PREFIXES = ("/hooks/gates/", BOARD_PATH + "/")
NOT_ONE_SPELLING = (
    "the request path must be absolute, without percent-encoding, '.', '..' or empty segments, "
    "and use only letters, digits and '-._~'"
)


def request_path(target: str) -> str | None:
    """The path a request ``target`` (as on the request line) asks for; None unless origin-form
    in its one spelling, with a query of printable ASCII and no fragment."""
    path, _, query = target.partition("?")
    if not _PATH.fullmatch(path) or not _QUERY.fullmatch(query) or "#" in query:
        return None
    return path


def is_public(path: str) -> bool:
    """Whether any client may ask for ``path`` (a ``request_path``), certificate or not."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def admit(head: bytes, certified: bool) -> str:
    """The path the request whose request line and headers are ``head`` asks for; ``Refused``
    when it needs a certificate and the client is not ``certified``, when its target is not in
    its one spelling, or when a header name holds ``_``."""
    line, *fields = head.split(b"\r\n")
    parts = line.split(b" ")
    path = request_path(parts[1].decode("latin-1")) if len(parts) == 3 else None
    if not certified and (path is None or not is_public(path)):
        raise Refused(403, "this path needs a client certificate signed by the server's --client-ca-file")
    if path is None:
        raise Refused(400, NOT_ONE_SPELLING)
    for field in fields:
        name = field.partition(b":")[0]
        if b"_" in name:
            # gunicorn reads SCRIPT_NAME (any case) as a prefix to strip before routing, and its
            # WSGI environ cannot tell X_A from X-A: no client of ours sends such a name.
            raise Refused(
                400,
                f"the header {name.decode('latin-1')[:64]!r} is refused: header names "
                "with '_' could be read as the server's own routing variables",
            )
    return path
