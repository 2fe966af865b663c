"""The live GPU map: static page + JSON route, served by the daemon's HTTP server.

The page (``swarmgpu/manager/web/``) is plain HTML/CSS/JS with no build step and no CDN, so it
works on an air-gapped cluster. It polls ``/api/v1/cluster`` and redraws in place.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from loguru import logger

from swarmgpu.manager.web import history as hist

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
        # (document parts, body) in one attribute: HTTP threads and the cycle's prime()
        # store at once, and two attributes could pair one's parts with another's body
        self.state: tuple[tuple[Any, ...], bytes] | None = None

    def get(self, doc: dict[str, Any]) -> bytes:
        parts = tuple(doc.items())
        state = self.state
        if state is not None and len(state[0]) == len(parts) and all(
                k1 == k2 and (v1 is v2 or (isinstance(v1, (str, int, float, bool))
                                           and v1 == v2))
                for (k1, v1), (k2, v2) in zip(state[0], parts, strict=True)):
            return state[1]
        body = json.dumps(doc, separators=(",", ":"), default=str).encode()
        self.state = (parts, body)
        return body


# What the daemon sets on each answer, not once per cycle (observe.current): the light
# document is built again when one of these changes, not kept for the cycle's nodes (a
# cycle cut short builds no document, but says so: ``last_cycle``).
LIVE_KEYS = ("leader", "engine", "last_cycle", "last_cycle_at")
# The page's first poll asks for ``?view=map``: at more nodes than this the map is the
# fleet heat map (app.js FLEET_AUTO_NODES + 1), drawn from the light document below
# while the whole one is fetched; at fewer the whole document answers at once.
LIGHT_MIN_NODES = 25
# What the heat map and the summary read of a GPU (app.js cellClass, renderSummary).
# Values: 0 is one (an idle GPU's 0% is drawn, not "unknown"); None is left out.
_LIGHT_GPU = ("index", "util_pct", "memory_mib", "memory_used_mib", "temp_c")
# Faults: 0 and none read as fine, so only the others are sent. healthy: only when false.
_LIGHT_FAULTS = ("xid", "xid_effect", "ecc_dbe")
_LIGHT_NODE = ("hostname", "state", "availability", "labels_state")


def _kept(d: dict[str, Any], keys: tuple[str, ...], fine: tuple[Any, ...] = (None,),
          ) -> dict[str, Any]:
    """``keys`` of ``d`` whose value is not one of ``fine`` (read as unknown or fine)."""
    return {k: d[k] for k in keys if k in d and d[k] not in fine}


def light_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """The cluster document cut to what the first paint of the fleet heat map reads: per
    node its name and state, per GPU its values and who holds what share; services,
    pending requests and moves are left out (``failed_count`` says how many services'
    planning failed, ``pending_count`` how many are pending, ``ungranted_count`` how
    many services see GPUs without a grant, ``unkeyed_count`` how many entries the
    engine's lists left out). At 1,000
    nodes about a tenth of the whole document's bytes."""
    nodes = []
    for n in doc.get("nodes") or []:
        gpus = []
        for g in n.get("gpus") or []:
            light = {**_kept(g, _LIGHT_GPU), **_kept(g, _LIGHT_FAULTS, (None, False, 0))}
            if g.get("healthy") is False:
                light["healthy"] = False
            # a holder without share_milli holds the whole GPU (app.js shareSum)
            holders = [{**({"share_milli": h["share_milli"]}
                           if h.get("share_milli") not in (None, 1000) else {}),
                        **({"over_share": True} if h.get("over_share") or any(
                            isinstance(b, dict) and b.get("text") == "over-share"
                            for b in h.get("badges") or ()) else {})}
                       for h in g.get("holders") or []]
            if holders:
                light["holders"] = holders
            if g.get("mig"):
                light["mig"] = [{"memory_mib": m.get("memory_mib"),
                                 **({"holder": {}} if m.get("holder") else {})}
                                for m in g["mig"]]
            gpus.append(light)
        nodes.append({**_kept(n, _LIGHT_NODE, (None, False, 0)), "gpus": gpus})
    return {"schema": doc.get("schema", SCHEMA), "generated_at": doc.get("generated_at"),
            **{k: doc[k] for k in LIVE_KEYS if k in doc}, "light": True, "nodes": nodes,
            "pending_count": len(doc.get("pending") or []),
            # the header's first count: services whose planning raised (placement.isolate)
            "failed_count": sum(isinstance(sv, dict) and sv.get("status") == "failed"
                                for sv in doc.get("services") or []),
            "ungranted_count": sum(not u.get("exempt") for u in doc.get("ungranted") or []),
            # the entries the engine listed without an ID (swarm.unkeyed): the summary's
            "unkeyed_count": len(doc.get("unkeyed") or [])}


STYLE = "swarmgpu/manager/web/style.css"


def _open_blocks(text: str, pos: int) -> list[str]:
    """The selectors (or at-rules) of the CSS blocks open at ``pos``, outermost first."""
    stack: list[str] = []
    last = 0
    for m in re.finditer(r"[{};]", text[:pos]):
        if m.group() == "{":
            stack.append(" ".join(text[last:m.start()].split()))
        elif m.group() == "}" and stack:
            stack.pop()
        last = m.end()
    return stack


def root_number(css: str, name: str) -> float:
    """The number style.css's top-level ``:root`` sets (``--name: 90;``), as the page reads
    it. Set in more than one block (dark mode's ``@media``, a second ``:root``) the page
    takes the last that applies to the viewer's screen, which the daemon cannot know:
    refused, so the header counts never disagree with the tiles' marks."""
    text = re.sub(r"/\*.*?\*/", lambda c: "\n" * c.group().count("\n"), css, flags=re.DOTALL)
    sets = [(text.count("\n", 0, m.start()) + 1, _open_blocks(text, m.start()), m.group(1))
            for m in re.finditer(rf"(?<![\w-]){re.escape(name)}\s*:([^;}}]*)", text)]
    fix = "set it once, in the top-level :root block"
    if not sets:
        raise RuntimeError(f"{STYLE}: :root sets no number {name}: reinstall swarmgpu")
    if len(sets) > 1 or sets[0][1] != [":root"]:
        where = "; ".join(f"line {line} in {' > '.join(blocks) or 'no block'}"
                          for line, blocks, _ in sets)
        raise RuntimeError(
            f"{STYLE}: {name} is set at {where}: the page takes the last that applies to the "
            f"viewer's screen, the daemon's header counts need one value; {fix}")
    value = sets[0][2].strip()
    if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", value):
        raise RuntimeError(f"{STYLE}: {name}: {value!r} is not a number; {fix}, as a number")
    return float(value)


APP = "swarmgpu/manager/web/app.js"
HOT_NAMES = {"util": "--hot-util-pct", "temp": "--hot-temp-c"}  # app.js hotLine's keys


def color_steps(js: str) -> dict[str, list[float]]:
    """The heat map's colour steps under each hot line, as app.js ``COLOR_STEPS`` writes
    them (``at: [10, 35, 60], hot: "util"``): read from the page, so written once."""
    found: dict[str, list[list[float]]] = {}
    for m in re.finditer(r'\bat:\s*\[([0-9., ]*)\]\s*,\s*hot:\s*"(\w+)"', js):
        found.setdefault(m.group(2), []).append(
            [float(v) for v in m.group(1).replace(" ", "").split(",") if v])
    steps: dict[str, list[float]] = {}
    for key in HOT_NAMES:
        got = found.get(key, [])
        if len(got) != 1 or not got[0] or got[0] != sorted(set(got[0])):
            raise RuntimeError(
                f"{APP}: COLOR_STEPS must write the steps under the {key} hot line once, "
                f"rising (`at: [a, b, c], hot: \"{key}\"`); found {got or 'none'}: "
                "reinstall swarmgpu")
        steps[key] = got[0]
    return steps


def hot_line(css: str, js: str, key: str) -> float:
    """style.css's hot line ``key`` (``HOT_NAMES``), the heat map's top colour step: it
    must stand above app.js's last step, or the steps stop rising (the legend read "60 to 50")."""
    name, steps = HOT_NAMES[key], color_steps(js)[key]
    value = root_number(css, name)
    if value <= steps[-1]:
        said = ", ".join(f"{s:g}" for s in steps)
        raise RuntimeError(
            f"{STYLE}: {name}: {value:g} is not above the heat map's last colour step "
            f"{steps[-1]:g} ({APP} COLOR_STEPS: {said}): its colours would stop rising at "
            f"the hot line; set it above {steps[-1]:g}, or lower the steps in {APP}")
    return value


# What the page counts in its header (app.js renderSummary, isHot, isSick, isDrifted):
# the first screen's light document carries these counts over every node. Hot is
# style.css's line, as app.js isHot reads it.
_CSS, _JS = asset_bytes("style.css").decode(), asset_bytes("app.js").decode()
HOT_UTIL_PCT = hot_line(_CSS, _JS, "util")
HOT_TEMP_C = hot_line(_CSS, _JS, "temp")
DRIFTED = ("drifted", "agent-stale", "agent-unreadable", "gpus-unread")


def summary_counts(doc: dict[str, Any]) -> dict[str, int]:
    """The header's counts over every node of ``doc``, as app.js renderSummary counts
    them from a whole document (tests/test_webmap.py holds the two equal)."""
    gpus = used = hot = sick = 0

    def at_least(v: Any, line: float) -> bool:
        return isinstance(v, (int, float)) and v >= line

    for n in doc.get("nodes") or []:
        for g in n.get("gpus") or []:
            gpus += 1
            used += bool(g.get("holders") or any(m.get("holder") for m in g.get("mig") or []))
            hot += at_least(g.get("util_pct"), HOT_UTIL_PCT) or at_least(g.get("temp_c"),
                                                                         HOT_TEMP_C)
            sick += (g.get("healthy") is False
                     or (at_least(g.get("xid"), 1) and g.get("xid_effect") != "none")
                     or at_least(g.get("ecc_dbe"), 1))
    nodes = doc.get("nodes") or []
    return {"nodes": len(nodes), "gpus": gpus, "used": used, "hot": hot, "sick": sick,
            "drifted": sum(n.get("labels_state") in DRIFTED for n in nodes)}


def map_order(node: dict[str, Any]) -> tuple[bool, list[tuple[int, int, str]], str]:
    """app.js sortedNodes' order: GPU nodes first, then by name with runs of digits
    compared as numbers (``Intl.Collator`` numeric). Punctuation and case may order a
    few names differently there: that changes only which nodes the first screen shows
    until the whole document comes, which the page sorts itself."""
    name = str(node.get("hostname", ""))
    runs = [(0, int(r), "") if r.isdigit() else (1, 0, r)
            for r in re.split(r"(\d+)", name.casefold()) if r]
    return (not node.get("gpus"), runs, name)


# ``?view=map&first=N``: the first N nodes the map draws (the page asks for about a
# screen of them); at most this many
FIRST_MAX = 100_000
_FIRST_QUERY = re.compile(r"view=map&first=([1-9][0-9]{0,5})")


def cluster_query(query: str) -> tuple[str, int | None]:
    """The view a ``/api/v1/cluster`` query asks for: ("full", None), ("map", None)
    (``view=map``) or ("map", N) (``view=map&first=N``); anything else is refused by
    name."""
    if query in ("", "view=full"):
        return "full", None
    if query == "view=map":
        return "map", None
    m = _FIRST_QUERY.fullmatch(query)
    if m and int(m.group(1)) <= FIRST_MAX:
        return "map", int(m.group(1))
    raise ValueError(f"{CLUSTER_PATH}: unknown query {query[:80]!r}; use ?view=map (the "
                     "light document the map paints first), ?view=map&first=N (its first "
                     f"N nodes, N from 1 to {FIRST_MAX}) or no query (the whole document)")


class _FirstScreen:
    """``?view=map&first=N`` bodies of one light document: its nodes in the map's order,
    each encoded once, so an answer is a join of the first N (whatever N a page asks)."""

    def __init__(self, light: dict[str, Any], summary: dict[str, int]) -> None:
        nodes = sorted(light["nodes"], key=map_order)
        self.parts = [json.dumps(n, separators=(",", ":")).encode() for n in nodes]
        head = {k: v for k, v in light.items() if k != "nodes"}
        head.update(first=True, summary=summary)
        self.head = json.dumps(head, separators=(",", ":"), default=str).encode()[:-1]

    def body(self, first: int) -> bytes:
        return self.head + b',"nodes":[' + b",".join(self.parts[:first]) + b"]}"


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
) -> Callable[[], None]:
    """Add the GPU map's page, assets and JSON APIs to a daemon's ``http_routes``
    (and ``http_query_routes`` for the history and the light document, when the daemon
    keeps them). Returns ``prime``: build and encode the light document of the current
    one now (the daemon calls it at the end of its cycle, so a page opening later gets
    it without waiting for the encoding)."""
    for path, (name, ctype) in ASSETS.items():
        routes[path] = _static(name, ctype)
    memo, light_memo = _BodyMemo(), _BodyMemo()
    routes[CLUSTER_PATH] = lambda: ("application/json", cluster_body(cluster_json, memo))

    # (the whole document's nodes, its light document, its first screen), stored in one
    # assignment: HTTP threads and the cycle's prime() run this at once, and a poll of the
    # last document finishing after the cycle's must not pair its parts with the new one
    # (it then only stores a state the next request replaces).
    light_cache: list[tuple[Any, tuple[Any, ...], dict[str, Any], _FirstScreen]] = []

    def light_state() -> tuple[dict[str, Any], _FirstScreen | None]:
        """The light document (or the whole one of a small cluster or an error, with
        None: no first screen of its own)."""
        doc = cluster_json()
        nodes = doc.get("nodes")
        if "error" in doc or len(nodes or ()) < LIGHT_MIN_NODES:
            return doc, None  # a small map is drawn from the whole document at once
        live = tuple(doc.get(k) for k in LIVE_KEYS)
        state = light_cache[0] if light_cache else None
        # one per whole document (cycle), and again when leadership or the engine's
        # reach changed since (a cycle that cannot ask the engine builds no document)
        if state is None or state[0] is not nodes or state[1] != live:
            light = light_doc(doc)
            state = (nodes, live, light, _FirstScreen(light, summary_counts(doc)))
            light_cache[:] = [state]
        return state[2], state[3]

    def light_json() -> dict[str, Any]:
        return light_state()[0]

    def first_body(first: int) -> bytes:
        screen: list[_FirstScreen | None] = [None]

        def light_and_screen() -> dict[str, Any]:
            doc, screen[0] = light_state()
            return doc

        body = cluster_body(light_and_screen, light_memo)
        if screen[0] is None:
            return body  # a small cluster, or an error: the same answer as ?view=map
        return screen[0].body(first)

    def cluster_route(query: str) -> tuple[str, bytes]:
        try:
            view, first = cluster_query(query)
        except ValueError as exc:
            body = {"schema": SCHEMA, "generated_at": time.time(), "error": str(exc)}
            return "application/json", json.dumps(body).encode()
        if view == "map" and first is not None:
            return "application/json", first_body(first)
        if view == "map":
            return "application/json", cluster_body(light_json, light_memo)
        return "application/json", cluster_body(cluster_json, memo)

    if query_routes is not None:
        query_routes[CLUSTER_PATH] = cluster_route

    if query_routes is not None and history is not None:
        query_routes[HISTORY_PATH] = lambda q: ("application/json", history_body(history, q))

    def prime() -> None:
        cluster_body(light_json, light_memo)

    return prime
