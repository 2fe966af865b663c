"""http.trusted_proxies (swarmgpu/core/forwarded.py): behind a reverse proxy every
client was the proxy's address, one wrong-token bucket for all, so one guesser locked
every user's token sign-in out. From a proxy the operator names, and only from it, the
client X-Forwarded-For names counts; a header that names no one client is refused."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest
from support.webauth import TOKEN, get, post, web_daemon

from swarmgpu.core.config import ConfigError, load_config
from swarmgpu.core.forwarded import BadForwarded, client_ip, parse_trusted
from swarmgpu.core.guesslimit import BURST

PROXY = "127.0.0.7"
WRONG = {"Authorization": "Bearer wrong-guess-0123456789"}
RIGHT = {"Authorization": f"Bearer {TOKEN}"}


def test_a_guesser_behind_the_proxy_locks_out_no_one_else(tmp_path: Path) -> None:
    """A guesser's wrong tokens through the trusted proxy use up its own bucket only:
    another user's token and sign-in through the same proxy still answer. The guesser
    writes what it likes left of the proxy's entry: the right-most address the proxy
    did not vouch for is the one counted. A peer not named never has its header read."""
    d = web_daemon(tmp_path, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": f"{PROXY}, 10.9.0.0/16"})
    assert d._http is not None
    port = d._http.server_address[1]
    try:
        for i in range(BURST):
            fwd = {"X-Forwarded-For": f"198.51.100.{i}, 203.0.113.9, 10.9.0.1"}
            assert get(port, "/api/v1/cluster", {**WRONG, **fwd}, src=PROXY)[0] == 401
        guesser = {"X-Forwarded-For": "192.0.2.1, 203.0.113.9"}
        assert get(port, "/api/v1/cluster", {**RIGHT, **guesser}, src=PROXY)[0] == 429
        user = {"X-Forwarded-For": "203.0.113.10"}
        assert get(port, "/api/v1/cluster", {**RIGHT, **user}, src=PROXY)[0] == 200
        assert post(port, "/login", f"token={TOKEN}", user, src=PROXY)[0] == 303
        assert get(port, "/api/v1/cluster", RIGHT, src=PROXY)[0] == 200  # the proxy's own
        for i in range(BURST):  # not named: one bucket, whatever it writes
            fwd = {"X-Forwarded-For": f"203.0.113.{100 + i}"}
            assert get(port, "/api/v1/cluster", {**WRONG, **fwd}, src="127.0.0.8")[0] == 401
        fwd = {"X-Forwarded-For": "203.0.113.200"}
        assert get(port, "/api/v1/cluster", {**RIGHT, **fwd}, src="127.0.0.8")[0] == 429
    finally:
        d._http.shutdown()
        d._http.server_close()


def _send(port: int, src: str, forwarded: list[str], rfc7239: list[str] | None = None,
          name: str = "X-Forwarded-For") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(src, 0))
    try:
        conn.putrequest("GET", "/api/v1/cluster")
        for value in forwarded:
            conn.putheader(name, value)
        for value in rfc7239 or []:
            conn.putheader("Forwarded", value)
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_trusted_proxys_header_that_names_no_one_client_is_refused(
        tmp_path: Path) -> None:
    """Two X-Forwarded-For lines (which one a proxy appended to is a guess), or an
    entry that is no bare IP address, from a trusted proxy: 400, never a bucket chosen
    by guess. From anyone else the header is not read at all."""
    d = web_daemon(tmp_path, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": PROXY})
    assert d._http is not None
    port = d._http.server_address[1]
    try:
        assert _send(port, PROXY, ["203.0.113.9"]) == 200
        for bad in (["203.0.113.9", "203.0.113.10"], ["203.0.113.9:4711"], ["unknown"],
                    ["203.0.113.9,"], ["proxy.example"], ["fe80::1%eth0"]):
            assert _send(port, PROXY, bad) == 400, bad
            assert _send(port, "127.0.0.8", bad) == 200, bad
    finally:
        d._http.shutdown()
        d._http.server_close()


def test_the_forwarded_client_rules() -> None:
    proxies = parse_trusted("10.0.0.5, 10.1.0.0/24, 2001:db8::/64")
    assert client_ip("10.0.0.5", ["192.0.2.1"], proxies) == "192.0.2.1"
    assert client_ip("::ffff:10.0.0.5", ["192.0.2.1"], proxies) == "192.0.2.1"
    assert client_ip("10.0.0.6", ["192.0.2.1"], proxies) == "10.0.0.6"
    assert client_ip("10.0.0.5", [], proxies) == "10.0.0.5"
    assert client_ip("10.0.0.5", ["1.2.3.4, 192.0.2.1 ,10.1.0.9"], proxies) == "192.0.2.1"
    assert client_ip("10.0.0.5", ["10.1.0.8, 10.1.0.9"], proxies) == "10.1.0.8"
    assert client_ip("10.0.0.5", ["2001:db8:1::1"], proxies) == "2001:db8:1::1"
    assert client_ip("10.0.0.6", ["a", "b"], proxies) == "10.0.0.6"  # never read
    assert client_ip("10.0.0.5", ["x"], ()) == "10.0.0.5"
    for bad in (["a", "b"], [""], ["1.2.3.4,,5.6.7.8"], ["[2001:db8::1]"],
                ["01.2.3.4"], [", ".join(["192.0.2.1"] * 33)]):
        with pytest.raises(BadForwarded):
            client_ip("10.0.0.5", bad, proxies)


def test_a_forwarded_header_beside_it_is_refused_from_a_trusted_proxy(
        tmp_path: Path) -> None:
    """A proxy that writes RFC 7239 ``Forwarded`` passes the client's own
    X-Forwarded-For on untouched: read, its right-most entry was the guesser's pick of
    bucket, one per request. A trusted proxy's request with ``Forwarded``: 400, the fix
    named. The header's name is read in any case; from anyone else neither is read."""
    d = web_daemon(tmp_path, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": PROXY})
    assert d._http is not None
    port = d._http.server_address[1]
    try:
        assert _send(port, PROXY, ["203.0.113.9"], name="x-forwarded-FOR") == 200
        assert _send(port, PROXY, ["203.0.113.9", "203.0.113.1"],
                     name="x-forwarded-for") == 400
        assert _send(port, PROXY, ["203.0.113.9"], ["for=203.0.113.9"]) == 400
        assert _send(port, PROXY, [], ["for=203.0.113.9"]) == 400
        assert _send(port, "127.0.0.8", ["203.0.113.9"], ["for=203.0.113.9"]) == 200
    finally:
        d._http.shutdown()
        d._http.server_close()


def test_a_trusted_proxy_named_ipv4_mapped_is_the_ipv4_peer() -> None:
    """``::ffff:10.0.0.5`` (how a dual-stack listener shows an IPv4 peer) named as the
    proxy matched no peer at all: peers are read as IPv4, the name stayed IPv6."""
    for named in ("::ffff:10.0.0.5", "::ffff:10.0.0.0/104", "10.0.0.5"):
        proxies = parse_trusted(named)
        for peer in ("10.0.0.5", "::ffff:10.0.0.5"):
            assert client_ip(peer, ["192.0.2.1"], proxies) == "192.0.2.1", (named, peer)
        assert client_ip("10.0.0.5", ["192.0.2.1, ::ffff:10.0.0.5"], proxies) == "192.0.2.1"


def test_a_peer_with_a_zone_is_never_a_trusted_proxy() -> None:
    """A link-local address names a host on one link only: ``fe80::1`` on another
    interface is anyone there. As Go's netip has it, an address with a zone matches no
    network; a link-local network named, which could then match nothing, is an error."""
    proxies = parse_trusted("::/0, 10.0.0.0/8")
    assert client_ip("fe80::1%eth9", ["192.0.2.1"], proxies) == "fe80::1%eth9"
    assert client_ip("2001:db8::5", ["192.0.2.1"], proxies) == "192.0.2.1"
    for named in ("fe80::1", "fe80::/10", "fe80::1%eth0"):
        with pytest.raises(ValueError, match="link-local"):
            parse_trusted(named)


def test_an_ipv4_link_local_proxy_is_refused_as_an_ipv6_one_is() -> None:
    """169.254.0.0/16 is link-local as fe80::/10 is (RFC 3927: self-assigned, one host
    per link, anyone's on another link); fe80:: was refused for that, 169.254.x.y was
    trusted, and matched (an IPv4 peer has no zone): one rule for both."""
    for named in ("169.254.10.5", "169.254.0.0/16", "169.254.7.0/24",
                  "::ffff:169.254.10.5", "10.0.0.5, 169.254.1.1"):
        with pytest.raises(ValueError, match="link-local, one host per link"):
            parse_trusted(named)
    assert parse_trusted("169.0.0.0/8, 10.0.0.5")  # a wider network holding it: as IPv6's
    with pytest.raises(ConfigError, match=r"169\.254\.3\.3' is link-local"):
        load_config(None, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": "169.254.3.3",
                               "SWARMGPU_HTTP_AUTH": "required"})


@pytest.mark.parametrize(("value", "says"), [
    ("proxy.example", "names are not resolved"),
    ("10.0.0.1/8", "host bits set"),
    ("fe80::1%eth0", "zone"),
    ("fe80::5", "link-local"),
    ("10.0.0.0/33", "not an IP address or network"),
])
def test_a_bad_trusted_proxies_setting_is_a_config_error_naming_it(
        value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"http\.trusted_proxies: ") as got:
        load_config(None, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": value})
    assert says in str(got.value), str(got.value)
    assert load_config(None, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": " 10.0.0.5 , ::1 ",
                                  "SWARMGPU_HTTP_AUTH": "required"}
                       ).http.trusted_proxies == " 10.0.0.5 , ::1 "


@pytest.mark.parametrize("named", ["127.0.0.1", "::1", "::ffff:127.0.0.1", "10.0.0.5, ::/0",
                                   "0.0.0.0/0"])
def test_a_loopback_proxy_under_auth_auto_is_a_config_error(named: str) -> None:
    """Under ``http.auth: auto`` (the default) a loopback peer reads everything without
    proof, so a proxy on the manager named trusted let every client through it read the
    cluster, token or none: the setting loaded, and the token it was named for was never
    asked. Refused at load, the fix named; under ``required`` it is what it is for."""
    with pytest.raises(ConfigError, match=r"http\.trusted_proxies: .*http\.auth: required"):
        load_config(None, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": named})
    load_config(None, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": named,
                           "SWARMGPU_HTTP_AUTH": "required"})
    load_config(None, env={"SWARMGPU_HTTP_TRUSTED_PROXIES": "10.0.0.5, 10.1.0.0/24, 2001:db8::/64"})
