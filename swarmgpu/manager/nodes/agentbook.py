"""What the daemon has seen of each node's agent: last good facts, failures since when.

Kept in memory for the daemon and written atomically to ``state_dir`` so that
``swarmgpu audit`` (another process) can say since when an agent is unreachable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.statefile import save_json
from swarmgpu.manager.nodes.agent_client import FactsResult

STATE_FILE = "agents.json"
# An agent error is the address, what answered (both cut to PEER_TEXT_LIMIT where the
# agent wrote any of it) and the fix: room for all three.
ERROR_LIMIT = 800


@dataclass
class AgentRecord:
    hostname: str
    last_ok: float | None = None
    ok_mono: float | None = None  # ``FactsResult.fetched_mono`` of the last good facts
    # When the agent last answered with facts (wall clock): ``last_ok`` dates the facts by
    # their read, older where its source hangs; a loss (the health policy's) counts from this.
    answered_at: float | None = None
    answered_mono: float | None = None  # the same, ``FactsResult.fetched_mono``
    failing_since: float | None = None
    last_error: str | None = None
    facts: NodeFacts | None = None
    # The last good facts as the agent gave them, before the GPUs' health states were
    # applied (``facts`` has those): what the facts watch compares a new answer with.
    read: NodeFacts | None = None
    url: str = ""
    listening: bool = False  # something answered on the agent port (last time)
    cause: str = ""  # what answered instead of facts (last time), in a few words
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "last_ok": self.last_ok,
            "answered_at": self.answered_at,
            "failing_since": self.failing_since,
            "last_error": self.last_error,
            "url": self.url,
            "listening": self.listening,
            "cause": self.cause,
            "fix": self.fix,
        }


class AgentBook:
    def __init__(self) -> None:
        self.records: dict[str, AgentRecord] = {}

    def record(self, result: FactsResult, read: NodeFacts | None = None) -> AgentRecord:
        """Note one fetch; ``read``: its facts as the agent gave them, where ``result``'s
        are the health-applied ones (``HealthBook.apply``); None: the same."""
        rec = self.records.setdefault(result.node_id, AgentRecord(result.hostname))
        rec.hostname = result.hostname
        rec.url, rec.listening = result.url, result.listening
        rec.cause, rec.fix = result.cause, result.fix
        if result.facts is not None:
            # (dated when the agent read them: it serves its last read while its source hangs)
            age = result.facts_age_s
            rec.last_ok, rec.answered_at = result.fetched_at - age, result.fetched_at
            rec.ok_mono = None if result.fetched_mono is None else result.fetched_mono - age
            rec.answered_mono = result.fetched_mono
            rec.failing_since = None
            rec.last_error = None
            rec.facts = result.facts
            rec.read = read if read is not None else result.facts
        else:
            if rec.failing_since is None:
                rec.failing_since = result.fetched_at
            # Built from the agent's answer: stored and shown bounded, whoever built it.
            rec.last_error = None if result.error is None else peer_text(result.error, ERROR_LIMIT)
        return rec

    def keep(self, node_ids: AbstractSet[str]) -> None:
        """Only the records of these nodes (every node Swarm lists): a replaced node
        joins under a new ID, and the old one's record would stay, saved every cycle."""
        if not self.records.keys() <= node_ids:
            self.records = {k: r for k, r in self.records.items() if k in node_ids}

    def save(self, state_dir: str) -> None:
        """Atomic write (temp file + rename); failures to persist are not fatal."""
        save_json(state_dir, STATE_FILE, {nid: r.to_dict() for nid, r in self.records.items()})


def stale_nodes(book: AgentBook, answered: Mapping[str, FactsResult],
                max_age_s: float) -> frozenset[str]:
    """The nodes whose agent did not answer this cycle (``answered``: the snapshot's)
    and whose last good facts, standing in for them, are ``max_age_s`` old or more
    (``health.node_lost_grace_s``: the age from which audit and the health policy call
    the node failing), and those whose agent answered with facts it read that long ago
    (its source hangs: ``FactsResult.facts_age_s``). Placement adds nothing to them: their
    GPUs may be gone or taken by now; what they hold is kept, their labels as they are."""
    return frozenset(
        nid for nid, res in answered.items()
        if (res.facts_age_s >= max_age_s if res.facts is not None else
            (r := book.records.get(nid)) is not None and r.facts is not None
            and (age := silent_s(r, res)) is not None and age >= max_age_s))


def silent_s(rec: AgentRecord, res: FactsResult) -> float | None:
    """Seconds from ``rec``'s last good facts to the fetch ``res``; None where it had
    none. Counted on the monotonic clock where both fetches carry it: on the wall clock, one
    stepped back an hour kept a node silent for longer than that unstale for the hour, and
    one stepped forward made a node stale that had missed one answer."""
    if rec.ok_mono is not None and res.fetched_mono is not None:
        return res.fetched_mono - rec.ok_mono
    return None if rec.last_ok is None else res.fetched_at - rec.last_ok


def lost_s(rec: AgentRecord, now: float, since: float) -> float:
    """Seconds ``rec``'s agent is lost at ``now``: from its last good facts or from
    ``since`` (the node's first look in the daemon's term), the later; both
    ``time.monotonic()``'s, as ``now`` is. Facts with no monotonic time (a record built
    by hand) count from ``since``."""
    # (from its last answer: facts it read long before that are stale, not lost)
    answered = rec.answered_mono if rec.answered_mono is not None else rec.ok_mono
    start = since if answered is None else max(answered, since)
    return max(0.0, now - start)


def facts_age_said(age_s: float, max_age_s: float) -> str:
    """What a silent node's last good facts ``age_s`` old mean to the daemon's placement
    (``stale_nodes``; ``max_age_s``: ``health.node_lost_grace_s``), for the commands that
    read its saved record (audit, plan): they have no stand-in facts of their own."""
    if age_s >= max_age_s:
        return (f"its last good facts are {age_s:.0f}s old, health.node_lost_grace_s "
                f"({max_age_s:g}s) or more: stale, the daemon places nothing new on it")
    return (f"its last good facts are {age_s:.0f}s old: the daemon places on them until they "
            f"are health.node_lost_grace_s ({max_age_s:g}s) old")


def saved_age(saved: Mapping[str, Any], now: float) -> float | None:
    """Seconds from a saved record's last good facts (``load_saved``'s entry) to ``now``
    (wall clock: another process wrote it); None without them."""
    last_ok = saved.get("last_ok")
    if isinstance(last_ok, bool) or not isinstance(last_ok, (int, float)):
        return None
    return max(0.0, now - float(last_ok))


def saved_silence(saved: Mapping[str, Any], now: float) -> float | None:
    """Seconds from a saved record's last answer with facts (``answered_at``; its
    ``last_ok`` in a record saved before that was) to ``now``: how long its agent has
    not answered, the health policy's loss; None without either."""
    at = saved.get("answered_at")
    number = isinstance(at, (int, float)) and not isinstance(at, bool)
    return saved_age({"last_ok": at} if number else saved, now)


def load_saved(state_dir: str) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((Path(state_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    for rec in data.values():  # a file written before errors were bounded
        if not isinstance(rec, dict):
            continue
        for key in ("last_error", "cause", "fix", "url"):
            if isinstance(rec.get(key), str):
                rec[key] = peer_text(rec[key], ERROR_LIMIT)
        # A time that is no finite number (json takes NaN) is none: NaN made plan --json
        # no JSON and audit a traceback.
        for key in ("last_ok", "failing_since", "answered_at"):
            at = rec.get(key)
            if key in rec and (isinstance(at, bool) or not isinstance(at, (int, float))
                               or not math.isfinite(at)):
                rec[key] = None
    return data
