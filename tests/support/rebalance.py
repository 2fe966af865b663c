"""The rebalance policies' inputs: two nodes, services, tasks, metrics pages.

First written in tests/test_rebalance_policies.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from support.gpu_nodes import DGX_A100, RTX4090
from swarmgpu.agent.metrics import render_metrics
from swarmgpu.core.config import RebalanceConfig, load_config
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.rebalanceconfig import ConsolidationConfig, HotspotConfig
from swarmgpu.core.samples import GpuSample
from swarmgpu.manager.placement import env_template, gate_constraint, read_ledger
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.scrape import NodeScrape, judge
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

if TYPE_CHECKING:
    from support.forged import RecordingSwarm
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.placement import PlacementPlan

P = "swarmgpu."
CFG = RebalanceConfig(dry_run=False, hotspot=HotspotConfig(window_s=5),
                      consolidation=ConsolidationConfig(idle_window_s=5, frag_window_s=5),
                      max_gap_s=2, min_samples=3, cooldown_s=300)
F1, F2 = DGX_A100.facts(), RTX4090.facts()
FACTS = {"n1": F1, "n2": F2}
U2 = [g.uuid for g in F2.gpus]


def node(nid: str, host: str, labels: Mapping[str, str]) -> SwarmNode:
    return SwarmNode(nid, host, "10.0.0." + nid[-1], "worker", "ready", "active", dict(labels),
                     {}, 1, {}, {})


def service(name: str, labels: Mapping[str, str], mode: str = "replicated") -> SwarmService:
    return SwarmService(f"id-{name}", name, dict(labels), (gate_constraint(P, name),),
                        (env_template(P),), mode, 1 if mode == "replicated" else None, None, 1)


def running(name: str, nid: str) -> SwarmTask:
    return SwarmTask(f"t-{name}", f"id-{name}", nid, 1, "running", "running", ())


def cluster(extra: Mapping[str, str] | None = None, b_labels: Mapping[str, str] | None = None
            ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """a and b share GPU 0 of gpu-node-2 (half each); gpu-node-1 is empty."""
    n2 = {f"{P}assign.a": f"{U2[0]}@500", f"{P}service.a": "true",
          f"{P}assign.b": f"{U2[0]}@500", f"{P}service.b": "true"}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    req = {f"{P}gpu-fraction": "0.5"}
    svcs = [service("a", {**req, **(extra or {})}), service("b", {**req, **(b_labels or {})})]
    return nodes, svcs, [running("a", "n2"), running("b", "n2")]


def page(facts: NodeFacts, util: Mapping[int, float | None]) -> str:
    samples = [GpuSample(uuid=g.uuid, index=g.index, util_pct=util.get(g.index, 5.0),
                         fb_used_mib=1000, fb_free_mib=g.memory_mib - 1000,
                         mem_copy_util_pct=None, temp_c=None, power_w=None)
               for g in facts.gpus if not g.mig_enabled]
    return render_metrics(facts, samples).decode()


def samples_of(text: str) -> str:
    """A page's samples without its HELP and TYPE lines: what a page that also carries
    another's samples says (two pages' TYPE lines, run together, are refused)."""
    return "".join(line for line in text.splitlines(True) if not line.startswith("#"))


def feed(sig: Signals, nodes: Sequence[SwarmNode], times: Sequence[float],
         util2: Mapping[float, Mapping[int, float | None]],
         broken: AbstractSet[float] = frozenset(),
         util1: Mapping[int, float | None] | None = None) -> list[str]:
    """Pages for every time of ``times``: gpu-node-2's utilisation per time (``util2``),
    gpu-node-1's the same at every time (``util1``; 5% where not said)."""
    warnings: list[str] = []
    ledger = read_ledger(nodes, P)
    for t in times:
        scr: dict[str, NodeScrape] = {}
        for n in nodes:
            f = FACTS[n.id]
            text = page(f, util2.get(t, {}) if n.id == "n2" else util1 or {})
            if n.id == "n2" and t in broken:
                text = "this is not prometheus {{{\n"
            scr[n.id] = judge(n, "http://x/metrics", text, t)
        warnings = sig.observe(scr, FACTS, {n.id: n.hostname for n in nodes}, ledger, t)
    return warnings


def observed(nodes: list[SwarmNode], svcs: list[SwarmService], tasks: list[SwarmTask],
             facts: dict[str, NodeFacts], pending: Sequence[str] = ("p",),
             **extra: Any) -> Inputs:
    """The rebalancer's inputs at 12 s after 13 s of ``facts``' metrics pages, no process
    on any GPU; ``pending`` waiting, ``extra`` (``classes``, ``held``...) as given."""
    sig = Signals(CFG)
    ledger = read_ledger(nodes, P)
    for t in (float(t) for t in range(13)):
        scr = {n.id: judge(n, "http://x/metrics", page(facts[n.id], {}), t) for n in nodes}
        sig.observe(scr, facts, {n.id: n.hostname for n in nodes}, ledger, t)
    return Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus, sig.nodes, CFG, 12.0,
                  list(pending), P, **extra)


def load_rebalance(rebalance: dict[str, object]) -> None:
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        json.dump({"rebalance": rebalance}, fh)
    load_config(fh.name, env={})


class SeenPolicy:
    """A policy that keeps each pass's inputs (registered as hotspot)."""

    name = "hotspot"

    def __init__(self) -> None:
        self.inputs: list[Inputs] = []

    def propose(self, ctx: Context) -> None:
        self.inputs.append(ctx.inp)


def hot_cycle(rb: Rebalancer, sw: RecordingSwarm, nodes: list[SwarmNode], at: float,
              placement: PlacementPlan) -> list[tuple[str, str]]:
    """One rebalance step of ``rb`` (a ``cycle.rebalance.Rebalancer``) at ``at``, after
    placement's ``placement`` (a ``PlacementPlan``): a snapshot of ``sw``'s services and
    tasks on ``nodes``, GPU 0 of gpu-node-2 hot (97%) on its metrics page. The moves
    proposed, (service, target host) each."""
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.placement import Planner

    session = CycleSession(Snapshot(nodes, sw.services(), sw.tasks(), {},
                                    swarm_labels=sw.swarm_labels(), taken_at=at))
    session.facts = dict(FACTS)
    session.scrapes = {n.id: judge(n, "http://x/metrics", page(
        FACTS[n.id], {0: 97.0} if n.id == "n2" else {}), at) for n in nodes}
    session.placement = placement
    session.planner = Planner(prefix=P)
    rb.run(session)
    assert rb.last is not None
    return [(m.service, m.target_host) for m in rb.last.moves]
