"""Scrape Prometheus text (swarmgpu agent or dcgm-exporter) from every node.

Bounded and never trusting: a deadline per node, a size cap, the real parser
(:func:`swarmgpu.metrics_in.parse_metrics`). A node whose page is unreachable, late,
garbage or names another host yields an error, which the signals turn into UNKNOWN.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from swarmgpu.metrics_in import ScrapeResult, parse_metrics
from swarmgpu.swarm import SwarmNode

MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class NodeScrape:
    node_id: str
    hostname: str
    url: str
    at: float
    result: ScrapeResult | None  # None: nothing usable came back
    error: str | None  # why the node's metrics are unusable (or partly broken)


def metrics_url(node: SwarmNode, template: str) -> str:
    return template.format(addr=node.addr, hostname=node.hostname)


def judge(node: SwarmNode, url: str, text: str, at: float) -> NodeScrape:
    """Parse one page; decide whether it can be trusted for this node."""
    res = parse_metrics(text)
    if not res.samples_by_uuid:
        why = "; ".join(res.errors[:3]) or "no GPU sample (no UUID label) in the page"
        return NodeScrape(node.id, node.hostname, url, at, None,
                          f"metrics at {url} unusable: {why}")
    if res.hostname and node.hostname and res.hostname != node.hostname:
        return NodeScrape(node.id, node.hostname, url, at, None,
                          f"metrics at {url} are for host {res.hostname!r}, not "
                          f"{node.hostname!r}; check rebalance.metrics_url_template")
    err = f"metrics at {url}: {len(res.errors)} broken line(s), e.g. {res.errors[0]}" \
        if res.errors else None
    return NodeScrape(node.id, node.hostname, url, at, res, err)


def scrape_node(node: SwarmNode, template: str, timeout_s: float) -> NodeScrape:
    url = metrics_url(node, template)
    at = time.time()
    try:
        with requests.get(url, timeout=timeout_s, stream=True) as resp:
            if resp.status_code != 200:
                return NodeScrape(node.id, node.hostname, url, at, None,
                                  f"metrics at {url} answered HTTP {resp.status_code}")
            body = b""
            deadline = time.monotonic() + timeout_s
            for chunk in resp.iter_content(65536):
                body += chunk
                if len(body) > MAX_BYTES or time.monotonic() > deadline:
                    return NodeScrape(node.id, node.hostname, url, at, None,
                                      f"metrics at {url} too big or too slow; ignored")
    except requests.exceptions.RequestException as exc:
        return NodeScrape(node.id, node.hostname, url, at, None,
                          f"metrics at {url} unreachable: {exc.__class__.__name__}")
    return judge(node, url, body.decode("utf-8", "replace"), at)


def scrape_all(nodes: Sequence[SwarmNode], template: str, timeout_s: float,
               parallel: int = 16) -> dict[str, NodeScrape]:
    """Every ready node's metrics, in parallel; one dead exporter never blocks others."""
    ready = [n for n in nodes if n.state == "ready"]
    if not ready:
        return {}
    with ThreadPoolExecutor(max_workers=min(parallel, len(ready))) as pool:
        got = list(pool.map(lambda n: scrape_node(n, template, timeout_s), ready))
    return {s.node_id: s for s in got}
