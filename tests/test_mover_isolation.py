"""The mover's reads and admission before its per-move loop: one move's checks that
raise past a SwarmError (a bug, or input no one foresaw) refuse that move alone, and a
read of the cycle's that raises so costs this mover's new moves of the cycle only, not
the rebalance step (the health mover after it, preemption, the map). Each is logged with
its traceback once while it lasts. Before: the exception left ``Mover.run_cycle`` and
ended the daemon's cycle, every cycle it lasted.

No real input is known to make these raise so: the faults are injected (monkeypatch)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.forged import DGX_F, T_UUID, P, RecordingSwarm, victim_cluster, victim_move
from support.loglines import log_lines

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.rebalance import admission, mover
from swarmgpu.manager.rebalance.context import why_not_movable
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move, Trigger


def _third_move() -> Move:
    """third (RTX 4090 GPU 0) onto the DGX's free GPU 1."""
    return Move(
        service="third",
        service_id="id-third",
        source_node="n-4090",
        source_host="gpu-node-2",
        source_uuids=(T_UUID,),
        source_milli=(1000,),
        target_node="n-dgx",
        target_host="gpu-node-1",
        target_gpus=(1,),
        target_uuids=(DGX_F.gpus[1].uuid,),
        target_milli=(1000,),
        trigger=Trigger.HOTSPOT,
        window_s=5.0,
        reason="test",
        gain="test",
    )


def _mover(sw: RecordingSwarm) -> Mover:
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=2, max_moves_per_node=2)
    swarm: Any = sw  # the SwarmClient methods the mover calls
    return Mover(swarm, cfg, prefix=P, dry_run=False, clock=lambda: 1000.0)


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def test_a_move_whose_admission_raises_is_refused_alone(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """victim's checks raise in ``admit``: victim is not started, third is; logged with
    the traceback once over two cycles."""

    def checks(s: Any, *a: Any, **kw: Any) -> str | None:
        if s.name == "victim":
            raise KeyError("gpu-node-9")
        return why_not_movable(s, *a, **kw)

    monkeypatch.setattr(admission, "why_not_movable", checks)
    sw = victim_cluster({})
    m = _mover(sw)
    for _ in range(2):
        m.run_cycle([victim_move(), _third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert set(read_records(sw.swarm_labels(), P)) == {"id-third"}
    said = [ln for ln in lines if "not started; the others go on" in ln]
    assert len(said) == 1 and "Traceback" in said[0] and "KeyError: 'gpu-node-9'" in said[0]


def test_a_read_before_the_moves_that_raises_costs_this_cycles_new_moves_only(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    def boom(*a: Any, **kw: Any) -> Any:
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(mover, "read_ledger", boom)
    sw = victim_cluster({})
    m = _mover(sw)
    for _ in range(2):
        m.run_cycle([_third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert not read_records(sw.swarm_labels(), P)
    said = [ln for ln in lines if "no new move this cycle" in ln]
    assert len(said) == 1 and "Traceback" in said[0]
    monkeypatch.undo()
    m.run_cycle([_third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert set(read_records(sw.swarm_labels(), P)) == {"id-third"}


@pytest.mark.parametrize("fault", ["bug", "engine"])
def test_a_fragmentation_move_that_fails_after_its_record_spends_the_budget(
    monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """victim's fragmentation move raises after its record was written (its spec edit: a
    bug; or the record write's answer lost, an engine error after it may have landed):
    it may be under way (the record is the authority; the mover goes on with it or
    rolls it back), so it spends the hour's fragmentation budget (1 here), and third's
    move waits. Before: the budget was spent only by a start that returned, so a second
    fragmentation move started in the same hour."""
    from dataclasses import replace

    from swarmgpu.core.rebalanceconfig import FragmentationConfig
    from swarmgpu.swarm.client import SwarmUnavailable

    if fault == "bug":
        def surge(spec: Any, replicas: int) -> None:
            raise TypeError("'NoneType' object is not subscriptable")

        monkeypatch.setattr(mover, "start_surge", surge)
    sw = victim_cluster({})
    if fault == "engine":
        real = sw.update_swarm_labels

        def lost(compute: Any, **kw: Any) -> bool:
            real(compute, **kw)  # landed, but the answer is lost
            sw.update_swarm_labels = real  # type: ignore[method-assign]
            raise SwarmUnavailable("engine timed out: read timeout")

        sw.update_swarm_labels = lost  # type: ignore[method-assign]
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=4, max_moves_per_node=4,
                          fragmentation=FragmentationConfig(moves_per_hour=1,
                                                            moves_per_100_placements=100))
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: 1000.0)  # type: ignore[arg-type]
    frag = Trigger.FRAGMENTATION
    m.run_cycle([replace(victim_move(), trigger=frag)], sw.nodes(), sw.services(), sw.tasks())
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}
    m.run_cycle([replace(_third_move(), trigger=frag)], sw.nodes(), sw.services(), sw.tasks())
    assert "id-third" not in read_records(sw.swarm_labels(), P)
    assert m.frag_budget.left(1000.0)[0] == 0
