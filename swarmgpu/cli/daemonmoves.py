"""The leader daemon's move proposals for ``swarmgpu plan`` (its metric windows live in
its memory), read at ``http.listen`` as the healthcheck reaches it (``loopback``), or
why they were not: not reachable, or an answer that is not its moves. A daemon that
refuses the read (``http.auth: required``, or beyond loopback, needs the token of
``http.token_file``, a manager certificate or loopback) was said "not reachable" too,
which sent the operator to look for a daemon that runs.

The daemon's HTTP serves plain HTTP and HTTPS on the same port (the first byte decides,
``web.webguard``); there is no TLS-only listener to refuse plain HTTP, so the read is
plain HTTP on loopback, as ``lastcycle``'s /healthz read.

What answers there is read as an edge (``boundedhttp``): within one deadline and a byte
cap, no redirect followed, and only a JSON object with ``proposed`` and ``recent`` lists
(each key once, no NaN) is taken as the moves. ``requests`` bounded each read alone (a
daemon sending a byte now and then held ``plan``), read any size, followed a redirect,
and handed on any JSON object: ``{}`` read as "none proposed".
"""

from __future__ import annotations

import json
from typing import Any

from swarmgpu.core.config import Config
from swarmgpu.core.healthcheck import loopback
from swarmgpu.core.jsonkeys import unique_keys
from swarmgpu.manager.nodes import boundedhttp

REFUSED = (401, 403, 429)  # the daemon's answers to a reader it does not let in
TIMEOUT_S = 3.0  # the whole answer: a local daemon gives it at once
# /api/rebalance at 5,000 nodes, each failing and unknown under a 253-character hostname,
# and 1,000 proposed moves is under 8 MiB (estimated, not measured): past twice that no
# daemon's document is read.
MAX_BYTES = 16 * 1024 * 1024
ASK = "is http.listen of this config the one it serves on?"


def daemon_moves(cfg: Config) -> dict[str, Any] | str:
    """The daemon's move document, or why it was not read (a text line's words), with
    the daemon's bearer token when ``http.token_file`` is readable here."""
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
        got = boundedhttp.get(url, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES, headers=headers)
    except (boundedhttp.FetchError, OSError, ValueError) as exc:
        if not getattr(exc, "connected", True) or getattr(exc, "kind", "") == boundedhttp.CONNECT:
            return f"the daemon is not reachable on {cfg.http.listen}"
        if isinstance(exc, TimeoutError):
            return f"the daemon at {url} did not answer within {TIMEOUT_S:g} s, not its moves"
        return f"the daemon at {url} {exc}, not its moves; {ASK}"
    if got.status in REFUSED:
        told = "its token refused or limited" if headers else unread
        return (f"the daemon at {url} answered HTTP {got.status}, not its moves: under "
                f"http.auth {cfg.http.auth!r} it asks this reader for the token of "
                f"http.token_file ({told}); set http.token_file to the daemon's token "
                "file, readable by this user")
    return _document(got, url)


def _document(got: boundedhttp.Fetched, url: str) -> dict[str, Any] | str:
    """The moves document of an answer not refused, or why it is none."""
    if 300 <= got.status < 400:
        return (f"the daemon at {url} answered HTTP {got.status} (a redirect, not "
                f"followed), not its moves; {ASK}")
    if got.status >= 500:  # the daemon's route raised (webguard): its log has the trace
        return (f"the daemon at {url} answered HTTP {got.status}, not its moves: it failed "
                "to give them; its log says why")
    doc = None
    if got.status == 200:
        try:
            doc = json.loads(got.body, object_pairs_hook=unique_keys,
                             parse_constant=_no_constant)
        except (ValueError, RecursionError):  # (RecursionError: nested too deep)
            doc = None
    if not isinstance(doc, dict) or not all(
            isinstance(doc.get(k), list) for k in ("proposed", "recent")):
        return (f"the daemon at {url} answered HTTP {got.status}, not its moves (no JSON "
                f"object with proposed and recent lists); {ASK}")
    return doc


def _no_constant(name: str) -> Any:
    """NaN and Infinity are no JSON: ``plan --json`` would write them on."""
    raise ValueError(name)
