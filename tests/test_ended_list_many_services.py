"""The mover's list of moves ended by service (``<p>state.moves-ended``) and the
over-share restarts' list (``<p>state.restarts``) kept their last 256 entries, a
service's older ones dropped first: past about 190 *other* services' moves (or
restarts) ended within one cool-down (``rebalance.max_moves_per_cycle`` raised, or a
cluster of many small shares), this service's entry left the list, and its genuine
cool-down mark then cooled nothing: a tenant whose many services the daemon moved
pushed another tenant's protection out. Each service's newest entry of the hour now
stays up to ``stampedlist.CAP`` entries (about 150 kB, far under Swarm's 1.5 MiB a
store transaction; a service's older entries still go past 256), and the reader reads
as many. Pure, over the recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from support.forged import P, RecordingSwarm, victim_cluster

from swarmgpu.core.stampedlist import CAP
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.rebalance.endedlist import ENDED, ended_times
from swarmgpu.manager.rebalance.record import drop_record, record_key
from swarmgpu.manager.services.restartlist import RESTARTS, record_restart, restart_times


def _end(sw: RecordingSwarm, writes: Writes) -> Callable[[str, float], None]:
    def end(sid: str, at: float) -> None:
        sw._swarm_labels[record_key(P, sid)] = "{}"
        assert drop_record(writes, P, sid, at, finished=True, started=False)
    return end


def _restart(sw: RecordingSwarm, writes: Writes) -> Callable[[str, float], None]:
    def restart(sid: str, at: float) -> None:
        assert record_restart(writes, P, sid, f"{at:.0f}", at) == ""
    return restart


@pytest.mark.parametrize(("add", "key", "read"), [
    pytest.param(_end, ENDED, ended_times, id="moves-ended"),
    pytest.param(_restart, RESTARTS, restart_times, id="restarts"),
])
def test_many_other_services_within_the_hour_leave_this_ones_entry(
        add: Callable[..., Callable[[str, float], None]], key: str,
        read: Callable[..., dict[str, frozenset[float]]]) -> None:
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    put = add(sw, writes)
    mark = time.time() - 1000
    put("id-third", mark)
    for i in range(600):  # 600 other services, each once, all within the hour
        put(f"id-other-{i}", mark + 1 + i)
    kept = read(sw.swarm_labels(), P)
    assert float(f"{mark:.0f}") in kept.get("id-third", ())
    assert len(kept) == 601


def _full(now: float) -> str:
    """A list of ``CAP`` services' entries, one each, from ``now`` on every half second."""
    return ",".join(f"id-{i}@{now + i * 0.5:.0f}" for i in range(CAP))


def test_a_full_restart_list_refuses_the_restart_and_keeps_every_entry() -> None:
    """Past ``CAP`` services restarted in the hour the restart is not made (its record
    cannot be stored without pushing another's cool-down out), said so; nothing goes."""
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    now = time.time() - 3000
    sw._swarm_labels[P + RESTARTS] = _full(now)
    before = sw.swarm_labels()[P + RESTARTS]
    why = record_restart(writes, P, "id-late", f"{now + 2100:.0f}", now + 2100)
    assert f"holds {CAP} services' restarts" in why
    assert sw.swarm_labels()[P + RESTARTS] == before
    assert len(before.split(",")) == CAP


def test_a_full_ended_list_keeps_its_cap_and_the_newest() -> None:
    """(a move that ended cannot be refused: its oldest entry goes, said in a warning)"""
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    end = _end(sw, writes)
    now = time.time() - 3000
    sw._swarm_labels[P + ENDED] = _full(now)
    for i in range(CAP, CAP + 50):
        end(f"id-{i}", now + i * 0.5)
    text = sw.swarm_labels()[P + ENDED].split(",")
    assert len(text) == CAP
    assert text[-1].startswith(f"id-{CAP + 49}@") and text[0].startswith("id-50@")
