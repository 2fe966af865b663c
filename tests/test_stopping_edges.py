"""Stop 72's edges of the holds for tasks Swarm is stopping (``nominated.StoppingGpus``):
the rebalancer without placement, a global job's run waiting across a rolling stream of
stops, and a service recreated under the name of one whose task still stops."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import FACTS, R4090_F, R_UUIDS, RecordingSwarm, sw_node, sw_svc
from support.placement import DGX, R4090, apply, svc
from support.placement import FACTS as PFACTS
from support.rebalance import SeenPolicy

from swarmgpu.core.config import Config, PlacementConfig, RebalanceConfig, SyncConfig
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.cycle.session import CycleSession
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, Planner, assign_key, gate_key
from swarmgpu.manager.placement.globalmode import RUN_WAIT_CAP_S
from swarmgpu.manager.placement.nominated import STOPPING_PRIORITY, StoppingGpus
from swarmgpu.manager.rebalance import policies
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."


def test_without_placement_the_rebalancer_holds_a_moved_sources_stopping_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """placement.enabled false: a ran on GPU 0 of n-4090; a move rewrote its ledger entry
    to another node and closed its gate there, and its old task, rejected, still stops
    for 10 s. No move lands on GPU 0 meanwhile (``Inputs.held``). Before: the stopping
    holds came from placement's plan alone, and without placement none were held."""
    seen = SeenPolicy()
    monkeypatch.setitem(policies.PLUGINS, "hotspot", lambda _rb: seen)
    a = sw_svc("a", {f"{P}gpus": "1"})
    h = Holding("a", "n-4090", (R_UUIDS[0],), (1000,))
    on = {assign_key(P, "a"): h.label_value(), gate_key(P, "a"): "true"}
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager"),
                         sw_node("n-4090", "gpu-node-2", on)], [a], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=PlacementConfig(enabled=False),
                 rebalance=RebalanceConfig(policies="hotspot"))
    (step,) = [x for x in daemon_steps(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
               if isinstance(x, Rebalancer)]
    t = SwarmTask("t-a", a.id, "n-4090", 1, "running", "running", ())
    for snap in (Snapshot(sw.nodes(), [a], [t], {}, taken_at=1000.0),  # it runs
                 Snapshot([sw_node("n-mgr", "manager", role="manager"),
                           sw_node("n-4090", "gpu-node-2", {})], [a], [], {},
                          taken_at=1005.0,  # moved away: its task rejected, stopping
                          rejected=[replace(t, desired_state="shutdown",
                                            rejected_until=1012.0)])):
        session = CycleSession(snap)
        session.facts, session.scrapes = {"n-4090": R4090_F}, {}
        step.run(session)
    assert seen.inputs[0].held == {}
    assert seen.inputs[1].held == {
        ("n-4090", R_UUIDS[0]): ("tasks stopping on n-4090", STOPPING_PRIORITY)}


def test_a_recreated_services_ledger_entry_is_not_read_as_the_removed_ones_stopping_gpus(
        ) -> None:
    """web (id-old) was live last cycle, its task not yet learned on n-4090; it was
    removed and a new web (id-new) created and placed there on GPU 1, while the old task
    stops (on GPU 0, its own line says where the service pinned it). Its GPUs are not
    read from the entry of the new web (the ledger keys by name only): nothing from it is
    held, only what the task's own line names. Before: the new service's GPU 1 was held
    as the old task's, and the GPU the old container ran on was not."""
    old = replace(sw_svc("web", {}), id="id-old")
    new = replace(sw_svc("web", {}), id="id-new")
    ledger = {"web": {"n-4090": Holding("web", "n-4090", (R_UUIDS[1],), (1000,))}}
    t = SwarmTask("t-old", old.id, "n-4090", 1, "running", "remove", ())
    g = StoppingGpus(P)
    assert g.holds([], [old], {}, [], FACTS) == []
    assert g.holds([t], [new], ledger, [], FACTS) == []
    g = StoppingGpus(P)
    assert g.holds([], [old], {}, [], FACTS) == []
    pinned = replace(t, env=(f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[0]}",))
    (n,) = g.holds([pinned], [new], ledger, [], FACTS)
    assert (n.node_id, n.uuids) == ("n-4090", (R_UUIDS[0],))
    # a removed service whose name no live one has is read by it, as before
    g = StoppingGpus(P)
    assert g.holds([], [old], {}, [], FACTS) == []
    (n,) = g.holds([t], [], ledger, [], FACTS)
    assert n.uuids == (R_UUIDS[1],)


def test_a_global_jobs_run_waits_no_longer_than_its_cap_across_a_rolling_stream_of_stops(
        ) -> None:
    """embed, a global job of 1 GPU, on both GPU nodes; a rolling update stops a new task
    on every GPU of gpu-node-2 each cycle (10 s grace each). Its run waits while it has
    waited less than ``RUN_WAIT_CAP_S`` in all, then starts without gpu-node-2, said so.
    Before: each new stop put the run off again, for as long as the stops kept coming."""
    s = replace(svc("embed", {f"{P}gpus": "1"}), mode="global-job", replicas=None)
    gone = svc("gone", {}, gated=False)
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(g.uuid for g in PFACTS["n-4090"].gpus)
    planner, nodes = Planner(prefix=P), [DGX, R4090]
    t0 = 1000.0
    for k, now in enumerate(t0 + 30.0 * i for i in range(8)):
        t_k = SwarmTask(f"t-{k}", gone.id, "n-4090", 1, "running", "shutdown", (line,))
        plan = planner.plan(nodes, [s], [], PFACTS, now=now, stopping=[t_k])
        (sp,) = plan.services
        assert [p.hostname for p in sp.placements] == ["gpu-node-1"], sp
        if now - t0 < RUN_WAIT_CAP_S:
            assert not sp.needs_service_write, (now, sp)  # its run waits
            assert any(w.startswith("its run waits for gpu-node-2") for w in sp.warnings)
        else:
            assert sp.needs_service_write, (now, sp)  # waited its most: the run goes
            assert "the most it waits" in sp.nodes_waiting["gpu-node-2"], sp
        nodes = apply(nodes, plan)
