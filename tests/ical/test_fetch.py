"""admission.ical.fetch against a real HTTPS server on loopback (tests/doubles/feedserver.py): feeds,
conditional GETs, credentials and CA bundles, and hostile servers: hangs, trickles, errors,
floods, encodings, redirects to other hosts, and addresses that must not be fetched."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from admission.ical.fetch import Auth, FetchError, Policy, allowed_address, fetch, parse_networks
from tests.doubles.feedserver import FeedServer, SilentListener

FEED = b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:t\r\nEND:VCALENDAR\r\n"
LOOPBACK = parse_networks("127.0.0.0/8,::1/128")
POLICY = Policy(total_timeout=1.5, connect_timeout=1.0, allowed_networks=LOOPBACK)


@pytest.fixture
def server(tmp_path):
    srv = FeedServer(tmp_path)
    yield srv
    srv.stop()


def get(server: FeedServer, path: str, **kw) -> bytes | None:
    kw.setdefault("auth", Auth(ca_pem=server.ca_pem))
    kw.setdefault("policy", POLICY)
    return fetch(server.url(path), **kw).body


def refused(server: FeedServer, path: str, **kw) -> str:
    with pytest.raises(FetchError) as err:
        get(server, path, **kw)
    return str(err.value)


def test_a_feed_is_fetched_over_https_with_our_ca_and_a_user_agent(server):
    server.routes["/freeze.ics"] = server.body(FEED)
    assert get(server, "/freeze.ics?gate=a") == FEED
    path, headers = server.requests[-1]
    assert path == "/freeze.ics?gate=a" and headers["User-Agent"].startswith("flux-gate-admission/")
    assert "Accept-Encoding" not in headers and "Authorization" not in headers


def test_the_servers_certificate_must_chain_to_the_given_bundle_or_the_systems_roots(server, tmp_path):
    server.routes["/f.ics"] = server.body(FEED)
    assert "certificate is not trusted" in refused(server, "/f.ics", auth=Auth())
    (tmp_path / "other").mkdir()
    other = FeedServer(tmp_path / "other")  # another CA
    try:
        assert "certificate is not trusted" in refused(server, "/f.ics", auth=Auth(ca_pem=other.ca_pem))
    finally:
        other.stop()
    assert "CA bundle cannot be used" in refused(
        server, "/f.ics", auth=Auth(ca_pem=b"-----BEGIN CERTIFICATE-----\nx")
    )


def test_a_bearer_token_or_basic_credentials_are_sent(server):
    server.routes["/f.ics"] = server.body(FEED)
    get(server, "/f.ics", auth=Auth(token="s3cret", ca_pem=server.ca_pem))
    assert server.requests[-1][1]["Authorization"] == "Bearer s3cret"
    get(server, "/f.ics", auth=Auth(username="bob", password="pw", ca_pem=server.ca_pem))
    assert server.requests[-1][1]["Authorization"] == "Basic " + base64.b64encode(b"bob:pw").decode()
    assert "s3cret" not in repr(Auth(token="s3cret"))


def test_an_unchanged_feed_is_not_sent_again(server):
    server.routes["/f.ics"] = server.etagged(FEED, '"v1"')
    first = fetch(server.url("/f.ics"), auth=Auth(ca_pem=server.ca_pem), policy=POLICY)
    assert first.body == FEED and first.etag == '"v1"'
    again = fetch(server.url("/f.ics"), auth=Auth(ca_pem=server.ca_pem), policy=POLICY, etag=first.etag)
    assert again.body is None and again.etag == '"v1"'
    assert server.requests[-1][1]["If-None-Match"] == '"v1"'


@pytest.mark.parametrize(
    "answer, why",
    [
        (FeedServer.body(b"oops", status=500), "HTTP 500 Internal Server Error"),
        (FeedServer.body(b"", status=304), "HTTP 304"),  # not modified, though nothing was asked
        (
            FeedServer.body(FEED, headers={"Content-Encoding": "gzip"}),
            "gzip-encoded; only identity is accepted",
        ),
        (FeedServer.body(b"", status=302), "HTTP 302 without a Location"),
    ],
)
def test_errors_are_reported(server, answer, why):
    server.routes["/f.ics"] = answer
    assert why in refused(server, "/f.ics")


def test_a_server_that_hangs_or_trickles_costs_the_deadline(server):
    server.routes["/hang.ics"] = server.hang
    server.routes["/trickle.ics"] = server.trickle
    assert refused(server, "/hang.ics") == "no complete answer within 1.5s"
    assert refused(server, "/trickle.ics") == "no complete answer within 1.5s"  # every read made progress
    silent = SilentListener()  # accepts, never speaks TLS
    try:
        with pytest.raises(FetchError, match="no complete answer within 1.5s"):
            fetch(f"https://127.0.0.1:{silent.port}/f.ics", policy=POLICY)
    finally:
        silent.stop()


@pytest.mark.parametrize("declare", [True, False])
def test_a_50_mb_feed_is_refused_having_read_at_most_the_limit(server, declare):
    server.routes["/big.ics"] = server.flood(50 << 20, declare)
    policy = Policy(total_timeout=10, allowed_networks=LOOPBACK)
    why = refused(server, "/big.ics", policy=policy)
    assert why == (
        "the feed is 52428800 bytes, more than 4194304" if declare else "the feed is more than 4194304 bytes"
    )
    # What the server got out before the connection closed: the limit and socket buffers, not 50 MB.
    assert server.sent.get("/big.ics", 0) < (12 << 20)


def test_redirects_are_followed_on_the_same_host_only(server):
    server.routes["/moved.ics"] = server.body(b"", 301, {"Location": "/f.ics"})
    server.routes["/f.ics"] = server.body(FEED)
    assert get(server, "/moved.ics") == FEED
    server.routes["/away.ics"] = server.body(b"", 302, {"Location": server.url("/f.ics", host="localhost")})
    assert refused(server, "/away.ics") == "redirected to another host (localhost): not followed"
    server.routes["/port.ics"] = server.body(
        b"", 307, {"Location": f"https://127.0.0.1:{server.port + 1}/f.ics"}
    )
    assert refused(server, "/port.ics") == "redirected to another host (127.0.0.1): not followed"
    server.routes["/down.ics"] = server.body(b"", 308, {"Location": f"http://127.0.0.1:{server.port}/f.ics"})
    assert "not followed" in refused(server, "/down.ics")
    server.routes["/loop.ics"] = server.body(b"", 302, {"Location": "/loop.ics"})
    assert refused(server, "/loop.ics") == "more than 3 redirects"


def test_loopback_private_and_link_local_targets_are_refused_unless_allowed(server):
    server.routes["/f.ics"] = server.body(FEED)
    seen = len(server.requests)
    why = refused(server, "/f.ics", policy=Policy(total_timeout=1.5))
    assert why.startswith(
        "127.0.0.1 resolves to 127.0.0.1: loopback, private, link-local or reserved addresses"
    )
    assert "localhost resolves to" in str(
        pytest.raises(
            FetchError, fetch, server.url("/f.ics", host="localhost"), policy=Policy(total_timeout=1.5)
        ).value
    )
    assert len(server.requests) == seen  # refused before connecting
    for address in (
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
    ):
        assert not allowed_address(address, Policy()), address
    assert allowed_address("93.184.215.14", Policy()) and allowed_address("2606:2800:21f:cb07::1", Policy())
    assert allowed_address("10.1.2.3", Policy(allowed_networks=parse_networks("10.0.0.0/8")))
    assert not allowed_address("169.254.169.254", Policy(allowed_networks=parse_networks("10.0.0.0/8")))


# IPv6 forms that carry an IPv4 address a translator, tunnel or relay delivers to: NAT64 and 6to4
# clusters route them to that address, so it is judged as if it were the address resolved.
EMBEDDING = {
    "IPv4-mapped": "::ffff:{}",
    "IPv4-compatible": "::{}",
    "IPv4-translated": "::ffff:0:{}",
    "NAT64 well-known": "64:ff9b::{}",
    "NAT64 local-use": "64:ff9b:1::{}",
}


def _hex(v4: str) -> str:
    a, b, c, d = (int(x) for x in v4.split("."))
    return f"{a << 8 | b:x}:{c << 8 | d:x}"


def _sixtofour(v4: str) -> str:
    return f"2002:{_hex(v4)}::1"


def _teredo(server: str, client: str) -> str:
    hidden = ipaddress.IPv4Address(int(ipaddress.IPv4Address(client)) ^ 0xFFFFFFFF)
    return f"2001:0:{_hex(server)}:8000:63bf:{_hex(str(hidden))}"  # flags, obfuscated port, obfuscated client


INSIDE = ["127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.1", "100.64.0.1", "0.0.0.0"]
FORMS = (
    [pytest.param(form.format(v4), id=f"{name} {v4}") for name, form in EMBEDDING.items() for v4 in INSIDE]
    + [
        pytest.param(form.format(_hex(v4)), id=f"{name} {v4} in hex")
        for name, form in EMBEDDING.items()
        for v4 in INSIDE[:2]
    ]
    + [pytest.param(_sixtofour(v4), id=f"6to4 {v4}") for v4 in INSIDE]
    + [pytest.param(_teredo("65.54.227.120", v4), id=f"Teredo client {v4}") for v4 in INSIDE]
    + [pytest.param(_teredo(v4, "93.184.215.14"), id=f"Teredo server {v4}") for v4 in INSIDE]
)


@pytest.mark.parametrize("address", FORMS)
def test_an_ipv6_form_carrying_a_non_public_ipv4_address_is_refused(address):
    assert not allowed_address(address, Policy()), address


@pytest.mark.parametrize(
    "address", ["64:ff9b::93.184.215.14", _sixtofour("93.184.215.14"), "2606:2800:21f:cb07::1"]
)
def test_public_ipv4_through_nat64_or_6to4_is_still_fetched(address):
    # An IPv6-only cluster's DNS64 answers every public feed with a 64:ff9b:: address.
    assert allowed_address(address, Policy()), address


def test_an_allowed_ipv4_network_is_allowed_through_nat64_too():
    policy = Policy(allowed_networks=parse_networks("10.0.0.0/8"))
    assert allowed_address("64:ff9b::10.1.2.3", policy) and allowed_address("::ffff:10.1.2.3", policy)
    assert not allowed_address("64:ff9b::127.0.0.1", policy) and not allowed_address(
        _sixtofour("192.168.0.1"), policy
    )


def test_plain_http_only_when_allowed_and_never_with_credentials(tmp_path):
    plain = FeedServer(tmp_path, tls=False)
    plain.routes["/f.ics"] = plain.body(FEED)
    try:
        with pytest.raises(FetchError, match="plain http is not allowed"):
            fetch(plain.url("/f.ics"), policy=POLICY)
        assert fetch(plain.url("/f.ics"), allow_http=True, policy=POLICY).body == FEED
        with pytest.raises(FetchError, match="credentials are never sent over plain http"):
            fetch(plain.url("/f.ics"), allow_http=True, auth=Auth(token="t"), policy=POLICY)
        with pytest.raises(FetchError, match="credentials in the URL are refused"):
            fetch(f"https://bob:pw@127.0.0.1:{plain.port}/f.ics", policy=POLICY)
    finally:
        plain.stop()
