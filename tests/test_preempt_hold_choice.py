"""The GPUs a preemption holds for its preemptor (``Preemption.held``, then
``placement.nominated``) are the set the allocator would give that preemptor on the node,
not the first ones by UUID: a set it cannot use together (two NUMA nodes for a
``topology: numa`` request) was held while the set it could use went to others."""

from __future__ import annotations

from dataclasses import replace

from support.forged import R4090_F, sw_node, sw_svc
from support.preempt_stop import stop_victims

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, Planner, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."
FACTS = {"n-4090": R4090_F}
ON_4090 = {f"{P}gpu-product": "*RTX 4090*"}
NUMA = {g.uuid: g.numa_node for g in R4090_F.gpus}  # GPUs 0-3 on NUMA node 0, 4-7 on 1
R = tuple(g.uuid for g in R4090_F.gpus)
Plan = dict[str, list[str]]  # service -> the GPUs it was given


SHARES = {"share1": ("1", {f"{P}gpu-fraction": "0.6"}, "10"),
          "share2": ("1", {f"{P}gpu-fraction": "0.6"}, "11")}


def _made(second: str) -> str:
    """A CreatedAt ``second`` seconds into 2026 ("": none); times order by their instant."""
    return f"2026-01-01T00:00:{int(second):02}Z" if second else ""


class World:
    """n-4090: batch (priority 0) and filler (not preemptible) hold ``held`` (4 GPUs each,
    any model); waiting, all of priority 100 and made at ``created``: ``waiting``, (GPUs,
    labels, created) by name, on RTX 4090s."""

    def __init__(self, held: dict[str, tuple[str, ...]],
                 waiting: dict[str, tuple[str, dict[str, str], str]]) -> None:
        labels: dict[str, str] = {}
        self.services: dict[str, SwarmService] = {}
        for name, uuids in held.items():
            h = Holding(name, "n-4090", uuids, tuple(1000 for _ in uuids))
            labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
            self.services[name] = sw_svc(name, {
                f"{P}gpus": "4", devices_key(P, "n-4090"): ",".join(uuids),
                **({f"{P}preemptible": "false"} if name == "filler" else {})})
        self.node = sw_node("n-4090", "gpu-node-2", labels)
        for name, (gpus, extra, created) in waiting.items():
            s = sw_svc(name, {f"{P}gpus": gpus, f"{P}priority": "100", **ON_4090, **extra})
            object.__setattr__(s, "created_at", _made(created))
            self.services[name] = s
        self.tasks = {n: SwarmTask(f"t-{n}", s.id, "n-4090" if n in held else "", 1,
                                   "running" if n in held else "pending", "running", ())
                      for n, s in self.services.items()}

    def snap(self) -> Snapshot:
        return Snapshot([self.node], list(self.services.values()), list(self.tasks.values()),
                        {})

    def stop(self, p: Preemption) -> None:
        """``p``'s victims stopped as the actuator stops them."""
        nodes = {self.node.id: self.node}
        stop_victims(nodes, self.services, self.tasks, p)
        self.node = nodes[self.node.id]


def _held_then_placed(w: World, facts: dict[str, NodeFacts]) -> tuple[Preemption, Plan]:
    """high's preemption decided and taken, its victim stopped, and the next plan's
    placements by service: the GPUs each was given."""
    planner = Planner(prefix=P)
    pre = Preempter(Config(preemption=PreemptionConfig(dry_run=False)), clock=lambda: 0.0)
    t, snap = 1000.0, w.snap()
    plan = planner.plan(snap.nodes, snap.services, snap.tasks, facts, now=t)
    (p,) = pre.decide(snap, plan, facts, planner.refused_nodes, t, planner.port_takers)
    assert p.describe() == "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"
    pre.took(p, list(p.victims), 0.0)
    w.stop(p)
    snap = w.snap()
    plan = planner.plan(snap.nodes, snap.services, snap.tasks, facts, now=t + 1,
                        nominated=pre.nominated.current(1.0))
    return p, {sp.name: [u for pl in sp.placements for u in pl.uuids] for sp in plan.services}


def test_the_hold_is_the_set_the_preemptor_can_use_and_it_is_placed_there() -> None:
    """batch holds GPUs 0, 1, 3 and 6, filler the others; two older shares (which never
    preempt) and high (2 GPUs on one NUMA node: 0-3 or 4-7) wait. Before, high's hold was
    batch's first two GPUs by UUID (6 and 1, a NUMA node each): the shares, served first,
    took 0 and 3, and high, left 1 and 6, stayed pending (and stopped another victim once
    its settle time passed). Now the hold is the allocator's choice for high among the
    GPUs it is counted on: one NUMA node's pair, high is placed on it, the shares beside."""
    w = World({"batch": (R[0], R[1], R[3], R[6]), "filler": (R[2], R[4], R[5], R[7])},
              {**SHARES, "high": ("2", {f"{P}topology": "numa"}, "20")})
    p, got = _held_then_placed(w, FACTS)
    assert len(p.held) == 2 and len({NUMA[u] for u in p.held}) == 1, p.held
    assert sorted(got["high"]) == sorted(p.held)
    assert len(got["share1"]) == len(got["share2"]) == 1


def test_a_hold_takes_only_gpus_of_a_model_the_preemptor_asks_for() -> None:
    """GPUs 0-3 of the node are L4s here; batch (any model) holds 0, 1, 4 and 5. high asks
    for 2 RTX 4090s: of what stopping batch frees, 4 and 5 alone are held for it (the
    L4s are not usable by it: ``preempt._usable``, already so before), and high is
    placed on them."""
    f = FACTS["n-4090"]
    mixed = replace(f, gpus=tuple(replace(g, product="NVIDIA L4") if g.index < 4 else g
                                  for g in f.gpus))
    w = World({"batch": (R[0], R[1], R[4], R[5]), "filler": (R[2], R[3], R[6], R[7])},
              {"high": ("2", {}, "20")})
    p, got = _held_then_placed(w, {"n-4090": mixed})
    assert sorted(p.held) == sorted((R[4], R[5]))
    assert sorted(got["high"]) == sorted(p.held)
