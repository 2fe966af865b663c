"""What a policy proposes: one replica of one service to a chosen node and GPU set.

Plain values, plus the renderers the CLI (`swarmgpu plan`) and the cluster JSON use.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Trigger(StrEnum):
    HOTSPOT = "hotspot"
    CONSOLIDATION = "consolidation"
    DEFRAG = "defrag"
    FRAGMENTATION = "fragmentation"
    SPREAD = "spread"
    PREEMPTION = "preemption"  # a victim moved to make room (manager.cycle.preemption)
    HEALTH = "health"  # off a failed GPU or a failing node (policies.health)


class Outcome(StrEnum):
    DONE = "done"
    ROLLED_BACK = "rolled-back"
    FAILED = "failed"
    DRY_RUN = "dry-run"
    REFUSED = "refused"
    STARTED = "started"
    IGNORED = "ignored"  # a move label the daemon did not write (never acted on)


@dataclass(frozen=True)
class Move:
    """Move the replica of ``service`` on ``source_node`` to ``target_node``/GPUs."""

    service: str
    service_id: str
    source_node: str  # node id
    source_host: str
    source_uuids: tuple[str, ...]
    source_milli: tuple[int, ...]
    target_node: str
    target_host: str
    target_gpus: tuple[int, ...]  # indices on the target node
    target_uuids: tuple[str, ...]
    target_milli: tuple[int, ...]
    trigger: Trigger
    window_s: float | None  # the window the trigger held for; None: not metric-driven
    reason: str
    gain: str  # human: what the move is expected to buy
    # service labels that tell the task on the target its share (swarmgpu.manager.services.sharing)
    target_share: tuple[tuple[str, str], ...] = ()
    # Fragmentation moves: the drop of the cluster's fragmented GPU-milli (FGD's measure
    # against the workload) and that measure before the move; None for other triggers.
    frag_gain_milli: float | None = None
    frag_before_milli: float | None = None

    @property
    def nodes(self) -> tuple[str, str]:
        """The source's and the target's node IDs, as a ``MoveRecord`` keeps them."""
        return self.source_node, self.target_node

    @property
    def frag_gain_pct(self) -> float | None:
        """The gain as a share (%) of the cluster's fragmented GPU-milli before the move."""
        if self.frag_gain_milli is None or not self.frag_before_milli:
            return None
        return 100.0 * self.frag_gain_milli / self.frag_before_milli

    def to_dict(self) -> dict[str, Any]:
        pct = self.frag_gain_pct
        return {
            "service": self.service, "from": self.source_host, "to": self.target_host,
            "from_node": self.source_node, "to_node": self.target_node,
            "gpus": list(self.target_gpus), "uuids": list(self.target_uuids),
            "trigger": str(self.trigger), "window": self.window_s, "reason": self.reason,
            "gain": self.gain,
            "frag_gain_milli": (None if self.frag_gain_milli is None
                                else round(self.frag_gain_milli, 1)),
            "frag_gain_pct": None if pct is None else round(pct, 2),
            "frag_before_milli": (None if self.frag_before_milli is None
                                  else round(self.frag_before_milli, 1)),
        }


@dataclass(frozen=True)
class MoveRecord:
    """A move the mover acted on (or refused), for the `recent` list and the logs."""

    at: float
    service: str
    source_host: str
    target_host: str
    reason: str
    outcome: Outcome
    detail: str = ""
    # The nodes' IDs ("": none, a label the daemon did not write): two hostnames may read
    # alike once the commands cut them (``peertext.cell``), or be the same.
    source_node: str = ""
    target_node: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "service": self.service, "from": self.source_host,
                "to": self.target_host, "from_node": self.source_node,
                "to_node": self.target_node, "reason": self.reason,
                "outcome": str(self.outcome), "detail": self.detail}


@dataclass(frozen=True)
class HealthInputs:
    """What the health policy reads beside the snapshot (whose facts carry each GPU's
    state, ``manager.nodes.gpuhealth``): its switch, its budget and the nodes lost."""

    evacuate: bool = True  # health.evacuate; false: report only
    left: int = 0  # health moves (and re-placements) that may start now
    left_why: str = ""  # why none may, when ``left`` is 0
    released: frozenset[tuple[str, str]] = frozenset()  # (service, node id) left to placement
    lost: Mapping[str, float] = field(default_factory=dict)  # node id -> s since its agent
    lost_grace_s: float = 300.0  # health.node_lost_grace_s


@dataclass
class HealthResult:
    """What the health policy found beside its moves (``Context.moves``)."""

    releases: list[Release] = field(default_factory=list)
    held: set[tuple[str, str]] = field(default_factory=set)  # (service, node id) to leave
    failing: dict[str, str] = field(default_factory=dict)  # node id -> why it is failing
    # of ``failing``, those by their agent's loss alone: said "agent lost", not failing
    agent_lost: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Release:
    """A holder of a failed GPU whose best healthy GPU is on its own node (or a service
    that never changes nodes): placement re-places it there (a new holding, restart)."""

    service: str
    node_id: str
    host: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"service": self.service, "node": self.host, "reason": self.reason}


@dataclass
class Proposal:
    """One planning pass: the moves, and why other candidates were left alone."""

    moves: list[Move] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown_nodes: dict[str, str] = field(default_factory=dict)  # node name -> why
    at: float = field(default_factory=time.time)
    releases: list[Release] = field(default_factory=list)  # health: same-node re-places
    failed_holders: frozenset[tuple[str, str]] = frozenset()  # (service, node id) on failed
    failing_nodes: dict[str, str] = field(default_factory=dict)  # node name -> why
    # of those, the ones failing by their agent's loss alone (docs/health.md)
    agent_lost_nodes: dict[str, str] = field(default_factory=dict)
    # policy name -> the traceback of its exception (its note says it in one line)
    policy_errors: dict[str, str] = field(default_factory=dict)


def moves_to_dicts(proposed: Iterable[Move], recent: Iterable[MoveRecord] = ()
                   ) -> dict[str, list[dict[str, Any]]]:
    """The cluster JSON shape: ``{"proposed": [...], "recent": [...]}``."""
    return {"proposed": [m.to_dict() for m in proposed],
            "recent": [r.to_dict() for r in recent]}


def _window(w: float | None) -> str:
    return "-" if w is None else f"{w:g}s"


def render_moves(proposed: Sequence[Move], recent: Sequence[MoveRecord] = (),
                 notes: Sequence[str] = ()) -> str:
    """Text for `swarmgpu plan`: every proposed move, then recent ones."""
    lines: list[str] = []
    if not proposed:
        lines.append("rebalancing: no move proposed")
    else:
        lines.append(f"rebalancing: {len(proposed)} move(s) proposed")
    for m in proposed:
        lines.append(f"  {m.service}: {m.source_host} -> {m.target_host} GPU "
                     f"{','.join(map(str, m.target_gpus)) or '-'} "
                     f"[{m.trigger}, window {_window(m.window_s)}]")
        lines.append(f"    why: {m.reason}")
        lines.append(f"    gain: {m.gain}")
    for n in notes:
        lines.append(f"  note: {n}")
    if recent:
        lines.append("recent moves:")
        for r in recent:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.at))
            lines.append(f"  {stamp} {r.service}: {r.source_host} -> {r.target_host} "
                         f"{r.outcome} ({r.reason}){': ' + r.detail if r.detail else ''}")
    return "\n".join(lines)
