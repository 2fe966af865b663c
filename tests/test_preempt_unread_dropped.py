"""Preemption's unread victims (``Preempter.unread``: holders whose spec a victim write
cannot read, never chosen and named in the map's note) are read from the ledger as
placement read it: without the entries a recreated service's placement dropped this
cycle (``PlacementPlan.dropped``). Before, the whole ledger was read, and a service whose
only entry was dropped (no holding of it, as placement read it) was named there."""

from __future__ import annotations

from dataclasses import replace

from support.forged import held_labels, snapshot, sw_node, sw_svc

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement.records import PlacementPlan


def _unread(disowned: frozenset[tuple[str, str]]) -> dict[str, str]:
    s = sw_svc("svc", {})
    bad = replace(s, spec={**s.spec, "TaskTemplate": {**s.spec["TaskTemplate"],
                                                       "ForceUpdate": "x"}})
    snap = snapshot([sw_node("n1", "gpu-node-1", held_labels("svc", "n1", "GPU-a"))],
                    [bad], [])
    pre = Preempter(Config())
    pre.decide(snap, PlacementPlan(disowned=disowned), {}, None, 1000.0, mono=1000.0)
    return pre.unread


def test_a_holder_whose_spec_is_unread_is_named_by_its_ledger_entry() -> None:
    assert "ForceUpdate" in _unread(frozenset())["svc"]


def test_a_holder_whose_only_entry_placement_dropped_is_not_named() -> None:
    assert _unread(frozenset({("svc", "n1")})) == {}
