"""The live GPU map (swarmgpu/manager/web/webmap.py + swarmgpu/manager/web/) in Debian's
real headless Chromium.

The page is served through `webmap.register()` by a ThreadingHTTPServer that answers
like the daemon's (200 + route, or 404), then Chromium runs its JS with virtual time
and dumps the DOM or a screenshot. Screenshots land in artifacts/webmap/ for a human
look. Without Chromium these tests FAIL (install `chromium`) unless
SWARMGPU_SKIP_BROWSER=1 turns that into a skip.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from support.browser import (
    ARTIFACTS,
    REPO,
    Cdp,
    Doc,
    MapServer,
    card_text,
    dump_dom,
    sample,
    screenshot,
    text_of,
    with_node_9,
)

from swarmgpu.manager.placement import Status
from swarmgpu.manager.web import webmap
from swarmgpu.manager.web.history import History
from swarmgpu.manager.web.webguard import SECURITY_HEADERS

WEB = REPO / "swarmgpu" / "manager" / "web"


# ---- a server shaped like the daemon's: the `serve` fixture (tests/conftest.py) -------


# ---- Chromium ------------------------------------------------------------------


# ---- routes without a browser -----------------------------------------------------


def test_register_adds_page_assets_and_api() -> None:
    routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
    webmap.register(routes, sample)
    assert set(routes) == {"/", "/static/app.js", "/static/style.css", "/api/v1/cluster"}
    ctype, body = routes["/"]()
    assert ctype.startswith("text/html") and b'src="/static/app.js"' in body
    assert routes["/static/app.js"]()[0].startswith("text/javascript")
    assert routes["/static/style.css"]()[0].startswith("text/css")
    ctype, body = routes["/api/v1/cluster"]()
    assert ctype == "application/json"
    assert json.loads(body) == sample()


def test_cluster_body_is_encoded_once_per_document() -> None:
    doc = sample()
    routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
    webmap.register(routes, lambda: dict(doc))  # a shallow copy per request, as observe
    first = routes["/api/v1/cluster"]()[1]
    assert routes["/api/v1/cluster"]()[1] is first  # same objects: the same bytes
    doc["leader"] = False  # a changed scalar is a new document
    assert json.loads(routes["/api/v1/cluster"]()[1])["leader"] is False
    doc["nodes"] = doc["nodes"][:2]  # so is a new list
    assert len(json.loads(routes["/api/v1/cluster"]()[1])["nodes"]) == 2


def test_the_light_document_is_what_the_heat_map_reads() -> None:
    """The first poll's ``?view=map``: per GPU the values cellClass reads, per node its
    name and state; services and pending requests are left out but counted."""
    from support.web_fleet import fleet_doc

    fleet = fleet_doc(30)
    light = webmap.light_doc(fleet)
    assert light["light"] is True and light["pending_count"] == len(fleet["pending"])
    assert "services" not in light and "pending" not in light
    fleet["ungranted"] = [{"service": "a", "exempt": False}, {"service": "b", "exempt": True}]
    assert webmap.light_doc(fleet)["ungranted_count"] == 1  # the summary's, exempt not counted
    # the header's first count: services whose planning raised (placement.isolate)
    assert light["failed_count"] == 0
    assert webmap.light_doc({**fleet, "services": [{"name": "bad", "status": "failed"}, {
        "name": "ok", "status": "placed"}]})["failed_count"] == 1
    assert [n["hostname"] for n in light["nodes"]] == [n["hostname"] for n in fleet["nodes"]]
    for ln, n in zip(light["nodes"], fleet["nodes"], strict=True):
        assert ln["state"] == n["state"] and len(ln["gpus"]) == len(n["gpus"])
        for lg, g in zip(ln["gpus"], n["gpus"], strict=True):
            assert lg["index"] == g["index"]
            for k in ("util_pct", "memory_used_mib", "temp_c"):
                assert lg.get(k) == g[k]  # a value, 0 included (an idle GPU is not unknown)
            assert lg.get("xid") == (g["xid"] or None)  # a fault: left out when none
            assert [h.get("share_milli", 1000) for h in lg.get("holders", [])] == [
                h["share_milli"] for h in g["holders"]]
            assert lg.get("healthy", True) == g["healthy"]
            assert len(lg.get("mig", [])) == len(g["mig"])
            assert ["holder" in m for m in lg.get("mig", [])] == [  # {} is true in JS
                bool(m["holder"]) for m in g["mig"]]
    assert len(json.dumps(light)) * 6 < len(json.dumps(fleet))


def test_the_map_query_answers_light_for_a_fleet_and_refuses_the_unknown() -> None:
    from support.web_fleet import fleet_doc

    big, small = fleet_doc(webmap.LIGHT_MIN_NODES), sample()
    box = {"doc": big}
    routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
    qroutes: dict[str, Callable[[str], tuple[str, bytes]]] = {}
    prime = webmap.register(routes, lambda: dict(box["doc"]), query_routes=qroutes)
    prime()
    assert json.loads(qroutes["/api/v1/cluster"]("view=map")[1])["light"] is True
    assert qroutes["/api/v1/cluster"]("view=map")[1] is qroutes["/api/v1/cluster"]("view=map")[1]
    assert "light" not in json.loads(qroutes["/api/v1/cluster"]("")[1])
    # the first screen: its first N nodes in the map's order, the header counted over all
    light = json.loads(qroutes["/api/v1/cluster"]("view=map")[1])
    first = json.loads(qroutes["/api/v1/cluster"]("view=map&first=7")[1])
    assert first["first"] is True and first["summary"] == webmap.summary_counts(big)
    assert first["summary"]["nodes"] == len(big["nodes"]) and first["summary"]["gpus"] > 0
    assert first["nodes"] == sorted(light["nodes"], key=webmap.map_order)[:7]
    assert {k: v for k, v in first.items() if k not in ("nodes", "first", "summary")} == {
        k: v for k, v in light.items() if k != "nodes"}
    whole = qroutes["/api/v1/cluster"](f"view=map&first={webmap.FIRST_MAX}")[1]
    assert len(json.loads(whole)["nodes"]) == len(big["nodes"])
    box["doc"] = small  # fewer nodes than the heat map needs: the whole document at once
    assert json.loads(qroutes["/api/v1/cluster"]("view=map")[1]) == small
    assert json.loads(qroutes["/api/v1/cluster"]("view=map&first=3")[1]) == small
    for bad in ("view=cards", "view=map&x=1", "v=map", "view=MAP", "view=map&first=0",
                "view=map&first=05", "view=map&first=x", "view=map&first=1000000",
                f"view=map&first={webmap.FIRST_MAX + 1}", "view=map&first=5&x=1",
                "first=5&view=map"):
        err = json.loads(qroutes["/api/v1/cluster"](bad)[1])["error"]
        assert "unknown query" in err and "view=map" in err, bad



def test_the_light_document_follows_leadership_between_cycles() -> None:
    """The light document (the fleet's first paint) was kept for the cycle's nodes, its
    ``leader`` as it was when built: a daemon whose engine went away builds no document,
    so the fleet map kept the old word while the whole document said the new one. It
    carries ``leader`` and ``engine`` as each answer has them."""
    from support.web_fleet import fleet_doc

    big = fleet_doc(webmap.LIGHT_MIN_NODES)
    live = {"leader": True, "engine": "reachable"}
    routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
    qroutes: dict[str, Callable[[str], tuple[str, bytes]]] = {}
    webmap.register(routes, lambda: {**big, **live}, query_routes=qroutes)
    for query in ("view=map", "view=map&first=3"):
        got = json.loads(qroutes["/api/v1/cluster"](query)[1])
        assert (got["leader"], got["engine"]) == (True, "reachable"), query
    live.update(leader=False, engine="unreachable")  # the same nodes: no new cycle
    for query in ("view=map", "view=map&first=3", ""):
        got = json.loads(qroutes["/api/v1/cluster"](query)[1])
        assert (got["leader"], got["engine"]) == (False, "unreachable"), query


def test_a_page_poll_of_the_last_document_never_leaves_its_first_screen_to_the_next() -> None:
    """A page's poll still encoding the last cycle's document while the cycle primes the
    new one: the first screen it stored after the cycle's must not be answered for the
    new document (it paired the old nodes with the new document, until the next cycle)."""
    import threading

    from support.web_fleet import fleet_doc

    old, new = fleet_doc(webmap.LIGHT_MIN_NODES), fleet_doc(webmap.LIGHT_MIN_NODES)
    for i, n in enumerate(new["nodes"]):
        n["hostname"] = f"new-{i:03d}"
    go, waiting = threading.Event(), threading.Event()

    class SlowNodes(list[Any]):
        """Its second read (the header's counts) waits: the poll is mid-encoding."""

        reads = 0

        def __iter__(self) -> Iterator[Any]:
            self.reads += 1
            if self.reads == 2:
                waiting.set()
                go.wait(10)
            return super().__iter__()

    old["nodes"] = SlowNodes(old["nodes"])
    box = {"doc": old}
    qroutes: dict[str, Callable[[str], tuple[str, bytes]]] = {}
    prime = webmap.register({}, lambda: dict(box["doc"]), query_routes=qroutes)
    poll = threading.Thread(target=qroutes["/api/v1/cluster"], args=("view=map&first=3",))
    poll.start()
    assert waiting.wait(10)
    box["doc"] = new  # the cycle's new document, primed while the poll still encodes
    prime()
    go.set()
    poll.join(10)
    first = json.loads(qroutes["/api/v1/cluster"]("view=map&first=3")[1])
    assert [n["hostname"] for n in first["nodes"]] == ["new-000", "new-001", "new-002"]


def test_the_first_screen_is_in_the_map_order() -> None:
    """app.js sortedNodes: GPU nodes first, then names with numbers compared as numbers."""
    nodes = [{"hostname": h, "gpus": g} for h, g in (
        ("gpu-10", [{}]), ("manager-1", []), ("gpu-9", [{}]), ("GPU-2", [{}]), ("a100-x", [{}]),
        ("gpu-9b", [{}]))]
    assert [n["hostname"] for n in sorted(nodes, key=webmap.map_order)] == [
        "a100-x", "GPU-2", "gpu-9", "gpu-9b", "gpu-10", "manager-1"]
    # app.js draws the heat map above FLEET_AUTO_NODES: the daemon's threshold is its next
    js = (WEB / "app.js").read_text()
    auto = int(re.search(r"const FLEET_AUTO_NODES = (\d+);", js).group(1))  # type: ignore[union-attr]
    assert auto + 1 == webmap.LIGHT_MIN_NODES


def test_cluster_failure_becomes_an_error_document() -> None:
    def broken() -> Doc:
        raise RuntimeError("docker API unreachable")

    routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
    webmap.register(routes, broken)
    doc = json.loads(routes["/api/v1/cluster"]()[1])
    assert doc["schema"] == "swarmgpu.cluster/v1"
    assert doc["error"] == "docker API unreachable"


NVML_ERR = "nvml: cannot initialise NVML (NVMLError_LibNvmlVersionMismatch)"


def _gpus_unread_doc() -> Doc:
    """The cluster document of one node whose agent answers with no GPU and an error
    (NVML cannot initialise: a driver/library mismatch after an upgrade), its labels
    those of its 8 RTX 4090s."""
    from support.gpu_nodes import RTX4090

    from swarmgpu.core.model import NodeFacts
    from swarmgpu.manager.nodes.agent_client import FactsResult
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.web.cluster_view import build_cluster
    from swarmgpu.swarm.client import SwarmNode
    from swarmgpu.swarm.labels import desired_labels

    facts = NodeFacts(hostname="gpu-node-2", driver_version="550.54.15", errors=(NVML_ERR,))
    node = SwarmNode(id="n1", hostname="gpu-node-2", addr="10.0.0.2", role="worker",
                     state="ready", availability="active",
                     labels=desired_labels(RTX4090.facts()), engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={})
    res = FactsResult("n1", "gpu-node-2", "https://10.0.0.2:9401/facts", facts, None, 5.0)
    return build_cluster(Snapshot([node], [], [], {"n1": res}), None)


def _failing_doc() -> Doc:
    """The one-node document built with the audit's findings: a node-failing one on the
    node (its ID), and one about a service of the same name (no node)."""
    from swarmgpu.manager.commands.audit import Finding
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.web.cluster_view import build_cluster

    (node,) = _gpus_unread_snapshot_nodes()
    found = [Finding("node-failing", "gpu-node-2", "3 of 8 GPUs failed; drain it", node="n1"),
             Finding("pending", "gpu-node-2", "a service's finding, not the node's")]
    return build_cluster(Snapshot([node], [], [], {}), None, findings=found)


def _gpus_unread_snapshot_nodes() -> list[Any]:
    from support.gpu_nodes import RTX4090

    from swarmgpu.swarm.client import SwarmNode
    from swarmgpu.swarm.labels import desired_labels

    return [SwarmNode(id="n1", hostname="gpu-node-2", addr="10.0.0.2", role="worker",
                      state="ready", availability="active",
                      labels=desired_labels(RTX4090.facts()), engine_labels={}, version=1,
                      generic_resources={}, discrete_resources={})]


def test_a_node_with_a_finding_carries_it_in_the_map_document() -> None:
    """observe passes the audit's findings to build_cluster (a failing node shows on the
    map through them): each node's own are on it, with their text and severity."""
    (n,) = _failing_doc()["nodes"]
    assert n["findings"] == [{"kind": "node-failing", "severity": "action",
                              "message": "3 of 8 GPUs failed; drain it"}]


def test_a_node_whose_gpus_cannot_be_read_is_shown_so_not_drift() -> None:
    """The map says the GPUs cannot be read, with the error and the fix and the labels
    as they stand (label sync keeps them), not a node drifting to 0 GPUs."""
    from swarmgpu.manager.web.cluster_view import render_status

    doc = _gpus_unread_doc()
    (n,) = doc["nodes"]
    assert n["labels_state"] == "gpus-unread" and n["drift"] == []
    assert "swarmgpu.gpu.count=8" in n["labels_kept"]
    assert n["gpu_count"] is None and n["gpus"] == []  # unknown, not 0
    agent = n["agent"]
    assert agent["status"] == "gpus-unread" and agent["last_ok"] == 5.0
    assert agent["error"] == agent["cause"] == f"its GPUs cannot be read: {NVML_ERR}"
    assert "run swarmgpu doctor on the node" in agent["fix"]
    text = render_status(doc)
    assert f"agent gpus-unread (its GPUs cannot be read: {NVML_ERR}), labels gpus-unread" in text
    assert "  labels kept as they are: swarmgpu.gpu.count=8" in text
    assert "run swarmgpu doctor on the node" in text and "0x" not in text
    # the header counts it with the nodes whose labels need a look, as the page does
    assert webmap.summary_counts(doc)["drifted"] == 1
    assert webmap.light_doc(doc)["nodes"][0]["labels_state"] == "gpus-unread"
    js = (WEB / "app.js").read_text()
    assert '"gpus-unread": ["bad", "✕", "GPUs cannot be read"]' in js
    drifted = re.search(r"const isDrifted = \(n\) => \[([^\]]*)\]", js)
    assert drifted is not None
    assert re.findall(r'"([^"]+)"', drifted.group(1)) == list(webmap.DRIFTED)


def test_every_plan_status_has_its_badge_and_failed_its_filter() -> None:
    """A service whose planning raised (Status.FAILED, placement.isolate) shows as failed
    on the map: its own badge, a state filter of its own (the "pending" one is not it),
    offered in the page's select and help as every other state."""
    js = (WEB / "app.js").read_text()
    html = (WEB / "index.html").read_text()
    badges = re.search(r"const SERVICE_STATUS = \{([^}]*)\}", js)
    assert badges is not None
    assert set(re.findall(r"(\w+): \[", badges.group(1))) == {str(s) for s in Status}
    assert 'failed: ["bad", "✕"]' in badges.group(1)
    states = re.search(r"const STATES = \[([^\]]*)\]", js)
    assert states is not None
    names = re.findall(r'"([^"]+)"', states.group(1))
    assert "failed" in names
    select = re.search(r'<select id="state"(.*?)</select>', html, re.S)
    assert select is not None
    assert re.findall(r'<option value="([^"]+)">', select.group(1)) == names
    assert "state: (" + ", ".join(names[:3]) in re.sub(r"\s+", " ", html)
    assert 't.value === "failed") return svc.status === "failed"' in js
    # the header counts them first, before Pending (renderSummary; the light document's
    # failed_count, webmap.light_doc)
    summary = js[js.index("function renderSummary"):]
    summary = summary[:summary.index("\n  }\n")]
    assert summary.index('item("Failed", String(failedCount), failedCount > 0)') < \
        summary.index('item("Pending"')
    assert "doc.failed_count ??" in summary


def test_assets_are_offline_and_never_inject_html() -> None:
    js = (WEB / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in js, f"app.js uses {sink}: build DOM nodes with text instead"
    for name in ("index.html", "app.js", "style.css"):
        text = (WEB / name).read_text()
        # the SVG namespace is a name, not a load
        assert not re.search(r"https?://(?!127\.0\.0\.1|www\.w3\.org/2000/svg\b)", text), (
            f"{name} loads from the net")


# ---- the page in Chromium --------------------------------------------------------


def test_map_shows_nodes_gpus_holders_pending_mig_groups(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(sample)
    dom = dump_dom(chromium, srv.url)
    text = text_of(dom)
    doc = sample()

    # every node as a card, with its labels health as words
    for node in doc["nodes"]:
        assert f'data-node="{node["hostname"]}"' in dom
    assert "Labels in sync" in text and "Labels drifted (2)" in text
    assert "Agent stale" in text and "No agent" in text
    assert "swarmgpu.gpu.memory: want 81559, have 1" in text
    assert "8 \u00d7 NVIDIA A100-SXM4-40GB · driver 535.104.05 · CUDA 12.2" in text

    # one focusable tile per GPU, named for screen readers
    tiles = re.findall(r'<div class="gpu[^"]*"[^>]*data-key="([^"]+)"', dom)
    want = [f"{n['hostname']}/{g['index']}" for n in doc["nodes"] for g in n["gpus"]]
    assert sorted(tiles) == sorted(want)
    assert dom.count('tabindex="0" role="button"') == len(want)
    assert 'aria-label="gpu-node-1 GPU 0; NVIDIA A100-SXM4-40GB; 35 of 40 GiB used' in dom

    # holders with their request; a half share
    assert "llm_api" in text and "2 NVLink GPUs &gt;= 40 GiB" in text
    assert "trainer" in text and "notebook 50 %" in text

    # the pending request with its reason
    pending = dom[dom.index('id="pending"') :]
    pending = text_of(pending[: pending.index("</section>")])
    assert "big" in pending and "4 GPUs &gt;= 80 GiB" in pending
    assert "needs 4 GPUs &gt;= 80 GiB; best node gpu-node-2 has 2 free" in pending

    # MIG slices drawn inside the tile: 4 slices, 3 held, 1 free
    assert dom.count('class="slice held"') == 3 and dom.count('class="slice"') == 1
    assert "3g.40gb" in text and "1g.10gb" in text

    # grouping: NUMA boxes on the DGX (NVLink spans all 8), NVLink pairs on the H100s
    for label in ("NUMA node 3", "NVLink group 1", "NVLink group 2", "PCIe switch 1"):
        assert label in text
    assert dom.count('<section class="group numa"') == 4 + 2  # DGX 4, RTX box 2
    assert dom.count('<section class="group nvlink"') == 2
    assert dom.count('<details class="links"') == 3 and ">NV12<" in dom

    # moves with reasons and outcomes
    assert "gpu-node-3 → gpu-node-2 (GPU 1)" in text
    assert "PCIe switch 1 above 85 % utilisation for 5 min" in text
    assert "rolled back" in text and "done" in text

    # health where the source reports it: temperature, power, XID, ECC; hot marked in words
    assert "86 °C" in text and "397 W" in text
    assert "XID 79" in text and "ECC 3 DBE" in text
    assert "Hot 4" in text and "Unhealthy 1" in text  # summary: trainer's 4 GPUs; the XID GPU
    # MIG: the tile says what its slices hold, each slice its memory (never "? / 80 GiB")
    mig_tile = text_of(dom.split('data-key="gpu-node-2/0"')[1].split("data-key=")[0])
    assert "? / 80 GiB" not in mig_tile
    assert "Mem 42 / 80 GiB" in mig_tile and "3g.40gb asr 30 / 39 GiB" in mig_tile
    assert "2g.20gb free 20 GiB" in mig_tile
    assert "zone zone-a" in text

    # live status, no banner
    assert "last updated" in text
    assert re.search(r'<div id="banner" class="banner" role="alert" hidden="">\s*</div>', dom)


def test_a_service_of_no_gpu_lists_its_node_without_gpus(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    """A ``gpus: "0"`` service's placement has no GPUs: the Services panel said
    ``gpu-node-1: GPU`` with nothing after it."""
    doc = sample()
    doc["services"].append({"name": "indexer", "id": "id-indexer",
                            "request": "no GPU, placed by swarmgpu by its CPU and memory",
                            "status": "placed", "state": "Active", "reason": None,
                            "placements": [{"node": "gpu-node-1", "gpus": [], "uuids": []}]})
    srv = serve(lambda: doc)
    dom = dump_dom(chromium, srv.url)
    section = dom[dom.index('id="services"'):]
    panel = text_of(section[: section.index("</section>")])
    assert "indexer" in panel and "gpu-node-1: no GPU" in panel, panel
    assert not re.search(r"gpu-node-1: GPU\s*(?:$|[a-z])", panel), panel


def test_the_header_says_the_last_cycle_was_cut_short_and_when(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    """A cycle cut at its engine budget builds no document: the map drew the last whole
    cycle's with nothing to tell it. The header says /healthz's word and when; a cycle
    that completed adds nothing."""
    doc = {**sample(), "last_cycle": "over_budget", "last_cycle_at": 1_700_000_000.0}

    def summary(one: Doc) -> str:
        dom = dump_dom(chromium, serve(lambda: one).url)
        part = dom[dom.index('id="summary"'):]
        return text_of(part[: part.index("</dl>")])

    said = summary(doc)
    assert "Last cycle" in said and "over_budget: cut at its engine budget at " in said, said
    said = summary({**sample(), "last_cycle": "ok", "last_cycle_at": 1_700_000_000.0})
    assert "Nodes" in said and "Last cycle" not in said, said


def test_screenshots_for_a_human_look(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(sample)
    for size, name in (("1366,768", "map-1366x768.png"), ("1920,1080", "map-1920x1080.png"),
                       ("1366,2400", "map-1366-full.png")):  # fmt: skip
        screenshot(chromium, srv.url, name, size)


def test_live_update_changes_the_dom_without_reload(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    polls = {"n": 0}

    def counting() -> Doc:
        polls["n"] += 1
        doc = sample()
        doc["pending"][0]["reason"] = f"poll number {polls['n']}"
        doc["nodes"][1]["gpus"][0]["util_pct"] = float(polls["n"])
        return doc

    srv = serve(counting)
    dom = dump_dom(chromium, srv.url, budget_ms=6000)  # polls every 2.5 s: 3 polls
    seen = [int(n) for n in re.findall(r"poll number (\d+)", dom)]
    assert srv.api_hits >= 2, f"the page polled {srv.api_hits} time(s) in 6 s of virtual time"
    assert seen and seen[0] >= 2, f"the DOM still shows poll {seen}: it never redrew"
    assert "poll number 1<" not in dom


def _hue(name: str) -> int:
    """app.js hue(): a service's stable hue."""
    x = 0
    for ch in name:
        x = (x * 31 + ord(ch)) & 0xFFFFFFFF
    return x % 360


def test_a_poll_moves_bars_and_hues_under_the_daemons_csp(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    # The daemon's CSP (style-src 'self', no 'unsafe-inline') ignores a style attribute
    # set from script: a patch that copied one left the bar at the first poll's width
    # and the tile in its first holder's hue, under new numbers and names.
    def changing() -> Doc:
        doc = sample()
        late = srv.api_hits > 1
        g = doc["nodes"][1]["gpus"][0]  # gpu-node-1/0
        g["util_pct"] = 95.0 if late else 5.0
        g["holders"][0]["service"] = "batch_b" if late else "llm_api"
        doc["nodes"][1]["gpus"][1]["holders"] = [] if late else [{"service": "held_a"}]
        return doc

    srv = serve(changing)
    cdp = Cdp(chromium, (1366, 900))
    tile = "document.querySelector('[data-key=\"gpu-node-1/%s\"]')"
    try:
        cdp.open(srv.url)
        cdp.wait_for(f"({tile % 0})?.querySelector('.util .m-value').textContent === '5 %'")
        assert cdp.js(f"{tile % 0}.querySelector('.util .fill').style.width") == "5%"
        assert cdp.js(f"{tile % 1}.style.getPropertyValue('--hue')") == str(_hue("held_a"))
        cdp.js(
            "window.violations = []; addEventListener('securitypolicyviolation', "
            "(e) => violations.push(`${e.violatedDirective} ${e.sample}`))"
        )
        cdp.wait_for(
            f"{tile % 0}.querySelector('.util .m-value').textContent === '95 %'", timeout=10
        )
        assert cdp.js(f"{tile % 0}.querySelector('.util .fill').style.width") == "95%"
        hue = cdp.js(f"getComputedStyle({tile % 0}).getPropertyValue('--hue').trim()")
        assert hue == str(_hue("batch_b"))
        chip = f"{tile % 0}.querySelector('.svc')"
        assert cdp.js(f"{chip}.textContent") == "batch_b"
        assert cdp.js(f"{chip}.style.getPropertyValue('--hue')") == str(_hue("batch_b"))
        assert cdp.js(f"{tile % 1}.style.getPropertyValue('--hue')") == ""  # free now
        assert cdp.js("violations") == []
    finally:
        cdp.close()


def test_a_value_of_the_wrong_type_or_range_reads_unknown_and_every_poll_still_draws(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    # The document passes on what others wrote (a move record is anyone's with the
    # manager API). Before, a time that was no number, or past year 275760, threw in
    # toISOString: the panels after Rebalancing were never drawn, the banner said
    # "Offline" and no later poll drew them; `{"toString": 1}` threw in String().
    def hostile() -> Doc:
        doc = sample()
        late = srv.api_hits > 1
        rec = doc["moves"]["recent"][0]
        doc["moves"]["recent"] = [{**rec, "at": at} for at in ("soon", 1e300, None, [1], {})]
        doc["moves"]["proposed"][0].update(window={"toString": 1}, gpus={"length": 1})
        g = doc["nodes"][1]["gpus"][0]  # gpu-node-1/0
        g["util_pct"] = 95.0 if late else 5.0
        g.update(ecc_sbe=[3], numa_node="far")
        g["holders"][0]["share_milli"] = "half"
        doc["pending"][0]["reason"] = {"toString": 1}
        doc["services"][0]["placements"][0]["gpus"] = 7
        doc["ungranted"] = {"of no shape": "the page knows"}  # a list, said the daemon
        return doc

    srv = serve(hostile)
    cdp = Cdp(chromium, (1366, 900))
    tile = "document.querySelector('[data-key=\"gpu-node-1/0\"]')"
    try:
        cdp.open(srv.url + "?service=notebook")
        cdp.wait_for("document.querySelectorAll('#services li').length > 0")
        moves = cdp.js("document.getElementById('moves').innerText")
        assert "notebook" in moves and "Invalid" not in moves and "()" not in moves
        assert "NaN" not in cdp.js("document.body.innerText")
        times = "[...document.querySelectorAll('#moves time')]"
        assert cdp.js(f"{times}.map((t) => t.textContent)") == ["?"] * 5
        assert cdp.js(f"{times}.map((t) => t.hasAttribute('datetime'))") == [False] * 5
        assert "Past moves 5" in cdp.js("document.getElementById('focus').textContent")
        assert "Why: ?" in cdp.js("document.getElementById('pending').innerText")
        label = cdp.js(f"{tile}.getAttribute('aria-label')")
        assert label.endswith("held by llm_api") and "ECC ? corrected" in label
        assert "utilisation 5 %" in label and "NaN" not in label
        # a shape no formatter expects: that part is named, the others are drawn
        banner = cdp.js("document.getElementById('banner').textContent")
        assert banner.startswith("Part of the page could not be drawn from the daemon's")
        assert "Ungranted GPU access (" in banner and "Rebalancing" not in banner
        # a later poll still redraws the map
        cdp.wait_for(f"{tile}.querySelector('.util .m-value').textContent === '95 %'", timeout=10)
        assert cdp.js("document.getElementById('live').textContent") == "Live"
    finally:
        cdp.close()


def test_classes_come_from_known_kinds_only(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    # A kind is put in a class: "nvlink sr" hid a group box (.sr: screen readers only),
    # a holder badge's "ok sr" its badge.
    def hostile() -> Doc:
        doc = sample()
        doc["nodes"][1]["groups"][0]["kind"] = "nvlink sr"
        doc["nodes"][1]["groups"].append({"kind": "sr x", "name": "odd", "gpus": [0]})
        doc["nodes"][1]["gpus"][0]["holders"][0]["badges"] = [{"kind": "ok sr", "text": "hi"}]
        doc["nodes"][1]["labels_state"] = "in-sync sr"
        return doc

    srv = serve(hostile)
    cdp = Cdp(chromium, (1366, 900))
    try:
        cdp.open(srv.url)
        cdp.wait_for("document.querySelectorAll('.gpu').length > 0")
        classes = cdp.js(
            "[...document.querySelectorAll('.group, .chip, .badge, .node')]"
            ".map((e) => [...e.classList]).flat()"
        )
        assert "sr" not in classes and "x" not in classes
        assert {"other", "ls-unknown"} <= set(classes)
        assert cdp.js("[...document.querySelectorAll('.badge')].some((b) => "
                      "b.textContent.endsWith('hi') && b.classList.contains('muted'))")
    finally:
        cdp.close()


def test_a_document_slower_to_arrive_than_the_answer_timeout_still_draws(
    chromium: str,
) -> None:
    # A big fleet's document on a slow link: the answer starts at once, its body takes
    # 6 s. The page's 4 s timeout covered the body too: it aborted every poll and never
    # drew, however long it was left open.
    routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
    webmap.register(routes, sample)
    body = json.dumps(sample()).encode()

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            slow = path == webmap.CLUSTER_PATH
            route = routes.get(path)
            ctype, out = ("application/json", body) if slow else route() if route else ("", b"")
            self.send_response(200 if out else 404)
            for k, v in SECURITY_HEADERS.items():
                self.send_header(k, v)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            step = len(out) // 12 + 1 if slow else len(out) + 1
            for i in range(0, len(out), step):
                self.wfile.write(out[i:i + step])
                self.wfile.flush()
                if slow:
                    time.sleep(0.5)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    cdp = Cdp(chromium, (1366, 768))
    try:
        cdp.open(f"http://127.0.0.1:{httpd.server_address[1]}/")
        cdp.wait_for("document.querySelector('[data-key]') !== null", timeout=20)
        assert cdp.js("window.swarmgpuMap.state.error") is None
    finally:
        cdp.close()
        httpd.shutdown()
        httpd.server_close()


def test_offline_banner_keeps_the_last_map(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    calls = {"n": 0}

    def flaky() -> Doc:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("docker API unreachable")
        return sample()

    srv = serve(flaky)
    dom = dump_dom(chromium, srv.url, budget_ms=4000)
    banner = re.search(r'<div id="banner"([^>]*)>(.*?)</div>', dom, re.S)
    assert banner and "hidden" not in banner.group(1), "no offline banner after the API failed"
    assert "Offline: the map is stale." in banner.group(2)
    assert "docker API unreachable" in banner.group(2)
    assert 'class="stale"' in dom  # the map is dimmed, not removed
    assert 'data-node="gpu-node-1"' in dom
    assert ">Offline<" in dom

    calls["n"] = 0  # the same story once more, for a human look at the banner
    screenshot(chromium, srv.url, "map-offline-1366x768.png", "1366,768")


def test_data_is_escaped_never_markup(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    evil = '<img src=x onerror="document.title=1">'

    def hostile() -> Doc:
        doc = copy.deepcopy(sample())
        doc["nodes"][1]["hostname"] = evil
        doc["nodes"][1]["gpus"][0]["holders"][0]["service"] = "<b>bold</b>"
        doc["pending"][0]["reason"] = "<script>document.title=2</script>"
        return doc

    srv = serve(hostile)
    dom = dump_dom(chromium, srv.url)
    assert "<img" not in dom and "<b>bold" not in dom
    assert "&lt;img src=x" in dom and "&lt;b&gt;bold&lt;/b&gt;" in dom
    assert "&lt;script&gt;document.title=2" in dom
    assert "<title>swarmgpu · GPU map</title>" in dom
    # the same in the heat map and in the views opened from the URL
    for q in ("?view=fleet", "?service=%3Cb%3Ebold%3C%2Fb%3E",
              "?node=%3Cimg%20src%3Dx%20onerror%3D%22document.title%3D1%22%3E&gpu=0"):
        dom = dump_dom(chromium, srv.url + q)
        assert "<img" not in dom and "<b>bold" not in dom, q
        assert "<title>swarmgpu · GPU map</title>" in dom, q


def test_hidden_characters_in_names_and_reasons_show_as_escapes(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    # A bidi override reversed the rest of a tile's or a reason's line, a zero-width
    # space made "llm" and "l\u200blm" look the same: shown as the commands print them.
    def hostile() -> Doc:
        doc = copy.deepcopy(sample())
        doc["nodes"][1]["hostname"] = "gpu\u202e1-edon"
        doc["nodes"][1]["gpus"][0]["holders"][0]["service"] = "l\u200blm"
        doc["pending"][0]["reason"] = "waits\x1b[2J\u2066 for a GPU\n"
        return doc

    srv = serve(hostile)
    dom = dump_dom(chromium, srv.url)
    shown = text_of(dom)
    assert not any(c in shown for c in "\u202e\u200b\u2066\x1b"), shown
    assert "gpu\\u202e1-edon" in shown and "l\\u200blm" in shown
    assert "waits\\x1b[2J\\u2066 for a GPU\\n" in shown
    dom = dump_dom(chromium, srv.url + "?node=gpu%E2%80%AE1-edon&gpu=0")  # the card, tooltips
    assert not any(c in text_of(dom) for c in "\u202e\u200b"), text_of(dom)
    assert 'aria-label="Close node gpu\\u202e1-edon"' in dom  # the card, its label escaped
    assert not re.search(r'(title|aria-label)="[^"]*[\u202e\u200b]', dom), dom


# ---- keyboard, through the DevTools protocol over a pipe ------------------------------


def test_keyboard_focus_shows_gpu_details(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    def changing() -> Doc:
        doc = sample()  # metrics move on every poll, as they do live
        doc["generated_at"] += srv.api_hits
        doc["nodes"][1]["gpus"][1]["util_pct"] = float(srv.api_hits)
        return doc

    srv = serve(changing)
    cdp = Cdp(chromium, (1366, 768))
    try:
        cdp.open(srv.url)
        cdp.wait_for("document.querySelectorAll('.gpu').length === 20")
        active = "document.activeElement.dataset.key || document.activeElement.tagName"
        for _ in range(14):  # skip link, pause, the search form's fields, then the first tile
            cdp.key("Tab", 9)
            if cdp.js("document.activeElement.classList.contains('gpu')"):
                break
        assert cdp.js(active) == "gpu-node-1/0", "Tab never reached the first GPU tile"
        assert cdp.js("document.querySelector('#inspector h2').textContent") == "gpu-node-1 · GPU 0"
        inspector = cdp.js("document.getElementById('inspector').innerText")
        assert "llm_api" in inspector and "Request: 2 NVLink GPUs >= 40 GiB" in inspector
        assert "NUMA node 3 (NUMA)" in inspector and "NVLink group 1 (NVLink)" in inspector
        assert "61 °C" in inspector and "262 W" in inspector and "zone-a" in inspector
        cdp.key("ArrowRight", 39)
        assert cdp.js(active) == "gpu-node-1/1"
        assert cdp.js("document.activeElement.getAttribute('aria-pressed')") == "true"

        # a poll patches the page in place: the same tile keeps focus, <details> stay open
        cdp.js("document.activeElement.mark = 'kept'")  # a JS property, not an attribute
        cdp.js("document.querySelector('details.links').open = true")
        hits = srv.api_hits
        cdp.wait_for(
            "document.querySelector('[data-key=\"gpu-node-1/1\"] .util .m-value')"
            f".textContent !== '77 %' && {hits}",
            timeout=10,
        )
        deadline = time.monotonic() + 10
        while srv.api_hits < hits + 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # one more poll, with the page patched twice
        assert srv.api_hits >= hits + 2, f"only {srv.api_hits - hits} poll(s) in 10 s"
        assert cdp.js("document.activeElement.mark") == "kept"
        assert cdp.js("document.querySelector('details.links').open") is True

        # the MIG GPU lists its slices and holders' tasks
        cdp.js("document.querySelector('[data-key=\"gpu-node-2/0\"]').focus()")
        cdp.key("Enter", 13)
        inspector = cdp.js("document.getElementById('inspector').innerText")
        assert "MIG slices" in inspector and "3g.40gb" in inspector and "free" in inspector
        cdp.screenshot(ARTIFACTS / "map-1366x768-inspector.png")

        cdp.key("Escape", 27)
        assert "Tab to a GPU tile" in cdp.js("document.getElementById('inspector').innerText")
    finally:
        cdp.close()


# ---- possible states only ----------------------------------------------------------


def test_sample_and_fleet_documents_are_possible_states() -> None:
    from support.web_fleet import fleet_doc

    from swarmgpu.manager.web.cluster_view import document_problems

    assert document_problems(sample()) == []
    fleet = fleet_doc(30)  # placed by the real planner from recorded topologies
    assert document_problems(fleet) == []
    assert fleet["pending"] and len(fleet["services"]) == 150

    # the contradictions the old sample had are caught, with words saying where
    bad = sample()
    bad["moves"]["proposed"][0]["gpus"] = [3]
    slice0 = bad["nodes"][2]["gpus"][0]["mig"][0]
    slice0["holder"]["service"] = "vision"
    assert document_problems(bad) == [
        "gpu-node-2 GPU 0: MIG 3g.40gb held by vision, whose request is '1 GPU >= 16 GiB'",
        "gpu-node-2 GPU 0: MIG slice held by vision, whose placements omit it",
        "proposed move of vision to gpu-node-2 GPU 3, which is unhealthy",
    ]
    small = sample()
    small["nodes"][3]["gpus"][3]["memory_mib"] = 8192
    assert document_problems(small) == [
        "gpu-node-3 GPU 3: 8192 MiB is less than vision's request (1 GPU >= 16 GiB)"]


def test_health_and_mig_memory_from_real_dcgm_exporter_pages() -> None:
    from swarmgpu.core.metrics_in import parse_metrics
    from swarmgpu.manager.web.cluster_view import health_fields, mig_used

    caps = REPO / "tests" / "fixtures" / "captures"
    t4 = parse_metrics((caps / "dcgm_tesla-t4_x1_drv460_Hostname_datadog-fixture-excerpt.txt")
                       .read_text()).samples_by_uuid["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
    assert health_fields(t4) == {"temp_c": 25, "power_w": 9.0, "xid": 0, "ecc_sbe": None,
                                 "ecc_dbe": None}  # this page has no ECC counters
    a800 = parse_metrics((caps / "dcgm_a800-sxm4-80gb_x8_gpu0-mig-3x2g20gb_Hostname_johnsblog"
                                 ".txt").read_text()).samples_by_uuid
    mig = a800["GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"]  # GPU 0: three 2g.20gb slices
    # device values are only on the GPU instances there: taken from them
    assert health_fields(mig) == {"temp_c": 33, "power_w": 78.4, "xid": 0, "ecc_sbe": None,
                                  "ecc_dbe": None}
    assert [mig_used(mig, gi) for gi in (3, 5, 6, 9)] == [10, 10, 10, None]
    assert health_fields(None) == dict.fromkeys(("temp_c", "power_w", "xid", "ecc_sbe",
                                                 "ecc_dbe"))


# ---- the history ring ----------------------------------------------------------------


def test_history_ring_is_bounded_and_answers_per_node_and_service() -> None:
    from swarmgpu.core.config import HistoryConfig
    from swarmgpu.manager.web.history import parse_query

    h = History(HistoryConfig(samples=4, max_gpus=6))
    doc = sample()
    for k in range(10):
        h.record(doc, at=1000.0 + 30 * k)
    assert len(h.rings) == 6  # 20 GPUs seen, the 6 seen last kept
    # fewer slots than GPUs: they churn (one sample each), the memory stays bounded
    assert sorted(r.n for r in h.rings.values()) == [1] * 6
    assert h.nbytes() == 6 * 4 * (8 + 4 * 4)  # preallocated: 24 bytes a sample

    h = History(HistoryConfig(samples=4, max_gpus=100))
    for k in range(10):
        doc["nodes"][1]["gpus"][4]["util_pct"] = float(k)
        h.record(doc, at=1000.0 + 30 * k)
    ans = h.query(node="gpu-node-1", window_s=60, points=60)  # ends at the newest sample
    assert [g["index"] for g in ans["gpus"]] == list(range(8))
    g4 = ans["gpus"][4]
    assert g4["t"] == [1210.0, 1240.0, 1270.0] and g4["util_pct"] == [7.0, 8.0, 9.0]
    assert g4["temp_c"] == [84.0] * 3 and g4["services"] == ["trainer"]
    by_svc = h.query(service="embed")
    assert [(g["node"], g["index"]) for g in by_svc["gpus"]] == [("gpu-node-2", 0)]
    unknown = h.query(node="gpu-node-2")["gpus"][3]
    assert unknown["util_pct"] == [None] * 4  # unknown stays unknown, never 0

    assert parse_query({"window": ["15m"], "points": ["30"], "node": ["a"]}) == {
        "window_s": 900.0, "points": 30, "node": "a"}
    for q, word in (({"window": ["soon"]}, "window"), ({"points": ["1"]}, "points"),
                    ({"gpu": ["0"]}, "unknown parameter 'gpu'")):
        with pytest.raises(ValueError, match=word):
            parse_query(q)
    body = json.loads(webmap.history_body(h, "window=forever"))
    assert body["error"].startswith("/api/v1/history: window 'forever' is not a duration")
    assert "error" in json.loads(webmap.history_body(h, "&".join(f"x{i}=1" for i in range(50))))



def test_the_cycle_records_while_a_history_query_averages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A query averages its GPUs outside the lock the cycle records under: at 512 GPUs of
    240 samples that takes ~0.7 s, and any caller of /api/v1/history (loopback without
    proof) could keep the cycle's ``record`` waiting behind query after query."""
    import threading

    from swarmgpu.manager.web import history as hist

    h = History()
    doc = sample()
    h.record(doc, at=1000.0)
    recorded: list[bool] = []
    real = hist._json_num

    def averaging(x: float) -> float | None:
        if not recorded:  # once, mid-query: the cycle's next sample
            t = threading.Thread(target=h.record, args=(doc, 1030.0), daemon=True)
            t.start()
            t.join(timeout=2)
            recorded.append(not t.is_alive())
        return real(x)

    monkeypatch.setattr(hist, "_json_num", averaging)
    h.query()
    assert recorded == [True], "record waited for the query to finish"



def test_a_history_query_names_a_repeated_or_unreadable_parameter() -> None:
    """What is not read as asked is refused by name: a parameter given twice (which one
    counts?), numbers in digits other than 0-9 (int() refused '²' with its own words),
    and an unknown name, shown cut."""
    from swarmgpu.manager.web.history import parse_query

    # Arabic-Indic digits: int() and float() read them, 30 and 15
    for q, word in (({"node": ["a", "b"]}, "node is given 2 times: give it once"),
                    ({"points": ["²"]}, "points must be a whole number"),
                    ({"points": ["\u0663\u0660"]}, "points must be a whole number"),
                    ({"window": ["\u0661\u0665m"]}, "window '.*' is not a duration")):
        with pytest.raises(ValueError, match=word):
            parse_query(q)
    body = json.loads(webmap.history_body(History(), "points=%C2%B2"))
    assert body["error"] == "/api/v1/history: points must be a whole number from 2 to 240"
    body = json.loads(webmap.history_body(History(), "x" * 2000 + "=1"))
    assert body["error"].startswith("/api/v1/history: unknown parameter 'xxx")
    assert len(body["error"]) < 200


# ---- fleet view, filter, node and service views -----------------------------------------


def test_filter_lives_in_the_url(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(sample)
    dom = dump_dom(chromium, srv.url + "?q=service:trainer")
    assert 'data-node="gpu-node-1"' in dom and 'data-node="gpu-node-3"' not in dom
    assert "1 of 5 nodes, 4 of 20 GPUs match." in text_of(dom)
    dom = dump_dom(chromium, srv.url + "?state=unhealthy")
    assert 'data-node="gpu-node-2"' in dom and 'data-node="gpu-node-1"' not in dom
    assert re.search(r'class="gpu free sick"[^>]*data-key="gpu-node-2/3"', dom)
    assert re.search(r'class="gpu free dim"[^>]*data-key="gpu-node-2/1"', dom)
    dom = dump_dom(chromium, srv.url + "?q=zone:zone-b+state:hot")
    assert "No node matches the filter." in text_of(dom)
    dom = dump_dom(chromium, srv.url + "?q=product:h100")
    assert "1 of 5 nodes, 4 of 20 GPUs match." in text_of(dom)
    # pending requests hold no GPUs: the panels narrow to them instead
    dom = dump_dom(chromium, srv.url + "?state=pending")
    services = text_of(dom[dom.index('id="services"'):])
    assert "Services 2 of 8" in services and "big" in services and "broken" in services


def test_service_and_node_views_from_the_url(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(sample)
    dom = dump_dom(chromium, srv.url + "?service=vision")
    focus = text_of(dom[dom.index('id="focus"'):dom.index('id="nodes"')])
    assert "Request 1 GPU &gt;= 16 GiB" in focus
    assert "gpu-node-3 GPU 3 15 / 24 GiB 63 % ✓ 64 °C · 318 W" in focus
    assert "gpu-node-3 → gpu-node-2 (GPU 1)" in focus and "hot-spot" in focus
    assert "Past moves 0" in focus
    dom = dump_dom(chromium, srv.url + "?service=embed")
    focus = text_of(dom[dom.index('id="focus"'):dom.index('id="nodes"')])
    assert focus.count("MIG 1g.10gb") >= 2 and "6 / 9.8 GiB" in focus
    assert "idle cleanup: MIG slice unused for 30 min" in focus  # its past move
    dom = dump_dom(chromium, srv.url + "?node=gpu-node-2&gpu=0")
    focus = dom[dom.index('id="focus"'):dom.index('id="nodes"')]
    assert focus.count('class="gpu ') == 4 and 'data-key="gpu-node-2/0"' in focus
    inspector = text_of(dom[dom.index('id="inspector"'):])
    assert "gpu-node-2 · GPU 0" in inspector and '<svg class="chart"' in dom
    assert dom.count('<svg class="spark"') >= 20  # history on every tile
    for q, name in (("?service=vision", "map-service-1366.png"),
                    ("?node=gpu-node-2&gpu=0", "map-node-1366.png")):
        screenshot(chromium, srv.url + q, name, "1366,900")


def test_fleet_heat_map_at_scale_opens_node_cards(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    from support.web_fleet import fleet_doc

    fleet = fleet_doc(40)  # above FLEET_AUTO_NODES: the heat map takes over
    gpus = sum(len(n["gpus"]) for n in fleet["nodes"])
    srv = serve(lambda: fleet)
    cdp = Cdp(chromium, (1366, 900))
    try:
        cdp.open(srv.url)
        cdp.wait_for(f"document.querySelectorAll('.fleet .cell').length === {gpus}")
        assert cdp.js("document.body.dataset.view") == "fleet"
        # painted first from the light document, then the whole one patched it in place
        assert cdp.js("window.swarmgpuMap.state.perf.first.light") is True
        cdp.wait_for("window.swarmgpuMap.state.perf.full !== null")
        cdp.wait_for("document.querySelectorAll('#services li, #services .more').length > 0")
        assert cdp.js("document.querySelectorAll('.node').length") == 0
        legend = cdp.js("document.querySelector('.legend').innerText")
        assert "free (outline)" in legend and "✕ unhealthy" in legend and "▲ hot" in legend
        # one tab stop for the whole map; arrows walk the cells; labels come on focus
        assert cdp.js("document.querySelectorAll('.fleet [tabindex]').length") == 1
        cdp.js("document.querySelector('.fleet [tabindex]').focus()")
        assert cdp.js("document.activeElement.dataset.key") == "gpu-0000/0"
        cdp.key("ArrowRight", 39)
        assert cdp.js("document.activeElement.dataset.key") == "gpu-0000/1"
        assert "gpu-0000 GPU 1" in cdp.js("document.activeElement.getAttribute('aria-label')")
        cdp.key("ArrowDown", 40)
        assert cdp.js("document.activeElement.dataset.key") == "gpu-0001/1"
        # Enter opens the node's card above the map, the URL says so
        cdp.key("Enter", 13)
        cdp.wait_for("document.querySelectorAll('#focus .gpu').length === 8")
        assert cdp.js("location.search") == "?node=gpu-0001&gpu=1"
        assert cdp.js("document.activeElement.dataset.key") == "gpu-0001/1"
        assert cdp.js("document.querySelector('#inspector h2').textContent") == "gpu-0001 · GPU 1"
        cdp.screenshot(ARTIFACTS / "map-fleet-node-1366.png")
        cdp.key("Escape", 27)
        cdp.wait_for("document.getElementById('focus').hidden")
        assert cdp.js("document.activeElement.dataset.key") == "gpu-0001/1"
        # colour by utilisation: the same cells, now levels; a click opens a node
        cdp.js("document.getElementById('color').value = 'util';"
               "document.getElementById('color').dispatchEvent(new Event('change'))")
        assert cdp.js("location.search") == "?color=util"
        assert cdp.js("document.querySelectorAll('.fleet .cell.v4, .fleet .cell.v0').length") > 0
        cdp.screenshot(ARTIFACTS / "map-fleet-1366.png")
        # a live poll patches cells in place: the focused cell keeps its element
        cdp.js("window.keep = document.querySelector('[data-key=\"gpu-0002/3\"]')")
        fleet["nodes"][2]["gpus"][3]["util_pct"] = 99.0
        fleet["nodes"] = list(fleet["nodes"])  # a new document is new objects (webmap memo)
        hits = srv.api_hits
        cdp.wait_for(f"window.swarmgpuMap.state.perf.updates.length > 1 && {hits}", timeout=10)
        cdp.wait_for("window.keep.classList.contains('v4')", timeout=10)
        assert cdp.js("window.keep === document.querySelector('[data-key=\"gpu-0002/3\"]')")
        cdp.js("document.querySelector('[data-key=\"gpu-0003/0\"]').click()")
        cdp.wait_for("location.search.includes('node=gpu-0003')")
    finally:
        cdp.close()


def _rgb(hex_colour: str) -> str:
    h = hex_colour.strip().lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


def _sketch_looks_are_the_cells_own(cdp: Cdp, looks: dict[str, Any]) -> None:
    """The first frame's canvas drew each cell class in the colours and fill height the
    real cells of that class get from style.css (one source: its custom properties)."""
    fills = 0
    for cls, look in looks.items():
        got = cdp.js(f"(() => {{ const c = [...document.querySelectorAll('.fleet .cell')]"
                     f".find((e) => e.className === {json.dumps(cls)}); if (!c) return null; "
                     f"const s = getComputedStyle(c); return [s.borderTopColor, "
                     f"s.backgroundColor, s.backgroundImage]; }})()")
        assert got is not None, cls
        border, colour, image = got
        assert border == _rgb(look["border"]), (cls, look, got)
        fill = look["fill"]
        if fill is None or fill[0] is None:
            continue
        fills += 1
        if fill[2] == 1 and fill[3] is None:
            assert colour == _rgb(fill[0]), (cls, look, got)
        else:
            assert _rgb(fill[0]) in image, (cls, look, got)
            if fill[3] is None:
                assert f"{round(fill[2] * 100)}%" in image, (cls, look, got)
    assert fills >= 3, looks  # filled classes (held, MIG or value cells) were compared


def test_fleet_first_frame_holds_no_more_elements_than_the_5_node_page(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    """Issue 36: the 1,000-node map's first paint within 1.2x of the 5-node page's (timed
    in benchmarks/bench_map.py, never here). What makes it hold, checked structurally:
    the fleet's first frame holds no more elements than the 5-node page's, however many
    nodes fill the screen (its first screen of node blocks is one canvas), and the
    interactive blocks that replace it after that paint sit where the canvas drew them."""
    from support.web_fleet import fleet_doc

    fleet = fleet_doc(400)  # more node blocks than a 1366 x 900 screen holds
    gpus = sum(len(n["gpus"]) for n in fleet["nodes"])
    first: dict[str, Any] = {}
    for name, doc in (("5 nodes", sample()), ("fleet", fleet)):
        srv = serve(lambda doc=doc: doc)
        cdp = Cdp(chromium, (1366, 900))
        try:
            cdp.open(srv.url)
            cdp.wait_for("window.swarmgpuMap?.state.perf.first?.painted_ms > 0")
            first[name] = cdp.js("window.swarmgpuMap.state.perf.first")
            if name == "fleet":
                cdp.wait_for(f"document.querySelectorAll('.fleet .cell').length === {gpus}")
                assert cdp.js("document.querySelectorAll('.fleet-sketch').length") == 0
                k = first[name]["sketch"]["blocks"]
                at = cdp.js(f"(() => {{ const g = document.querySelector('.fleet')"
                            f".getBoundingClientRect(); const b = document.querySelectorAll("
                            f"'.fleet .fn')[{k - 1}].getBoundingClientRect(); "
                            f"return [b.x - g.x, b.y - g.y]; }})()")
                assert at == pytest.approx(first[name]["sketch"]["last"], abs=1)
                assert cdp.js("document.querySelector('.fleet').style.minHeight") == ""
                _sketch_looks_are_the_cells_own(cdp, first[name]["sketch"]["looks"])
                # the header the daemon counted for the first screen is the page's own
                # count over the whole document (app.js renderSummary)
                want = webmap.summary_counts(fleet)
                assert want["hot"] > 0 and want["sick"] > 0
                cdp.wait_for("window.swarmgpuMap.state.perf.full !== null")
                dd = cdp.js("[...document.querySelectorAll('#summary dd')].map((e) => "
                            "e.textContent)")
                assert [dd[0], dd[1], dd[5], dd[6], dd[7]] == [
                    str(want["nodes"]), f"{want['used']} / {want['gpus']}", str(want["hot"]),
                    str(want["sick"]), str(want["drifted"])]
                assert dd[2] == str(sum(sv.get("status") == "failed"
                                        for sv in fleet.get("services") or []))
        finally:
            cdp.close()
    fleet_first, small_first = first["fleet"], first["5 nodes"]
    assert fleet_first["light"] is True and fleet_first["sketch"]["blocks"] >= 150
    # the first request asked for about a screen of nodes, not all of them
    assert fleet_first["sketch"]["blocks"] <= fleet_first["nodes"] < len(fleet["nodes"])
    assert fleet_first["elements"] <= small_first["elements"], (fleet_first, small_first)


def test_fleet_first_frame_draws_values_in_the_cells_own_colours(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    """As above, coloured by utilisation: the value classes' colours and fill heights."""
    from support.web_fleet import fleet_doc

    fleet = fleet_doc(400)
    gpus = sum(len(n["gpus"]) for n in fleet["nodes"])
    srv = serve(lambda: fleet)
    cdp = Cdp(chromium, (1366, 900))
    try:
        cdp.open(srv.url + "/?color=util")
        cdp.wait_for("window.swarmgpuMap?.state.perf.first?.painted_ms > 0")
        looks = cdp.js("window.swarmgpuMap.state.perf.first.sketch.looks")
        assert sum(f" v{i}" in cls for cls in looks for i in range(5)) >= 4, sorted(looks)
        cdp.wait_for(f"document.querySelectorAll('.fleet .cell').length === {gpus}")
        _sketch_looks_are_the_cells_own(cdp, looks)
    finally:
        cdp.close()


def test_typing_a_search_updates_the_url_and_clear_resets_it(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(sample)
    cdp = Cdp(chromium, (1366, 900))
    try:
        cdp.open(srv.url)
        cdp.wait_for("document.querySelectorAll('.gpu').length === 20")
        cdp.js("document.getElementById('q').focus()")
        cdp.call("Input.insertText", text="service:embed")
        cdp.wait_for("location.search === '?q=service%3Aembed'")
        assert cdp.js("document.getElementById('matches').textContent") == (
            "1 of 5 nodes, 1 of 20 GPUs match.")
        assert cdp.js("document.querySelectorAll('.node').length") == 1
        # a service link is a button: Enter on it opens the service view
        cdp.js("document.querySelector('#services [data-service=\"embed\"]').focus()")
        cdp.key("Enter", 13)
        cdp.wait_for("location.search === '?q=service%3Aembed&service=embed'")
        assert "Where it runs" in cdp.js("document.getElementById('focus').textContent")
        cdp.js("document.getElementById('clear').click()")
        cdp.wait_for("location.search === '?service=embed'")
        assert cdp.js("document.querySelectorAll('#nodes .node').length") == 5
    finally:
        cdp.close()


def test_over_share_badge_and_filter(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    def over() -> Doc:
        doc = sample()  # notebook (0.5 GPU) uses more memory than its half, as observe says
        holder = doc["nodes"][3]["gpus"][2]["holders"][0]
        holder.update(over_share=True, memory_used_mib=17400, memory_share_mib=12282)
        return doc

    srv = serve(over)
    dom = dump_dom(chromium, srv.url + "?state=over-share")
    assert 'data-node="gpu-node-3"' in dom and 'data-node="gpu-node-1"' not in dom
    assert "1 of 5 nodes, 1 of 20 GPUs match." in text_of(dom)
    assert 'title="uses 17400 MiB, share 12282 MiB"' in dom and "over share" in dom
    dom = dump_dom(chromium, srv.url + "?view=fleet")
    assert re.search(r'class="cell a-part x-over"[^>]*data-key="gpu-node-3/2"', dom)


def test_a_node_whose_gpus_cannot_be_read_has_its_card(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(with_node_9(_gpus_unread_doc))
    dom = dump_dom(chromium, srv.url + "?state=drifted")
    text = card_text(dom, "gpu-node-9", "node no-gpu ls-gpus-unread")
    assert "✕ GPUs cannot be read GPUs cannot be read · driver 550.54.15" in text
    assert "No GPUs" not in text and "drifted" not in text
    assert f"agent: its GPUs cannot be read: {NVML_ERR}" in text
    assert "kept: swarmgpu.gpu.count=8" in text


def test_a_node_with_a_finding_is_marked_with_its_text(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(with_node_9(_failing_doc))
    text = card_text(dump_dom(chromium, srv.url), "gpu-node-9")
    assert "! node-failing 3 of 8 GPUs failed; drain it" in text, text
    assert "a service's finding" not in text


def test_the_summary_says_leadership_unknown_while_the_engine_is_unreachable(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    """``leader: false`` read "Role follower" while the daemon could not ask its engine
    (who leads unknown, as /healthz says): the map now says so, marked; a follower
    whose engine answers is still a follower, and the leader shows no role. An engine
    that answers with its swarm node stalled (locked, failed, in no swarm) is named so,
    with the fix for a locked one: the map names no ``engine_error``."""
    for live, want in (({"leader": False, "engine": "unreachable"},
                        "Role unknown: engine unreachable"),
                       ({"leader": False, "engine": "locked"},
                        "Role unknown: swarm locked (docker swarm unlock on it)"),
                       ({"leader": False, "engine": "inactive"},
                        "Role unknown: engine in no swarm"),
                       ({"leader": False, "engine": "error"},
                        "Role unknown: swarm node failed to start"),
                       ({"leader": False, "engine": "reachable"}, "Role follower"),
                       ({"leader": False}, "Role follower"),  # a daemon of before
                       ({"leader": True, "engine": "reachable"}, None)):
        dom = dump_dom(chromium, serve(lambda live=live: {**sample(), **live}).url)
        summary = dom[dom.index('id="summary"'):]
        summary = summary[: summary.index("</dl>")]
        text = text_of(summary)
        if want is None:
            assert "Role" not in text, text
        else:
            assert want in text, (live, text)
        assert ("follower" in text) == (want == "Role follower"), (live, text)
        if live.get("engine") not in (None, "reachable"):
            assert '<div class="warn"><dt>Role' in summary, summary


def test_ungranted_gpu_access_panel_and_summary(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    """Services that see GPUs without a grant (swarmgpu/manager/services/grants.py): each with its
    nodes, why and the fix, counted in the summary (an exempt one listed, not counted)."""
    def doc() -> Doc:
        d = sample()
        d["ungranted"] = [
            {"service": "team-b_rogue", "service_id": "x", "nodes": ["gpu-node-2"],
             "reason": "NVIDIA_VISIBLE_DEVICES=all in its own env", "fix": "set <b>void</b>",
             "known": True, "voidable": True, "exempt": False, "access": []},
            {"service": "swarmgpu_agent", "service_id": "y", "nodes": ["gpu-node-1"],
             "reason": "NVIDIA_VISIBLE_DEVICES=all in its own env",
             "fix": "none needed: exempt by placement.ungranted_exempt", "known": True,
             "voidable": True, "exempt": True, "access": []}]
        return d

    srv = serve(doc)
    dom = dump_dom(chromium, srv.url)
    panel = dom[dom.index('id="ungranted"'):]
    panel = text_of(panel[: panel.index("</section>")])
    assert "Ungranted GPU access 2" in panel
    assert "team-b_rogue" in panel and "on gpu-node-2" in panel
    assert "Why: NVIDIA_VISIBLE_DEVICES=all in its own env" in panel
    assert "Fix: set &lt;b&gt;void&lt;/b&gt;" in panel  # text, never markup
    assert "exempt" in panel and "swarmgpu_agent" in panel
    assert "Ungranted 1" in text_of(dom)  # the summary counts the one needing action
    clean = dump_dom(chromium, serve(sample).url)
    assert "None: every service on a GPU node sees only the GPUs placement granted it" in \
        text_of(clean)


LEFT_OUT = ("the engine's answer lists service 2 of 3 (name '<b>llm</b>') with ID None, "
            "not a non-empty text: it is left out, nothing is read of it or written to it")


def test_the_left_out_entries_are_counted_in_the_light_document() -> None:
    """The fleet's first paint (the light document) counts the nodes and services the
    engine listed without an ID (``unkeyed``), as the summary shows them."""
    assert webmap.light_doc({**sample(), "unkeyed": [LEFT_OUT, LEFT_OUT]})["unkeyed_count"] == 2
    assert webmap.light_doc(sample())["unkeyed_count"] == 0


def test_the_page_draws_the_left_out_entries_in_their_own_panel() -> None:
    """The entries the engine's lists left out (the document's ``unkeyed``: in no node's
    card nor the services' panel) have a panel of their own, hidden while there are
    none, and a summary count. Before, the page drew none of them."""
    js, page = (WEB / "app.js").read_text(), (WEB / "index.html").read_text()
    assert re.search(r'<section id="unkeyed" class="panel" [^>]*hidden>', page)
    body = js[js.index("function renderUnkeyed(doc)"):]
    body = body[: body.index("\n  }\n")]
    assert "arr(doc.unkeyed)" in body and '$("unkeyed")' in body
    assert "el.hidden = !all.length" in body
    assert "text(m)" in body  # the message as text, never markup
    assert "() => renderUnkeyed(doc));" in js[js.index("function render() {"):]  # each poll
    assert 'doc.unkeyed_count ?? arr(doc.unkeyed).length' in js and 'item("Left out"' in js


def test_the_left_out_entries_show_in_the_browser(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    srv = serve(lambda: {**sample(), "unkeyed": [LEFT_OUT]})
    dom = dump_dom(chromium, srv.url)
    panel = dom[dom.index('id="unkeyed"'):]
    panel = panel[: panel.index("</section>")]
    assert "hidden" not in panel[: panel.index(">")]
    shown = text_of(panel)
    assert "Left out of the engine's lists 1" in shown and "left out" in shown
    assert "(name '&lt;b&gt;llm&lt;/b&gt;')" in shown  # text, never markup
    assert "Left out 1" in text_of(dom)  # the summary's count
    clean = dump_dom(chromium, serve(sample).url)
    empty = clean[clean.index('id="unkeyed"'):]
    assert "hidden" in empty[: empty.index(">")] and "Left out 1" not in text_of(clean)
