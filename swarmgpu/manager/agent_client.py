"""Fetching a node's facts from its agent: bounded, with a deadline, never trusting it."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from swarmgpu.core.config import AgentsConfig
from swarmgpu.core.model import FactsError, NodeFacts
from swarmgpu.core.peertext import peer_text
from swarmgpu.manager import boundedhttp
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import node_refusal, peer_name


@dataclass(frozen=True)
class FactsResult:
    node_id: str
    hostname: str
    url: str
    facts: NodeFacts | None
    error: str | None
    fetched_at: float


def agent_base_url(node: SwarmNode, cfg: AgentsConfig) -> str:
    return cfg.url_template.format(addr=node.addr, hostname=node.hostname, port=cfg.port)


def redact(url: str) -> str:
    """The URL without user:password@, for messages, logs and saved state."""
    parts = urlsplit(url)
    if not (parts.username or parts.password):
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def fetch_facts(node: SwarmNode, cfg: AgentsConfig, tls: ssl.SSLContext | None = None,
                token: str | None = None) -> FactsResult:
    """One node's facts, or an error that says what the agent did wrong.

    Never raises for anything the agent does: the whole request has one deadline
    (``cfg.timeout_s``), the body a byte cap, the JSON a depth limit, the facts caps on
    GPUs and MIG devices; no redirect is followed and no error quotes the body.
    With ``tls`` (agents.identity: swarm-pki) the agent must present the Swarm node
    certificate of this very node: verified against the swarm root CA, CN == node ID,
    O == this swarm's cluster ID (``tls.cluster_id``), OU a Swarm role.
    """
    real_url = agent_base_url(node, cfg).rstrip("/") + "/facts"
    url = redact(real_url)  # every message and the result carry no credentials
    now = time.time()

    def fail(msg: str) -> FactsResult:
        # Parts of msg came from the agent: cut and cleaned before anyone logs or stores it.
        return FactsResult(node.id, node.hostname, url, None, peer_text(msg), now)

    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        got = boundedhttp.get(real_url, timeout_s=cfg.timeout_s,
                              max_bytes=cfg.max_response_bytes, tls=tls, headers=headers)
    except TimeoutError:
        return fail(f"agent at {url} timed out: no whole answer within {cfg.timeout_s}s")
    except boundedhttp.FetchError as exc:
        if "more than" in str(exc):
            return fail(f"agent at {url} {exc}; refusing it "
                        "(raise agents.max_response_bytes if that is real)")
        return fail(f"agent at {url} unusable: {exc}")
    except Exception as exc:
        return fail(f"agent at {url} unreachable: {exc.__class__.__name__}")
    if tls is not None:
        why = node_refusal(peer_name(got.peer_cert), node.id, node.hostname,
                           getattr(tls, "cluster_id", None) or None)
        if why is not None:
            return fail(f"agent at {url} {why}; refused")
    if 300 <= got.status < 400:
        return fail(f"agent at {url} answered a redirect (HTTP {got.status}); "
                    "redirects are not followed")
    if got.status != 200:
        return fail(f"agent at {url} answered HTTP {got.status}")
    data, why = parse_json_bounded(got.body)
    if why is not None:
        return fail(f"agent at {url} answered something that is not JSON facts ({why})")
    try:
        facts = NodeFacts.from_dict(data, where=f"facts from {url}")
    except FactsError as exc:
        return fail(str(exc))
    except Exception as exc:
        return fail(f"facts from {url}: cannot be read ({exc.__class__.__name__})")
    if not facts.hostname and node.hostname:
        return fail(f"agent at {url} serves facts without a host name; Swarm node "
                    f"{node.id[:12]} is {node.hostname!r} (an agent always names its host: "
                    "is something else answering on that port?)")
    if facts.hostname and node.hostname and facts.hostname != node.hostname:
        return fail(
            f"agent at {url} serves facts for host {facts.hostname[:64]!r}, but Swarm node "
            f"{node.id[:12]} is {node.hostname!r}; check agents.url_template and the "
            "agent's --hostname"
        )
    return FactsResult(node.id, node.hostname, url, facts, None, now)


def parse_json_bounded(body: bytes) -> tuple[Any, str | None]:
    """(value, None) or (None, why): never raises, never quotes the body.

    json's C scanner raises RecursionError on deep nesting (200,000 ``[``); that is
    caught here, so it stays this agent's error instead of escaping the cycle.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:
        pos = getattr(exc, "pos", None)
        return None, f"invalid JSON at character {pos}" if pos is not None else "invalid JSON"


def fetch_all(nodes: Sequence[SwarmNode], cfg: AgentsConfig, tls: ssl.SSLContext | None = None,
              token: str | None = None) -> dict[str, FactsResult]:
    """Facts for every node, fetched in parallel; one bad agent never blocks others
    (each fetch ends by its deadline, so the whole takes at most
    ceil(nodes / agents.parallel) * agents.timeout_s)."""
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(cfg.parallel, len(nodes))) as pool:
        results = list(pool.map(lambda n: fetch_facts(n, cfg, tls, token), nodes))
    return {r.node_id: r for r in results}
