"""The GPU map at fleet scale, in Debian's headless Chromium.

    .venv/bin/python benchmarks/bench_map.py                 # 1,000 nodes / 8,000 GPUs
    .venv/bin/python benchmarks/bench_map.py --nodes 200 --updates 3
    .venv/bin/python benchmarks/bench_map.py --doc /tmp/fleet1000.json  # plan once, reuse

Builds a fleet document with the real planner (tests/support/web_fleet.py: DGX A100 and RTX 4090
captures, 5 services per node), serves it the way the daemon does (webmap.register on
loopback) and drives the page over the DevTools protocol (--remote-debugging-pipe):

- first render: navigation start until the map is built (script) and painted (next frame);
  a fleet is drawn first from the first screen's light document
  (``/api/v1/cluster?view=map&first=N``, its first screen on one canvas), whose encoding
  the daemon does at the end of its cycle (done here before navigating), and the whole
  document follows: "full" is until it is applied and painted
- live update: a poll whose document changed (10 % of GPUs change utilisation, memory
  and temperature), from the response text to the patched DOM, and to the next paint
- JS heap after a forced GC (Runtime.getHeapUsage), and the page's element count

Beside it, measured in the same run: the 5-node sample document, and the same fleet
drawn as one card per node (?view=cards, the map before the heat map). Then the first
paint of both pages compared (the goal: the fleet within 1.2x of the 5-node page), as
medians over --repeat loads of each taken in turn, each in a fresh browser, from
navigation and from the page's first request for the document, and the elements of each
first frame. Also the
history ring's memory per 1,000 GPUs at the default bound. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shutil
import statistics
import sys
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.browser import Cdp, MapServer, sample  # noqa: E402
from support.web_fleet import fleet_doc  # noqa: E402

from swarmgpu.core.config import HistoryConfig  # noqa: E402
from swarmgpu.manager.web.history import History  # noqa: E402


def wobble(doc: dict[str, Any], rng: random.Random, share: float = 0.1) -> dict[str, Any]:
    """The next poll: about ``share`` of the GPUs report new values."""
    d = copy.deepcopy(doc)
    d["generated_at"] = time.time()
    for n in d["nodes"]:
        for g in n["gpus"]:
            if rng.random() < share and g.get("util_pct") is not None:
                g["util_pct"] = float(rng.randrange(0, 100))
                g["temp_c"] = 30 + round(g["util_pct"] * 0.6)
                if g.get("memory_used_mib") is not None:
                    g["memory_used_mib"] = rng.randrange(0, int(g["memory_mib"]))
    return d


def measure(browser: str, doc: dict[str, Any], query: str, updates: int,
            timeout: float, shot: str | None = None) -> dict[str, Any]:
    box = {"doc": doc}
    srv = MapServer(lambda: box["doc"], seed=False, record=False)
    # As the daemon: the light document is encoded at the end of its cycle (observe's
    # step calls webmap.register's prime), not at the page's first poll.
    urllib.request.urlopen(srv.url + "/api/v1/cluster?view=map", timeout=timeout).read()
    cdp = Cdp(browser, (1366, 900))
    rng = random.Random(5)
    err = None
    try:
        cdp.open(srv.url + query)
        cdp.wait_for("window.swarmgpuMap?.state.perf.first?.painted_ms > 0", timeout=timeout)
        cdp.wait_for("window.swarmgpuMap?.state.perf.full?.painted_ms > 0", timeout=timeout)
        first = cdp.js("window.swarmgpuMap.state.perf.first")
        full = cdp.js("window.swarmgpuMap.state.perf.full")
        # the first two fetches of the document: (query, request sent, first byte, last)
        fetches = cdp.js(
            "performance.getEntriesByType('resource').filter((e) => e.name.includes("
            "'/api/v1/cluster')).slice(0, 2).map((e) => [e.name.split('?')[1] || '', "
            "Math.round(e.requestStart), Math.round(e.responseStart), Math.round(e.responseEnd)])")
        cdp.wait_for("window.swarmgpuMap.state.perf.fleetBuilt || "
                     "!document.querySelector('.fleet')", timeout=timeout)
        built = cdp.js("window.swarmgpuMap.state.perf.fleetBuilt || null")
        applied, painted, script, phases = [], [], [], []
        for _ in range(updates):
            seen = cdp.js("window.swarmgpuMap.state.perf.updates.length")
            box["doc"] = wobble(doc, rng)
            cdp.wait_for(f"window.swarmgpuMap.state.perf.updates.length > {seen} && "
                         "window.swarmgpuMap.state.perf.updates.at(-1).painted_ms > 0",
                         timeout=timeout)
            u = cdp.js("window.swarmgpuMap.state.perf.updates.at(-1)")
            applied.append(u["apply_ms"])
            painted.append(u["painted_ms"])
            script.append(u["render_ms"])
            phases.append((u["prep_ms"], u["map_ms"], u["panels_ms"], u["parse_ms"]))
        cdp.call("HeapProfiler.enable")
        cdp.call("HeapProfiler.collectGarbage")
        cdp.call("Performance.enable")
        metrics = {m["name"]: m["value"] for m in cdp.call("Performance.getMetrics")["metrics"]}
        elements = cdp.js("document.getElementsByTagName('*').length")
        view = cdp.js("document.body.dataset.view")
        if shot:
            cdp.screenshot(REPO / "artifacts" / "webmap" / shot)
    except AssertionError as exc:  # e.g. the card view at 1,000 nodes: too slow to answer
        err = str(exc)
    finally:
        cdp.close()
        srv.close()
    if err is not None:
        return {"view": query or "auto", "nodes": len(doc["nodes"]), "error": err}
    med = statistics.median
    return {
        "view": view, "nodes": len(doc["nodes"]),
        "gpus": sum(len(n["gpus"]) for n in doc["nodes"]),
        "doc_mib": round(len(json.dumps(doc)) / 2**20, 2),
        "first_render_ms": round(first["at_ms"]), "first_painted_ms": round(
            first["painted_at_ms"]),
        "first_parse_ms": round(first["parse_ms"]), "first_build_ms": round(first["render_ms"]),
        "first_light": bool(first.get("light")), "first_elements": first.get("elements"),
        "first_sketched": (first.get("sketch") or {}).get("blocks"),
        "full_painted_ms": round(full["painted_at_ms"]),
        "fleet_built_ms": round(built) if built else None,
        "fetches_ms": fetches,
        "update_apply_ms": round(med(applied), 1) if applied else None,
        "update_painted_ms": round(med(painted), 1) if painted else None,
        "update_render_ms": round(med(script), 1) if script else None,
        "update_phases_ms": {k: round(med(p[i] for p in phases), 1) for i, k in
                             enumerate(("prep", "map", "panels", "parse"))} if phases else None,
        "js_heap_mib": round(metrics["JSHeapUsedSize"] / 2**20, 1), "elements": elements,
    }


def first_load(browser: str, doc: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    """One first load in a fresh browser: navigation start until the map is built and
    painted (``first``), and until the whole document is applied and painted."""
    srv = MapServer(lambda: doc, seed=False, record=False)
    urllib.request.urlopen(srv.url + "/api/v1/cluster?view=map", timeout=timeout).read()
    cdp = Cdp(browser, (1366, 900))
    try:
        cdp.open(srv.url)
        cdp.wait_for("window.swarmgpuMap?.state.perf.full?.painted_ms > 0", timeout=timeout)
        first = cdp.js("window.swarmgpuMap.state.perf.first")
        full = cdp.js("window.swarmgpuMap.state.perf.full")
        # the first fetch of the document: request sent, last byte (ms from navigation)
        fetch = cdp.js("performance.getEntriesByType('resource').filter((e) => e.name.includes("
                       "'/api/v1/cluster')).slice(0, 1).map((e) => [Math.round(e.requestStart), "
                       "Math.round(e.responseEnd)])[0]")
    finally:
        cdp.close()
        srv.close()
    return {"fetch_ms": fetch, "render_ms": round(first["render_ms"]),
            "render_at_ms": round(first["at_ms"]), "painted_at_ms": round(first["painted_at_ms"]),
            "full_painted_at_ms": round(full["painted_at_ms"]), "elements": first.get("elements")}


def history_memory(gpus: int, cfg: HistoryConfig) -> dict[str, Any]:
    """Bytes the history ring holds for ``gpus`` GPUs at a full ring (tracemalloc)."""
    doc = {"nodes": [{"hostname": f"n{i // 8}", "gpus": [
        {"uuid": f"GPU-{i:08d}", "index": i % 8, "util_pct": 50.0, "memory_used_mib": 1000,
         "temp_c": 60.0, "power_w": 200.0, "holders": [{"service": "s"}], "mig": []}]}
        for i in range(gpus)]}
    tracemalloc.start()
    h = History(cfg)
    before = tracemalloc.get_traced_memory()[0]
    for k in range(cfg.samples):
        h.record(doc, at=1000.0 + k)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"gpus": gpus, "samples": cfg.samples, "arrays_mib": round(h.nbytes() / 2**20, 2),
            "traced_mib": round((after - before) / 2**20, 2),
            "bytes_per_gpu": round((after - before) / gpus)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--no-cards", action="store_true", help="skip the card-view reference")
    ap.add_argument("--doc", type=Path, help="reuse (or write) the fleet document here")
    ap.add_argument("--repeat", type=int, default=5,
                    help="first loads of each page, taken in turn, for the medians")
    args = ap.parse_args()
    browser = shutil.which("chromium")
    if not browser:
        print("needs Debian's chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    t = time.monotonic()
    if args.doc and args.doc.exists():
        fleet = json.loads(args.doc.read_text())
        args.nodes = len(fleet["nodes"])
    else:
        fleet = fleet_doc(args.nodes)
        if args.doc:
            args.doc.write_text(json.dumps(fleet))
    print(json.dumps({"built": f"{args.nodes} nodes by the planner",
                      "s": round(time.monotonic() - t, 1)}), flush=True)
    rows = {}
    rows["fleet (heat map)"] = measure(browser, fleet, "", args.updates, 120,
                                       shot=f"bench-fleet-{args.nodes}.png")
    print(json.dumps(rows["fleet (heat map)"]), flush=True)
    rows["reference: 5-node sample"] = measure(browser, sample(), "", args.updates, 60)
    print(json.dumps(rows["reference: 5-node sample"]), flush=True)
    # One page load varies by a factor of 2-3 on a shared machine (a browser that just
    # closed still winds down beside the next): the comparison is of medians over loads
    # of the two pages taken in turn, each in a fresh browser.
    loads: dict[str, list[dict[str, Any]]] = {"5": [], "fleet": []}
    for _ in range(args.repeat):
        for name, doc in (("5", sample()), ("fleet", fleet)):
            loads[name].append(first_load(browser, doc))
    first = {k: statistics.median(x["painted_at_ms"] for x in v) for k, v in loads.items()}
    # the same, counted from the page's first request for the document: what comes before
    # it (page, script, style sheet) is the same for both pages, and so is its noise
    since = {k: statistics.median(x["painted_at_ms"] - x["fetch_ms"][0] for x in v)
             for k, v in loads.items()}
    whole = {k: statistics.median(x.get("full_painted_at_ms", 0) for x in v)
             for k, v in loads.items()}
    print(json.dumps({"loads": loads}), flush=True)
    if not args.no_cards:
        rows["reference: fleet as cards"] = measure(browser, fleet, "?view=cards",
                                                    min(args.updates, 2), 300)
        print(json.dumps(rows["reference: fleet as cards"]), flush=True)
    hist = history_memory(1000, HistoryConfig())
    print(json.dumps({"history_ring": hist}), flush=True)
    print()
    cols = ["nodes", "gpus", "first_painted_ms", "full_painted_ms", "update_apply_ms",
            "update_painted_ms", "js_heap_mib", "elements"]
    print(f"{'':28}" + "".join(f"{c:>18}" for c in cols))
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:28}  did not finish: {r['error']}")
            continue
        print(f"{name:28}" + "".join(f"{r[c]!s:>18}" for c in cols))
    print(f"\nfirst paint, median of {args.repeat} loads of each page taken in turn: "
          f"{args.nodes:,} nodes {first['fleet']:.0f} ms, 5 nodes {first['5']:.0f} ms = "
          f"{first['fleet'] / first['5']:.2f}x (goal: 1.2x); the whole document applied "
          f"and painted: {whole['fleet']:.0f} / {whole['5']:.0f} ms; from the first request "
          f"for the document to the first paint: {since['fleet']:.0f} / {since['5']:.0f} ms = "
          f"{since['fleet'] / since['5']:.2f}x; elements in the first frame: "
          f"{statistics.median(x['elements'] or 0 for x in loads['fleet']):.0f} / "
          f"{statistics.median(x['elements'] or 0 for x in loads['5']):.0f}")
    print(f"\nhistory ring, {hist['gpus']} GPUs x {hist['samples']} samples: "
          f"{hist['traced_mib']} MiB ({hist['bytes_per_gpu']} bytes per GPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
