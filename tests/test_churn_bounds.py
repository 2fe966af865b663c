"""The daemon's memory across cycles shrinks back when what it names goes: services,
nodes and GPUs come and go for months (CI stacks every few minutes, nodes replaced), and
state kept by a name or ID that no longer exists is memory (and a state file) that only
grows. Each test makes many objects, runs the component's per-cycle entry point, lets
them go and runs it again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from support.forged import R4090_F, RecordingSwarm, sw_node, sw_svc

from swarmgpu.core.config import Config, HealthConfig, RebalanceConfig
from swarmgpu.core.httpguard import GuardedServer, OneRequestHandler
from swarmgpu.core.model import MAX_GPUS, NodeFacts
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.gpuhealth import HealthBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.manager.services.overshare import Restarter, ServiceUse, Watch
from swarmgpu.swarm.client import SwarmNode

N = 1000  # objects made and gone


def test_preemption_settle_times_of_gone_services_are_dropped() -> None:
    """A victim's cooldown (by service id) and a preemptor's settle time; past them
    a time decides nothing, and a month of CI stacks left one each in memory for good."""
    cfg = Config()
    pre = Preempter(cfg)
    for i in range(N):  # as cycle() leaves them after N preemptions at t=1000
        pre.victim_at[f"ci-{i}_victim"] = 1000.0
        pre.preemptor_at[f"ci-{i}_job"] = 1000.0
    snap = Snapshot([], [], [], {})
    plan = make_plan(snap, cfg)
    at = 1000.0 + cfg.preemption.settle_s - 1
    pre.decide(snap, plan, {}, None, at, mono=at)
    assert len(pre.preemptor_at) == N  # still settling: kept
    at = 1000.0 + cfg.preemption.victim_cooldown_s - 1
    pre.decide(snap, plan, {}, None, at, mono=at)
    assert not pre.preemptor_at and len(pre.victim_at) == N  # still cooling: kept
    pre.decide(snap, plan, {}, None, at + 1, mono=at + 1)
    assert not pre.victim_at


def _results(nodes: list[SwarmNode]) -> dict[str, FactsResult]:
    return {
        n.id: FactsResult(
            n.id, n.hostname, f"https://{n.hostname}:9101/facts", R4090_F, None, 1000.0
        )
        for n in nodes
    }


def test_agent_records_of_nodes_gone_from_the_swarm_are_dropped(tmp_path: Path) -> None:
    """A replaced node comes back under a new ID: the old one's agent record (its last
    facts) stayed in memory and in agents.json, saved every cycle, for good."""
    nodes = [sw_node(f"n-{i}", f"gpu-{i}") for i in range(N // 10)]
    sw = RecordingSwarm(nodes, [], [])
    cfg = Config(dry_run=True, state_dir=str(tmp_path))
    book = AgentBook()
    sync = LabelSync(sw, cfg, DaemonMetrics(), book)  # type: ignore[arg-type]
    sync.cycle(Snapshot(nodes, [], [], _results(nodes)))
    assert len(book.records) == len(nodes)
    sync.cycle(Snapshot(nodes[:1], [], [], _results(nodes[:1])))
    assert list(book.records) == [nodes[0].id]


def _gpus(tag: str, n: int, *, healthy: bool = True) -> NodeFacts:
    gpu = R4090_F.gpus[0]
    return replace(
        R4090_F,
        gpus=tuple(
            replace(
                gpu,
                index=i,
                uuid=f"GPU-{tag}-{i:04d}",
                healthy=healthy,
                error=None if healthy else "lost",
            )
            for i in range(n)
        ),
    )


def test_gpu_health_of_nodes_gone_from_the_swarm_is_dropped() -> None:
    """States are by node ID and UUID: a replaced node's stayed in memory and in
    gpu-health.json for good, failed ones too."""
    book = HealthBook(HealthConfig(), "swarmgpu.")
    nodes = [sw_node(f"n-{i}", f"gpu-{i}") for i in range(N // 10)]
    res = {
        n.id: replace(r, facts=_gpus(n.id, 8, healthy=i % 2 == 0))
        for i, (n, r) in enumerate(zip(nodes, _results(nodes).values(), strict=True))
    }
    book.apply(nodes, res, now=1000.0)
    assert len(book.states) == len(book.where) == 8 * len(nodes)
    book.apply(nodes[:1], {nodes[0].id: res[nodes[0].id]}, now=1010.0)
    assert len(book.states) == len(book.where) == 8 and list(book.nodes) == [nodes[0].id]


def test_an_agent_listing_new_gpu_uuids_each_cycle_grows_no_health_state() -> None:
    """An agent (broken or hostile) naming 64 new GPUs a cycle: those healthy are
    forgotten once unlisted, those failed kept up to MAX_GPUS for the node, the latest
    first; a GPU its agent no longer lists keeps its failed state (no news is not good
    news)."""
    book = HealthBook(HealthConfig(), "swarmgpu.")
    (node,) = nodes = [sw_node("n-0", "gpu-0")]
    (r,) = _results(nodes).values()
    book.apply(nodes, {node.id: replace(r, facts=_gpus("real", 2, healthy=False))}, now=10.0)
    for c in range(50):
        book.apply(nodes, {node.id: replace(r, facts=_gpus(f"c{c}", MAX_GPUS))}, now=100.0 + c)
    assert len(book.states) == MAX_GPUS + 2  # this cycle's, and the 2 failed ones
    for c in range(50):
        book.apply(
            nodes,
            {node.id: replace(r, facts=_gpus(f"f{c}", MAX_GPUS, healthy=False))},
            now=1000.0 + c,
        )
    assert len(book.states) == 2 * MAX_GPUS
    assert not any("real" in k for k in book.states)  # the oldest bad went first


def test_window_states_of_gpus_and_nodes_gone_are_dropped() -> None:
    """The rebalancer's windows kept a hot/idle/fragmentation state per GPU and node
    ever seen after their series went: the state goes with the series."""
    sig = Signals(RebalanceConfig())
    facts = {f"n-{i}": _gpus(f"n-{i}", 8) for i in range(N // 10)}
    sig.observe({}, facts, {}, {}, 1000.0)
    assert len(sig.hot) == len(sig.idle) == 8 * len(facts) and len(sig.frag) == len(facts)
    sig.observe({}, {"n-0": facts["n-0"]}, {}, {}, 1010.0)
    assert (len(sig.hot), len(sig.idle), len(sig.frag)) == (8, 8, 1)


def _use(service: str, uuid: str, used: int) -> ServiceUse:
    return ServiceUse(service, "n-0", "gpu-0", 0, uuid, used, 1000, 250)


def test_over_share_windows_of_services_gone_are_dropped() -> None:
    """A holder over its share, then removed (a CI stack), while the GPU it held is still
    read with other holders: its window stayed open for good."""
    watch = Watch(clock=lambda: 1000.0)
    watch.update([_use(f"ci-{i}", f"GPU-{i % 8}", 2000) for i in range(N)])
    assert len(watch.since) == N
    watch.update([_use("keeper", f"GPU-{i}", 10) for i in range(8)])
    assert not watch.since
    # A GPU not read this cycle keeps the windows of its holders (its reading is missing).
    watch.update([_use("a", "GPU-0", 2000), _use("b", "GPU-1", 2000)])
    watch.update([_use("a", "GPU-0", 2000)])
    assert set(watch.since) == {("a", "n-0", "GPU-0"), ("b", "n-0", "GPU-1")}


def test_over_share_restart_notes_of_holders_no_longer_due_are_dropped() -> None:
    """A restart "not done: <why>" is said once per holder while it is due; the reasons of
    holders no longer due (a CI stack removed) stayed in memory for good."""
    svcs = [sw_svc(f"ci-{i}", {"swarmgpu.rebalance": "never"}) for i in range(N // 10)]
    sw = RecordingSwarm([sw_node("n-0", "gpu-0")], svcs, [])
    base = Config()
    cfg = replace(base, placement=replace(base.placement, overshare="restart"))
    r = Restarter(sw, cfg, wait_s=0.0)  # type: ignore[arg-type]
    snap = Snapshot(sw.nodes(), sw.services(), [], {})
    r.run([_use(s.name, "GPU-0", 2000) for s in svcs], snap)
    assert len(r.said) == len(svcs)
    r.run([_use("ci-0", "GPU-0", 2000)], snap)
    assert list(r.said) == [("ci-0", "n-0", "GPU-0")]
    r.run([], snap)
    assert not r.said


def test_a_megabyte_request_label_makes_a_short_reason() -> None:
    """A tenant may write a 1 MB label on their service: an unknown key's value, or the
    key itself, went whole into the invalid reason, logged every cycle and kept in the
    plan and the map's document; it is cut, saying how long it was."""
    big = "x" * 1_000_000
    svcs = [
        sw_svc("by-value", {"swarmgpu.gpuz": big}),
        sw_svc("by-key", {"swarmgpu.gpus": "1", f"swarmgpu.{big}": "1"}),
    ]
    facts = _results([sw_node("n-0", "gpu-0")])
    plan = make_plan(Snapshot([sw_node("n-0", "gpu-0")], svcs, [], facts), Config(), facts)
    for sp in plan.services:
        assert sp.status == "invalid" and len(sp.reason or "") < 2000, sp.name
        assert " characters]" in (sp.reason or ""), sp.name  # says it was cut


def test_a_flood_from_many_addresses_counts_turned_away_ones_in_bounded_memory() -> None:
    """Connections turned away are counted by address for the next log line (every 10
    s): a flood from 100,000 addresses (IPv6 gives anyone that many) kept a count for each
    until then; past a cap the rest are counted together."""
    srv = GuardedServer(("127.0.0.1", 0), OneRequestHandler)
    try:
        srv._turn_away("refused", "10.0.0.1")  # logs now: the window starts
        for i in range(100_000):
            srv._turn_away("refused", f"2001:db8::{i:x}")
        assert len(srv._turned_away) <= 1100
        assert sum(srv._turned_away.values()) == 100_000 and srv.refused_total == 100_001
    finally:
        srv.server_close()
