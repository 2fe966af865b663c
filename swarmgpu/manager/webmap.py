"""The live GPU map: static page + JSON route, served by the daemon's HTTP server.

The page (``swarmgpu/manager/web/``) is plain HTML/CSS/JS with no build step and no CDN, so it
works on an air-gapped cluster. It polls ``/api/v1/cluster`` and redraws in place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from loguru import logger

from swarmgpu.manager import history as hist

Route = Callable[[], tuple[str, bytes]]
# a route that reads the query string (raw, after '?'); the daemon passes it as is
QueryRoute = Callable[[str], tuple[str, bytes]]

CLUSTER_PATH = "/api/v1/cluster"
HISTORY_PATH = "/api/v1/history"
SCHEMA = "swarmgpu.cluster/v1"

# URL path -> (asset file in swarmgpu/manager/web, content type)
ASSETS: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}


def asset_bytes(name: str) -> bytes:
    """Read one packaged asset; a missing one means a broken install, so say so."""
    try:
        return resources.files("swarmgpu.manager").joinpath("web", name).read_bytes()
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"web asset swarmgpu/manager/web/{name} is missing: reinstall swarmgpu "
            "(package data 'manager/web/*' must be included)"
        ) from exc


def _static(name: str, ctype: str) -> Route:
    body = asset_bytes(name)  # read once at registration: fail at start, not per request

    def route() -> tuple[str, bytes]:
        return ctype, body

    return route


class _BodyMemo:
    """The last /api/v1/cluster body, reused while the document is the same objects.

    At 1,000 nodes the document is ~7 MB of JSON: encoding it for every poll of every
    open page costs the daemon ~0.1 s of CPU each. The daemon builds a new document
    (new objects) each cycle, so "every top-level value is the same object" means
    "nothing changed". A ``cluster_json`` that edits its document in place must return
    new objects instead, or the page keeps the old values.
    """

    def __init__(self) -> None:
        self.parts: tuple[Any, ...] | None = None
        self.body = b""

    def get(self, doc: dict[str, Any]) -> bytes:
        parts = tuple(doc.items())
        old = self.parts
        if old is not None and len(old) == len(parts) and all(
                k1 == k2 and (v1 is v2 or (isinstance(v1, (str, int, float, bool))
                                           and v1 == v2))
                for (k1, v1), (k2, v2) in zip(old, parts, strict=True)):
            return self.body
        self.body = json.dumps(doc, separators=(",", ":"), default=str).encode()
        self.parts = parts
        return self.body


def cluster_body(cluster_json: Callable[[], dict[str, Any]],
                 memo: _BodyMemo | None = None) -> bytes:
    """The /api/v1/cluster body; a failure becomes an error document, not a dead socket.

    The daemon's handler always answers 200, so the page tells an error apart by the
    ``error`` key and shows it in its banner instead of a stale map.
    """
    try:
        doc = cluster_json()
    except Exception as exc:
        logger.opt(exception=exc).warning("cannot build the cluster document for the GPU map")
        doc = {"schema": SCHEMA, "generated_at": time.time(), "error": f"{exc}"}
    if memo is not None and "error" not in doc:
        return memo.get(doc)
    return json.dumps(doc, separators=(",", ":"), default=str).encode()


def history_body(history: hist.History, query: str) -> bytes:
    """The /api/v1/history body; a bad query answers an error document naming it."""
    try:
        if len(query) > 2048:
            raise ValueError("the query string is longer than 2048 characters")
        args = hist.parse_query(parse_qs(query, max_num_fields=8, strict_parsing=False))
        doc = history.query(**args)
    except ValueError as exc:  # parse_qs raises ValueError past max_num_fields too
        doc = {"schema": hist.SCHEMA, "error": f"/api/v1/history: {exc}"}
    return json.dumps(doc, separators=(",", ":")).encode()


def register(
    routes: dict[str, Route],
    cluster_json: Callable[[], dict[str, Any]],
    *,
    query_routes: dict[str, QueryRoute] | None = None,
    history: hist.History | None = None,
) -> None:
    """Add the GPU map's page, assets and JSON APIs to a daemon's ``http_routes``
    (and ``http_query_routes`` for the history, when the daemon keeps one)."""
    for path, (name, ctype) in ASSETS.items():
        routes[path] = _static(name, ctype)
    memo = _BodyMemo()
    routes[CLUSTER_PATH] = lambda: ("application/json", cluster_body(cluster_json, memo))
    if query_routes is not None and history is not None:
        query_routes[HISTORY_PATH] = lambda q: ("application/json", history_body(history, q))
