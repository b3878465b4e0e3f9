"""Fetch a calendar feed: one GET over HTTPS, bounded in size and time, with no SSRF.

- **Where**: https only (plain http only when the entry allows it, and never with credentials);
  no credentials in the URL; the host is resolved once and every address is checked: loopback,
  private, link-local, shared, multicast and reserved addresses are refused unless the operator
  lists their network (the controller's ``--calendar-allow-networks``), and so are IPv6 addresses
  that carry such an IPv4 address (NAT64, 6to4, Teredo: ``embedded_ipv4``). The connection goes to
  the checked address (no second resolution an attacker could answer differently), with the
  URL's host name for SNI and certificate checking.
- **Redirects**: followed to the same host and port only, at most ``MAX_REDIRECTS``, never from
  https to http.
- **Bounds**: ``max_bytes`` of body (Content-Length checked first, the body counted as it is
  read); a connect timeout, and one deadline for the whole fetch (DNS, TLS, headers, body): a
  watchdog shuts the socket down when it passes, so a server that trickles bytes cannot hold it.
  No compressed bodies (``Accept-Encoding`` is not sent; an encoded answer is refused).
- **Conditional**: ``If-None-Match``/``If-Modified-Since`` from the last fetch; 304 is "not modified".
- **TLS**: 1.2 or later, the system's roots, or only the given CA bundle when there is one.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urljoin, urlsplit

from admission import __version__

MAX_BYTES = 4 << 20
CONNECT_TIMEOUT = 5.0
TOTAL_TIMEOUT = 30.0
MAX_REDIRECTS = 3
USER_AGENT = f"flux-gate-admission/{__version__}"
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 64 * 1024

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class FetchError(Exception):
    """The feed could not be fetched; ``str()`` says why, for the GateKeeper's status."""


@dataclass(frozen=True)
class Policy:
    """The operator's bounds for every fetch."""

    max_bytes: int = MAX_BYTES
    connect_timeout: float = CONNECT_TIMEOUT
    total_timeout: float = TOTAL_TIMEOUT
    max_redirects: int = MAX_REDIRECTS
    allowed_networks: tuple[Network, ...] = ()  # non-public networks that may be fetched from


DEFAULT_POLICY = Policy()  # the bounds when the operator gives none (frozen: one serves all)


@dataclass(frozen=True)
class Auth:
    """Credentials and trust for one feed (from Secrets in the GateKeeper's namespace)."""

    token: str | None = None  # Authorization: Bearer
    username: str | None = None  # Authorization: Basic, with password
    password: str | None = field(default=None, repr=False)
    ca_pem: bytes | None = None  # trust only these roots

    def __repr__(self) -> str:  # never a secret in a log line or a traceback
        return f"Auth(token={'***' if self.token else None}, username={self.username!r}, ca={self.ca_pem is not None})"

    def header(self) -> str | None:
        if self.token:
            return f"Bearer {self.token}"
        if self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None


@dataclass(frozen=True)
class Fetched:
    """A fetch's answer: the body (None: not modified since the validators sent) and the new validators."""

    body: bytes | None
    etag: str | None = None
    last_modified: str | None = None


def parse_networks(text: str) -> tuple[Network, ...]:
    """``10.0.0.0/8,127.0.0.1/32`` as networks; raise ValueError."""
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())


# IPv6 forms whose last 32 bits are an IPv4 address a translator delivers to: IPv4-compatible
# (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d, SIIT) and NAT64's well-known and local-use
# prefixes. (IPv4-mapped, 6to4 and Teredo: ipaddress reads those itself.)
_CARRIES_LAST_32 = tuple(
    ipaddress.IPv6Network(net) for net in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48")
)
# Not globally reachable (RFC 8215), though Python's ipaddress says so only from 3.12.4 on.
_NOT_GLOBAL = (ipaddress.IPv6Network("64:ff9b:1::/48"),)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Every IPv4 address an IPv6 address carries, where NAT64, a 6to4 relay or Teredo would deliver."""
    found = [*(ip.teredo or ()), *((ip.sixtofour,) if ip.sixtofour else ())]
    if any(ip in net for net in _CARRIES_LAST_32):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return tuple(found)


def allowed_address(address: str, policy: Policy) -> bool:
    """Whether a resolved address may be fetched from: public, or in a network the operator allows;
    and so is every IPv4 address it carries (NAT64 and 6to4 clusters route to those)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # the socket connects to the IPv4 address itself
    carried = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else ()
    return _allowed(ip, policy) and all(_allowed(v4, policy) for v4 in carried)


def _allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, policy: Policy) -> bool:
    if any(ip.version == net.version and ip in net for net in policy.allowed_networks):
        return True
    return ip.is_global and not ip.is_multicast and not any(ip in net for net in _NOT_GLOBAL)


class _Expired(FetchError):
    """The fetch's deadline passed (``fetch`` says after how long)."""


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Expired()
    return left


def _resolve(host: str, port: int, deadline: float) -> list[tuple[int, tuple[Any, ...]]]:
    """The host's addresses, within the deadline (getaddrinfo cannot be interrupted: it runs in
    a daemon thread that is abandoned when the deadline passes)."""
    try:
        ip = ipaddress.ip_address(host)
        return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (str(ip), port))]
    except ValueError:
        pass
    found: list[list[tuple[Any, ...]] | OSError] = []  # getaddrinfo's answer, or why not
    done = threading.Event()

    def resolve() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            found.append(err)
        finally:
            done.set()

    threading.Thread(target=resolve, name="calendar-dns", daemon=True).start()
    if not done.wait(_remaining(deadline)):
        raise FetchError(f"resolving {host} took longer than the fetch deadline")
    answer = found[0]
    if isinstance(answer, OSError):
        raise FetchError(f"cannot resolve {host}: {answer}")
    return [(family, sockaddr) for family, _, _, _, sockaddr in answer]


def _connect(host: str, port: int, policy: Policy, deadline: float) -> socket.socket:
    addresses = _resolve(host, port, deadline)
    allowed = [(family, addr) for family, addr in addresses if allowed_address(addr[0], policy)]
    if not allowed:
        shown = ", ".join(sorted({addr[0] for _, addr in addresses})[:4])
        raise FetchError(
            f"{host} resolves to {shown}: loopback, private, link-local or reserved addresses are "
            f"not fetched unless the controller allows their network (--calendar-allow-networks)"
        )
    last: Exception | None = None
    for family, addr in allowed[:4]:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(min(policy.connect_timeout, _remaining(deadline)))
            sock.connect(addr)
            return sock
        except OSError as err:
            sock.close()
            last = err
    raise FetchError(f"cannot connect to {host}:{port}: {last}")


def _tls(ca_pem: bytes | None) -> ssl.SSLContext:
    try:
        context = (
            ssl.create_default_context(cadata=ca_pem.decode("ascii"))
            if ca_pem
            else ssl.create_default_context()
        )
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as err:
        raise FetchError(f"the CA bundle cannot be used: {err}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _check(url: str, allow_http: bool, auth: Auth) -> SplitResult:
    parts = urlsplit(url)
    try:
        _ = parts.port  # reading it checks it: a port that is not one raises
    except ValueError as err:
        raise FetchError(f"bad URL: {err}") from None
    if parts.scheme == "http" and not allow_http:
        raise FetchError("plain http is not allowed for this calendar (allowHTTP)")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise FetchError("only https:// URLs are fetched")
    if parts.username is not None or parts.password is not None:
        raise FetchError("credentials in the URL are refused: use secretRef")
    if parts.scheme == "http" and auth.header() is not None:
        raise FetchError("credentials are never sent over plain http")
    return parts


def _get(
    parts: SplitResult, auth: Auth, validators: dict[str, str], policy: Policy, deadline: float
) -> tuple[int, str, http.client.HTTPMessage, bytes]:
    host, https = parts.hostname, parts.scheme == "https"
    assert host is not None  # _check refuses a URL without one
    port = parts.port or (443 if https else 80)
    sock = _connect(host, port, policy, deadline)
    # The watchdog shuts the connection down through a descriptor of its own: http.client closes
    # the socket object it was given when the server says "Connection: close", while the response
    # goes on reading the same connection.
    guard = socket.socket(fileno=os.dup(sock.fileno()))
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        try:
            guard.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    watchdog = threading.Timer(_remaining(deadline), expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        sock.settimeout(_remaining(deadline))  # each read's bound; the watchdog bounds them all
        if https:
            sock = _tls(auth.ca_pem).wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, port)
        conn.sock = sock  # connected and checked above: http.client must not connect again
        conn.putrequest(
            "GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), skip_accept_encoding=True
        )
        headers = {
            "User-Agent": USER_AGENT,
            "Accept": "text/calendar, */*;q=0.5",
            "Connection": "close",
            **validators,
        }
        authorization = auth.header()
        if authorization is not None:
            headers["Authorization"] = authorization
        for key, value in headers.items():
            conn.putheader(key, value)
        conn.endheaders()
        response = conn.getresponse()
        body = b""
        if response.status == 200:
            encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
            if encoding != "identity":
                raise FetchError(f"the feed came {encoding}-encoded; only identity is accepted")
            declared = response.getheader("Content-Length")
            if declared and declared.strip().isdigit() and int(declared) > policy.max_bytes:
                raise FetchError(f"the feed is {int(declared)} bytes, more than {policy.max_bytes}")
            chunks, size = [], 0
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > policy.max_bytes:
                    raise FetchError(f"the feed is more than {policy.max_bytes} bytes")
                chunks.append(chunk)
                _remaining(deadline)
            body = b"".join(chunks)
        return response.status, response.reason, response.headers, body
    except FetchError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as err:
        if expired.is_set() or time.monotonic() >= deadline:
            raise FetchError(f"no complete answer within {policy.total_timeout:g}s") from None
        if isinstance(err, ssl.SSLCertVerificationError):
            raise FetchError(f"the server's certificate is not trusted: {err.verify_message}") from None
        raise FetchError(f"{type(err).__name__}: {err}") from None
    finally:
        watchdog.cancel()
        for each in (sock, guard):
            try:
                each.close()
            except OSError:
                pass


def fetch(
    url: str,
    *,
    auth: Auth = Auth(),
    allow_http: bool = False,
    etag: str | None = None,
    last_modified: str | None = None,
    policy: Policy = Policy(),
) -> Fetched:
    """GET the feed at ``url``; raise FetchError saying why it could not be had."""
    deadline = time.monotonic() + policy.total_timeout
    validators: dict[str, str] = {}
    if etag:
        validators["If-None-Match"] = etag
    if last_modified:
        validators["If-Modified-Since"] = last_modified
    current = url
    for _ in range(policy.max_redirects + 1):
        parts = _check(current, allow_http, auth)
        host = parts.hostname
        assert host is not None  # _check refuses a URL without one
        try:
            status, reason, headers, body = _get(parts, auth, validators, policy, deadline)
        except _Expired:
            raise FetchError(f"no complete answer within {policy.total_timeout:g}s") from None
        if status in _REDIRECTS:
            location = headers.get("Location")
            if not location:
                raise FetchError(f"HTTP {status} without a Location")
            target = urlsplit(urljoin(current, location.strip()))
            same = (target.hostname or "").lower() == host.lower() and (
                target.port or (443 if target.scheme == "https" else 80)
            ) == (parts.port or (443 if parts.scheme == "https" else 80))
            if not same:
                raise FetchError(f"redirected to another host ({target.hostname}): not followed")
            if parts.scheme == "https" and target.scheme != "https":
                raise FetchError("redirected from https to plain http: not followed")
            current = target.geturl()
            continue
        if status == 304 and validators:
            return Fetched(None, etag, last_modified)
        if status != 200:
            raise FetchError(f"HTTP {status} {reason}".strip())
        return Fetched(body, headers.get("ETag"), headers.get("Last-Modified"))
    raise FetchError(f"more than {policy.max_redirects} redirects")
