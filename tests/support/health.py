"""The health policy's inputs: marked facts, holders on a node, one plan call.

First written in tests/test_health_policy.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from support.gpu_nodes import DGX_A100, RTX4090
from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import env_template, gate_constraint
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.moves import HealthInputs, Proposal
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
CFG = RebalanceConfig(dry_run=True)  # health acts even in rebalance dry-run
F1, F2 = DGX_A100.facts(), RTX4090.facts()

U2 = [g.uuid for g in F2.gpus]
XID79 = "health: failed: Xid 79: GPU has fallen off the bus (suggested: reboot)"
ECC = "health: degraded: 3 correctable ECC errors (suggested: none)"


def mark(f: NodeFacts, failed: Sequence[int] = (), degraded: Sequence[int] = ()) -> NodeFacts:
    """Facts as the health book leaves them: failed unhealthy, degraded used."""
    gpus = tuple(replace(g, healthy=False, error=XID79) if g.index in failed else
                 replace(g, error=ECC) if g.index in degraded else g for g in f.gpus)
    return replace(f, gpus=gpus)


def node(nid: str, host: str, labels: Mapping[str, str]) -> SwarmNode:
    return SwarmNode(nid, host, "10.0.0." + nid[-1], "worker", "ready", "active", dict(labels),
                     {}, 1, {}, {})


def service(name: str, labels: Mapping[str, str], mode: str = "replicated",
            constraints: Sequence[str] = ()) -> SwarmService:
    return SwarmService(f"id-{name}", name, dict(labels),
                        (gate_constraint(P, name), *constraints), (env_template(P),), mode,
                        1 if mode == "replicated" else None, None, 1)


def running(name: str, nid: str) -> SwarmTask:
    return SwarmTask(f"t-{name}", f"id-{name}", nid, 1, "running", "running", ())


def hold(name: str, uuids: Sequence[str]) -> dict[str, str]:
    return {f"{P}assign.{name}": ",".join(f"{u}@1000" for u in uuids), f"{P}service.{name}": "true"}


ONE = {f"{P}gpus": "1"}


def setup(n2_holders: Mapping[str, Sequence[str]], *, full_n2: bool = True,
          svc_labels: Mapping[str, Mapping[str, str]] | None = None,
          constraints: Mapping[str, Sequence[str]] | None = None,
          modes: Mapping[str, str] | None = None,
          ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """Holders on gpu-node-2; with ``full_n2`` a 'big' service holds every GPU of it
    the holders do not, so a healthy target exists only on gpu-node-1."""
    labels: dict[str, str] = {}
    svcs, tasks = [], []
    used = {u for us in n2_holders.values() for u in us}
    for name, us in n2_holders.items():
        labels.update(hold(name, us))
        svcs.append(service(name, {**ONE, **(svc_labels or {}).get(name, {})},
                            (modes or {}).get(name, "replicated"),
                            (constraints or {}).get(name, ())))
        tasks.append(running(name, "n2"))
    if full_n2:
        rest = [u for u in U2 if u not in used]
        labels.update(hold("big", rest))
        svcs.append(service("big", {f"{P}gpus": str(len(rest))}))
        tasks.append(running("big", "n2"))
    return [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", labels)], svcs, tasks


def plan(nodes: Sequence[SwarmNode], svcs: Sequence[SwarmService], tasks: Sequence[SwarmTask],
         f2: NodeFacts, h: HealthInputs | None = None, cfg: RebalanceConfig = CFG,
         f1: NodeFacts = F1, moving: frozenset[str] = frozenset(),
         unreadable: Mapping[str, str] | None = None,
         held: Mapping[tuple[str, str], tuple[str, int]] | None = None,
         dropped: frozenset[tuple[str, str]] = frozenset(),
         stale: frozenset[str] = frozenset()) -> Proposal:
    """``held``: the GPUs preemptions hold (``Inputs.held``); ``dropped``: the entries
    placement read as a removed namesake's (``Inputs.dropped``); ``stale``: the nodes whose
    facts are stale (``Inputs.stale``)."""
    from swarmgpu.manager.placement import read_ledger

    inp = Inputs(nodes=nodes, services=svcs, tasks=tasks, facts={"n1": f1, "n2": f2},
                 ledger=read_ledger(nodes, P), gpus={}, node_signals={}, cfg=cfg, now=1000.0,
                 prefix=P, moving=moving, unreadable=unreadable or {}, held=held or {},
                 dropped=dropped, stale=stale)
    return plan_moves(inp, h if h is not None else HealthInputs(left=2))
