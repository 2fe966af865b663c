"""The daemon's HTTP asks who you are (issue 32, item 3): the rules (pure), the token,
the browser's cookie, a manager certificate over HTTPS on the same port, and slow
readers that never read their answers.

The daemon's HTTP runs here with ``http.auth: required`` on loopback: the same checks as
``auto`` beyond loopback, minus the loopback exemption, which only a real second address
can show (tests/test_webauth_swarm.py, from another namespace of the test swarm).
"""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from loguru import logger
from support import slowflood
from support.identity import CLUSTER
from support.paths import REPO
from support.webauth import (
    BIG,
    FORM,
    TOKEN,
    get,
    https_web_daemon,
    map_in_chromium,
    post,
    raw,
    web_daemon,
)

from swarmgpu.cli import main
from swarmgpu.core.config import ConfigError, HttpConfig, load_config
from swarmgpu.core.guesslimit import BURST, REFILL_S, GuessLimit
from swarmgpu.core.httpguard import (
    STUCK_WRITE_S,
    WRITE_DEADLINE_S,
    Conn,
    GuardedServer,
    pick_victim,
)
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import CycleReport
from swarmgpu.manager.web import webmap
from swarmgpu.manager.web.webauth import (
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    Caller,
    WebAuth,
    auth_required,
    cookie_matches,
    is_loopback,
    judge,
    session_value,
)
from swarmgpu.manager.web.weblogin import login_token
from swarmgpu.swarm.identity import MIN_TOKEN_CHARS, PeerName, client_context


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Daemon, int]]:
    d = web_daemon(tmp_path)
    assert d._http is not None
    yield d, d._http.server_address[1]
    d._http.shutdown()
    d._http.server_close()


# --- the rules -------------------------------------------------------------------


def test_auth_is_required_beyond_loopback_and_configurable() -> None:
    assert not auth_required(HttpConfig(listen="127.0.0.1:9402"))
    assert not auth_required(HttpConfig(listen="localhost:9402"))
    assert not auth_required(HttpConfig(listen="[::1]:9402"))
    assert auth_required(HttpConfig(listen="0.0.0.0:9402"))
    assert auth_required(HttpConfig(listen="[::]:9402"))
    assert auth_required(HttpConfig(listen="10.0.0.5:9402"))
    assert auth_required(HttpConfig(listen="127.0.0.1:9402", auth="required"))
    assert not auth_required(HttpConfig(listen="0.0.0.0:9402", auth="off"))
    with pytest.raises(ConfigError, match=r"http\.auth"):
        load_config(None, env={"SWARMGPU_HTTP_AUTH": "maybe"})
    cfg = load_config(None, env={"SWARMGPU_HTTP_TOKEN_FILE": "/run/secrets/t"})
    assert cfg.http.token_file == "/run/secrets/t" and cfg.http.auth == "auto"
    for ip in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "localhost"):
        assert is_loopback(ip), ip
    for ip in ("10.0.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1", "evil.example", ""):
        assert not is_loopback(ip), ip


MANAGER = PeerName("mgr1", CLUSTER, "swarm-manager")


def _judge(caller: Caller, required: bool = True, loopback_open: bool = True
           ) -> tuple[bool, str]:
    v = judge(caller, required=required, loopback_open=loopback_open, token=TOKEN,
              cluster_id=CLUSTER)
    return v.allowed, v.how


def test_who_may_read_what() -> None:
    far = "10.1.2.3"
    assert _judge(Caller("/api/v1/cluster", far)) == (False, "")
    assert _judge(Caller("/healthz", far)) == (True, "open")
    assert _judge(Caller("/metrics", far, f"Bearer {TOKEN}")) == (True, "token")
    assert _judge(Caller("/", far, cookie=f"{SESSION_COOKIE}={session_value(TOKEN)}")) \
        == (True, "cookie")
    assert _judge(Caller("/", far, tls_peer=MANAGER)) == (True, "manager-certificate")
    # A worker's certificate, another swarm's manager, an expired manager certificate.
    for peer in (PeerName("n1", CLUSTER, "swarm-worker"),
                 PeerName("m9", "clusterB", "swarm-manager"),
                 PeerName("mgr1", CLUSTER, "swarm-manager", 0.0, time.time() - 60)):
        assert _judge(Caller("/", far, tls_peer=peer)) == (False, ""), peer
    # Loopback: open under auto (an SSH tunnel), not under required.
    assert _judge(Caller("/api/v1/cluster", "127.0.0.1")) == (True, "loopback")
    assert _judge(Caller("/api/v1/cluster", "127.0.0.1"), loopback_open=False) == (False, "")
    assert _judge(Caller("/api/v1/cluster", far), required=False) == (True, "off")


def test_token_and_cookie_checks() -> None:
    for bad in (None, "", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", f"Bearer{TOKEN}",
                f"Bearer {TOKEN}x", TOKEN):
        assert _judge(Caller("/", "10.0.0.1", bad)) == (False, ""), bad
    # RFC 9110 11.1: the scheme in any case (test_identity.py).
    assert _judge(Caller("/", "10.0.0.1", f"bearer {TOKEN}")) == (True, "token")
    good = f"{SESSION_COOKIE}={session_value(TOKEN)}"
    assert cookie_matches(good, TOKEN)
    assert cookie_matches(f"a=b; {good}; c=d", TOKEN)
    assert session_value(TOKEN) != TOKEN and TOKEN not in session_value(TOKEN)
    for bad in (None, "", f"{SESSION_COOKIE}={TOKEN}",  # the token itself is no session
                f"{SESSION_COOKIE}={session_value('other')}",
                f"{good}; {SESSION_COOKIE}=x",  # two: ambiguous
                f"{good}; {good}", f"x{good}"):
        assert not cookie_matches(bad, TOKEN), bad
    assert login_token(f"token={TOKEN}") == TOKEN
    for bad in ("", "token=", f"token={TOKEN}&token={TOKEN}", f"token={TOKEN}&x=1",
                "tok=1", "token=" + "a" * 9000):
        assert login_token(bad) is None, bad[:40]


def test_a_session_ends_after_its_max_age() -> None:
    """The cookie's Max-Age binds only the browser: a value copied off it (a backup, a
    shared profile, malware) must stop working too. The value carries when it was
    issued, under the HMAC, and is refused past SESSION_MAX_AGE_S (or from the future)."""
    now = time.time()

    def cookie(issued: float) -> str:
        return f"{SESSION_COOKIE}={session_value(TOKEN, int(issued))}"

    assert cookie_matches(cookie(now - 60), TOKEN, now)
    assert cookie_matches(cookie(now - SESSION_MAX_AGE_S + 60), TOKEN, now)
    for bad in (cookie(now - SESSION_MAX_AGE_S - 1), cookie(now + 3600),
                # the issued time moved forward: the MAC no longer fits
                f"{SESSION_COOKIE}={int(now)}." + cookie(now - 9e6).rpartition(".")[2],
                f"{SESSION_COOKIE}=.{session_value(TOKEN).rpartition('.')[2]}",
                f"{SESSION_COOKIE}=1e3.x", f"{SESSION_COOKIE}={'9' * 40}.x"):
        assert not cookie_matches(bad, TOKEN, now), bad


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["/", "/api/v1/cluster", "/metrics", "/healthz", "/login", "/x"]),
       st.sampled_from(["10.0.0.1", "127.0.0.1", "::1", "192.168.1.1"]),
       st.one_of(st.none(), st.text(max_size=60)), st.one_of(st.none(), st.text(max_size=80)),
       st.booleans())
def test_prop_without_proof_only_healthz_or_an_allowed_loopback(
        path: str, ip: str, authz: str | None, cookie: str | None, lb_open: bool) -> None:
    allowed, how = _judge(Caller(path, ip, authz, cookie), loopback_open=lb_open)
    if how in ("token", "cookie"):
        return  # hypothesis found the token: proof enough
    if allowed:
        assert path == "/healthz" or (lb_open and is_loopback(ip)), (path, ip, how)


def test_the_shipped_stack_asks_who_you_are() -> None:
    """stacks/swarmgpu.yml: the daemon listens beyond loopback, auth auto (required
    there), the token from the swarmgpu-http-token secret the header says to create."""
    from support.webauth_swarm import stack_daemon_env

    env = stack_daemon_env()
    cfg = load_config(REPO / "stacks" / "swarmgpu-config.yml", env=env)
    assert cfg.http.listen == "0.0.0.0:9402" and cfg.http.auth == "auto"
    assert auth_required(cfg.http)
    assert cfg.http.token_file == "/run/secrets/swarmgpu-http-token"
    text = (REPO / "stacks" / "swarmgpu.yml").read_text()
    assert "openssl rand -hex 32 | docker secret create swarmgpu-http-token -" in text


def test_a_short_token_is_refused_at_config_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token of a few characters is guessed in an afternoon: ``http.token_file``
    holding fewer than MIN_TOKEN_CHARS is a configuration error (``config check``, and
    ``run`` and every command that loads the config), naming the key and how to make
    one; the daemon's HTTP never takes it either. A file not readable here (the secret
    lives in the container) is left to the daemon, as before."""
    monkeypatch.delenv("SWARMGPU_HTTP_TOKEN_FILE", raising=False)
    short = tmp_path / "short"
    short.write_text("s3cret\n")
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"http:\n  listen: 0.0.0.0:9402\n  token_file: {short}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert f"{cfg}:3: http.token_file:" in res.output, res.output
    assert f"at least {MIN_TOKEN_CHARS}" in res.output and "openssl rand -hex 32" in res.output
    assert "s3cret" not in res.output  # the token itself is never printed
    monkeypatch.setenv("SWARMGPU_HTTP_TOKEN_FILE", str(short))
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2 and "SWARMGPU_HTTP_TOKEN_FILE: http.token_file:" in res.output
    assert WebAuth(HttpConfig(listen="0.0.0.0:0", token_file=str(short))).token is None
    for ok in (tmp_path / "absent", tmp_path / "enough"):
        if ok.name == "enough":
            ok.write_text("x" * MIN_TOKEN_CHARS + "\n")
        monkeypatch.setenv("SWARMGPU_HTTP_TOKEN_FILE", str(ok))
        res = CliRunner().invoke(main, ["config", "check", str(cfg)])
        assert res.exit_code == 0, (ok, res.output)
    assert len(TOKEN) >= MIN_TOKEN_CHARS  # the tests' own token passes


# --- over HTTP: the token, the browser's cookie ----------------------------------


def test_nothing_but_healthz_without_proof(web: tuple[Daemon, int]) -> None:
    _, port = web
    for path in ("/api/v1/cluster", "/metrics", "/", "/nothing"):
        status, headers, body = get(port, path)
        assert status == 401, path
        assert headers["www-authenticate"].startswith("Bearer")
        assert b"/login" in body and b"/login?token=" not in body and b"nodes" not in body
        assert headers["x-content-type-options"] == "nosniff"
    assert get(port, "/healthz")[0] == 200
    status, _, body = get(port, "/api/v1/cluster", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and body == b'{"nodes": []}'
    status, _, body = get(port, "/metrics", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and b"swarmgpu_" in body
    assert get(port, "/api/v1/cluster", {"Authorization": "Bearer wrong"})[0] == 401


LEAKY = ("gpu-7: agent at https://10.1.2.3:9401/facts timed out: no whole answer within "
         "5s; fix: check agents.url_template")


def test_healthz_tells_a_stranger_no_error_texts(web: tuple[Daemon, int],
                                                tmp_path: Path) -> None:
    """/healthz is open to anyone, so it says whether the daemon is well, not the
    cycle's errors: those name nodes, agent addresses and node IDs, what /api/v1/cluster
    answers only with proof."""
    d, port = web
    d.last_report = CycleReport(errors=[LEAKY])
    d.last_cycle_at = time.monotonic()
    status, _, body = get(port, "/healthz")
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "ok" and doc["error_count"] == 1
    assert b"10.1.2.3" not in body and b"gpu-7" not in body and "errors" not in doc
    for proof in ({"Authorization": f"Bearer {TOKEN}"},
                  {"Cookie": f"{SESSION_COOKIE}={session_value(TOKEN)}"}):
        doc = json.loads(get(port, "/healthz", proof)[2])
        assert doc["errors"] == [LEAKY] and doc["error_count"] == 1, proof
    # where anything else is open to the caller (a loopback client under auto), so is this
    d2 = web_daemon(tmp_path, auth="auto", listen="0.0.0.0:0")
    assert d2._http is not None
    try:
        d2.last_report = CycleReport(errors=[LEAKY])
        assert json.loads(get(d2._http.server_address[1], "/healthz")[2])["errors"] == [LEAKY]
    finally:
        d2._http.shutdown()
        d2._http.server_close()


def test_a_refused_path_is_logged_without_control_characters(
        web: tuple[Daemon, int]) -> None:
    """Anyone may send a path: an escape sequence in it must not reach the operator's
    terminal through the refusal's log line (peer input is cleaned, core.peertext). A
    target of other than visible ASCII is a malformed request line (400), unlogged; a
    401 is logged by its path."""
    _, port = web
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /x\x1b]0;owned\x07\x1b[2J\x9b31m HTTP/1.1\r\n"
                      b"Host: 127.0.0.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 400")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 401")
    finally:
        logger.remove(sink)
    refused = [ln for ln in lines if "refused (401" in ln]
    assert refused and "/x" in refused[0], lines
    assert not any(c in ln for ln in lines for c in "\x1b\x07\x9b"), lines


def test_an_answer_that_crashed_is_logged_by_its_path_alone(
        web: tuple[Daemon, int]) -> None:
    """A route that raised was logged with the whole target, its query too, which may
    hold a secret (a share link's key, a token a client put there): the log line and
    its traceback name the path alone; the client gets 500."""
    d, port = web

    def boom(query: str) -> tuple[str, bytes]:
        raise RuntimeError("a bug")

    d.http_query_routes["/api/v1/boom"] = boom
    lines: list[str] = []
    # without variables in tracebacks, as the daemon logs (cli.logs.setup_logging)
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR", diagnose=False)
    try:
        status, _, body = get(port, "/api/v1/boom?key=secret-in-the-query",
                              {"Authorization": f"Bearer {TOKEN}"})
    finally:
        logger.remove(sink)
    assert status == 500 and b"secret" not in body
    failed = [ln for ln in lines if "failed" in ln]
    assert failed and "HTTP /api/v1/boom failed" in failed[0], lines
    assert not any("secret-in-the-query" in ln or "key=" in ln for ln in lines), lines


def test_the_server_header_names_no_python_version(web: tuple[Daemon, int]) -> None:
    """Anyone gets /healthz and 401s: their Server header says swarmgpu, not the
    interpreter's exact version (which would point at its known flaws)."""
    _, port = web
    for path in ("/healthz", "/metrics"):
        assert get(port, path)[1]["server"] == "swarmgpu", path


def test_browser_signs_in_with_a_form_post_and_keeps_a_cookie(
        web: tuple[Daemon, int]) -> None:
    _, port = web
    for bad in ("", "token=wrong", f"token={TOKEN}&token=x", f"tok={TOKEN}"):
        status, headers, _ = post(port, "/login", bad)
        assert status == 401 and "set-cookie" not in headers, bad
    status, headers, _ = post(port, "/login", f"token={TOKEN}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0].startswith(f"{SESSION_COOKIE}=") and cookie_matches(parts[0], TOKEN)
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(parts)
    assert "Secure" not in parts  # plain HTTP: a browser would drop a Secure cookie
    assert TOKEN not in cookie
    jar = {"Cookie": parts[0]}
    assert get(port, "/api/v1/cluster", jar)[0] == 200
    assert get(port, "/metrics", jar)[0] == 200
    assert get(port, "/api/v1/cluster",
               {"Cookie": f"{SESSION_COOKIE}={session_value('other-token')}"})[0] == 401


def test_wrong_tokens_from_one_address_are_limited_and_no_one_else(
        web: tuple[Daemon, int]) -> None:
    """Any number of token guesses were answered 401 at full speed. Now a client's
    wrong tokens (Authorization on any path, the sign-in form) use up its bucket; then
    its tokens get 429 with Retry-After, the right one too (the answer must not tell a
    right guess), said once in the log; its cookie, /healthz and every other client
    answer as before, and right tokens never use a bucket up."""
    _, port = web
    wrong = {"Authorization": "Bearer wrong-guess-0123456789"}
    right = {"Authorization": f"Bearer {TOKEN}"}
    cookie = {"Cookie": f"{SESSION_COOKIE}={session_value(TOKEN)}"}
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for _ in range(BURST):
            assert get(port, "/api/v1/cluster", wrong, src="127.0.0.3")[0] == 401
        for path, hdrs in (("/healthz", wrong), ("/api/v1/cluster", wrong),
                           ("/api/v1/cluster", right), ("/metrics", right)):
            status, headers, body = get(port, path, hdrs, src="127.0.0.3")
            assert status == 429, (path, hdrs)
            assert 1 <= int(headers["retry-after"]) <= REFILL_S, headers
            assert b"nodes" not in body and b"swarmgpu_" not in body
        status, headers, _ = post(port, "/login", f"token={TOKEN}", src="127.0.0.3")
        assert status == 429 and "set-cookie" not in headers
        assert get(port, "/healthz", src="127.0.0.3")[0] == 200
        assert get(port, "/api/v1/cluster", cookie, src="127.0.0.3")[0] == 200
        assert get(port, "/api/v1/cluster", right, src="127.0.0.4")[0] == 200
        for _ in range(2 * BURST):  # a right token is never a guess used up
            assert get(port, "/api/v1/cluster", right, src="127.0.0.5")[0] == 200
        for _ in range(BURST):  # the sign-in form's wrong tokens count the same
            assert post(port, "/login", "token=wrong-guess", src="127.0.0.6")[0] == 401
        assert post(port, "/login", f"token={TOKEN}", src="127.0.0.6")[0] == 429
    finally:
        logger.remove(sink)
    said = [ln for ln in lines if "answered 429" in ln]
    assert len(said) == 1 and "127.0.0.3" in said[0], said


def test_a_scraper_that_proved_its_token_is_never_pushed_into_the_shared_bucket(
        web: tuple[Daemon, int]) -> None:
    """Prometheus sends the right token, so its bucket is full and was forgotten first
    once the table filled: its next scrape landed in the bucket every further address
    shares, which a guesser with a few more addresses keeps empty, and got 429. A
    client that proved its token keeps a bucket of its own; only its own address's
    wrong tokens count against it."""
    d, port = web
    d.web_auth.guesses = GuessLimit(max_clients=4)
    right = {"Authorization": f"Bearer {TOKEN}"}
    wrong = {"Authorization": "Bearer wrong-guess-0123456789"}
    assert get(port, "/metrics", right, src="127.0.0.5")[0] == 200  # Prometheus
    for i in range(10, 16):  # a guesser's addresses: the table, then the shared bucket
        for _ in range(BURST):
            get(port, "/api/v1/cluster", wrong, src=f"127.0.0.{i}")
    for _ in range(3):
        assert get(port, "/metrics", right, src="127.0.0.5")[0] == 200
    assert get(port, "/metrics", right, src="127.0.0.16")[0] == 429  # a new one shares


def test_the_token_never_goes_in_the_address(web: tuple[Daemon, int]) -> None:
    """/login?token= kept the token in the browser's history (and a proxy's access log):
    now it is refused, naming the way in, and the sign-in page is a form that POSTs it
    (a link carries it in the fragment, which no request sends)."""
    _, port = web
    for path in (f"/login?token={TOKEN}", "/login?x=1"):
        status, headers, body = get(port, path)
        assert status == 400 and "set-cookie" not in headers, path
        assert b"/login#token=" in body and TOKEN.encode() not in body, path
    status, headers, body = get(port, "/login")  # no proof needed to see the form
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'method="post"' in body and b'action="/login"' in body
    assert b'src="/login.js"' in body and TOKEN.encode() not in body
    # not deferred: it strips the fragment before the page is read
    assert b'<script src="/login.js"></script>' in body
    assert "form-action 'self'" in headers["content-security-policy"]
    assert headers["cache-control"] == "no-store"
    status, headers, body = get(port, "/login.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert b"replaceState" in body
    # the map's own pages may still post no form anywhere
    assert "form-action 'none'" in get(port, "/healthz")[1]["content-security-policy"]


def test_a_sign_in_from_another_origin_is_refused(web: tuple[Daemon, int]) -> None:
    """A form on another site could POST the token it knows (login CSRF): a browser's
    Sec-Fetch-Site, else its Origin against Host, must say the page was this one."""
    _, port = web
    form = f"token={TOKEN}"
    for hdrs in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                 {"Origin": f"http://127.0.0.1:{port + 1}"},
                 {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                 {"Sec-Fetch-Site": "cross-site", "Origin": f"http://127.0.0.1:{port}"}):
        status, headers, body = post(port, "/login", form, hdrs)
        assert status == 403 and "set-cookie" not in headers, hdrs
        assert b"same origin" in body, hdrs
    for hdrs in ({"Origin": f"http://127.0.0.1:{port}"},
                 # a proxy that rewrote Host: the browser's own word decides
                 {"Sec-Fetch-Site": "same-origin", "Origin": "https://map.example"},
                 {}):  # no browser (curl): nothing to forge
        assert post(port, "/login", form, hdrs)[0] == 303, hdrs


def test_sign_out_ends_the_browsers_session(web: tuple[Daemon, int]) -> None:
    """The sign-in page's Sign out button POSTs /logout: the cookie is cleared (Max-Age=0,
    the same scope); another site cannot sign you out, nor can a link (GET)."""
    _, port = web
    assert b'action="/logout"' in get(port, "/login")[2]
    status, headers, _ = post(port, "/logout", "", {"Origin": "http://evil.example"})
    assert status == 403 and "set-cookie" not in headers
    status, headers, _ = get(port, "/logout")
    assert status == 405 and headers["allow"] == "POST" and "set-cookie" not in headers
    jar = {"Cookie": f"{SESSION_COOKIE}={session_value(TOKEN)}"}
    status, headers, _ = post(port, "/logout", "", {**jar, "Origin": f"http://127.0.0.1:{port}"})
    assert status == 303 and headers["location"] == "/login"
    parts = [p.strip() for p in headers["set-cookie"].split(";")]
    assert parts[0] == f"{SESSION_COOKIE}=" and "Max-Age=0" in parts
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(parts)


def test_a_sign_in_post_is_bounded(web: tuple[Daemon, int]) -> None:
    """The one POST the daemon takes: a short urlencoded form with its length, read
    within the head's deadline; every other path and method is still refused."""
    _, port = web
    head = b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    form = f"Content-Type: {FORM}\r\n".encode()
    assert b" 411 " in raw(port, head + form + b"\r\ntoken=x")[:20]
    assert b" 411 " in raw(port, head + form + b"Transfer-Encoding: chunked\r\n"
                             b"Content-Length: 7\r\n\r\n7\r\ntoken=x\r\n0\r\n\r\n")[:20]
    assert b" 413 " in raw(port, head + form + b"Content-Length: 100000\r\n\r\n")[:20]
    assert b" 400 " in raw(port, head + form + b"Content-Length: -1\r\n\r\n")[:20]
    assert b" 415 " in raw(port, head + b"Content-Type: application/json\r\n"
                             b"Content-Length: 2\r\n\r\n{}")[:20]
    # A body that never comes ends at the head's deadline (2 s): the server closes it,
    # before raw()'s 5 s read timeout (a hang guard) would fail here.
    assert raw(port, head + form + b"Content-Length: 30\r\n\r\ntoken=")[:20] \
        in (b"", b"HTTP/1.1 408 Reques")
    ok = raw(port, head + form + f"Content-Length: {6 + len(TOKEN)}\r\n\r\n"
             f"token={TOKEN}".encode())
    assert ok.startswith(b"HTTP/1.1 303 ")
    for method, path in (("POST", "/"), ("POST", "/api/v1/cluster"), ("OPTIONS", "/login"),
                         ("PUT", "/login"), ("DELETE", "/login")):
        out = raw(port, f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Content-Length: 0\r\n\r\n".encode())
        assert out.startswith(b"HTTP/1.1 405 "), (method, path)
        allow = "GET, HEAD, POST" if path == "/login" else "GET, HEAD"
        assert f"Allow: {allow}\r\n".encode() in out, (method, path)


def test_a_sign_in_post_names_its_length_once(web: tuple[Daemon, int]) -> None:
    """Two Content-Length headers that differ: the daemon read the first, a proxy in
    front may read the other (RFC 9112 6.3: 400), as two Host headers are 400. Blanks
    around the number are the field's own (RFC 9110 5.5), not part of it."""
    _, port = web
    head = f"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {FORM}\r\n".encode()
    form = f"token={TOKEN}".encode()
    for lengths in ((len(form), 200), (len(form), len(form))):
        cl = "".join(f"Content-Length: {n}\r\n" for n in lengths).encode()
        out = raw(port, head + cl + b"\r\n" + form)
        assert out.startswith(b"HTTP/1.1 400 ") and b"one Content-Length" in out, lengths
        assert b"Set-Cookie" not in out, lengths
    out = raw(port, head + f"Content-Length: \t{len(form)} \r\n\r\n".encode() + form)
    assert out.startswith(b"HTTP/1.1 303 "), out[:80]


def test_two_authorization_or_cookie_headers_are_refused_not_read_first(
        web: tuple[Daemon, int]) -> None:
    """The token (or session) in the first of two lines opened everything, whatever the
    second said: a proxy in front that checked the other line was bypassed. Both
    orders are 400 now, as two Host lines are."""
    _, port = web
    cookie = f"Cookie: {SESSION_COOKIE}={session_value(TOKEN)}"
    for good, bad in ((f"Authorization: Bearer {TOKEN}", "Authorization: Bearer wrong"),
                      (cookie, "Cookie: other=1")):
        for first, second in ((good, bad), (bad, good)):
            out = raw(port, f"GET /api/v1/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\n{first}"
                            f"\r\n{second}\r\n\r\n".encode())
            assert out.startswith(b"HTTP/1.1 400 "), (first, out[:80])
            assert b"not several" in out and b"nodes" not in out, out


def test_a_request_target_with_a_fragment_is_refused_and_never_logged(
        web: tuple[Daemon, int]) -> None:
    """A client that sent the link's fragment (``GET /login#token=...``, which no
    browser sends: RFC 9112's request target has no fragment) was judged as path
    ``/login#token=...``: 401, and the refusal's log line held the token. A target with
    ``#`` is now 400, naming why, and logged nowhere."""
    _, port = web
    secret = "guess-or-token-0123456789abcdef"
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG")
    try:
        for target in (f"/login#token={secret}", f"/api/v1/cluster?view=map#{secret}",
                       f"/#token={secret}"):
            out = raw(port, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            assert out.startswith(b"HTTP/1.1 400 "), (target, out[:60])
            assert b"fragment" in out and secret.encode() not in out, out
    finally:
        logger.remove(sink)
    assert not [ln for ln in lines if secret in ln], lines


def test_every_refused_method_on_logout_names_post_alone(web: tuple[Daemon, int]) -> None:
    """/logout takes a POST only: a PUT's 405 said 'Allow: GET, HEAD, POST' (httpguard's
    list for a POST path), where a GET or HEAD is 405 too."""
    _, port = web
    for method in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS"):
        out = raw(port, f"{method} /logout HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Content-Length: 0\r\n\r\n".encode())
        assert out.startswith(b"HTTP/1.1 405 "), (method, out[:80])
        assert b"Allow: POST\r\n" in out and b"Set-Cookie" not in out, (method, out)


def test_answers_with_proof_are_never_stored_framed_sniffed_or_read_cross_origin(
    web: tuple[Daemon, int],
) -> None:
    # What a tenant names reaches the JSON as is: it stays JSON (nosniff), no cache keeps
    # an answer given to the token or cookie, and another origin's page reads none of it.
    d, port = web
    evil = "</script><script>window.pwned=1</script>"
    doc = {"schema": webmap.SCHEMA, "nodes": [], "services": [{"name": evil}]}
    webmap.register(d.http_routes, lambda: doc, query_routes=d.http_query_routes)
    asked = {"Authorization": f"Bearer {TOKEN}", "Origin": "https://evil.example"}
    pages = ("/", "/static/app.js", "/api/v1/cluster", "/api/v1/cluster?view=map")
    for path in (*pages, "/login", "/login.js"):
        status, headers, body = get(port, path, asked)
        assert status == 200, path
        assert headers["cache-control"] == "no-store", path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
        csp = headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "unsafe-" not in csp, path
        assert not [k for k in headers if k.startswith("access-control-")], path
    status, headers, body = get(port, "/api/v1/cluster", asked)
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["services"] == [{"name": evil}]


def test_a_large_answer_goes_gzipped_to_a_browser_that_takes_it(
    web: tuple[Daemon, int],
) -> None:
    # 5,000 nodes are a 25 MB document, polled whole every 2.5 s, which the page gives up
    # on after 4 s: a link under 50 Mbit/s never drew the map. Gzipped, a tenth of that.
    _, port = web
    proof = {"Authorization": f"Bearer {TOKEN}"}
    status, headers, body = get(port, "/big", {**proof, "Accept-Encoding": "gzip, deflate, br"})
    assert status == 200 and headers.get("content-encoding") == "gzip"
    assert "Accept-Encoding" in headers["vary"]
    assert len(body) < BIG // 100 and gzip.decompress(body) == b"x" * BIG
    assert int(headers["content-length"]) == len(body)
    zipped = len(body)
    for took in (None, "identity", "gzip;q=0, br", "deflate"):  # a client that cannot
        status, headers, body = get(port, "/big", {**proof, **(
            {"Accept-Encoding": took} if took else {})})
        assert status == 200 and "content-encoding" not in headers, took
        assert body == b"x" * BIG and "Accept-Encoding" in headers["vary"], took
    for took in ("*", "GZIP;q=0.5", "x-gzip", "br;q=1, gzip;q=0.1"):
        out = raw(port, f"HEAD /big HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                        f"{TOKEN}\r\nAccept-Encoding: {took}\r\n\r\n".encode())
        head = out.decode("latin-1").lower()
        assert "content-encoding: gzip\r\n" in head and out.endswith(b"\r\n\r\n"), took
        assert f"content-length: {zipped}\r\n" in head, took  # what a GET would send
    # a small answer is not worth it
    status, headers, _ = get(port, "/healthz", {"Accept-Encoding": "gzip"})
    assert status == 200 and "content-encoding" not in headers


def test_the_browser_draws_the_map_from_gzipped_answers(tmp_path: Path, chromium: str) -> None:
    # loopback: open, as through an SSH tunnel
    with map_in_chromium(tmp_path, chromium, auth="auto") as (cdp, port):
        cdp.open(f"http://127.0.0.1:{port}/")
        cdp.wait_for("document.querySelector('[data-key]') !== null")
        sizes = cdp.js("JSON.stringify(performance.getEntriesByType('resource').map("
                       "e => [new URL(e.name).pathname, e.transferSize, e.decodedBodySize]))")
        got = {path: (sent, size) for path, sent, size in json.loads(sizes)}
        sent, size = got["/static/app.js"]
        assert 0 < sent < size / 2, got


def test_without_a_token_file_only_certificates_and_healthz(tmp_path: Path) -> None:
    d = web_daemon(tmp_path, token=False)
    assert d._http is not None
    port = d._http.server_address[1]
    try:
        assert get(port, "/api/v1/cluster", {"Authorization": f"Bearer {TOKEN}"})[0] == 401
        assert post(port, "/login", f"token={TOKEN}")[0] == 401
        assert get(port, "/healthz")[0] == 200
    finally:
        d._http.shutdown()
        d._http.server_close()


def test_loopback_listen_and_loopback_clients_stay_open(tmp_path: Path) -> None:
    for auth, listen in (("auto", "127.0.0.1:0"), ("auto", "0.0.0.0:0"), ("off", "0.0.0.0:0")):
        d = web_daemon(tmp_path, auth=auth, listen=listen)
        assert d._http is not None
        port = d._http.server_address[1]
        try:
            assert get(port, "/api/v1/cluster")[0] == 200, (auth, listen)
        finally:
            d._http.shutdown()
            d._http.server_close()


# --- a manager certificate: HTTPS on the same port ---------------------------------


def _key(crt: Path) -> Path:
    return crt.with_suffix(".key")


def _client(pki: dict[str, Path], cert: str | None) -> ssl.SSLContext:
    c = pki[cert] if cert else None
    ctx = client_context(pki["ca"].read_text(), CLUSTER, c, _key(c) if c else None)
    return ctx


def test_a_manager_certificate_opens_everything_over_https(
        tmp_path: Path, pki: dict[str, Path]) -> None:
    with https_web_daemon(tmp_path, pki) as port:
        status, _, body = get(port, "/api/v1/cluster", ctx=_client(pki, "mgr"))
        assert status == 200 and body == b'{"nodes": []}'
        # The daemon presents its manager's certificate (the client checked the chain).
        for who in (None, "node1", "othermgr"):  # none, a worker's, another swarm's
            assert get(port, "/api/v1/cluster", ctx=_client(pki, who))[0] == 401, who
        assert get(port, "/healthz", ctx=_client(pki, None))[0] == 200
        # The token over HTTPS too; plain HTTP on the same port still answers.
        assert get(port, "/api/v1/cluster", {"Authorization": f"Bearer {TOKEN}"},
                   ctx=_client(pki, None))[0] == 200
        assert get(port, "/api/v1/cluster", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        # Over HTTPS the session cookie is Secure.
        _, headers, _ = post(port, "/login", f"token={TOKEN}", ctx=_client(pki, None))
        assert "Secure" in [p.strip() for p in headers["set-cookie"].split(";")]
        # An absolute-form target over TLS names https (RFC 9110 7.4), plain http not.
        here = f"127.0.0.1:{port}"
        assert get(port, f"https://{here}/healthz", ctx=_client(pki, None))[0] == 200
        assert get(port, f"http://{here}/healthz", ctx=_client(pki, None))[0] == 421
        assert get(port, f"http://{here}/healthz")[0] == 200
        # A manager certificate from a rogue CA fails the handshake itself.
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(port, "/api/v1/cluster", ctx=_client(pki, "roguemgr"))
        assert get(port, "/healthz")[0] == 200  # the server lives on


def test_a_manager_certificate_is_never_limited_by_its_addresss_wrong_tokens(
        tmp_path: Path, pki: dict[str, Path]) -> None:
    """A try was taken before the certificate was read: a manager (``swarmgpu plan`` on
    it, with a stale http.token_file beside its certificate) whose address had sent ten
    wrong tokens got 429, though a manager certificate "still answers". It is read
    first now and takes no try, as on the agent."""
    wrong = {"Authorization": "Bearer wrong-guess-0123456789"}
    with https_web_daemon(tmp_path, pki) as port:
        for _ in range(BURST):
            assert get(port, "/api/v1/cluster", wrong)[0] == 401
        assert get(port, "/api/v1/cluster", wrong, ctx=_client(pki, None))[0] == 429
        for hdrs in (wrong, {"Authorization": f"Bearer {TOKEN}"}):
            assert get(port, "/api/v1/cluster", hdrs, ctx=_client(pki, "mgr"))[0] == 200


def test_over_https_the_session_cookie_is_host_prefixed_and_read_only_so(
        tmp_path: Path, pki: dict[str, Path]) -> None:
    """Over HTTPS the session was ``swarmgpu_session``, a name any page of the host's
    names can set (a tenant's service over plain HTTP, a sibling domain with Domain=):
    now it is ``__Host-swarmgpu_session`` (Secure, Path=/, no Domain: the browser keeps
    it only as this origin set it), and over HTTPS only that name is read. Plain HTTP
    on loopback keeps the plain name, and two cookies of the name are still refused."""
    ctx = _client(pki, None)
    with https_web_daemon(tmp_path, pki) as port:
        _, headers, _ = post(port, "/login", f"token={TOKEN}", ctx=ctx)
        parts = [p.strip() for p in headers["set-cookie"].split(";")]
        name, _, value = parts[0].partition("=")
        assert name == f"__Host-{SESSION_COOKIE}", parts
        assert {"Secure", "Path=/", "HttpOnly", "SameSite=Strict"} <= set(parts)
        assert not [p for p in parts if p.lower().startswith("domain")]
        assert get(port, "/api/v1/cluster", {"Cookie": parts[0]}, ctx=ctx)[0] == 200
        for jar in (f"{SESSION_COOKIE}={value}",  # the plain name: anyone's to set
                    f"{parts[0]}; {parts[0]}"):  # two: ambiguous
            assert get(port, "/api/v1/cluster", {"Cookie": jar}, ctx=ctx)[0] == 401, jar
        here = {"Origin": f"https://127.0.0.1:{port}", "Cookie": parts[0]}
        _, headers, _ = post(port, "/logout", "", here, ctx=ctx)
        out = [p.strip() for p in headers["set-cookie"].split(";")]
        assert out[0] == f"__Host-{SESSION_COOKIE}=" and {"Secure", "Path=/", "Max-Age=0"} \
            <= set(out), out
        # plain HTTP (loopback, an SSH tunnel): the plain name, as before
        _, headers, _ = post(port, "/login", f"token={TOKEN}")
        plain = headers["set-cookie"].split(";")[0]
        assert plain.startswith(f"{SESSION_COOKIE}=") and "Secure" not in headers["set-cookie"]
        assert get(port, "/api/v1/cluster", {"Cookie": plain})[0] == 200
        assert get(port, "/api/v1/cluster", {"Cookie": f"__Host-{plain}"})[0] == 401
    # HTTPS ended at a proxy in front (http.secure_cookie: always): the browser saw
    # HTTPS, so the prefixed name, read over the daemon's plain HTTP
    d = web_daemon(tmp_path, env={"SWARMGPU_HTTP_SECURE_COOKIE": "always"})
    assert d._http is not None
    port = d._http.server_address[1]
    try:
        _, headers, _ = post(port, "/login", f"token={TOKEN}")
        jar = headers["set-cookie"].split(";")[0]
        assert jar.startswith(f"__Host-{SESSION_COOKIE}="), jar
        assert get(port, "/api/v1/cluster", {"Cookie": jar})[0] == 200
        assert get(port, "/api/v1/cluster", {"Cookie": jar.removeprefix("__Host-")})[0] == 401
    finally:
        d._http.shutdown()
        d._http.server_close()


# --- slow readers: complete requests whose answers are never read -------------------


def test_stuck_answers_are_evictable_half_sent_or_not() -> None:
    now = 100.0
    stuck = Conn("10.0.0.1", 1.0, complete=True, writing_since=now - STUCK_WRITE_S - 0.1)
    fresh = Conn("10.0.0.1", 2.0, complete=True, writing_since=now - 0.01)
    busy = Conn("10.0.0.1", 0.5, complete=True)  # being computed, not yet written
    authed = Conn("10.0.0.2", 0.1, complete=True, authenticated=True,
                  writing_since=now - 5)
    assert pick_victim([fresh, busy], "x", now) is None
    assert pick_victim([stuck, fresh, busy], "x", now) is stuck
    # A proved peer that does not read holds a slot like anyone: it goes too.
    assert pick_victim([authed, fresh], "x", now) is authed


@pytest.mark.parametrize("with_token", [True, False])
def test_healthz_answered_beside_400_unread_answers_while_they_hold_the_server(
        web: tuple[Daemon, int], with_token: bool) -> None:
    """400 complete requests from ten addresses whose answers (4 MiB with the token; a
    401 without) are never read: /healthz and a proved client are still answered, from
    a fresh address, while the flood holds the server (not once its answers ended at
    their write deadline). Counted, not timed: how fast is benchmarks/bench_unread.py."""
    d, port = web
    srv = d._http
    assert isinstance(srv, GuardedServer)
    headers = (f"Authorization: Bearer {TOKEN}",) if with_token else ()
    flood = slowflood.start(port, "127.0.0.20-29", 40, for_s=40, complete="/big",
                            headers=headers, rcvbuf=4096, renew_s=5.0)
    try:
        time.sleep(1.0)
        held, beside = [], []
        for i in range(10):
            held.append(srv.connection_counts()[0])
            # A client deadline below the write deadline: an answer that waited for a
            # stuck one to end fails here (a hang guard, not a speed check).
            status, _, body = get(port, "/healthz", src="127.0.0.9",
                                  timeout=WRITE_DEADLINE_S / 2)
            beside.append(srv.connection_counts()[0])
            assert status == 200 and b'"status"' in body, (i, status, body[:80])
            time.sleep(0.2)
        print(f"connections held {held}, after each answer {beside}; evicted "
              f"{srv.evicted_total}, refused {srv.refused_total}")
        if with_token:  # the answers were stuck and filled the server, and still did
            assert max(held) >= srv.max_connections - 8 and srv.evicted_total > 0, held
            assert max(beside) >= srv.max_connections - 8, beside
        assert get(port, "/api/v1/cluster", {"Authorization": f"Bearer {TOKEN}"},
                   src="127.0.0.9", timeout=WRITE_DEADLINE_S / 2)[0] == 200
    finally:
        slowflood.stop(flood)


def test_an_answer_not_read_ends_at_the_write_deadline(web: tuple[Daemon, int]) -> None:
    """One deadline for the whole answer, not per send: the thread and slot are free
    when it passes, however slowly the reader takes bytes."""
    d, port = web
    srv = d._http
    assert isinstance(srv, GuardedServer)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    try:
        s.sendall(f"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2:
            if srv.connection_counts()[0] == 1:
                break
            time.sleep(0.05)
        assert srv.connection_counts()[0] == 1
        while time.monotonic() - t0 < 20:
            s.recv(64)  # a trickle: each send would renew a per-send timeout
            if srv.connection_counts()[0] == 0:
                break
            time.sleep(0.2)
        # A per-send timeout, renewed by the trickle, never ends it: the slot is still
        # held when the 20 s hang guard above gives up.
        assert srv.connection_counts()[0] == 0, "the slow reader still holds its slot"
    finally:
        s.close()


def test_secure_cookie_always_marks_the_cookie_secure_over_plain_http(
        tmp_path: Path) -> None:
    """Behind a TLS-terminating reverse proxy the daemon sees plain HTTP: the operator's
    http.secure_cookie: always still marks the session cookie Secure, so the browser
    never sends it over plain HTTP (to another port of the name, a tenant's service).
    X-Forwarded-Proto is anyone's to send, so it changes nothing."""
    d = web_daemon(tmp_path, env={"SWARMGPU_HTTP_SECURE_COOKIE": "always"})
    assert d._http is not None
    try:
        _, headers, _ = post(d._http.server_address[1], "/login", f"token={TOKEN}")
        assert "Secure" in [p.strip() for p in headers["set-cookie"].split(";")]
    finally:
        d._http.shutdown()
        d._http.server_close()
    d = web_daemon(tmp_path)  # auto: Secure only over the daemon's own HTTPS
    assert d._http is not None
    try:
        _, headers, _ = post(d._http.server_address[1], "/login", f"token={TOKEN}",
                             {"X-Forwarded-Proto": "https"})
        assert "Secure" not in [p.strip() for p in headers["set-cookie"].split(";")]
    finally:
        d._http.shutdown()
        d._http.server_close()
    with pytest.raises(ConfigError, match=r"http\.secure_cookie"):
        load_config(None, env={"SWARMGPU_HTTP_SECURE_COOKIE": "yes"})


def test_a_token_link_signs_a_browser_in_and_leaves_no_token_in_its_history(
        chromium: str, tmp_path: Path) -> None:
    """A link /login#token=<token> (the fragment reaches no server, log or Referer): the
    page takes the token out of the address, POSTs it under the daemon's CSP and
    Trusted Types, and lands on the map; no entry of the tab's history holds it."""
    with map_in_chromium(tmp_path, chromium) as (cdp, port):
        cdp.open(f"http://127.0.0.1:{port}/login#token={TOKEN}")
        cdp.wait_for("location.pathname === '/' && document.querySelector('[data-key]') !== null")
        assert cdp.js("fetch('/api/v1/cluster').then(r => r.status)") == 200
        entries = cdp.call("Page.getNavigationHistory")["entries"]
        urls = [e["url"] for e in entries]
        assert urls[-1] == f"http://127.0.0.1:{port}/", urls
        assert not [u for u in urls if TOKEN in u], urls
        assert TOKEN not in cdp.js("document.cookie")  # HttpOnly: not even its HMAC


def test_any_fragment_leaves_the_address_before_the_page_is_read(
        chromium: str, tmp_path: Path) -> None:
    """The page took the token out of the address only when the fragment was exactly
    ``#token=...``: a link with more in it (``#from=mail&token=...``, what a mail or
    chat client may add) kept the token in the tab's address and history, and signed no
    one in. Now the script runs before the page is parsed and strips any fragment at
    once, then reads the token out of what it took."""
    with map_in_chromium(tmp_path, chromium) as (cdp, port):
        cdp.open(f"http://127.0.0.1:{port}/login#from=mail&token={TOKEN}")
        cdp.wait_for("location.pathname === '/' && document.querySelector('[data-key]') !== null")
        urls = [e["url"] for e in cdp.call("Page.getNavigationHistory")["entries"]]
        assert not [u for u in urls if TOKEN in u or "#" in u], urls
        cdp.call("Page.navigate", url=f"http://127.0.0.1:{port}/login#no-token-here")
        cdp.wait_for("document.readyState === 'complete' && location.pathname === '/login'")
        assert cdp.js("location.href") == f"http://127.0.0.1:{port}/login"
