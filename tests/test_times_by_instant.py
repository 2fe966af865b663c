"""Docker's times (CreatedAt) ordered by their instant, never by their text. Go's
RFC3339Nano drops trailing zeros, so one time has any number of fraction digits
("...00.5Z", "...00.55Z", "...00Z"), and as text "...00.5Z" sorts after "...00.55Z"
('Z' is above '5') though it is earlier. Before, the preemption round's starts (its
newest task, the victim rule, a victim set's start) and the serve order compared the
text. Pure: the lists as Swarm answers them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from support.forged import FACTS, R_UUIDS, held_labels, held_on_4090s, sw_node, sw_svc
from support.task_watch import Seen, TaskWatch

from swarmgpu.manager.placement import Planner, devices_key
from swarmgpu.manager.placement.preempt import (
    Candidate,
    choose_preemptions,
    newest_first,
    rule_sorted,
    serve_order,
)
from swarmgpu.manager.placement.preemptview import task_starts
from swarmgpu.manager.placement.records import Status
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_epoch, rfc3339_ns

P = "swarmgpu."
EARLY, LATE = "2026-01-01T10:00:00.5Z", "2026-01-01T10:00:00.55Z"  # LATE < EARLY as text
PRODUCT = {f"{P}gpu-product": "*RTX 4090*"}


def _cand(name: str, started: str, priority: int = 0) -> Candidate:
    return Candidate(name, "id-" + name, "n", priority, started, ("u-" + name,))


def _task(s: SwarmService, node: str, created: str, tid: str = "") -> SwarmTask:
    return SwarmTask(tid or f"t-{s.name}", s.id, node, 1, "running", "running", (),
                     created_at=created)


def test_an_instant_reads_exactly_whatever_its_fraction_length() -> None:
    """Nanoseconds, exact (a float's epoch seconds keep about a tenth of a microsecond),
    offsets to UTC; the float reader is the same parse."""
    assert rfc3339_ns(EARLY) == 1767261600_500_000_000
    assert rfc3339_ns(LATE) == 1767261600_550_000_000
    assert rfc3339_ns("2026-01-01T10:00:00.000000001Z") == 1767261600_000_000_001
    assert rfc3339_ns("2026-01-01T11:00:00.5+01:00") == rfc3339_ns(EARLY)
    assert rfc3339_epoch(EARLY) == 1767261600.5
    assert rfc3339_ns("") is None and rfc3339_ns("yesterday") is None
    assert rfc3339_ns(None) is None


def test_a_holders_start_is_its_newest_task_by_the_instant() -> None:
    """Two tasks of one service on a node, made at .5 s and .55 s: its start is the
    .55 s one's (before, the text's greatest: .5 s). A time that does not read tells
    nothing: the other's start is kept, and one with none at all reads "" (none)."""
    s = sw_svc("s", {f"{P}gpus": "1"})
    u = sw_svc("u", {f"{P}gpus": "1"})
    got = task_starts([_task(s, "n", LATE, "t1"), _task(s, "n", EARLY, "t2"),
                       _task(s, "m", "garbage", "t3"), _task(s, "m", EARLY, "t4"),
                       _task(u, "n", "not a time", "t5")])
    assert got.get((s.id, "n")) == LATE
    assert got.get((s.id, "m")) == EARLY
    assert got.get((u.id, "n"), "") == ""


def test_the_rule_puts_the_later_start_first_whatever_its_digits() -> None:
    """Of one priority, the most recently started first: .55 s before .5 s, and a whole
    second ("...01Z") before both; not started ("" or a time that does not read) first."""
    got = rule_sorted([_cand("a", EARLY), _cand("b", LATE),
                       _cand("c", "2026-01-01T10:00:01Z"), _cand("d", "")])
    assert [c.service for c in got] == ["d", "c", "b", "a"]


def test_a_victim_set_of_the_later_start_ranks_as_the_newer() -> None:
    """``newest_first``: least for the newest. A set started at .55 s is newer than one
    at .5 s (before, the text made the .5 s one newer); not started, newest of all."""
    late, early = newest_first([_cand("b", LATE)]), newest_first([_cand("a", EARLY)])
    assert late < early
    assert newest_first([_cand("n", "")]) < late
    # its earliest start among the highest priority: .5 s, though .55 s's text is less
    assert newest_first([_cand("a", EARLY), _cand("b", LATE)]) == early


def test_serve_order_takes_the_older_service_first_whatever_its_digits() -> None:
    """Two services of one priority, made at .5 s and .55 s: the .5 s one is older and
    served first (before, the text served the .55 s one first); one whose time does not
    read sorts first, as one with none ("") did."""
    r = GpuRequest(gpus=1)
    a, b = sw_svc("a", {}), sw_svc("b", {})
    c = sw_svc("c", {})
    got = serve_order([(replace(a, created_at=LATE), r), (replace(b, created_at=EARLY), r),
                       (replace(c, created_at="bad"), r)])
    assert [s.name for s, _ in got] == ["c", "b", "a"]


def test_the_planner_places_the_older_of_two_waiting_services() -> None:
    """One RTX 4090 free on n-4090; "a" (made at .55 s) and "b" (at .5 s, the older)
    both want it at one priority: b is served first and placed, a waits."""
    labels: dict[str, str] = {}
    held = []
    for i, u in enumerate(R_UUIDS[:7]):
        labels |= held_labels(f"v{i}", "n-4090", u)
        held.append(sw_svc(f"v{i}", {f"{P}gpus": "1", devices_key(P, "n-4090"): u}))
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2", labels)]
    a = replace(sw_svc("a", {f"{P}gpus": "1", **PRODUCT}), created_at=LATE)
    b = replace(sw_svc("b", {f"{P}gpus": "1", **PRODUCT}), created_at=EARLY)
    tasks = [_task(s, "n-4090", "2026-01-01T09:00:00Z") for s in held]
    plan = Planner().plan(nodes, [*held, a, b], tasks, FACTS)
    status = {sp.name: sp.status for sp in plan.services}
    assert (status["a"], status["b"]) == (Status.PENDING, Status.PLACED)


def test_a_preemptor_stops_the_holder_started_last_whatever_its_digits() -> None:
    """n-4090's eight RTX 4090s are held at priority 0; v6's task was made at .5 s, v7's
    at .55 s, the others hours before. hi (priority 100) needs one: v7 goes, the most
    recently started (before, the text made v6 the newer, and v6 went)."""
    names = [f"v{i}" for i in range(8)]
    nodes, held = held_on_4090s(names)
    starts = [f"2026-01-01T0{i}:00:00Z" for i in range(6)] + [EARLY, LATE]
    tasks = [_task(s, "n-4090", at) for s, at in zip(held, starts, strict=True)]
    hi = sw_svc("hi", {f"{P}gpus": "1", f"{P}priority": "100", **PRODUCT})
    services = [*held, hi]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [(p.service, [v.service for v in p.victims]) for p in got] == [("hi", ["v7"])]


def test_the_swarm_tests_task_watch_lists_a_services_tasks_oldest_first() -> None:
    """The swarm tests read the newest task that ran as the last one ``TaskWatch.of``
    lists: the .55 s one after the .5 s one (before, the text listed .5 s last)."""
    w = TaskWatch(cast(Any, None), ["s"])  # (not entered: no poll, no swarm)
    w.seen = {tid: Seen(tid, "s", at) for tid, at in
              (("t-late", LATE), ("t-early", EARLY), ("t-first", "2026-01-01T10:00:00Z"))}
    assert [s.task_id for s in w.of("s")] == ["t-first", "t-early", "t-late"]
