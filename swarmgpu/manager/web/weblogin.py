"""The browser's sign-in: a form POSTs the token; no address ever carries it.

``GET /login`` is a page with a form (anyone may see it); ``POST /login`` with the
right token sets the session cookie (``webauth.session_cookie``) and redirects to the
map; its Sign out button POSTs ``/logout``, which clears the cookie. An address stays
in the browser's history and may reach a proxy's access log or a Referer, so
``/login?token=...`` is refused (400), naming the way in. A link may carry the token in
its fragment (``/login#token=...``), which no request sends: the page's script
(``login.js``) takes it out of the address, then posts it.

A page on another site could post a form to ``/login`` or ``/logout`` too (login CSRF:
SameSite keeps the cookie from being sent cross-site, not from being set), so the
browser's ``Sec-Fetch-Site``, or where it sends none its ``Origin`` against ``Host``,
must say the form was this origin's. A client that sends neither is no browser:
nothing to forge.
"""

from __future__ import annotations

import hmac
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from swarmgpu.manager.web.webauth import PLAIN, Answer, refused, session_cookie
from swarmgpu.manager.web.webmap import asset_bytes

LOGIN_PATH = "/login"
LOGIN_SCRIPT = "/login.js"
LOGOUT_PATH = "/logout"
FORM_TYPE = "application/x-www-form-urlencoded"
# read at import: a broken install fails at start, not at the first sign-in
_PAGE = asset_bytes("login.html")
_SCRIPT = asset_bytes("login.js")


def login_page() -> Answer:
    return Answer(HTTPStatus.OK, "text/html; charset=utf-8", _PAGE, {})


def login_script() -> Answer:
    return Answer(HTTPStatus.OK, "text/javascript; charset=utf-8", _SCRIPT, {})


def address_refused() -> Answer:
    """``/login?...``: the token is never read from an address (not even compared)."""
    return Answer(
        HTTPStatus.BAD_REQUEST,
        PLAIN,
        (
            b"400: the token does not go in the address (it stays in the browser's history "
            b"and may reach a proxy's log): open /login and paste it, or use a link "
            b"/login#token=<token> (the part after # is never sent). If that was the real "
            b"token, it is in this browser's history now: consider a new one.\n"
        ),
        {},
    )


def cross_origin(origin: str | None, fetch_site: str | None, host: str | None) -> str | None:
    """Why a POST is not this origin's own form, or None when it is (or no browser sent
    it). ``Sec-Fetch-Site`` is the browser's own word, which a page cannot set: it
    decides where sent (a proxy in front may rewrite Host, never that); else ``Origin``
    must name ``Host``."""
    if fetch_site is not None:
        ok = fetch_site.strip().lower() == "same-origin"
        return None if ok else f"Sec-Fetch-Site: {fetch_site[:40]}"
    if origin is None:
        return None
    netloc = urlsplit(origin.strip()).netloc.lower() if "://" in origin else ""
    if not netloc or host is None or netloc != host.strip().lower():
        return f"Origin {origin[:80]} is not this address ({(host or '')[:80]})"
    return None


def forbidden(why: str) -> Answer:
    return Answer(
        HTTPStatus.FORBIDDEN,
        PLAIN,
        f"403: sign in from this daemon's own /login page, not another site's "
        f"form: the same origin is required ({why})\n".encode(),
        {},
    )


def logout_answer(method: str, secure: bool) -> Answer:
    """``POST /logout`` (the sign-in page's button): the session cookie cleared. Not by
    GET: a link or an image on any page could sign the operator out."""
    if method != "POST":
        return Answer(
            HTTPStatus.METHOD_NOT_ALLOWED,
            PLAIN,
            b"405: sign out with the button on /login (a POST)\n",
            {"Allow": "POST"},
        )
    return Answer(
        HTTPStatus.SEE_OTHER,
        PLAIN,
        b"signed out; see /login\n",
        {"Location": LOGIN_PATH, "Set-Cookie": session_cookie(None, secure)},
    )


def login_token(form: str) -> str | None:
    """The one ``token`` of a sign-in form (None: missing, repeated or malformed)."""
    if len(form) > 8192:
        return None
    try:
        args = parse_qs(form, max_num_fields=4, strict_parsing=True)
    except ValueError:
        return None
    got = args.get("token", [])
    return got[0] if len(got) == 1 and set(args) == {"token"} else None


def login_answer(body: bytes, ctype: str | None, token: str | None, secure: bool) -> Answer:
    """``POST /login``: the right token sets the session cookie and redirects to the
    map; a body that is no form is 415, any other 401."""
    if (ctype or "").partition(";")[0].strip().lower() != FORM_TYPE:
        return Answer(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            PLAIN,
            f"415: send the sign-in as a form ({FORM_TYPE}: token=...)\n".encode(),
            {},
        )
    try:
        given = login_token(body.decode("ascii"))
    except UnicodeDecodeError:  # a form's bytes are ASCII (percent-encoded)
        given = None
    if token is None or given is None or not hmac.compare_digest(given.encode(), token.encode()):
        return refused()
    return Answer(
        HTTPStatus.SEE_OTHER,
        PLAIN,
        b"signed in; see /\n",
        {"Location": "/", "Set-Cookie": session_cookie(token, secure)},
    )
