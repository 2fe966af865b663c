"""The health rebalance policy, pure: snapshot (facts carrying each GPU's health state, as
``manager.nodes.gpuhealth`` marks them) in, moves and releases out; its budget, report-only
mode, degraded GPUs, whole failing nodes; and placement keeping a failed holding for it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml
from loguru import logger
from support.health import CFG, F1, F2, U2, P, mark, plan, service, setup
from support.placement import apply

from swarmgpu.core.config import (
    Config,
    ConfigError,
    HealthConfig,
    RebalanceConfig,
    load_config,
)
from swarmgpu.core.health import Level
from swarmgpu.core.metrics_in import parse_metrics
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.core.rebalanceconfig import HealthPolicyConfig
from swarmgpu.manager.cycle.placement import new_planner
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.gpuhealth import HealthBook, level_of
from swarmgpu.manager.placement import MOVE_STATE, Planner
from swarmgpu.manager.rebalance.budget import HOUR_S
from swarmgpu.manager.rebalance.moves import HealthInputs, Trigger
from swarmgpu.manager.rebalance.policies.health import HealthBudget
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

U1 = [g.uuid for g in F1.gpus]


def test_holder_of_a_failed_gpu_moves_to_the_healthy_gpu_on_the_other_node() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert len(p.moves) == 1, p.notes
    m = p.moves[0]
    assert (m.service, m.trigger, m.source_host, m.target_host) == (
        "a", Trigger.HEALTH, "gpu-node-2", "gpu-node-1")
    assert m.window_s is None  # no utilisation window: it does not wait
    assert "Xid 79: GPU has fallen off the bus" in m.reason and U2[0] in m.reason
    assert m.target_uuids[0] in U1 and F1.gpus[U1.index(m.target_uuids[0])].mig_enabled is False
    assert p.failed_holders == {("a", "n2")} and not p.releases
    # "big" holds healthy GPUs only: nothing else moves, whatever the other policies say
    assert [x.service for x in p.moves] == ["a"]


def test_same_node_target_is_a_repin_move() -> None:
    """Its best healthy GPU on its own node (here the only one its constraint allows): a
    move that stays on its node, which the mover makes as a repin."""
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False,
                               constraints={"a": ["node.hostname==gpu-node-2"]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert [(m.service, m.source_node, m.target_node, m.trigger) for m in p.moves] == [
        ("a", "n2", "n2", Trigger.HEALTH)]
    assert U2[0] not in p.moves[0].target_uuids and "Xid 79" in p.moves[0].reason
    assert not p.releases


def test_a_holder_the_mover_may_not_move_is_released_to_placement() -> None:
    """Opted out of rebalancing: placement re-places it (as it always re-placed a holder
    of a failed GPU), once, within the health budget."""
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False,
                               svc_labels={"a": {f"{P}rebalance": "never"}})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert not p.moves
    assert [(r.service, r.host) for r in p.releases] == [("a", "gpu-node-2")]
    assert "Xid 79" in p.releases[0].reason and "opted out" in p.releases[0].reason
    # released: it is not proposed again while placement re-places it
    again = plan(nodes, svcs, tasks, mark(F2, failed=[0]),
                 HealthInputs(left=2, released=frozenset({("a", "n2")})))
    assert not again.moves and not again.releases
    assert any("left to placement" in n for n in again.notes)


def test_a_holder_whose_namesakes_entry_lasts_is_proposed_no_move_its_start_refuses(
) -> None:
    """A removed service of a's name left an entry on gpu-node-1, its task stopping, that
    placement read as the removed one's (``PlacementPlan.dropped``: not in the ledger the
    policy reads). The mover's admission and a move's (or repin's) start read a's
    holdings by name, that entry among them: not converged, refused. Before, the health
    policy judged a movable on the ledger without it: the same move proposed, refused and
    logged every cycle while the entry lasted, the failed GPU's holder never released."""
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), dropped=frozenset({("a", "n1")}))
    assert not p.moves, p.moves  # (no healthy GPU on its own node: it stays, said so)
    assert any("a on gpu-node-2 stays" in n for n in p.notes), p.notes
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False)  # room on its own node
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), dropped=frozenset({("a", "n1")}))
    assert not p.moves, p.moves
    assert [(r.service, r.host) for r in p.releases] == [("a", "gpu-node-2")]
    assert "removed service of its name" in p.releases[0].reason


def test_a_holder_staying_for_its_namesakes_entry_is_said_to_stay_for_it() -> None:
    """a may not move off gpu-node-2 while a removed service of its name has an entry on
    gpu-node-1, and its own node has no healthy GPU free: it stays. Before, the note said
    "no healthy GPU free for it", with gpu-node-1's all free, and named no entry."""
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), dropped=frozenset({("a", "n1")}))
    (said,) = [n for n in p.notes if n.startswith("a on gpu-node-2 stays")]
    assert "free for it on its own node" in said, said
    assert "removed service of its name still has an entry on gpu-node-1" in said, said


def test_a_global_service_is_never_moved_between_nodes_only_repinned() -> None:
    nodes, svcs, tasks = setup({"g": [U2[0]]}, full_n2=False, modes={"g": "global"})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert [(m.service, m.source_node, m.target_node) for m in p.moves] == [("g", "n2", "n2")]
    assert not p.releases


def test_evacuate_false_reports_only() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), HealthInputs(evacuate=False, left=5))
    assert not p.moves and not p.releases
    assert any("stays (health.evacuate: false)" in n and "Xid 79" in n for n in p.notes)
    assert p.failed_holders == {("a", "n2")}  # placement keeps it: nothing moves


def test_a_degraded_gpu_moves_nothing() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    p = plan(nodes, svcs, tasks, mark(F2, degraded=[0]), HealthInputs(left=5))
    assert not p.moves and not p.releases and not p.failed_holders


def test_budget_moves_one_and_says_why_the_other_waits() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]], "b": [U2[1]]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]),
             HealthInputs(left=1, left_why="budget: 12 health move(s) per hour"))
    assert [m.service for m in p.moves] == ["a"]
    assert any(n.startswith("b on gpu-node-2 waits for the health budget: budget: 12")
               for n in p.notes)
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]), HealthInputs(left=0, left_why="x"))
    assert not p.moves


def test_budget_per_hour_and_per_cycle() -> None:
    b = HealthBudget(per_hour=2)
    assert b.left(0.0, 5, []) == (2, "")
    left, why = b.left(20.0, 5, [0.0, 10.0])
    assert left == 0 and "2 health move(s) per hour (2 in the last hour)" in why
    assert b.left(HOUR_S + 11.0, 5, [0.0, 10.0]) == (2, "")  # the hour rolls
    assert b.left(HOUR_S + 11.0, 1, [0.0, 10.0]) == (1, "")
    assert b.left(0.0, 0, [])[0] == 0


def test_a_new_daemon_sees_the_hours_spent_health_budget_in_swarm(tmp_path: Path) -> None:
    """The hour's health moves and releases are counted from the swarm object (records in
    flight, the list of ended ones and of releases), so a restarted daemon or a new
    leader over the same swarm cannot start a fresh hour; the list stays bounded."""
    from support.forged import RecordingSwarm, victim_cluster, victim_move

    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.moves import Outcome, Release
    from swarmgpu.manager.rebalance.record import HEALTH_KEEP, HEALTH_SPENT

    sw: RecordingSwarm = victim_cluster({})
    cfg = Config(state_dir=str(tmp_path), health=HealthConfig(evacuations_per_hour=2))
    clock = [1000.0]

    def daemon() -> tuple[Daemon, Rebalancer]:
        d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
        rb = Rebalancer(d)
        rb.health_mover.clock = rb.health_mover.repin.clock = lambda: clock[0]
        return d, rb

    def left(d: Daemon, rb: Rebalancer) -> tuple[int, str]:
        h = rb.health_inputs(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                      taken_at=clock[0]))
        return h.left, h.left_why

    d, rb = daemon()
    assert left(d, rb) == (2, "")
    move = replace(victim_move(), trigger=Trigger.HEALTH, window_s=None, reason="health: x")
    rb.health_mover.run_cycle([move], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in rb.health_mover.recent] == [Outcome.STARTED]
    rb._release(Release("third", "n-4090", "gpu-node-2", "health: y"), clock[0])
    d2, rb2 = daemon()  # a restart, or a new leader: the same swarm labels
    n, why = left(d2, rb2)
    assert n == 0 and "(2 in the last hour)" in why
    # the move ends (its record goes): its start stays counted in the list
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    for _ in range(3):
        rb2.health_mover.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")
    assert Outcome.DONE in [r.outcome for r in rb2.health_mover.recent]
    assert not any(k.startswith(f"{P}state.moves.") for k in sw.swarm_labels())
    assert left(*daemon())[0] == 0
    clock[0] += HOUR_S + 1  # the hour rolls: the budget is back
    assert left(*daemon()) == (2, "")
    # bounded: the list keeps only the last hour's, at most HEALTH_KEEP entries
    for _ in range(HEALTH_KEEP + 5):
        rb2._release(Release("third", "n-4090", "gpu-node-2", "health: y"), clock[0])
    assert len(sw.swarm_labels()[P + HEALTH_SPENT].split(",")) == HEALTH_KEEP


def test_an_unreadable_move_record_counts_in_the_health_hour_and_is_said(
        tmp_path: Path) -> None:
    """A move record that cannot be read may be a health move under way (its trigger and
    start unknown): the hour counts it as one started now, as the move budgets count it
    in flight, and the budget's reason says so. Before: it was left out of the hour."""
    from support.forged import victim_cluster

    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.record import health_spent, record_key

    key = record_key(P, "id-victim")
    labels = {key: '{"id": 1}', f"{P}state.health-spent": "900"}
    assert sorted(health_spent(labels, P, 1000.0)) == [900.0, 1000.0]
    sw = victim_cluster({})
    sw._swarm_labels[key] = '{"id": 1}'
    cfg = Config(state_dir=str(tmp_path), health=HealthConfig(evacuations_per_hour=1))
    rb = Rebalancer(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    h = rb.health_inputs(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, taken_at=1000.0))
    assert h.left == 0, h
    assert "(1 in the last hour, 1 of them a move record that cannot be read" in h.left_why
    assert "swarmgpu audit: move-record-unreadable" in h.left_why


def test_a_holder_with_a_move_under_way_is_not_proposed_again() -> None:
    """Hysteresis: once its move started (the daemon's record: ``record.moving``), the
    holder is left to it. A move label alone is no move: that holder is evacuated."""
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    svcs = [replace(s, labels={**s.labels, P + MOVE_STATE: "{}"}) if s.name == "a" else s
            for s in svcs]
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), moving=frozenset({"a"}))
    assert not p.moves and any("a move is under way" in n for n in p.notes)
    forged = plan(nodes, svcs, tasks, mark(F2, failed=[0]))  # the label, no record
    assert [(m.service, m.trigger) for m in forged.moves] == [("a", Trigger.HEALTH)]


def test_a_holder_whose_move_record_cannot_be_read_is_not_proposed_and_said_once(
        tmp_path: Path) -> None:
    """a's own move record cannot be read (a move of it may be under way). Before: the
    health policy proposed a every cycle, the mover refused it only at its start (a
    refusal recorded each cycle), and a took b's slot of the budget (b: "not started")."""
    from support.forged import RecordingSwarm, sw_svc

    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.moves import Outcome
    from swarmgpu.manager.rebalance.record import record_key

    nodes, svcs, tasks = setup({"a": [U2[0]], "b": [U2[1]]})
    key = record_key(P, "id-a")
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks,
                        {key: '{"id": 1}'})
    rb = Rebalancer(Daemon(Config(state_dir=str(tmp_path)), swarm=sw),  # type: ignore[arg-type]
                    placement=False)
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="INFO")
    try:
        for at in (1000.0, 1001.0):
            session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                            swarm_labels=sw.swarm_labels(), taken_at=at))
            session.facts = {"n1": F1, "n2": mark(F2, failed=[0, 1])}
            session.scrapes = {}
            rb.run(session)
            assert rb.last is not None and [m.service for m in rb.last.moves] in (["b"], [])
            (note,) = [n for n in rb.last.notes if n.startswith("a ")]
            assert key in note and "remove it by hand" in note
    finally:
        logger.remove(sink)
    assert [(r.service, r.outcome) for r in rb.health_mover.recent] == [
        ("b", Outcome.STARTED)]
    assert len([m for m in said if key in m and "a is not moved" in m]) == 1, said


def test_no_healthy_room_leaves_it_and_says_so() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    f1 = mark(F1, failed=list(range(8)))
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), f1=f1)
    assert not p.moves and not p.releases
    assert any("no healthy GPU free" in n for n in p.notes)


def test_a_holder_whose_request_no_longer_parses_is_told_why_not_no_gpu_free() -> None:
    """Its request label was edited into something unreadable: the note names the label,
    the error and the fix, never "no healthy GPU free"."""
    nodes, svcs, tasks = setup({"a": [U2[0]]}, svc_labels={"a": {f"{P}gpus": "lots"}})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert not p.moves and not p.releases
    (note,) = [n for n in p.notes if n.startswith("a on gpu-node-2")]
    assert f"its GPU request cannot be read: {P}gpus='lots'" in note
    assert f"--label-add {P}gpus=<value> a" in note and "no healthy GPU" not in note
    assert "Xid 79" in note  # the health reason still said


def test_failing_node_is_reported_and_drained_only_when_configured() -> None:
    """gpu-node-2 with two failed GPUs fails as a whole: 'c' on a healthy GPU of it stays
    unless rebalance.health.drain_node; the holders of the failed GPUs leave anyway."""
    nodes, svcs, tasks = setup({"a": [U2[0]], "c": [U2[5]]}, full_n2=False)
    f2 = mark(F2, failed=[0, 1])
    p = plan(nodes, svcs, tasks, f2, HealthInputs(left=5))
    assert p.failing_nodes == {"gpu-node-2": "2 of 8 GPUs failed"}
    assert any("node gpu-node-2 is failing" in n and "reported only" in n for n in p.notes)
    assert [(m.service, m.target_host) for m in p.moves] == [("a", "gpu-node-1")]
    drain = plan(nodes, svcs, tasks, f2, HealthInputs(left=5),
                 cfg=replace(CFG, health=HealthPolicyConfig(drain_node=True)))
    assert sorted((m.service, m.target_host) for m in drain.moves) == [
        ("a", "gpu-node-1"), ("c", "gpu-node-1")]
    assert all(m.trigger is Trigger.HEALTH for m in drain.moves)
    assert "draining it" in next(m.reason for m in drain.moves if m.service == "c")


def test_an_agent_lost_beyond_its_grace_makes_the_node_failing() -> None:
    nodes, svcs, tasks = setup({"c": [U2[5]]}, full_n2=False)
    p = plan(nodes, svcs, tasks, F2, HealthInputs(left=5, lost={"n2": 299.0}))
    assert not p.failing_nodes
    p = plan(nodes, svcs, tasks, F2, HealthInputs(left=5, lost={"n2": 400.0}),
             cfg=replace(CFG, health=HealthPolicyConfig(drain_node=True)))
    assert p.failing_nodes == {"gpu-node-2": "its agent has not answered for 400s"}
    assert not p.moves  # (the loss alone moves nothing: tests/test_health_agent_loss.py)


def test_policy_off_proposes_nothing() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), cfg=replace(CFG, policies="hotspot"))
    assert not p.moves and not p.failed_holders


def test_placement_keeps_a_failed_holding_for_the_policy_and_never_gives_it_out() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False)
    svcs = [s for s in svcs if s.name == "a"]
    facts = {"n1": F1, "n2": mark(F2, failed=[0])}
    planner = Planner()
    planner.keep_failed_holdings(lambda svc, nid: True)
    sp = planner.plan(nodes, svcs, tasks, facts).services[0]
    assert [pl.uuids for pl in sp.placements] == [(U2[0],)] and sp.status == "placed"
    # a new service is never given the failed GPU: all 7 healthy ones, not 8
    big = service("n", {f"{P}gpus": "8"}, constraints=["node.hostname==gpu-node-2"])
    sp_new = planner.plan(nodes, [*svcs, big], tasks, facts).services
    assert next(s for s in sp_new if s.name == "n").status == "pending"
    # released (or the policy off): placement re-places it on a healthy GPU
    planner.keep_failed_holdings(lambda svc, nid: False)
    p = planner.plan(nodes, svcs, tasks, facts)
    nodes2 = apply(nodes, p)
    sp = planner.plan(nodes2, svcs, tasks, facts).services[0]
    assert sp.placements and U2[0] not in sp.placements[0].uuids


def _load(tmp: Path, data: object) -> Config:
    f = tmp / "config.yml"
    f.write_text(yaml.safe_dump(data))
    return load_config(f)


def test_health_keys_are_checked(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"health": {"evacuate": False, "evacuations_per_hour": 3},
                           "rebalance": {"health": {"drain_node": True}}})
    assert cfg.health.evacuate is False and cfg.health.evacuations_per_hour == 3
    assert cfg.rebalance.health.drain_node is True
    assert cfg.rebalance.enabled_policies[0] == "health"
    # the flat key of older releases is still read
    assert _load(tmp_path, {"rebalance": {"health_drain_node": True}}).rebalance.health.drain_node
    for bad, word in (({"health": {"evacuate": "maybe"}}, "health.evacuate"),
                      ({"health": {"evacuations_per_cycle": -1}}, "evacuations_per_cycle"),
                      ({"health": {"evacuat": True}}, "unknown key"),
                      ({"rebalance": {"health_drain_nodes": True}}, "unknown key"),
                      ({"rebalance": {"health": {"drain_nodes": True}}}, "unknown key")):
        try:
            _load(tmp_path, bad)
        except ConfigError as exc:
            assert word in str(exc), exc
        else:
            raise AssertionError(f"{bad} was accepted")


T4_PAGE = (Path(__file__).parent / "fixtures" / "captures"
           / "dcgm_tesla-t4_x1_drv460_Hostname_datadog-fixture-excerpt.txt")
T4_UUID = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"


def test_dcgm_exporter_page_feeds_the_health_state_of_a_gpu_without_signals() -> None:
    """A node whose agent reads no health signals (gfd:, topo:) beside dcgm-exporter: the
    page's last XID (real capture, its value set to 79) fails the GPU in the next apply;
    a page counts only for the node it was scraped from."""
    page = T4_PAGE.read_text()
    line = next(ln for ln in page.splitlines() if ln.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    res = parse_metrics(page.replace(line, line.rsplit(" ", 1)[0] + " 79"))
    facts = NodeFacts("t4-node", gpus=(Gpu(0, T4_UUID, "Tesla T4", 15360),))  # health None
    n = SwarmNode("n9", "t4-node", "10.0.0.9", "worker", "ready", "active", {}, {}, 1, {}, {})
    book = HealthBook(HealthConfig(), P)

    def apply_once(now: float) -> Gpu:
        out = book.apply([n], {"n9": FactsResult("n9", "t4-node", "", facts, None, now)},
                         now=now)["n9"].facts
        assert out is not None
        return out.gpus[0]

    book.feed_metrics({"n1": res.samples_by_uuid})  # another node's page: not this GPU's
    assert apply_once(1.0).healthy
    book.feed_metrics({"n9": res.samples_by_uuid})
    g = apply_once(2.0)
    assert not g.healthy and g.error is not None and "failed: Xid 79" in g.error
    assert level_of(g)[0] is Level.FAILED


def test_the_daemons_planner_leaves_failed_holdings_to_the_policy_from_its_first_cycle(
) -> None:
    """``new_planner`` (the daemon's first cycle, and plan/status/audit) keeps a holding on
    a failed GPU when the health policy runs, so a restarted daemon never re-places it
    behind the policy's back (nor with health.evacuate false); without it, re-placed."""
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False)
    svcs = [s for s in svcs if s.name == "a"]
    facts = {"n1": F1, "n2": mark(F2, failed=[0])}
    on = Config()
    assert on.rebalance.health_policy
    sp = new_planner(on).plan(nodes, svcs, tasks, facts).services[0]
    assert [pl.uuids for pl in sp.placements] == [(U2[0],)]
    off = replace(on, rebalance=replace(on.rebalance, policies="hotspot"))
    sp = new_planner(off).plan(nodes, svcs, tasks, facts).services[0]
    assert not any(U2[0] in pl.uuids for pl in sp.placements)


# --- the two movers (cycle/rebalance.py): health moves act in rebalance dry-run ----------


def test_health_mover_acts_in_dry_run_and_the_movers_leave_each_others_moves() -> None:
    """The health mover (not dry-run) starts and finishes a health move; the other
    policies' mover (rebalance dry-run) neither writes, nor calls its label forged; the
    health mover judges no labels (a forged one is the other mover's to report)."""
    from support.forged import RecordingSwarm, victim_cluster, victim_move

    from swarmgpu.manager.rebalance.mover import Mover
    from swarmgpu.manager.rebalance.moves import Outcome

    sw: RecordingSwarm = victim_cluster({f"{P}{MOVE_STATE}": "{}"})  # the attacker's forged label
    rb = RebalanceConfig(dry_run=True, cooldown_s=0.0)
    now = [1000.0]
    main = Mover(sw, rb, prefix=P, dry_run=True, clock=lambda: now[0],  # type: ignore[arg-type]
                 scope=lambda st: st.trigger != Trigger.HEALTH)
    health = Mover(sw, rb, prefix=P, dry_run=False, clock=lambda: now[0],  # type: ignore[arg-type]
                   scope=lambda st: st.trigger == Trigger.HEALTH, judge_labels=False)
    move = replace(victim_move(), trigger=Trigger.HEALTH, window_s=None, reason="health: x")
    health.run_cycle([move], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in health.recent] == [Outcome.STARTED]
    assert all(r.service != "attacker" for r in health.recent)  # not its to judge
    sw.calls.clear()
    main.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert sw.calls == []  # dry-run
    assert [r.service for r in main.recent] == ["attacker"]  # only the forged one
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    for _ in range(3):
        health.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")
    assert [r.outcome for r in health.recent] == [Outcome.STARTED, Outcome.DONE]
    assert f"{P}{MOVE_STATE}" not in sw.service("id-victim").labels


MIG0 = [m.uuid for m in F1.gpus[0].mig_devices]  # GPU 0 of gpu-node-1 runs MIG


def _mig_holder() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """'m' holds a 1g.5gb slice of GPU 0 of gpu-node-1 and runs there."""
    m = service("m", {f"{P}mig": "1g.5gb"})
    n1 = SwarmNode("n1", "gpu-node-1", "10.0.0.1", "worker", "ready", "active",
                   {f"{P}assign.m": f"{MIG0[2]}@1000", f"{P}service.m": "true"}, {}, 1, {}, {})
    n2 = SwarmNode("n2", "gpu-node-2", "10.0.0.2", "worker", "ready", "active", {}, {}, 1, {},
                   {})
    return [n1, n2], [m], [SwarmTask("t-m", "id-m", "n1", 1, "running", "running", ())]


def test_the_holder_of_a_slice_of_a_failed_gpu_is_released_to_placement() -> None:
    """An XID names the parent GPU (NVML's event is the device's): its slices failed
    with it, and the slice's holder goes as a holder the mover may not move does."""
    nodes, svcs, tasks = _mig_holder()
    f1 = mark(F1, failed=[0])
    p = plan(nodes, svcs, tasks, F2, f1=f1)
    assert not p.releases and any("no healthy GPU free" in n for n in p.notes), p.notes
    # GPU 1 split alike: a healthy 1g.5gb is free, and placement may take it
    g1 = replace(f1.gpus[1], mig_capable=True, mig_enabled=True, mig_devices=tuple(
        replace(m, uuid=m.uuid.replace("MIG-5ca1ab1e", "MIG-0000beef")) for m in
        F1.gpus[0].mig_devices))
    p = plan(nodes, svcs, tasks, F2, f1=replace(f1, gpus=(f1.gpus[0], g1, *f1.gpus[2:])))
    assert [(r.service, r.host) for r in p.releases] == [("m", "gpu-node-1")], p.notes
    assert "Xid 79" in p.releases[0].reason and MIG0[2] in p.releases[0].reason
    assert "MIG devices are not moved" in p.releases[0].reason and not p.moves
    assert p.failed_holders == {("m", "n1")}


def test_placement_keeps_a_failed_slice_for_the_policy_and_replaces_it_once_released() -> None:
    nodes, svcs, tasks = _mig_holder()
    facts = {"n1": mark(F1, failed=[0]), "n2": F2}
    planner = Planner()
    planner.keep_failed_holdings(lambda svc, nid: True)
    sp = planner.plan(nodes, svcs, tasks, facts).services[0]
    assert [pl.uuids for pl in sp.placements] == [(MIG0[2],)] and sp.status == "placed"
    # released (or the policy off): its slice of a failed GPU is not kept
    planner.keep_failed_holdings(None)
    sp = planner.plan(nodes, svcs, tasks, facts).services[0]
    assert all(MIG0[2] not in pl.uuids for pl in sp.placements), sp.placements


def test_failing_nodes_of_one_hostname_are_listed_and_counted_each() -> None:
    """Two nodes may share a hostname (one re-joined under a new ID, or two machines
    named alike). Before: keyed by hostname, two failing nodes were one entry, and
    swarmgpu_health_failing_nodes (its length) said 1."""
    nodes, svcs, tasks = setup({"c": [U2[5]]}, full_n2=False)
    nodes = [replace(n, hostname="gpu-node-2") for n in nodes]
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]), HealthInputs(left=5, lost={"n1": 400.0}))
    assert p.failing_nodes == {"gpu-node-2 (n1)": "its agent has not answered for 400s",
                               "gpu-node-2 (n2)": "2 of 8 GPUs failed"}


def test_the_health_policys_notes_are_logged_once_while_they_last(tmp_path: Path) -> None:
    """Each note of the health policy, and each release it would make in dry-run, is
    logged when it appears, not again while it lasts, again once it went and came back;
    the other policies' notes are not its to log."""
    from support.forged import victim_cluster

    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.moves import Proposal, Release

    sw = victim_cluster({})
    rb = Rebalancer(Daemon(Config(state_dir=str(tmp_path), dry_run=True),
                           swarm=sw))  # type: ignore[arg-type]
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, taken_at=1000.0)
    rel = Release("third", "n-4090", "gpu-node-2", "health: y")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO")
    try:
        for notes, releases in ((["health: a", "fragmentation: f"], [rel]),
                                (["health: a"], [rel]), ([], []),
                                (["health: a", "health: b"], [rel])):
            rb.health_step(Proposal(notes=notes, releases=releases), [], snap)
    finally:
        logger.remove(sink)
    assert [x for x in lines if x.startswith("rebalance:")] == [
        "rebalance: health: a", "rebalance: health: a", "rebalance: health: b"], lines
    assert len([x for x in lines if "would have placement re-place third" in x]) == 2, lines


def test_a_service_whose_move_record_cannot_be_read_is_said_once_while_it_lasts(
        tmp_path: Path) -> None:
    """The rebalancer's "not moved" for a service whose own move record cannot be read:
    said once while the record stays unreadable, again once it was removed and came back."""
    from support.forged import RecordingSwarm, sw_svc

    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.record import record_key

    nodes, svcs, tasks = setup({"a": [U2[0]]})
    key = record_key(P, "id-a")
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks)
    rb = Rebalancer(Daemon(Config(state_dir=str(tmp_path)), swarm=sw),  # type: ignore[arg-type]
                    placement=False)
    said: list[tuple[int, str]] = []
    at = 0
    sink = logger.add(lambda m: said.append((at, str(m.record["message"]))), level="WARNING",
                      filter=lambda r: "a is not moved" in r["message"])
    try:
        for at, garbled in enumerate((True, True, False, True, True)):
            if garbled:
                sw._swarm_labels[key] = '{"id": 1}'
            else:
                del sw._swarm_labels[key]
            session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                            swarm_labels=sw.swarm_labels(),
                                            taken_at=1000.0 + at))
            session.facts = {"n1": F1, "n2": F2}
            session.scrapes = {}
            rb.run(session)
    finally:
        logger.remove(sink)
    assert [at for at, _ in said] == [0, 3] and all(key in m for _, m in said), said
