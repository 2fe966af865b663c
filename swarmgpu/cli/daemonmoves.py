"""The leader daemon's move proposals for ``swarmgpu plan`` (its metric windows live in
its memory), read at ``http.listen`` as the healthcheck reaches it (``loopback``), or
why they were not: not reachable, or an answer that is not its moves. A daemon that
refuses the read (``http.auth: required``, or beyond loopback, needs the token of
``http.token_file``, a manager certificate or loopback) was said "not reachable" too,
which sent the operator to look for a daemon that runs.

The daemon's HTTP serves plain HTTP and HTTPS on the same port (the first byte decides,
``web.webguard``); there is no TLS-only listener to refuse plain HTTP, so the read is
plain HTTP on loopback, as ``lastcycle``'s /healthz read.
"""

from __future__ import annotations

import contextlib
from typing import Any

from swarmgpu.core.config import Config
from swarmgpu.core.healthcheck import loopback

REFUSED = (401, 403, 429)  # the daemon's answers to a reader it does not let in


def daemon_moves(cfg: Config) -> dict[str, Any] | str:
    """The daemon's move document, or why it was not read (a text line's words), with
    the daemon's bearer token when ``http.token_file`` is readable here."""
    import requests

    from swarmgpu.manager.cycle.rebalance import ROUTE
    from swarmgpu.swarm.identity import IdentityError, read_token

    headers, unread = {}, "http.token_file is not set"
    if cfg.http.token_file:
        try:
            headers["Authorization"] = f"Bearer {read_token(cfg.http.token_file)}"
        except IdentityError as exc:
            unread = f"http.token_file: {exc}"
    url = f"http://{loopback(cfg.http.listen)}{ROUTE}"  # '::1:9402' is no URL's host
    try:
        r = requests.get(url, timeout=3, headers=headers)
    except requests.RequestException:
        return f"the daemon is not reachable on {cfg.http.listen}"
    if r.status_code in REFUSED:
        told = "its token refused or limited" if headers else unread
        return (f"the daemon at {url} answered HTTP {r.status_code}, not its moves: under "
                f"http.auth {cfg.http.auth!r} it asks this reader for the token of "
                f"http.token_file ({told}); set http.token_file to the daemon's token "
                "file, readable by this user")
    data = None
    with contextlib.suppress(ValueError):
        data = r.json() if r.status_code == 200 else None
    if not isinstance(data, dict):
        return (f"the daemon at {url} answered HTTP {r.status_code}, not its moves; is "
                "http.listen of this config the one it serves on?")
    return data
