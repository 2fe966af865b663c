"""What a queue counts (``placement.queues``): each GPU a service holds, once, in the
ledger's unit (a MIG device as its share of its GPU), in every state a holding can be
in -- released this cycle, held by a service whose labels are broken now, held twice by
a move in flight -- so that the max, the guarantee's reclaim and ``status``/``plan
--json`` read the same number."""

from __future__ import annotations

import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.commands import command_json
from support.forged import DGX_F, R4090_F, RecordingSwarm, closed_port, held_labels, sw_node, sw_svc
from support.gpu_nodes import DGX_A100, FakeGpuNode

from swarmgpu.core.config import load_config
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.cycle.placement import new_planner
from swarmgpu.manager.nodes.agentbook import AgentRecord
from swarmgpu.manager.placement import MOVE_STATE, Holding, Planner, assign_key, gate_key
from swarmgpu.manager.rebalance.record import MoveState, moving, record_key
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
D_UUIDS = tuple(g.uuid for g in DGX_F.gpus)
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)


def _used(plan: Any, queue: str) -> float:
    (q,) = [q for q in plan.queues if q["queue"] == queue]
    return float(q["used_gpus"])


def _held(name: str, per_node: dict[str, tuple[str, ...]]) -> list[SwarmNode]:
    """n-dgx and n-4090, ``name`` holding ``per_node``'s GPUs in the ledger (gates open)."""
    out = []
    for nid, host in (("n-dgx", "gpu-node-1"), ("n-4090", "gpu-node-2")):
        u = per_node.get(nid)
        labels = {} if u is None else {
            assign_key(P, name): Holding(name, nid, u, tuple(1000 for _ in u)).label_value(),
            gate_key(P, name): "true"}
        out.append(sw_node(nid, host, labels))
    return out


def _running(s: SwarmService, *nodes: str) -> list[SwarmTask]:
    return [SwarmTask(f"t-{s.name}-{i}", s.id, nid, i + 1, "running", "running", ())
            for i, nid in enumerate(nodes)]


def test_holdings_a_scale_down_releases_are_not_counted_after_it() -> None:
    """x (queue prod, 2 GPUs a replica) is scaled from 2 replicas to 1: the cycle releases
    one holding, and prod holds 2 GPUs after it, not 4. Counted as 4, y (prod, 2 GPUs,
    max 4) was refused for a cycle, ``status`` said 4 used, and a preemptor of another
    queue could reclaim prod's 2 GPUs left above a guarantee of 2 (taking it to 0)."""
    nodes = _held("x", {"n-dgx": D_UUIDS[:2], "n-4090": R_UUIDS[:2]})
    x = sw_svc("x", {f"{P}gpus": "2", f"{P}queue": "prod"}, replicas=1)
    y = sw_svc("y", {f"{P}gpus": "2", f"{P}queue": "prod"})
    tasks = _running(x, "n-dgx", "n-4090")
    plan = Planner(queues={"prod": (0, 4000)}).plan(nodes, [x, y], tasks, FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert len(by["x"].placements) == 1
    assert by["y"].status == "placed", by["y"].reason
    assert _used(plan, "prod") == 4
    # alone, x is counted as what it keeps: the number preemption's reclaim reads
    plan = Planner(queues={"prod": (2000, None)}).plan(nodes, [x], tasks, FACTS)
    assert _used(plan, "prod") == 2


def test_a_service_with_broken_labels_still_counts_what_it_holds() -> None:
    """x holds 2 GPUs of queue research (max 2) and a later label is broken: it keeps
    its GPUs (an invalid request never loses them), so they still count. Uncounted, y
    took 2 more: research held 4 above its max of 2."""
    nodes = _held("x", {"n-4090": R_UUIDS[:2]})
    x = sw_svc("x", {f"{P}gpus": "2", f"{P}queue": "research", f"{P}topology": "bogus"})
    y = sw_svc("y", {f"{P}gpus": "2", f"{P}queue": "research"})
    plan = Planner(queues={"research": (0, 2000)}).plan(nodes, [x, y], _running(x, "n-4090"),
                                                        FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["x"].status == "invalid"
    assert by["y"].status == "pending" and not by["y"].placements
    assert by["y"].reason == "queue research at its quota: max 2 GPUs, 2 used, this " \
                             "service needs 2"
    assert _used(plan, "research") == 2


TEAMS = """\
    tenants:
      team-a: {stacks: ["team-a*"], guaranteed: 0}
      team-b: {stacks: ["team-b*"], guaranteed: 0, max: 2}
    """


def test_a_tenants_service_naming_a_foreign_queue_still_counts_in_its_own(
        tmp_path: Path) -> None:
    """With tenants, a label naming another tenant's queue makes the request invalid;
    what the service holds still counts against its tenant's queue (team-b's first),
    else relabelling one service freed team-b's whole max for the next."""
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent(TEAMS))
    cfg = load_config(f, env={})
    nodes = _held("team-b_x", {"n-4090": R_UUIDS[:2]})
    x = sw_svc("team-b_x", {STACK_LABEL: "team-b", f"{P}gpus": "2", f"{P}queue": "team-a"})
    y = sw_svc("team-b_y", {STACK_LABEL: "team-b", f"{P}gpus": "2"})
    plan = new_planner(cfg).plan(nodes, [x, y], _running(x, "n-4090"), FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["team-b_x"].status == "invalid"
    assert by["team-b_y"].status == "pending" and "at its quota" in (by["team-b_y"].reason
                                                                    or "")
    assert _used(plan, "team-b") == 2 and _used(plan, "team-a") == 0
    # A label naming one of its own queues is kept while another label is broken.
    z = replace(x, labels={**x.labels, f"{P}queue": "team-b", f"{P}gpus": "two"})
    plan = new_planner(cfg).plan(nodes, [z], _running(z, "n-4090"), FACTS)
    assert _used(plan, "team-b") == 2


def test_a_move_in_flight_counts_its_replica_once() -> None:
    """x (queue prod, 1 replica of 2 GPUs) is moved make-before-break by the daemon: the
    ledger holds its source and its target until the target's task runs. Its queue counts
    the replica once: y (prod, max 4) is placed beside it, and prod is not above its
    guarantee of 2 for a reclaim to take from while the move runs."""
    st = MoveState(id="m0000000001", service="x", source="n-dgx", source_host="gpu-node-1",
                   source_uuids=D_UUIDS[:2], source_milli=(1000, 1000), target="n-4090",
                   target_host="gpu-node-2", target_uuids=R_UUIDS[:2],
                   target_milli=(1000, 1000), surge=True, replicas=1, max_replicas=0,
                   started_at=1000.0, trigger="hotspot", reason="r", service_id="id-x")
    nodes = _held("x", {"n-dgx": D_UUIDS[:2], "n-4090": R_UUIDS[:2]})
    x = sw_svc("x", {f"{P}gpus": "2", f"{P}queue": "prod", P + MOVE_STATE: st.to_json()},
               replicas=2)  # the surge: one more while the move runs
    y = sw_svc("y", {f"{P}gpus": "2", f"{P}queue": "prod"})
    tasks = _running(x, "n-dgx", "n-4090")
    records = {record_key(P, x.id): st.to_json()}
    plan = Planner(queues={"prod": (2000, 4000)}).plan(nodes, [x, y], tasks, FACTS,
                                                       moving=moving([x, y], records, P))
    by = {sp.name: sp for sp in plan.services}
    assert len(by["x"].placements) == 2 and by["x"].state == "Rebalancing"
    assert by["y"].status == "placed", by["y"].reason
    assert _used(plan, "prod") == 4
    plan = Planner(queues={"prod": (2000, None)}).plan(nodes, [x], tasks, FACTS,
                                                       moving=moving([x], records, P))
    assert _used(plan, "prod") == 2


# A DGX whose GPU 0 holds seven 1g.5gb devices and GPU 1 a 3g.20gb, 2g.10gb, 1g.5gb x2.
MIG_DGX = FakeGpuNode("gpu-node-1", DGX_A100.capture, DGX_A100.product, DGX_A100.memory_mib,
                      mig="0:1g.5gb*7;1:3g.20gb,2g.10gb,1g.5gb*2").facts()
MIG_FACTS = {"n-dgx": MIG_DGX}


def _migs(profile: str) -> list[str]:
    return [m.uuid for g in MIG_DGX.gpus for m in g.mig_devices if m.profile == profile]


def _slices(n: int, queue: str = "q") -> list[SwarmService]:
    return [sw_svc(f"s{i}", {f"{P}mig": "1g.5gb", f"{P}queue": queue}) for i in range(n)]


def test_a_queue_of_one_gpu_holds_seven_1g_slices_of_one_gpu() -> None:
    """A 1g slice is 1/7 of its GPU's compute: seven of them, one GPU's worth, fit a max
    of 1 GPU and count 1; an eighth does not. Counted as a whole GPU each, one was placed
    and the six others waited at the quota."""
    plan = Planner(queues={"q": (0, 1000)}).plan([sw_node("n-dgx", "gpu-node-1")],
                                                 _slices(8), [], MIG_FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert [by[f"s{i}"].status for i in range(7)] == ["placed"] * 7, \
        [by[f"s{i}"].reason for i in range(7)]
    assert by["s7"].status == "pending"
    assert by["s7"].reason == "queue q at its quota: max 1 GPUs, 1 used, this service " \
                              "needs 0.143"
    assert _used(plan, "q") == 1


def test_a_held_3g_slice_counts_three_sevenths_of_a_gpu() -> None:
    """A 3g.20gb device the ledger holds (in its unit, 1000 for any MIG device) counts 3/7
    of a GPU, rounded up to 0.429, in ``status``; a 1g slice beside it fits a max of 0.6."""
    (u,) = _migs("3g.20gb")
    nodes = [sw_node("n-dgx", "gpu-node-1", held_labels("x", "n-dgx", u))]
    x = sw_svc("x", {f"{P}mig": "3g.20gb", f"{P}queue": "q"})
    (y,) = _slices(1)
    plan = Planner(queues={"q": (0, 600)}).plan(nodes, [x, y], _running(x, "n-dgx"),
                                                MIG_FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["x"].status == "placed" and by["x"].placements[0].uuids == (u,)
    assert by["s0"].status == "placed", by["s0"].reason
    assert _used(plan, "q") == 0.572  # 4/7, rounded up once for the queue


def test_whole_gpus_and_slices_count_together() -> None:
    """One whole GPU and seven 1g slices are 2 GPUs: they fit a max of 2 together, and a
    service of one more whole GPU waits, told 2 are used."""
    w = sw_svc("w", {f"{P}gpus": "1", f"{P}queue": "q"})
    more = sw_svc("more", {f"{P}gpus": "1", f"{P}queue": "q", f"{P}priority": "-1"})
    plan = Planner(queues={"q": (0, 2000)}).plan([sw_node("n-dgx", "gpu-node-1")],
                                                 [w, *_slices(7), more], [], MIG_FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["w"].status == "placed" and all(
        by[f"s{i}"].status == "placed" for i in range(7)), [sp.reason for sp in plan.services]
    assert by["more"].status == "pending"
    assert by["more"].reason == "queue q at its quota: max 2 GPUs, 2 used, this service " \
                                "needs 1"
    assert _used(plan, "q") == 2


# An RTX PRO 6000 Blackwell (4 compute slices a GPU): GPUs 0 and 1 run four 1g.24gb each.
PRO_6000 = FakeGpuNode("gpu-node-1", DGX_A100.capture,
                       "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887,
                       mig="0:1g.24gb*4;1:1g.24gb*4").facts()


def test_a_1g_24gb_slice_of_an_rtx_pro_6000_counts_a_quarter_gpu() -> None:
    """1g.24gb is on the H100 NVL (1/7) and the RTX PRO 6000 (1/4): the GPU it is on
    says which. Four on an RTX PRO 6000 are its GPU, 1 GPU, a max of 1 holds a fifth
    back. Before: 1/7 each, all five placed (1.25 GPUs) and status said 0.715."""
    ss = [sw_svc(f"s{i}", {f"{P}mig": "1g.24gb", f"{P}queue": "q"}) for i in range(5)]
    plan = Planner(queues={"q": (0, 1000)}).plan([sw_node("n-pro", "gpu-node-1")], ss, [],
                                                 {"n-pro": PRO_6000})
    by = {sp.name: sp for sp in plan.services}
    assert [by[f"s{i}"].status for i in range(4)] == ["placed"] * 4
    assert by["s4"].status == "pending"
    assert by["s4"].reason == "queue q at its quota: max 1 GPUs, 1 used, this service " \
                              "needs 0.25"
    assert _used(plan, "q") == 1


def test_a_held_1g_24gb_slice_counts_by_its_gpu_in_the_reclaim_too() -> None:
    """What a reclaim frees (``holding_milli``) is the slice's share of the GPU it is on,
    from its node's facts; without them, the profile's table (1/7)."""
    from swarmgpu.manager.placement.queues import holding_milli
    from swarmgpu.manager.services.requests import parse_request

    r = parse_request({f"{P}mig": "1g.24gb", f"{P}queue": "q"}, prefix=P)
    u = PRO_6000.gpus[1].mig_devices[0].uuid
    h = Holding("x", "n-pro", (u,), (1000,))
    assert holding_milli(r, h, {"n-pro": PRO_6000}) == 250
    assert holding_milli(r, h, {}) == 143


def test_plan_json_counts_slices_as_a_dry_run_daemon_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard: `plan --json`'s queues and its verdict on a slice at the max are the daemon
    cycle's (one planner for both: a held 3g.20gb device is 3/7 of a GPU, and a 1g slice
    more fits a max of 0.6 and not of 0.5)."""
    from swarmgpu.manager.cycle.wiring import daemon_steps
    from swarmgpu.manager.daemon import Daemon

    (u,) = _migs("3g.20gb")
    x = sw_svc("x", {f"{P}mig": "3g.20gb", f"{P}queue": "q"})
    (y,) = _slices(1)
    for top, placed in ((0.6, True), (0.5, False)):
        sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager"),
                             sw_node("n-dgx", "gpu-node-1", held_labels("x", "n-dgx", u))],
                            [x, y], _running(x, "n-dgx"))
        cfg = tmp_path / "c.yml"
        cfg.write_text(f"state_dir: {tmp_path}\ndry_run: true\nagents: {{port: "
                       f"{closed_port()}, timeout_s: 0.5, identity: none}}\n"
                       f"sync: {{watch_events: false}}\nqueues: {{q: {{max: {top}}}}}\n")
        d = Daemon(load_config(cfg), swarm=sw)  # type: ignore[arg-type]
        d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=MIG_DGX)
        d.use(daemon_steps(d))
        d.cycle()
        daemon = d.last_session.placement
        doc = command_json(sw, str(cfg), monkeypatch, "plan", {"n-dgx": ("gpu-node-1", MIG_DGX)})
        assert sw.calls == []
        assert doc["queues"] == daemon.queues
        status = {sv["name"]: sv["status"] for sv in doc["services"]}
        assert status == {sp.name: sp.status for sp in daemon.services}
        assert (status["s0"] == "placed") == placed, doc["services"]


H100_NVL = FakeGpuNode("gpu-node-2", DGX_A100.capture, "NVIDIA H100 NVL", 95830,
                       mig="0:1g.24gb*4;1:1g.24gb*4").facts()


def test_a_1g_24gb_slice_held_to_the_h100_nvl_counts_a_seventh_before_it_is_placed() -> None:
    """A replica not placed yet counts its largest share on the GPUs with its profile that
    it may land on: one whose gpu-product is the H100 NVL is 1/7 there, whatever an RTX
    PRO 6000 beside it counts (1/4). Seven fill a max of 1 GPU. Before: 1/4 each until
    placed, the seventh held back at 6/7 used, for good."""
    nodes = [sw_node("n-pro", "gpu-node-1"), sw_node("n-nvl", "gpu-node-2")]
    ss = [sw_svc(f"s{i}", {f"{P}mig": "1g.24gb", f"{P}queue": "q",
                           f"{P}gpu-product": "NVIDIA H100 NVL"}) for i in range(8)]
    plan = Planner(queues={"q": (0, 1000)}).plan(nodes, ss, [],
                                                 {"n-pro": PRO_6000, "n-nvl": H100_NVL})
    by = {sp.name: sp for sp in plan.services}
    assert [by[f"s{i}"].status for i in range(7)] == ["placed"] * 7, \
        [by[f"s{i}"].reason for i in range(7)]
    assert all(p.node_id == "n-nvl" for i in range(7) for p in by[f"s{i}"].placements)
    assert by["s7"].status == "pending"
    assert by["s7"].reason == "queue q at its quota: max 1 GPUs, 1 used, this service " \
                              "needs 0.143"
    assert _used(plan, "q") == 1


def test_a_queue_label_apart_from_a_configured_queue_only_by_case_is_refused() -> None:
    """No tenants: swarmgpu.queue=Research beside queues.research read as an unlisted
    queue (guaranteed 0, no max), so research's max never applied to it. It is refused,
    naming both and the fix, as the config refuses two such queues."""
    x = sw_svc("x", {f"{P}gpus": "2", f"{P}queue": "Research"})
    plan = Planner(queues={"research": (0, 2000)}).plan(_held("x", {}), [x], [], FACTS)
    (sp,) = plan.services
    assert sp.status == "invalid" and not sp.placements
    assert (f"{P}queue='Research': expected a queue's name as the config writes it: "
            "Research differs from queue research only in case; write "
            f"{P}queue=research") in (sp.reason or ""), sp.reason
    # the queue as written, and one the config does not list at all, are as before
    for queue in ("research", "scratch"):
        y = sw_svc("y", {f"{P}gpus": "2", f"{P}queue": queue})
        plan = Planner(queues={"research": (0, 2000)}).plan(_held("y", {}), [y], [], FACTS)
        assert plan.services[0].status == "placed", plan.services[0].reason


def test_what_a_case_twin_queues_service_holds_counts_against_the_configured_queue() -> None:
    """x holds 2 GPUs under swarmgpu.queue=Research (now refused): what it holds counts
    against research, the queue it meant, so y (research, max 2) waits."""
    nodes = _held("x", {"n-4090": R_UUIDS[:2]})
    x = sw_svc("x", {f"{P}gpus": "2", f"{P}queue": "Research"})
    y = sw_svc("y", {f"{P}gpus": "2", f"{P}queue": "research"})
    plan = Planner(queues={"research": (0, 2000)}).plan(nodes, [x, y], _running(x, "n-4090"),
                                                        FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["x"].status == "invalid"
    assert by["y"].status == "pending" and "at its quota" in (by["y"].reason or "")
    assert _used(plan, "research") == 2


def test_a_tenants_case_twin_of_its_own_queue_is_refused_by_the_same_rule(
        tmp_path: Path) -> None:
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent(TEAMS))
    x = sw_svc("team-b_x", {STACK_LABEL: "team-b", f"{P}gpus": "2", f"{P}queue": "Team-B"})
    plan = new_planner(load_config(f, env={})).plan(_held("x", {}), [x], [], FACTS)
    (sp,) = plan.services
    assert sp.status == "invalid"
    assert ("Team-B differs from queue team-b only in case; write "
            f"{P}queue=team-b") in (sp.reason or ""), sp.reason


def test_render_check_without_tenants_refuses_a_case_twin_queue(tmp_path: Path) -> None:
    """The daemon refuses swarmgpu.queue=Research beside a configured research, tenants
    or not; render --check, the gate before a deploy, passed it without tenants (it
    checked queues only against a tenant's). It now knows the config's queues."""
    from click.testing import CliRunner

    from swarmgpu.cli import main

    cfg = tmp_path / "config.yml"
    cfg.write_text("queues:\n  research: {guaranteed: 0, max: 2}\n")

    def check(queue: str) -> Any:
        f = tmp_path / "stack.yml"
        f.write_text("version: \"3.8\"\nservices:\n  x:\n    image: busybox\n    deploy:\n"
                     f"      labels: {{{P}gpus: \"1\", {P}queue: {queue}}}\n")
        return CliRunner().invoke(main, ["render", "--check", "--config", str(cfg),
                                         "-n", "lab", str(f)])

    res = check("Research")
    assert res.exit_code == 1, res.output
    assert (f"services.x.deploy.labels: {P}queue='Research': expected a queue's name as "
            "the config writes it: Research differs from queue research only in case; "
            f"write {P}queue=research") in res.output, res.output
    for fine in ("research", "scratch"):  # as written, or a queue the config lacks
        assert check(fine).exit_code == 0, check(fine).output


def test_with_tenants_a_case_twin_queues_holdings_count_against_the_queue_it_meant(
        tmp_path: Path) -> None:
    """As without tenants: team-b's x holds 2 GPUs under swarmgpu.queue=Research (now
    refused); what it holds counts against research, the queue it meant, not team-b's
    first queue, so y (research, max 2) waits. Before, research read 0 used and y was
    placed past its max."""
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent("""\
        queues:
          research: {guaranteed: 0, max: 2}
        tenants:
          team-a: {stacks: ["team-a*"], guaranteed: 0}
          team-b: {stacks: ["team-b*"], guaranteed: 0, queues: [research]}
        """))
    cfg = load_config(f, env={})
    nodes = _held("team-b_x", {"n-4090": R_UUIDS[:2]})
    x = sw_svc("team-b_x", {STACK_LABEL: "team-b", f"{P}gpus": "2", f"{P}queue": "Research"})
    y = sw_svc("team-b_y", {STACK_LABEL: "team-b", f"{P}gpus": "2", f"{P}queue": "research"})
    plan = new_planner(cfg).plan(nodes, [x, y], _running(x, "n-4090"), FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["team-b_x"].status == "invalid"
    assert by["team-b_y"].status == "pending" and "at its quota" in (by["team-b_y"].reason
                                                                    or ""), by["team-b_y"]
    assert _used(plan, "research") == 2 and _used(plan, "team-b") == 0


def test_a_case_twin_of_another_tenants_queue_is_named_as_that_queue(
        tmp_path: Path) -> None:
    # team-b's label names team-a's team-a queue in capitals: it was said to be "no
    # tenant's queue", which sent the operator looking for a queue no config lacked.
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent(TEAMS))
    x = sw_svc("team-b_x", {STACK_LABEL: "team-b", f"{P}gpus": "2", f"{P}queue": "Team-A"})
    plan = new_planner(load_config(f, env={})).plan(_held("x", {}), [x], [], FACTS)
    (sp,) = plan.services
    assert sp.status == "invalid"
    assert "Team-A is tenant team-a's queue team-a but for case" in (sp.reason or ""), \
        sp.reason
