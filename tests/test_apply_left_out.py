"""``swarmgpu apply --service NAME`` for a name the service list lacks: while the
engine's list left a service out (listed without an ID, ``swarm.unkeyed``), it may be
that one, and the error says so with the entry's message and its fix. Before, it said
only "no service NAME", as if the name were a typo."""

from __future__ import annotations

from support.forged import RecordingSwarm, victim_cluster

from swarmgpu.core.config import Config
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.services.release import release_held
from swarmgpu.swarm.unkeyed import UNKEYED_FIX, Unkeyed

LEFT = ("the engine's answer lists service 2 of 3 (name 'llm') with ID None, not a "
        f"non-empty text: it is left out, nothing is read of it or written to it; {UNKEYED_FIX}")


def _error(sw: RecordingSwarm, unkeyed: Unkeyed) -> str:
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, unkeyed=unkeyed)
    (r,) = release_held(sw, snap, Config(), ["llm"], dry_run=True)  # type: ignore[arg-type]
    assert r.error is not None and not r.written
    return r.error


def test_a_name_not_listed_says_the_list_left_a_service_out() -> None:
    sw = victim_cluster({})
    err = _error(sw, Unkeyed(services=(LEFT, LEFT)))
    assert err.startswith("no service 'llm' with a swarmgpu GPU request; it may be a "
                          "service the engine's list left out")
    assert LEFT in err and UNKEYED_FIX in err and err.endswith("(and 1 more)")


def test_a_name_not_listed_is_said_alone_when_none_was_left_out() -> None:
    assert _error(victim_cluster({}), Unkeyed()) == (
        "no service 'llm' with a swarmgpu GPU request")
