"""The rebalancer's checks on the pass's kept allocator (``Context.trial``), each taken
back after, plan as checks on an allocator built for each (``Context.fresh_trials``,
the code before stop 78) did: the same moves in the same order with the same reasons,
the same notes, on generated clusters (``support.drawn_plans``). Built for each,
defrag's allocators took most of a 200-node plan's time
(``benchmarks/defrag_scale.py``). Pure."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.drawn_plans import generated

from swarmgpu.manager.placement import ClusterAllocator
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import Proposal
from swarmgpu.manager.rebalance.planner import plan_moves


def _plan(inp: Inputs, policies: str) -> Proposal:
    return plan_moves(replace(inp, cfg=replace(inp.cfg, policies=policies)))


@pytest.mark.parametrize("policies", ["defrag", ""], ids=["defrag", "every-policy"])
@pytest.mark.parametrize("seed", range(8))
def test_plans_on_the_kept_allocator_are_those_of_one_built_per_check(
    seed: int, policies: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    inp = generated(seed)
    fast = _plan(inp, policies)
    monkeypatch.setattr(Context, "fresh_trials", True)
    plain = _plan(inp, policies)
    assert fast.moves == plain.moves
    assert fast.notes == plain.notes


def test_defrag_builds_no_allocator_per_pending_request_or_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 2: three pending requests, each made room for by moves; before, each
    request built one allocator for its search, one for each mover's target and one
    for its last check, and each commit one for the movers' room (21 here)."""
    inp = generated(2)
    built = [0]
    real = ClusterAllocator.__init__

    def counted(self: ClusterAllocator, *a: object, **kw: object) -> None:
        built[0] += 1
        real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ClusterAllocator, "__init__", counted)
    got = _plan(inp, "defrag")
    assert len({m.reason for m in got.moves}) >= 3  # (rooms made for 3 requests)
    assert built[0] <= 2  # the kept one and the movers' room
