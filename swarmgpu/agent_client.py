"""Fetching a node's facts from its agent: bounded, with a deadline, never trusting it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import requests

from swarmgpu.config import AgentsConfig
from swarmgpu.model import FactsError, NodeFacts
from swarmgpu.swarm import SwarmNode


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


def fetch_facts(node: SwarmNode, cfg: AgentsConfig) -> FactsResult:
    """One node's facts, or an error that says what the agent did wrong."""
    real_url = agent_base_url(node, cfg).rstrip("/") + "/facts"
    url = redact(real_url)  # every message and the result carry no credentials
    now = time.time()

    def fail(msg: str) -> FactsResult:
        return FactsResult(node.id, node.hostname, url, None, msg, now)

    try:
        with requests.get(real_url, timeout=cfg.timeout_s, stream=True) as resp:
            if resp.status_code != 200:
                return fail(f"agent at {url} answered HTTP {resp.status_code}")
            body = b""
            deadline = time.monotonic() + cfg.timeout_s
            for chunk in resp.iter_content(65536):
                body += chunk
                if len(body) > cfg.max_response_bytes:
                    return fail(
                        f"agent at {url} sent more than {cfg.max_response_bytes} bytes; "
                        "refusing it (raise agents.max_response_bytes if that is real)"
                    )
                if time.monotonic() > deadline:
                    return fail(f"agent at {url} did not finish within {cfg.timeout_s}s")
    except requests.exceptions.Timeout:
        return fail(f"agent at {url} timed out after {cfg.timeout_s}s")
    except requests.exceptions.RequestException as exc:
        return fail(f"agent at {url} unreachable: {exc.__class__.__name__}")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        snippet = body[:60].decode("utf-8", "replace")
        return fail(f"agent at {url} answered something that is not JSON: {snippet!r}")
    try:
        facts = NodeFacts.from_dict(data, where=f"facts from {url}")
    except FactsError as exc:
        return fail(str(exc))
    if facts.hostname and node.hostname and facts.hostname != node.hostname:
        return fail(
            f"agent at {url} serves facts for host {facts.hostname!r}, but Swarm node "
            f"{node.id[:12]} is {node.hostname!r}; check agents.url_template and the "
            "agent's --hostname"
        )
    return FactsResult(node.id, node.hostname, url, facts, None, now)


def fetch_all(nodes: Sequence[SwarmNode], cfg: AgentsConfig) -> dict[str, FactsResult]:
    """Facts for every node, fetched in parallel; one bad agent never blocks others."""
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(cfg.parallel, len(nodes))) as pool:
        results = list(pool.map(lambda n: fetch_facts(n, cfg), nodes))
    return {r.node_id: r for r in results}
