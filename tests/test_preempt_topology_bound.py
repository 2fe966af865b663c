"""A ``topology`` preemptor (nvlink, numa) on a crowded node: its victim search leaves
whole the victim sets that free no GPU set its topology lets go together
(``victimsearch``, ``preempt._GpuSets.may``), and asks the allocator for a GPU set once
per set of GPUs its victims would free, not once per victim set: 12 small holders of an
8-GPU node make 4,095 victim sets, and asked for each, one preemptor's choice took 0.8 s
a node, asked for each set of GPUs freed 72 ms (``benchmarks/bench_preempt_topology.py``).
The victims chosen are those every set tried one by one chooses
(``support.reference_victims``). Pure: the real planner and ``choose_preemptions`` over
a forged snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from support.crowded_node import Held, chooser, halves, twelve_small, victims
from support.forged import DGX_F, R4090_F
from support.reference_victims import every_set

from swarmgpu.allocator.core import Allocator
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import preempt


@pytest.mark.parametrize(("facts", "gpus", "topology"), [
    (R4090_F, 2, "nvlink"), (R4090_F, 5, "numa"), (DGX_F, 4, "numa")])
def test_a_crowded_node_no_set_serves_asks_the_allocator_nothing(
    monkeypatch: pytest.MonkeyPatch, facts: NodeFacts, gpus: int, topology: str,
) -> None:
    """nvlink for 2 GPUs on the RTX 4090 node (no NVLink), numa for more GPUs than a NUMA
    node holds: no victim set gives a set. Once asked 3,583 times, then once per distinct
    set of freed GPUs (247 for the first), now never: no GPUs of the node go together as
    it asks, so no set of them is tried. Still nobody is stopped."""
    choose = chooser(facts, twelve_small(), gpus, topology)
    asked = []
    real = Allocator.gpu_set

    def counted(self: Allocator, *a: Any) -> Any:
        asked.append(a)
        return real(self, *a)

    monkeypatch.setattr(Allocator, "gpu_set", counted)
    assert choose() == []
    assert asked == []


def _whole() -> dict[str, tuple[tuple[int, ...], int, int]]:
    return {f"w{i}": ((i,), 1000, 0) for i in range(8)}


def _numa_pair() -> dict[str, tuple[tuple[int, ...], int, int]]:
    """test_preempt_topology_victims's first node: low across the NUMA nodes, mid on one
    (filler is not preemptible)."""
    return {"low": ((0, 4), 1000, 0), "mid": ((1, 2), 1000, 10),
            "filler": ((3, 5, 6, 7), 1000, -1)}


def _low_only() -> dict[str, tuple[tuple[int, ...], int, int]]:
    return {"low": ((0, 4), 1000, 0), "filler": ((1, 2, 3, 5, 6, 7), 1000, -1)}


LAYOUTS = {"twelve_small": twelve_small, "halves": halves, "whole": _whole,
           "t1": _numa_pair, "t2": _low_only}
# (facts, GPUs asked, topology) of the preemptor on each layout ("": none)
REQUESTS = [(f, gpus, topo) for f in (R4090_F, DGX_F)
            for gpus, topo in ((2, "nvlink"), (2, "numa"), (4, "numa"), (5, "numa"), (2, ""),
                               (4, "nvlink"))]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_victims_are_those_every_set_tried_chooses(
    monkeypatch: pytest.MonkeyPatch, layout: str,
) -> None:
    """Each layout under nvlink and numa requests (and a plain one) on both nodes: the
    victims chosen are those the sets tried one by one choose, none where it chose none
    (as the code before the search recorded them: twelve_small's DGX nvlink 4 stops
    a4, b4, w1, w2 and w3)."""
    held: Held = LAYOUTS[layout]()
    got = [victims(f, held, gpus, topo) for f, gpus, topo in REQUESTS]
    monkeypatch.setattr(preempt, "pick_victims", every_set)
    assert got == [victims(f, held, gpus, topo) for f, gpus, topo in REQUESTS]
    if layout == "twelve_small":
        assert got[-1] == [["a4", "b4", "w1", "w2", "w3"]]
