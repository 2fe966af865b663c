"""The facts watch between cycles (``Daemon._watch_facts``): a cycle starts early only
when an agent's facts changed, not because the daemon's own record of them differs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.core.health import HealthSignals, XidEvent
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.nodes.watchkey import facts_key
from swarmgpu.swarm.client import SwarmNode


def _node() -> SwarmNode:
    return SwarmNode("n1", "gpu-node-1", "10.0.0.1", "worker", "ready", "active", {}, {}, 1,
                     {}, {})


def _facts(health: HealthSignals) -> dict[str, FactsResult]:
    f = NodeFacts("gpu-node-1", gpus=(
        Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", 81920, health=health),
        Gpu(1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", 81920),
    ))
    return {"n1": FactsResult("n1", "gpu-node-1", "", f, None, 0.0)}


def _daemon(tmp: Path) -> Daemon:
    cfg = Config(state_dir=str(tmp), dry_run=True,
                 sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=5),
                 http=HttpConfig(listen="127.0.0.1:0"))
    return Daemon(cfg, swarm=EmptySwarm())  # type: ignore[arg-type]


def _watched(tmp: Path, monkeypatch: pytest.MonkeyPatch, recorded: HealthSignals,
             answered: HealthSignals) -> list[Any]:
    """One facts watch of a leader whose last cycle recorded GPU 0 with ``recorded``
    health, its agent answering ``answered``: a 1 for each cycle it started."""
    d = _daemon(tmp)
    d.leader = True
    d.labels.cycle(Snapshot([_node()], [], [], _facts(recorded)))
    monkeypatch.setattr("swarmgpu.manager.daemon.fetch_agents",
                        lambda *_a, **_k: _facts(answered))
    monkeypatch.setattr(d.swarm, "nodes", lambda: [_node()], raising=False)
    runs: list[Any] = []
    monkeypatch.setattr(d, "trigger", lambda why: runs.append(1) if why == "facts" else None)
    d._watch_facts()
    return runs


@pytest.mark.parametrize("health", [
    HealthSignals(xid_events=(XidEvent(79, 100.0),)),  # failed
    HealthSignals(row_remap_pending=True),  # degraded
], ids=["failed", "degraded"])
def test_facts_watch_starts_no_cycle_for_the_same_facts_of_a_sick_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, health: HealthSignals,
) -> None:
    """The cycle records each node's facts with its GPUs' health states applied (a failed
    GPU unhealthy, a note in its error); the watch compared the agent's raw answer with
    that record, found them different every time while a GPU was not healthy, and started
    a full cycle every agents.watch_s (5 s) instead of every sync.interval_s."""
    runs = _watched(tmp_path, monkeypatch, health, health)
    assert runs == [], "the same facts as last cycle's started a cycle"


def test_facts_watch_starts_a_cycle_when_a_gpu_falls_sick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change the agent reports (a new Xid) still starts a cycle now."""
    sick = HealthSignals(xid_events=(XidEvent(79, 100.0),))
    assert _watched(tmp_path, monkeypatch, HealthSignals(), sick) == [1]


@pytest.mark.parametrize(("recorded", "answered"), [
    # a GPU going idle or busy flips its idle and software power cap reasons
    (HealthSignals(throttle_reasons=0x1), HealthSignals(throttle_reasons=0x4)),
    # correctable counters the health policy does not judge, growing as they do
    (HealthSignals(ecc_sbe_volatile=1, nvlink_crc_errors=10, row_remap_correctable=0),
     HealthSignals(ecc_sbe_volatile=3, nvlink_crc_errors=12, row_remap_correctable=1)),
], ids=["idle-to-busy", "correctable-counters"])
def test_facts_watch_starts_no_cycle_for_readings_no_cycle_acts_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: HealthSignals,
    answered: HealthSignals,
) -> None:
    """The watch compared every health reading: a GPU's idle bit (set whenever it waits
    for work) and its software power cap (set under load) flip all day, and a cycle
    started every agents.watch_s on a cluster at work. A change is what a cycle acts on:
    the GPUs and their health as judged (``health.assess``)."""
    assert _watched(tmp_path, monkeypatch, recorded, answered) == []


def test_facts_watch_starts_a_cycle_when_the_hardware_slows_a_gpu_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reason the health policy judges (HW slowdown, 0x08: degraded) is a change."""
    assert _watched(tmp_path, monkeypatch, HealthSignals(throttle_reasons=0x1),
                    HealthSignals(throttle_reasons=0x1 | 0x08)) == [1]


def test_facts_watch_starts_no_cycle_for_the_same_gpus_listed_in_another_order() -> None:
    """An agent listing its GPUs (or a GPU's MIG devices) in another order reports no
    change a cycle acts on (labels take the lowest-indexed GPU: docs/deploy.md): compared
    as listed, each such answer started a full cycle early."""
    a = Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", 81920, mig_capable=True, mig_enabled=True,
            mig_devices=(MigDevice("1g.10gb", "MIG-1", 9728, 1, 0),
                         MigDevice("2g.20gb", "MIG-2", 19968, 2, 0)))
    b = Gpu(1, "GPU-bbbb", "NVIDIA H100 80GB HBM3", 81559, health=HealthSignals())
    listed = NodeFacts("gpu-node-1", gpus=(a, b))
    again = NodeFacts("gpu-node-1", gpus=(b, replace(a, mig_devices=a.mig_devices[::-1])))
    assert facts_key(again) == facts_key(listed)
    assert facts_key(NodeFacts("gpu-node-1", gpus=(b,))) != facts_key(listed)


def test_facts_watch_reads_the_links_by_the_gpus_they_join_not_their_place_in_the_list(
        ) -> None:
    """The links matrix is by list position: the same GPUs listed in another order with
    their links reordered alike change nothing; the same matrix kept as the GPUs move
    joins other GPUs, a topology change. Before, the GPUs were compared sorted and the
    matrix as listed: the first started a cycle, the second none."""
    gpus = tuple(Gpu(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", 81559) for i in range(3))
    links = (("X", "PHB", "NV4"), ("PHB", "X", "SYS"), ("NV4", "SYS", "X"))
    listed = NodeFacts("gpu-node-1", gpus=gpus, links=links)
    order = (1, 0, 2)
    moved = tuple(gpus[i] for i in order)
    alike = tuple(tuple(links[i][j] for j in order) for i in order)
    assert facts_key(NodeFacts("gpu-node-1", gpus=moved, links=alike)) == facts_key(listed)
    assert facts_key(NodeFacts("gpu-node-1", gpus=moved, links=links)) != facts_key(listed)
