"""Fetching a node's facts from its agent: bounded, with a deadline, never trusting it."""

from __future__ import annotations

import json
import math
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from swarmgpu.core.config import AgentsConfig
from swarmgpu.core.jsonkeys import RepeatedKey, unique_keys
from swarmgpu.core.model import FACTS_AGE_HEADER, FactsError, NodeFacts
from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.engine.stop import NotRead, StopRequest, read_cut, read_each, read_some
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.nodeurl import UnusableHostname, node_url, shown_template
from swarmgpu.swarm.answerjson import node_read_cut, read_deadline
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import node_refusal, peer_name
from swarmgpu.swarm.jsonstrict import shape_fault


@dataclass(frozen=True)
class FactsResult:
    node_id: str
    hostname: str
    url: str
    facts: NodeFacts | None
    error: str | None  # the address, what answered, and the fix (the log line, audit, map)
    fetched_at: float
    listening: bool = False  # something accepted the connection on the agent's port
    cause: str = ""  # short: what answered instead of the facts (status, the map's badge)
    fix: str = ""  # the one line to do about it
    # ``time.monotonic()`` at the fetch: how long a node is silent, within this process,
    # whatever the wall clock does meanwhile (NTP's step, a hand ``date -s``). None: not
    # known (built by hand), ``fetched_at`` counts.
    fetched_mono: float | None = None
    # How old the agent said its facts were (``FACTS_AGE_HEADER``): read that long before
    # the fetch (an agent whose source hangs serves its last read); 0 without the header.
    facts_age_s: float = 0.0


# What to do, by what answered (boundedhttp's kinds, and the checks after the answer).
_FIX_PLAIN_HTTP = (
    "the agent serves plain HTTP because it found no Swarm node certificate: run it on a "
    "Swarm member as root (it reads <DockerRootDir>/swarm/certificates; --data-root, or "
    "systemd's LoadCredential=, or --tls-cert/--tls-key), or, not recommended, set "
    "agents.identity: none in the daemon's config")
_FIX_TLS_ANSWERED = (
    "the agent serves HTTPS with its node certificate: remove agents.identity: none (and "
    "any http:// agents.url_template) from the daemon's config; swarm-pki, the default, "
    "reads it")
_FIX_REFUSED_DAEMON = (
    "the agent refused this daemon's certificate: run the daemon on a manager of the same "
    "swarm (it presents its node certificate), or set agents.cert_file/key_file to a "
    "swarm-manager certificate")
_FIX_CERT = (
    "the agent must serve its own node's Swarm certificate, signed by this swarm's root CA: "
    "is it a node of another swarm, or was the CA rotated (restart the agent)?")
_FIX_WRONG_NODE = (
    "agents.url_template must reach each node's own agent: check the address Swarm "
    "reports for the node (docker node inspect) and what listens on the agent port there")
# The causes of an answer of another node than the one asked (``fetch_facts``), named
# once: the doctor tells such an answer by them (``WRONG_NODE``).
_CAUSE_CERT = "certificate of another node"
_CAUSE_NO_HOST = "facts of no host"
_CAUSE_UNNAMED_NODE = "node of no hostname, no certificate"
_CAUSE_OTHER_HOST = "facts of another host"
WRONG_NODE = frozenset({_CAUSE_CERT, _CAUSE_OTHER_HOST, _CAUSE_NO_HOST})
UNTOLD_NODE = _CAUSE_UNNAMED_NODE  # an answer the doctor says was refused, not absent
_FIX_UNAUTHORISED = (
    "give the daemon the agents' token (agents.token_file) or serve the agents with their "
    "node certificates (agents.identity: swarm-pki)")
_FIX_WRONG_TOKENS = (
    "the daemon's agents.token_file must hold the token the agents were started with "
    "(--token-file); once it does, the agent compares it again after its Retry-After")
_FIX_HOST = (
    "a plain-HTTP agent without a token answers only a Host it knows (DNS rebinding): keep "
    "{addr} in agents.url_template, or start the agent with --allowed-hosts NAME")
_FIX_OTHER = "check the agent's log on that node (journalctl -u swarmgpu-agent)"
# An agent's head is a few hundred bytes, and the cap on it is no setting: 64 KiB of
# headers (or of 1xx heads) is something else on that port, or in between.
_FIX_HEAD = (
    "no agent sends so large a head: check what answers on the agent port there (another "
    "service, or a proxy in between)")


def agent_base_url(node: SwarmNode, cfg: AgentsConfig) -> str:
    """UnusableHostname where the template fills in a hostname that is no host name."""
    return node_url(cfg.url_template, node, "agents.url_template", port=cfg.port)


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
    (``cfg.timeout_s``; within the daemon's cycle, what is left of its budget where
    that is less: past it, ``BudgetEnded``, no fault of the agent's), the body a byte
    cap, the JSON a depth limit, the facts caps on GPUs and MIG devices; no redirect
    is followed and no error quotes the body.
    With ``tls`` (agents.identity: swarm-pki) the agent must present the Swarm node
    certificate of this very node: verified against the swarm root CA, CN == node ID,
    O == this swarm's cluster ID (``tls.cluster_id``), OU a Swarm role.
    """
    now, mono = time.time(), time.monotonic()
    try:
        real_url = agent_base_url(node, cfg).rstrip("/") + "/facts"
    except UnusableHostname as exc:  # never fetched: the name would pick the host
        return FactsResult(node.id, node.hostname, shown_template(cfg.url_template), None, str(exc),
                           now, False, "hostname is no host name",
                           "use {addr} in agents.url_template", mono)
    url = redact(real_url)  # every message and the result carry no credentials

    def fail(msg: str, cause: str = "", fix: str = _FIX_OTHER,
             listening: bool = True) -> FactsResult:
        # Parts of msg came from the agent: cut and cleaned before anyone logs or stores it.
        cause = peer_text(cause or msg.removeprefix(f"agent at {url} "), 160)
        return FactsResult(node.id, node.hostname, url, None,
                           f"{peer_text(msg)}; fix: {fix}", now, listening, cause, fix,
                           mono)

    headers = {"Authorization": f"Bearer {token}"} if token else None
    deadline_s = read_deadline(cfg.timeout_s)  # (within the daemon's cycle: its budget's)
    try:
        got = boundedhttp.get(real_url, timeout_s=deadline_s,
                              max_bytes=cfg.max_response_bytes, tls=tls, headers=headers)
    except TimeoutError as exc:
        cut = node_read_cut(f"agent facts at {url}", deadline_s, cfg.timeout_s)
        if cut is not None:  # (the budget's deadline, not the agent's fault)
            raise read_cut() from cut
        connected = getattr(exc, "connected", True)
        return fail(f"agent at {url} timed out: no whole answer within {cfg.timeout_s}s",
                    "timed out" if connected else "no answer to connect",
                    _FIX_OTHER if connected else "check that the node's address and the "
                    "agent port are reachable from this manager (firewall, routing)",
                    listening=connected)
    except boundedhttp.FetchError as exc:
        if exc.kind == boundedhttp.TOO_LARGE:  # (not a head too large: no setting reads it)
            return fail(f"agent at {url} {exc}; refusing it "
                        "(raise agents.max_response_bytes if that is real)",
                        "answer too large", "raise agents.max_response_bytes if that is real")
        return fail(f"agent at {url} unusable: {exc}", *_cause_fix(exc),
                    listening=exc.connected)
    except Exception as exc:
        return fail(f"agent at {url} unreachable: {exc.__class__.__name__}",
                    listening=False)
    if tls is not None:
        why = node_refusal(peer_name(got.peer_cert), node.id, node.hostname,
                           getattr(tls, "cluster_id", None) or None)
        if why is not None:
            return fail(f"agent at {url} {why}; refused", _CAUSE_CERT,
                        _FIX_WRONG_NODE)
    refused = _status_refusal(got.status, url, tls is not None)
    if refused is not None:
        return fail(*refused)
    data, why = parse_json_bounded(got.body)
    if why is not None:
        return fail(f"agent at {url} answered something that is not JSON facts ({why})",
                    "not JSON facts")
    try:
        facts = NodeFacts.from_dict(data, where=f"facts from {url}")
    except FactsError as exc:
        return fail(str(exc), "facts refused")
    except Exception as exc:
        return fail(f"facts from {url}: cannot be read ({exc.__class__.__name__})",
                    "facts refused")
    refused = _host_refusal(node, facts, url, tls is not None)
    if refused is not None:
        return fail(*refused)
    return FactsResult(node.id, node.hostname, url, facts, None, now, True,
                       fetched_mono=mono, facts_age_s=facts_age(got.headers))


def facts_age(headers: Mapping[str, str]) -> float:
    """The agent's ``FACTS_AGE_HEADER``, seconds; 0 where it sent none or no finite
    number of seconds (an older agent, or garbage: its facts are taken as read now, as
    before the header was read). Capped at a year: the age only makes facts stale."""
    try:
        age = float(headers.get(FACTS_AGE_HEADER.lower(), "0")[:32])
    except ValueError:
        return 0.0
    return min(age, 365 * 86400.0) if math.isfinite(age) and age > 0 else 0.0


def _host_refusal(node: SwarmNode, facts: NodeFacts, url: str, tls: bool,
                  ) -> tuple[str, str, str] | None:
    """(message, cause, fix) for facts that cannot be told for ``node``: of another host,
    of none, or (no node certificate: ``tls`` False) for a node Swarm names no host of;
    None: they are its."""
    if not tls and not node.hostname:
        # Without a node certificate (CN == node ID) the host name is the only sign of
        # whose facts these are: with none to compare, another node's would be taken.
        return (f"agent at {url} answered for Swarm node {node.id[:12]}, which reports "
                "no hostname, and agents.identity is none (no node certificate): nothing "
                f"tells whose facts these are (they name host {facts.hostname[:64]!r}); "
                "refused", _CAUSE_UNNAMED_NODE,
                f"give node {node.id} a hostname and restart its Docker engine (Swarm "
                "reports the engine's: docker node inspect shows it), or serve the agents "
                "with their node certificates (agents.identity: swarm-pki), which name the "
                "node ID")
    if not facts.hostname and node.hostname:
        return (f"agent at {url} serves facts without a host name; Swarm node "
                f"{node.id[:12]} is {node.hostname!r} (an agent always names its host: "
                "is something else answering on that port?)", _CAUSE_NO_HOST,
                _FIX_WRONG_NODE)
    if facts.hostname and node.hostname and facts.hostname != node.hostname:
        return (f"agent at {url} serves facts for host {facts.hostname[:64]!r}, but Swarm "
                f"node {node.id[:12]} is {node.hostname!r}", _CAUSE_OTHER_HOST,
                "check agents.url_template and the agent's --hostname")
    return None


def _status_refusal(status: int, url: str, tls: bool) -> tuple[str, str, str] | None:
    """(message, cause, fix) for an answer that is not 200; None for 200."""
    if 300 <= status < 400:
        return (f"agent at {url} answered a redirect (HTTP {status}); redirects are not "
                "followed", f"HTTP {status} redirect", _FIX_OTHER)
    if status in (401, 403):
        return (f"agent at {url} answered HTTP {status}: it refused this daemon",
                f"HTTP {status}: refused the daemon",
                _FIX_REFUSED_DAEMON if tls else _FIX_UNAUTHORISED)
    if status == 421:
        return (f"agent at {url} answered HTTP 421: it does not serve the name this daemon "
                "called it by (--allowed-hosts)", "HTTP 421: host not served", _FIX_HOST)
    if status == 429:
        # The agent's limit on wrong tokens (agent.access): this daemon's address sent
        # them, so its token is not the agents' (or another process there guesses).
        return (f"agent at {url} answered HTTP 429: too many wrong tokens from this "
                "daemon's address", "HTTP 429: too many wrong tokens", _FIX_WRONG_TOKENS)
    if status != 200:
        return f"agent at {url} answered HTTP {status}", f"HTTP {status}", _FIX_OTHER
    return None


def _cause_fix(exc: boundedhttp.FetchError) -> tuple[str, str]:
    """What answered, in a few words, and the fix, for a GET that failed."""
    text = str(exc)
    if exc.kind == boundedhttp.CONNECT:
        return ("nothing listens", "start the agent on that node (swarmgpu-agent.service, or "
                "the stack's agent service), or check agents.port")
    if exc.kind == boundedhttp.UNRESOLVED:
        return "host name unresolved", (
            "the node's hostname (as Swarm reports it) must resolve from this manager, or "
            "use {addr} in agents.url_template")
    if exc.kind == boundedhttp.PLAIN_HTTP:
        return "plain HTTP (the agent has no node certificate)", _FIX_PLAIN_HTTP
    if exc.kind == boundedhttp.TLS_ANSWERED:
        return "TLS (the agent serves HTTPS)", _FIX_TLS_ANSWERED
    if exc.kind == boundedhttp.HEAD_TOO_LARGE:
        return "headers too large", _FIX_HEAD
    if exc.kind == boundedhttp.CERTIFICATE:
        return text.replace("TLS certificate refused: ", "certificate refused: "), _FIX_CERT
    if exc.kind == boundedhttp.TLS:
        # The agent's alert when it will not take the daemon's certificate.
        if "CERTIFICATE" in text.upper() and "ALERT" in text.upper():
            return f"{text}: the agent refused the daemon's certificate", _FIX_REFUSED_DAEMON
        return text, _FIX_OTHER
    return text, _FIX_OTHER


class _NotJsonNumber(ValueError):
    """A number JSON has not (its message says which, never quoting more than 40
    characters of it)."""


def _no_constant(name: str) -> Any:
    raise _NotJsonNumber(f"it holds {name}, which is not JSON")


def _bounded_int(text: str) -> int:
    # Past 4300 digits int() raises a ValueError of no position ("invalid JSON"); no
    # fact is an integer of more than 16 digits (model.MAX_INT).
    digits = len(text.lstrip("-"))
    if digits > 20:
        raise _NotJsonNumber(f"it holds a number of {digits} digits; a fact has 16 at most")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotJsonNumber(f"it holds {text[:40]!r}, past a 64-bit float: not JSON "
                             "(json reads it as inf)")
    return value


def parse_json_bounded(body: bytes) -> tuple[Any, str | None]:
    """(value, None) or (None, why): never raises, never quotes the body.

    More values and keys, or deeper nesting, than any node's facts have is refused from
    the text, before parsing (``jsonstrict.shape_fault``): json's C scanner would raise
    RecursionError on deep nesting, and a few MiB of ``[{},...]`` take ~100 MiB parsed.
    A key given twice in one object is refused: json keeps the last one silently, another
    reader of the same answer (jq, a proxy, a person) may take the first. So are NaN,
    Infinity and numbers past a 64-bit float or of more than 20 digits, which are no
    JSON (RFC 8259 6): json reads them, and a string field took ``nan`` or ``inf`` as its
    text (a GPU product ``nan`` labelled the node).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    if (fault := shape_fault(text)) is not None:
        return None, f"{fault}; a node's facts hold some thousands, nested a few deep"
    try:
        return json.loads(text, object_pairs_hook=unique_keys, parse_constant=_no_constant,
                          parse_int=_bounded_int, parse_float=_finite_float), None
    except _NotJsonNumber as exc:
        return None, str(exc)
    except RepeatedKey as exc:
        return None, f"it names {peer_text(exc.key, 40)!r} twice in one object"
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:
        pos = getattr(exc, "pos", None)
        return None, f"invalid JSON at character {pos}" if pos is not None else "invalid JSON"



def fetch_all(nodes: Sequence[SwarmNode], cfg: AgentsConfig, tls: ssl.SSLContext | None = None,
              token: str | None = None, stop: StopRequest | None = None,
              missed: dict[str, NotRead] | None = None) -> dict[str, FactsResult]:
    """Facts for every node, fetched in parallel; one bad agent never blocks others
    (each fetch ends by its deadline, so the whole takes at most
    ceil(nodes / agents.parallel) * agents.timeout_s).

    Once ``stop`` is asked (the daemon's SIGTERM) no further read starts: those in
    flight finish or reach their deadline, then ``Stopped`` is raised with the reads
    not made counted in ``stop.reads_left`` and its own ``reads``: facts half read are
    no cycle's to plan from, and a node not read is no agent found down. Within the
    daemon's cycle each read ends by its budget too, and none starts past it: then
    ``BudgetEnded`` (``read_each``). With ``missed`` (the facts watch, which compares
    what it read) the nodes read are returned instead, and each node the budget cut
    is in ``missed``, by node ID (``read_some``)."""
    def one(node: SwarmNode) -> FactsResult:
        return fetch_facts(node, cfg, tls, token)

    if missed is None:
        results = read_each(nodes, one, cfg.parallel, stop, "agent read")
        return {r.node_id: r for r in results}
    got = read_some(nodes, one, cfg.parallel, stop, "agent read")
    missed.update((n.id, r) for n, r in zip(nodes, got, strict=True) if isinstance(r, NotRead))
    return {r.node_id: r for r in got if not isinstance(r, NotRead)}
