"""The planner's memories across cycles stay bounded and survive a listing hiccup:
``recreated.Recreated`` forgets an entry once no task of the removed service stops on
its node, and ``StoppingGpus`` keeps a stopping task's start while it drops out of a
few snapshots (an engine hiccup), then forgets it."""

from __future__ import annotations

from dataclasses import replace

from support.forged import FACTS, R_UUIDS, sw_svc

from swarmgpu.manager.placement import gate_constraint
from swarmgpu.manager.placement.keys import UNLISTED_CYCLES, kept_unlisted
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.nominated import StoppingGpus
from swarmgpu.manager.placement.recreated import Recreated
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."
OLD_AT, NEW_AT = "2026-12-06T10:00:00.5Z", "2026-12-06T10:05:00Z"
LINE = f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[0]}"


def _recreation(i: int) -> tuple[SwarmService, SwarmTask, dict[str, dict[str, Holding]]]:
    """Service web-i recreated (id new-i) while its removed one's task stops on n-i,
    whose ledger entry it found: the live service, the stopping task and the ledger."""
    name, node = f"web-{i}", f"n-{i}"
    s = replace(sw_svc(name, {f"{P}gpus": "1"}), id=f"new-{i}", created_at=NEW_AT)
    t = SwarmTask(f"t-{i}", f"old-{i}", node, 1, "running", "remove", (),
                  created_at=OLD_AT, constraints=(gate_constraint(P, name),))
    return s, t, {name: {node: Holding(name, node, ("GPU-a",), (1000,))}}


def test_the_recreated_memory_forgets_entries_whose_removed_task_stopped() -> None:
    """Fifty services, each recreated once while its removed one's task stops, its entry
    disowned, then the task gone; they all live on. The memory keeps an entry only while
    it may matter: a removed task still stops on its node (or did a few cycles ago), or
    the ledger has the entry (the memory no larger than the ledger); once both are gone,
    it is forgotten. Before, it kept one per recreation for the live service's life."""
    rec = Recreated()
    services: list[SwarmService] = []
    ledger: dict[str, dict[str, Holding]] = {}
    for i in range(50):
        s, t, entry = _recreation(i)
        services.append(s)
        ledger |= entry
        got = rec.entries(services, [t], ledger, {}, [], P, lambda _t: None)
        assert got == {(s.name, t.node_id)}, got
        for _ in range(5):  # its task stopped: listed no more
            rec.entries(services, [], ledger, {}, [], P, lambda _t: None)
        assert len(rec.afresh) <= sum(len(v) for v in ledger.values()), len(rec.afresh)
    ledger = {}  # their entries went (placed elsewhere, released): a few cycles more
    for _ in range(UNLISTED_CYCLES + 1):
        rec.entries(services, [], ledger, {}, [], P, lambda _t: None)
    assert len(rec.afresh) == 0, len(rec.afresh)


def test_a_recreated_entry_stays_its_own_across_a_listing_hiccup() -> None:
    """The removed task drops out of one listing and comes back: the entry, placed afresh
    on by the live service since, is still its own (not disowned again, its gate kept)."""
    rec = Recreated()
    s, t, ledger = _recreation(0)
    assert rec.entries([s], [t], ledger, {}, [], P, lambda _t: None)
    assert not rec.entries([s], [], ledger, {}, [], P, lambda _t: None)
    assert not rec.entries([s], [t], ledger, {}, [], P, lambda _t: None)


def _stopping(s: SwarmService, tid: str = "t-p") -> SwarmTask:
    """``s``'s task stopping on n-4090 (docker's default grace period, 10 s)."""
    return SwarmTask(tid, s.id, "n-4090", 1, "running", "shutdown", (LINE,))


def test_a_stopping_task_absent_from_one_snapshot_keeps_its_start() -> None:
    """Seen stopping at 1000, absent at 1030 (an engine hiccup), back at 1050: overdue at
    1071 as if it had never dropped out. Before, its wait restarted at 1050."""
    s = sw_svc("pinned", {})
    g, steady = StoppingGpus(P), StoppingGpus(P)
    for now, listed in ((1000.0, True), (1030.0, False), (1050.0, True), (1071.0, True)):
        g.holds([_stopping(s)] if listed else [], [s], {}, [], FACTS, now=now)
        steady.holds([_stopping(s)], [s], {}, [], FACTS, now=now)
        if listed:
            assert (g.overdue, g.until, g.waits) == (
                steady.overdue, steady.until, steady.waits), now
    assert g.overdue == {"t-p"}, g.overdue


def test_the_stopping_start_memory_forgets_tasks_gone_for_good() -> None:
    """A thousand tasks each seen stopping once, then gone: the memory of their starts
    stays bounded (each forgotten a few cycles after it went)."""
    s = sw_svc("pinned", {})
    g = StoppingGpus(P)
    for i in range(1000):
        g.holds([_stopping(s, f"t-{i}")], [s], {}, [], FACTS, now=1000.0 + i)
    assert len(g.began) <= 5, len(g.began)


def test_kept_unlisted_keeps_an_entry_unlisted_up_to_the_cycles_then_forgets_it() -> None:
    """The one keeper both memories use: a listed entry's count starts over; an unlisted
    one is kept, counted, for UNLISTED_CYCLES cycles, then dropped."""
    memory: dict[str, float] = {"a": 1.0, "b": 2.0}
    counts: dict[str, int] = {}
    for n in range(1, UNLISTED_CYCLES + 1):
        memory, counts = kept_unlisted(memory, counts, {"a"})
        assert (memory, counts) == ({"a": 1.0, "b": 2.0}, {"b": n})
    assert kept_unlisted(memory, counts, {"a"}) == ({"a": 1.0}, {})
    assert kept_unlisted(memory, counts, {"a", "b"}) == ({"a": 1.0, "b": 2.0}, {})
