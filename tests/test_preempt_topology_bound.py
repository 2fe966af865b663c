"""A ``topology`` preemptor (nvlink, numa) asks the allocator for a GPU set once per set
of GPUs its victims would free on a node, not once per victim set: 12 small holders of
an 8-GPU node make 4,095 victim sets but free at most 2**8 sets of GPUs, and asked for
each victim set anew, one preemptor's choice took 0.8 s a node
(``benchmarks/bench_preempt_topology.py``). The victims chosen are those chosen before
(recorded from the code that asked for every set). Pure: the real planner and
``choose_preemptions`` over a forged snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from support.crowded_node import Held, chooser, halves, twelve_small, victims
from support.forged import DGX_F, R4090_F

from swarmgpu.allocator.core import Allocator


def test_a_crowded_node_asks_the_allocator_once_per_set_of_freed_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvlink for 2 GPUs on the RTX 4090 node (no NVLink): no victim set gives a pair,
    so every one is tested. Before, the allocator was asked 3,583 times; now once per
    distinct set of freed GPUs (247), and still nobody is stopped."""
    choose = chooser(R4090_F, twelve_small(), 2, "nvlink")
    asked = []
    real = Allocator.gpu_set

    def counted(self: Allocator, *a: Any) -> Any:
        asked.append(a)
        return real(self, *a)

    monkeypatch.setattr(Allocator, "gpu_set", counted)
    assert choose() == []
    assert 0 < len(asked) <= 2 ** 8


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
# layout -> (facts, GPUs asked, topology, the victims chosen), as the code before chose
BEFORE: dict[str, list[tuple[Any, int, str, list[list[str]]]]] = {
    "twelve_small": [
        (R4090_F, 2, "nvlink", []),
        (R4090_F, 2, "numa", [["w0", "w1"]]),
        (R4090_F, 4, "numa", [["w0", "w1", "w2", "w3"]]),
        (R4090_F, 5, "numa", []),
        (R4090_F, 2, "", [["w0", "w1"]]),
        (R4090_F, 4, "nvlink", []),
        (DGX_F, 2, "nvlink", [["w1", "w2"]]),
        (DGX_F, 2, "numa", [["w2", "w3"]]),
        (DGX_F, 4, "numa", []),
        (DGX_F, 5, "numa", []),
        (DGX_F, 2, "", [["w1", "w2"]]),
        (DGX_F, 4, "nvlink", [["a4", "b4", "w1", "w2", "w3"]]),
    ],
    "halves": [
        (R4090_F, 2, "nvlink", []),
        (R4090_F, 2, "numa", [["a0", "a1", "b0", "b1"]]),
        (R4090_F, 4, "numa", [["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]]),
        (R4090_F, 5, "numa", []),
        (R4090_F, 2, "", [["a0", "a1", "b0", "b1"]]),
        (R4090_F, 4, "nvlink", []),
        (DGX_F, 2, "nvlink", [["a1", "a2", "b1", "b2"]]),
        (DGX_F, 2, "numa", [["a2", "a3", "b2", "b3"]]),
        (DGX_F, 4, "numa", []),
        (DGX_F, 5, "numa", []),
        (DGX_F, 2, "", [["a1", "a2", "b1", "b2"]]),
        (DGX_F, 4, "nvlink", [["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"]]),
    ],
    "whole": [
        (R4090_F, 2, "nvlink", []),
        (R4090_F, 2, "numa", [["w0", "w1"]]),
        (R4090_F, 4, "numa", [["w0", "w1", "w2", "w3"]]),
        (R4090_F, 5, "numa", []),
        (R4090_F, 2, "", [["w0", "w1"]]),
        (R4090_F, 4, "nvlink", []),
        (DGX_F, 2, "nvlink", [["w1", "w2"]]),
        (DGX_F, 2, "numa", [["w2", "w3"]]),
        (DGX_F, 4, "numa", []),
        (DGX_F, 5, "numa", []),
        (DGX_F, 2, "", [["w1", "w2"]]),
        (DGX_F, 4, "nvlink", [["w1", "w2", "w3", "w4"]]),
    ],
    "t1": [
        (R4090_F, 2, "nvlink", []),
        (R4090_F, 2, "numa", [["mid"]]),
        (R4090_F, 4, "numa", []),
        (R4090_F, 5, "numa", []),
        (R4090_F, 2, "", [["low"]]),
        (R4090_F, 4, "nvlink", []),
        (DGX_F, 2, "nvlink", [["mid"]]),
        (DGX_F, 2, "numa", []),
        (DGX_F, 4, "numa", []),
        (DGX_F, 5, "numa", []),
        (DGX_F, 2, "", [["mid"]]),
        (DGX_F, 4, "nvlink", []),
    ],
    "t2": [
        (R4090_F, 2, "nvlink", []),
        (R4090_F, 2, "numa", []),
        (R4090_F, 4, "numa", []),
        (R4090_F, 5, "numa", []),
        (R4090_F, 2, "", [["low"]]),
        (R4090_F, 4, "nvlink", []),
        (DGX_F, 2, "nvlink", []),
        (DGX_F, 2, "numa", []),
        (DGX_F, 4, "numa", []),
        (DGX_F, 5, "numa", []),
        (DGX_F, 2, "", []),
        (DGX_F, 4, "nvlink", []),
    ],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_victims_are_those_chosen_before(layout: str) -> None:
    """Each layout under nvlink and numa requests (and a plain one) on both nodes: the
    victims chosen are those the code before chose, none where it chose none."""
    held: Held = LAYOUTS[layout]()
    got = [victims(f, held, gpus, topo) for f, gpus, topo, _ in BEFORE[layout]]
    assert got == [want for *_, want in BEFORE[layout]]
