"""The victim rule's "most recently started" counts a task desired ``ready`` on the
node (``placement.keys.MEANT_STATES``): a victim restarting right now (its old task
shut down, its new one made, not yet started) has lost its work already. Pure: the
lists as Swarm answers them."""

from __future__ import annotations

from dataclasses import replace

from support.forged import FACTS, held_on_4090s, sw_svc

from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."


def test_a_victim_restarting_now_counts_as_the_most_recently_started() -> None:
    """v1..v8 hold one RTX 4090 each, started in that order; v1's task has just
    restarted (old one shut down, the new one desired ready, made last). Before, only
    tasks desired running counted: v1 ranked as started never ("") and v8 was stopped
    though v1's work was already lost. Now v1 goes."""
    names = [f"v{i}" for i in range(1, 9)]
    nodes, held = held_on_4090s(names)
    hi = sw_svc("hi", {f"{P}gpus": "1", f"{P}gpu-product": "*RTX 4090*",
                       f"{P}priority": "100"})
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-4090", 1, "running", "running", (),
                       created_at=f"2026-01-01T10:0{i}:00Z") for i, s in enumerate(held)]
    tasks[0] = replace(tasks[0], desired_state="shutdown", state="failed")
    tasks.append(SwarmTask("t-v1-new", held[0].id, "n-4090", 1, "ready", "ready", (),
                           created_at="2026-01-01T10:09:00Z"))
    services = [*held, hi]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [(p.service, [v.service for v in p.victims]) for p in got] == [("hi", ["v1"])]
