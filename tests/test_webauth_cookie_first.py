"""A signed-in browser's session cookie is read before its ``Authorization`` header, as a
manager certificate is (``webauth.WebAuth.take_try``, ``judge``): docs/security.md says a
client's session cookie still answers once its address's wrong tokens are used up. A
request with a valid cookie and a wrong bearer header (a browser extension, a proxy that
adds one, a stale bookmarklet) took a token try all the same: its own reads used its
address's bucket up, and then the cookie got 429. Now the header of such a request is not
compared (no oracle: nothing about the token is told) and takes no try. Pure: the
daemon's HTTP on loopback with ``http.auth: required``."""

from __future__ import annotations

from pathlib import Path

from support.webauth import TOKEN, get, post, web_daemon

from swarmgpu.core.guesslimit import BURST
from swarmgpu.manager.web.webauth import SESSION_COOKIE, session_value

WRONG = {"Authorization": "Bearer wrong-guess-0123456789"}


def test_a_session_cookie_with_a_wrong_bearer_header_takes_no_try(tmp_path: Path) -> None:
    d = web_daemon(tmp_path)
    assert d._http is not None
    port = d._http.server_address[1]
    jar = {"Cookie": f"{SESSION_COOKIE}={session_value(TOKEN)}"}
    try:
        for _ in range(2 * BURST):  # the cookie's reads never use the bucket up
            assert get(port, "/api/v1/cluster", {**jar, **WRONG}, src="127.0.0.7")[0] == 200
        # the address's bucket is whole: a wrong token alone is still compared (401)
        assert get(port, "/api/v1/cluster", WRONG, src="127.0.0.7")[0] == 401
        for _ in range(BURST):  # used up by wrong tokens alone
            get(port, "/api/v1/cluster", WRONG, src="127.0.0.8")
        assert get(port, "/api/v1/cluster", WRONG, src="127.0.0.8")[0] == 429
        # ... its session cookie still answers, whatever header comes with it
        for hdrs in (jar, {**jar, **WRONG}):
            assert get(port, "/api/v1/cluster", hdrs, src="127.0.0.8")[0] == 200, hdrs
        # a cookie of another token is no session: the header is judged as before
        stale = {"Cookie": f"{SESSION_COOKIE}={session_value('other-token-0123456789')}"}
        assert get(port, "/api/v1/cluster", {**stale, **WRONG}, src="127.0.0.8")[0] == 429
    finally:
        d._http.shutdown()
        d._http.server_close()


def test_the_sign_in_forms_wrong_tokens_count_whatever_cookie_comes(tmp_path: Path) -> None:
    """The form's token is compared (a 303 or a 401 tells it apart), so its tries are
    counted with a valid session too: a cookie copied off a browser buys no unlimited
    guesses of the token."""
    d = web_daemon(tmp_path)
    assert d._http is not None
    port = d._http.server_address[1]
    jar = {"Cookie": f"{SESSION_COOKIE}={session_value(TOKEN)}"}
    try:
        for _ in range(BURST):
            assert post(port, "/login", "token=wrong-guess", jar, src="127.0.0.9")[0] == 401
        assert post(port, "/login", f"token={TOKEN}", jar, src="127.0.0.9")[0] == 429
        assert get(port, "/api/v1/cluster", {**jar, **WRONG}, src="127.0.0.9")[0] == 200
    finally:
        d._http.shutdown()
        d._http.server_close()
