"""Scrape Prometheus text (swarmgpu agent or dcgm-exporter) from every node.

Bounded and never trusting: a deadline per node, a size cap, the real parser
(:func:`swarmgpu.core.metrics_in.parse_metrics`). A node whose page is unreachable, late,
garbage or names another host yields an error, which the signals turn into UNKNOWN.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from swarmgpu.core.metrics_in import ScrapeResult, parse_metrics
from swarmgpu.core.peertext import PEER_TEXT_LIMIT, peer_text
from swarmgpu.manager.engine.stop import StopRequest, read_cut, read_each
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import redact
from swarmgpu.manager.nodes.nodeurl import UnusableHostname, node_url, shown_template
from swarmgpu.swarm.answerjson import node_read_cut, read_deadline
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import node_refusal, peer_name

MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class NodeScrape:
    node_id: str
    hostname: str
    url: str
    at: float
    result: ScrapeResult | None  # None: nothing usable came back
    error: str | None  # why the node's metrics are unusable (or partly broken)
    authenticated: bool = False  # HTTPS with the node's identity checked (swarm-pki)


def metrics_url(node: SwarmNode, template: str) -> str:
    """UnusableHostname where the template fills in a hostname that is no host name."""
    return node_url(template, node, "rebalance.metrics_url_template")


def judge(node: SwarmNode, url: str, text: str, at: float) -> NodeScrape:
    """Parse one page; decide whether it can be trusted for this node."""
    res = parse_metrics(text)
    if res.refused is not None:  # past a cap: this node's readings unknown, others read on
        # Only the node and URL are cut as peer text, to what the refusal leaves of the
        # line's PEER_TEXT_LIMIT: the refusal is ours (its metric name cut already), and
        # the whole line cut lost its fix; neither cut, the line was past the limit.
        where = peer_text(f"metrics of node {node.hostname or node.id} at {url}",
                          max(0, PEER_TEXT_LIMIT - len(res.refused) - 2))
        return NodeScrape(node.id, node.hostname, url, at, None, f"{where}: {res.refused}")
    if not res.samples_by_uuid:
        why = "; ".join(res.errors[:3]) or "no GPU sample (no UUID label) in the page"
        return NodeScrape(node.id, node.hostname, url, at, None,
                          peer_text(f"metrics at {url} unusable: {why}"))
    if len(res.hostnames) > 1:
        # Judged by one of them, the page passed or failed by which name sorted first.
        names = ", ".join(repr(peer_text(h, 40)) for h in res.hostnames)
        return NodeScrape(node.id, node.hostname, url, at, None,
                          peer_text(f"metrics at {url} name several hosts ({names}); a node's "
                                    f"page names one host, its own ({node.hostname!r}): check "
                                    "rebalance.metrics_url_template (an exporter of several "
                                    "nodes?)"))
    if res.hostname and node.hostname and res.hostname != node.hostname:
        return NodeScrape(node.id, node.hostname, url, at, None,
                          peer_text(f"metrics at {url} are for host {res.hostname!r}, not "
                                    f"{node.hostname!r}; check rebalance.metrics_url_template"))
    err = peer_text(f"metrics at {url}: {len(res.errors)} broken line(s), e.g. "
                    f"{res.errors[0]}") if res.errors else None
    return NodeScrape(node.id, node.hostname, url, at, res, err)


def scrape_node(node: SwarmNode, template: str, timeout_s: float,
                tls: ssl.SSLContext | None = None, token: str | None = None) -> NodeScrape:
    """One node's page: one wall-clock deadline for the whole request, a byte cap, no
    redirects, and errors that never quote what the exporter sent. Never raises, but
    ``BudgetEnded`` where the daemon's cycle's budget cut its deadline (no node's fault)."""
    try:
        real_url = metrics_url(node, template)
    except UnusableHostname as exc:  # never fetched: the name would pick the host
        return NodeScrape(node.id, node.hostname, shown_template(template), time.time(), None,
                          str(exc))
    # Derived from agents.url_template, user:password@ included: every message and the
    # recorded URL (warnings, the log) carry none, as for facts (agent_client.redact).
    url = redact(real_url)
    at = time.time()

    def fail(msg: str) -> NodeScrape:
        return NodeScrape(node.id, node.hostname, url, at, None,
                          peer_text(f"metrics at {url} {msg}"))

    headers = {"Authorization": f"Bearer {token}"} if token else None
    deadline_s = read_deadline(timeout_s)  # (within the daemon's cycle: its budget's)
    try:
        got = boundedhttp.get(real_url, timeout_s=deadline_s, max_bytes=MAX_BYTES, tls=tls,
                              headers=headers)
    except TimeoutError:
        cut = node_read_cut(f"metrics at {url}", deadline_s, timeout_s)
        if cut is not None:  # (the budget's deadline, not the exporter's fault)
            raise read_cut() from cut
        return fail(f"timed out: no whole answer within {timeout_s}s; ignored")
    except boundedhttp.FetchError as exc:
        return fail(f"unusable: {exc}; ignored")
    except Exception as exc:
        return fail(f"unreachable: {exc.__class__.__name__}")
    if tls is not None:  # the same identity check as facts (CN, O, OU)
        why = node_refusal(peer_name(got.peer_cert), node.id, node.hostname,
                           getattr(tls, "cluster_id", None) or None)
        if why is not None:
            return fail(f"{why}; refused")
    if got.status == 421:  # the agent's Host check, as for facts (agent_client)
        return fail("answered HTTP 421: a plain-HTTP agent without a token answers only a "
                    "Host it knows (DNS rebinding); keep {addr} in "
                    "rebalance.metrics_url_template (or agents.url_template), or start the "
                    "agent with --allowed-hosts NAME")
    if got.status != 200:
        extra = " (redirects are not followed)" if 300 <= got.status < 400 else ""
        return fail(f"answered HTTP {got.status}{extra}")
    try:
        return replace(judge(node, url, got.body.decode("utf-8", "replace"), at),
                       authenticated=tls is not None)
    except Exception as exc:  # the parser never should; one page never stops the cycle
        return fail(f"cannot be parsed ({exc.__class__.__name__}); ignored")


def scrape_all(nodes: Sequence[SwarmNode], template: str, timeout_s: float,
               parallel: int = 16, tls: ssl.SSLContext | None = None,
               token: str | None = None, stop: StopRequest | None = None
               ) -> dict[str, NodeScrape]:
    """Every ready node's metrics, in parallel; one dead exporter never blocks others
    (the whole takes at most ceil(ready / parallel) * timeout_s).

    Once ``stop`` is asked (the daemon's SIGTERM) no further scrape starts, as for the
    agents' facts (``agent_client.fetch_all``): those in flight end by their deadline,
    then ``Stopped`` is raised with the scrapes not made counted (``stop.reads_left``,
    and its own ``reads``): a node not read is no node whose metrics are unknown. Within
    the daemon's cycle, each ends by its budget and none starts past it (``BudgetEnded``,
    ``read_each``)."""
    ready = [n for n in nodes if n.state == "ready"]
    done = read_each(ready, lambda node: scrape_node(node, template, timeout_s, tls, token),
                     parallel, stop, "metrics read")
    return {s.node_id: s for s in done}


def for_moves(scrapes: dict[str, NodeScrape], trust_unauthenticated: bool
              ) -> dict[str, NodeScrape]:
    """The scrapes that may trigger moves: unauthenticated pages (plain HTTP) become
    unusable here, so their nodes are UNKNOWN to the rebalancer's signals, unless the
    config trusts them (rebalance.trust_unauthenticated_metrics). The map keeps them."""
    if trust_unauthenticated:
        return scrapes
    return {nid: sc if sc.authenticated or sc.result is None else replace(
        sc, result=None, error=f"metrics at {sc.url} are unauthenticated (no checked node "
        "certificate): shown, not used for moves (rebalance.trust_unauthenticated_metrics)")
        for nid, sc in scrapes.items()}
