"""The holds of stopping tasks and of preemptions while the service list left a service
out (listed without an ID, ``swarm.unkeyed``): a service not listed may be that one.

`plan` and `status` read a preemption's hold from its victim's record
(``recorded_nominations``); a record naming a preemptor not listed was dropped there, as
a removed preemptor's, while the daemon keeps that hold until it settles
(``live_nominations``): `plan` said the preemptor's GPUs were held for the stopping task
from all, the daemon gave them to it.

A stopping task of a service not listed (``StoppingGpus.holds``) is read by the name the
last cycle had for its id, else its own gate constraint's: its GPUs are held as its own
service's, from all, or spared for its own preemptor alone (pinned below)."""

from __future__ import annotations

from support.forged import R_UUIDS, sw_svc, victim_stopping_on_4090s

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.sync import Snapshot, facts_by_node
from swarmgpu.manager.placement import Holding, gate_constraint
from swarmgpu.manager.placement.nominated import Nomination, StoppingGpus, live_nominations
from swarmgpu.manager.placement.recorded import recorded_nominations
from swarmgpu.manager.placement.recreated import Recreated
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.unkeyed import Unkeyed

P = "swarmgpu."
LEFT = ("the engine's answer lists service 3 of 3 with ID None, not a non-empty text: "
        "it is left out")


def _victim_of_a_preemptor_not_listed(left: Unkeyed) -> Snapshot:
    """victim stops on two RTX 4090s, its record naming high 5 s ago there; high is not
    listed (``left``: the list left one out, or none)."""
    return victim_stopping_on_4090s(1000.0, high=False, unkeyed=left)[0]


def _one_shot(snap: Snapshot) -> list[str]:
    return [n.service for n in recorded_nominations(
        snap.services, snap.stopping, facts_by_node(snap), P, 1000.0,
        Config().preemption.settle_s, left_out=bool(snap.unkeyed.services),
        stopped=frozenset({995}))]


def test_plan_keeps_the_hold_of_a_preemptor_not_listed_as_the_daemon_does() -> None:
    snap = _victim_of_a_preemptor_not_listed(Unkeyed(services=(LEFT,)))
    names = {s.name for s in snap.services}
    daemon = [n.service for n in live_nominations(
        [Nomination("high", 100, "n-4090", R_UUIDS[:2], victims=("id-victim",))], names,
        left_out=True)]
    assert daemon == _one_shot(snap) == ["high"]
    # plan's placement reads it so: the victim's GPUs spared for high, not held from all
    assert make_plan(snap, Config()).stopping_waits == frozenset()


def test_plan_drops_the_hold_of_a_preemptor_not_listed_when_none_was_left_out() -> None:
    snap = _victim_of_a_preemptor_not_listed(Unkeyed())
    assert _one_shot(snap) == []
    assert make_plan(snap, Config()).stopping_waits == {("n-4090", u) for u in R_UUIDS[:2]}


LEFTY = sw_svc("lefty", {f"{P}gpus": "1"})
OTHER = sw_svc("other", {f"{P}gpus": "1"})
LEDGER = {"lefty": {"n1": Holding("lefty", "n1", ("GPU-a",), (1000,))},
          "other": {"n1": Holding("other", "n1", ("GPU-b",), (1000,))}}


def _lefty_task(desired: str) -> SwarmTask:
    return SwarmTask("t-l", LEFTY.id, "n1", 1, "running", desired, (),
                     constraints=(gate_constraint(P, "lefty"),))


def _held(holds: list[Nomination]) -> list[tuple[tuple[str, ...], str]]:
    return [(n.uuids, n.owner) for n in holds]


def test_a_stopping_task_of_a_service_left_out_keeps_its_own_gpus_held() -> None:
    """lefty runs on GPU-a, then the list leaves it out as its task stops: the daemon
    (which saw it listed) and a fresh reader (its gate) both hold GPU-a from all, not
    other's GPU-b, and give it to no one."""
    daemon = StoppingGpus(P)
    daemon.holds([], [LEFTY, OTHER], LEDGER, [_lefty_task("running")], now=1000.0)
    stop = [_lefty_task("shutdown")]
    assert _held(daemon.holds(stop, [OTHER], LEDGER, [], now=1005.0)) == [(("GPU-a",), "")]
    fresh = StoppingGpus(P).holds(stop, [OTHER], LEDGER, [], now=1005.0)
    assert _held(fresh) == [(("GPU-a",), "")]


def test_a_stopping_victim_left_out_is_spared_for_its_own_preemptor_alone() -> None:
    stop = [_lefty_task("shutdown")]
    spare = [Nomination("big", 100, "n1", ("GPU-a",), victims=(LEFTY.id,)),
             Nomination("else", 100, "n1", ("GPU-b",), victims=(OTHER.id,))]
    got = StoppingGpus(P).holds(stop, [OTHER], LEDGER, [], spare=spare, now=1005.0)
    assert _held(got) == [(("GPU-a",), "big")]


def test_an_entry_placed_afresh_stays_its_services_after_the_list_left_it_out() -> None:
    """web was removed and created again; its entry on n1 (a half of GPU-a, which the
    removed one's task still stops on) was disowned and web placed afresh there. A cycle
    whose list leaves web out, then web listed again, the old task still stopping: the
    entry is still web's own (``Recreated``). Before, the memory went with the cycle
    that did not list web (taken for removed), and the entry was disowned again: web
    placed afresh once more, its gate closed in turn."""
    web = sw_svc("web", {f"{P}gpus": "0.5"})
    ledger = {"web": {"n1": Holding("web", "n1", ("GPU-a",), (500,))}}
    old = SwarmTask("t-old", "id-old", "n1", 1, "running", "shutdown", (),
                    constraints=(gate_constraint(P, "web"),))
    memory, last = Recreated(), {"id-old": "web"}

    def cycle(services: list[SwarmService], left_out: bool) -> frozenset[tuple[str, str]]:
        return memory.entries(services, [old], ledger, last, [], P,
                              lambda t: {"GPU-a"}, left_out)

    assert cycle([web], False) == {("web", "n1")}  # disowned: placed afresh there
    assert cycle([], True) == frozenset()  # web left out of the list
    assert cycle([web], False) == frozenset()  # still the one it was placed on afresh
