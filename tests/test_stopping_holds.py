"""The holds of tasks Swarm is stopping (``nominated.StoppingGpus``), stop 72's gaps: a
stopping task's MIG device held as the ledger holds a running task's; a GPU both a
preemptor's nomination and a stopping task hold read as the preemptor's."""

from __future__ import annotations

from dataclasses import replace

from support.forged import R_UUIDS, victim_stopping_on_4090s
from support.placement import DGX, FACTS, R4090, apply, svc

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.sync import facts_by_node
from swarmgpu.manager.placement import Holding, Planner, Status, assign_key, gate_key
from swarmgpu.manager.placement.nominated import STOP_WAIT_S, Nomination, Nominations
from swarmgpu.manager.placement.recorded import recorded_nominations
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
SLICE_3G = next(m.uuid for m in FACTS["n-dgx"].gpus[0].mig_devices if m.profile == "3g.20gb")
h = Holding("old", "n-dgx", (SLICE_3G,), (1000,))


def _old_stopping_on_the_3g() -> tuple[list[SwarmNode], SwarmService, SwarmService,
                                        SwarmTask, SwarmTask]:
    """The DGX, old holding its only 3g.20gb device (``h``), scaled to 0; new asks
    3g.20gb, pending. Nodes, old, new, old's task stopping there and new's."""
    nodes = [replace(DGX, labels={assign_key(P, "old"): h.label_value(),
                                  gate_key(P, "old"): "true"})]
    old = svc("old", {f"{P}mig": "3g.20gb"}, replicas=0)
    new = svc("new", {f"{P}mig": "3g.20gb"})
    t_old = SwarmTask("t-old", old.id, "n-dgx", 1, "running", "shutdown", ())
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", ())
    return nodes, old, new, t_old, t_new


def test_a_mig_device_a_holding_frees_is_given_to_the_request_waiting_for_it() -> None:
    """old holds the DGX's only 3g.20gb device, new waits for one; old is scaled to 0 and
    its task is gone: new is placed on it in the next cycle. Before: new waited for good
    (its "none free" answer was kept while the cluster's capacity had not grown, and a
    MIG device freed grew none: no GPU share changes)."""
    nodes, old, new, _t_old, t_new = _old_stopping_on_the_3g()
    planner, facts = Planner(prefix=P), {"n-dgx": FACTS["n-dgx"]}
    plan = planner.plan(nodes, [old, new], [t_new], facts)
    assert {sp.name: sp for sp in plan.services}["new"].status == Status.PENDING
    plan = planner.plan(apply(nodes, plan), [old, new], [t_new], facts)
    by = {sp.name: sp for sp in plan.services}
    assert [p.uuids for p in by["new"].placements] == [(SLICE_3G,)], by["new"]


def test_a_stopping_tasks_mig_device_is_not_given_to_a_new_mig_request() -> None:
    """old held the DGX's only 3g.20gb MIG device and was scaled to 0: its task stops on
    that device. new asks 3g.20gb: it waits while the task stops, across cycles (old's
    ledger entry is gone from the second), and is placed on it once it has stopped.
    Before: new was given the device the stopping task still used (the holds counted
    whole GPUs only; the allocator counts MIG devices by UUID, not by GPU share)."""
    nodes, old, new, t_old, t_new = _old_stopping_on_the_3g()
    planner = Planner(prefix=P)
    facts = {"n-dgx": FACTS["n-dgx"]}
    for _ in range(2):
        plan = planner.plan(nodes, [old, new], [t_new], facts, stopping=[t_old])
        by = {sp.name: sp for sp in plan.services}
        assert by["new"].status == Status.PENDING and not by["new"].placements, by["new"]
        nodes = apply(nodes, plan)
    assert assign_key(P, "old") not in nodes[0].labels  # its holding went, as before
    plan = planner.plan(nodes, [old, new], [t_new], facts, stopping=[])
    by = {sp.name: sp for sp in plan.services}
    assert [p.uuids for p in by["new"].placements] == [(SLICE_3G,)], by["new"]


def test_a_stopping_tasks_own_line_naming_a_mig_device_holds_it_for_a_fresh_daemon() -> None:
    """A daemon that starts after old's ledger entry went reads the MIG device from the
    stopping task's own pinned device line, and holds it. Before: a MIG device's UUID in
    the line was not read (nothing held: new was given the device in use)."""
    old = svc("old", {}, gated=False)
    new = svc("new", {f"{P}mig": "3g.20gb"})
    t_old = SwarmTask("t-old", old.id, "n-dgx", 1, "running", "shutdown",
                      (f"NVIDIA_VISIBLE_DEVICES={SLICE_3G}",))
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", ())
    plan = Planner(prefix=P).plan([DGX], [old, new], [t_new], {"n-dgx": FACTS["n-dgx"]},
                                  stopping=[t_old])
    by = {sp.name: sp for sp in plan.services}
    assert by["new"].status == Status.PENDING and not by["new"].placements, by["new"]


def test_a_global_jobs_run_waits_for_a_node_a_stopping_task_holds_for_seconds() -> None:
    """embed, a global job of 1 GPU, on both GPU nodes; a removed service's task stops on
    every GPU of gpu-node-2 (stop grace period 10 s). embed's run waits for that node: no
    write to its spec starts it while the hold lasts; once the task has stopped it is
    placed there too and the run starts with both. A hold past its end (the task still
    seen stopping) is waited for no more: the run starts without the node, said so.
    Before: the run started at once on gpu-node-1 alone, and gpu-node-2 ran nothing of
    that run (seen on the real swarm)."""
    s = replace(svc("embed", {f"{P}gpus": "1"}), mode="global-job", replicas=None)
    gone = svc("gone", {}, gated=False)
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(g.uuid for g in FACTS["n-4090"].gpus)
    t_old = SwarmTask("t-old", gone.id, "n-4090", 1, "running", "shutdown", (line,))
    assert t_old.stop_grace_s == 10  # docker's default, as its spec sets none
    planner, nodes = Planner(prefix=P), [DGX, R4090]
    for now in (1000.0, 1005.0):
        plan = planner.plan(nodes, [s], [], FACTS, now=now, stopping=[t_old])
        (sp,) = plan.services
        assert [p.hostname for p in sp.placements] == ["gpu-node-1"], sp
        assert not sp.needs_service_write, sp  # no write starts its run
        assert any(w.startswith("its run waits for gpu-node-2") for w in sp.warnings), sp
        nodes = apply(nodes, plan)
    later = planner.plan(nodes, [s], [], FACTS, now=1011.0, stopping=[t_old])
    (sp,) = later.services
    assert sp.needs_service_write, sp  # the hold outlived its end: the run goes without it
    assert "longer than a run waits for them" in sp.nodes_waiting["gpu-node-2"], sp
    plan = planner.plan(nodes, [s], [], FACTS, now=1006.0, stopping=[])  # it stopped
    (sp,) = plan.services
    assert [p.hostname for p in sp.placements] == ["gpu-node-1", "gpu-node-2"], sp
    assert sp.needs_service_write and not sp.nodes_waiting, sp  # the run, with both


def test_a_gpu_a_preemptor_is_nominated_and_its_victim_still_stops_on_reads_as_nominated(
        ) -> None:
    """victim stops on six RTX 4090s of gpu-node-2 (its pinned line); high's nomination
    holds two of them (its preemption), and high, asking three, still waits. new (priority
    0) waits too: its reason names the two as held for high, the other four for the
    stopping task, and the plan's stopping holds (preemption's, the rebalancer's) keep the
    two for high alone (its victim's). A guard: right on main since stop 71's spare."""
    r4090 = FACTS["n-4090"].gpus
    uuids = tuple(g.uuid for g in r4090)
    victim = svc("victim", {}, gated=False)
    filler = svc("filler", {f"{P}gpus": "2"})
    high = svc("high", {f"{P}gpus": "3", f"{P}priority": "100",
                        f"{P}gpu-product": "*RTX 4090*"})
    new = svc("new", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*"})
    held = Holding("filler", "n-4090", uuids[6:], (1000, 1000))
    nodes = [DGX, replace(R4090, labels={assign_key(P, "filler"): held.label_value(),
                                         gate_key(P, "filler"): "true"})]
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(uuids[:6])
    t_v = SwarmTask("t-v", victim.id, "n-4090", 1, "running", "shutdown", (line,))
    tasks = [SwarmTask("t-f", filler.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-h", high.id, "", 1, "pending", "running", ()),
             SwarmTask("t-n", new.id, "", 1, "pending", "running", ())]
    nom = Nomination("high", 100, "n-4090", uuids[:2], victims=(victim.id,))
    facts = {"n-4090": FACTS["n-4090"]}
    plan = Planner(prefix=P).plan(nodes[1:], [victim, filler, high, new], tasks, facts,
                                  stopping=[t_v], nominated=[nom])
    by = {sp.name: sp for sp in plan.services}
    assert by["high"].status == Status.PENDING and by["new"].status == Status.PENDING
    assert (by["new"].reason or "").endswith(
        "; 2 GPUs of gpu-node-2 held for high (its preemption); 4 GPUs of gpu-node-2 held "
        "for tasks Swarm is stopping there"), by["new"].reason
    assert {k for k, (who, _p) in plan.stopping_held.items() if who != "high"} == {
        ("n-4090", u) for u in uuids[2:6]}
    assert plan.stopping_spared == {("n-4090", u): "high" for u in uuids[:2]}


def test_plan_reads_a_stopping_victims_gpus_as_its_preemptors_as_the_daemon_does() -> None:
    """`plan` and `status` (a one-shot planner: no nomination in its memory) see
    high's victim still stopping on two RTX 4090s (its pinned line), its record naming
    high 5 s ago on that node. The daemon holds them for high (its nomination, the stop
    held for the rest only): high is placed on them. The one-shot now reads the record
    as that nomination. Before: high read pending, "2 GPUs of gpu-node-2 held for tasks
    Swarm is stopping there", and preemption's preview chose it new victims."""
    snap, _victim = victim_stopping_on_4090s(1000.0)
    by = {sp.name: sp for sp in make_plan(snap, Config()).services}
    assert [set(p.uuids) for p in by["high"].placements] == [set(R_UUIDS[:2])], by["high"]
    # it settled: the daemon's hold waits for a victim's stop STOP_WAIT_S at most
    late = replace(snap, taken_at=995.0 + STOP_WAIT_S + Config().preemption.settle_s)
    by = {sp.name: sp for sp in make_plan(late, Config()).services}
    assert by["high"].status == Status.PENDING, by["high"]  # the stop held, as the daemon
    assert "held for tasks Swarm is stopping there" in (by["high"].reason or "")


def test_a_pending_mig_request_is_told_of_the_stopping_tasks_mig_device_it_waits_for() -> None:
    """old's task stops on the DGX's only 3g.20gb device, which new asks for: new's reason
    names that device held for the stopping task. Before, only whole-GPU holds were named
    (``Holds.note``): the ledger showed the device free, and nothing said why new waited.
    A request for another profile (1g.10gb, free there) is not told of it."""
    nodes, old, new, t_old, t_new = _old_stopping_on_the_3g()
    planner, facts = Planner(prefix=P), {"n-dgx": FACTS["n-dgx"]}
    # the first cycle releases old's ledger entry (its holding, not a hold, then): from
    # the next the device reads free in the ledger, held for the stopping task alone
    nodes = apply(nodes, planner.plan(nodes, [old, new], [t_new], facts, stopping=[t_old]))
    for _ in range(2):
        plan = planner.plan(nodes, [old, new], [t_new], facts, stopping=[t_old])
        by = {sp.name: sp for sp in plan.services}
        assert by["new"].status == Status.PENDING, by["new"]
        assert (by["new"].reason or "").endswith(
            "3g.20gb MIG device of gpu-node-1 held for tasks Swarm is stopping there"
        ), by["new"].reason
        nodes = apply(nodes, plan)
    small = svc("small", {f"{P}mig": "1g.10gb"})
    plan = planner.plan(nodes, [old, small], [], facts, stopping=[t_old])
    sp = next(sp for sp in plan.services if sp.name == "small")
    assert "held for" not in (sp.reason or ""), sp


def test_plan_reads_a_victim_still_stopping_past_settle_as_the_daemon_holds_it() -> None:
    """high's victim (a job's task, stopped by its spec write: Swarm still counts it) is
    still stopping on two RTX 4090s a whole settle time after its record: the daemon's
    nomination lasts while that task stops (``Nominations.keep``, ``STOP_WAIT_S`` at
    most), so it spares the GPUs for high, and `plan` reads the record so too. Before:
    the one-shot cut the record at ``settle_s``: high read pending, "held for tasks Swarm
    is stopping there", while the daemon placed it."""
    settle = Config().preemption.settle_s
    late = 995.0 + settle + 5.0
    snap, victim = victim_stopping_on_4090s(late)
    # The daemon's side: nominated at 995, the victim's task seen stopping since.
    noms = Nominations(settle)
    noms.by["high"] = (Nomination("high", 100, "n-4090", R_UUIDS[:2],
                                  victims=(victim.id,)), 995.0, 995.0)
    pending = make_plan(snap, Config(), nominated=[])  # high waits without the hold
    assert {sp.name: sp for sp in pending.services}["high"].status == Status.PENDING
    for now in range(1000, int(late) + 1, 5):
        noms.keep(pending, float(now), stopping={(victim.id, "n-4090")})
    daemon = {sp.name: sp for sp in make_plan(snap, Config(), nominated=noms.current(late))
              .services}
    assert [set(p.uuids) for p in daemon["high"].placements] == [set(R_UUIDS[:2])]
    by = {sp.name: sp for sp in make_plan(snap, Config()).services}
    assert [set(p.uuids) for p in by["high"].placements] == [set(R_UUIDS[:2])], by["high"]
    # A daemon that settles no preemption (settle_s 0) holds none, however long it stops.
    none = Config(preemption=PreemptionConfig(settle_s=0))
    by = {sp.name: sp for sp in make_plan(snap, none).services}
    assert by["high"].status == Status.PENDING, by["high"]
    # Once past the longest a hold waits for its victims' stop, neither holds it.
    gone = replace(snap, taken_at=995.0 + STOP_WAIT_S + settle)
    for now in range(int(late), int(gone.taken_at) + 1, 5):
        noms.keep(pending, float(now), stopping={(victim.id, "n-4090")})
    assert not noms.current(gone.taken_at)
    by = {sp.name: sp for sp in make_plan(gone, Config()).services}
    assert by["high"].status == Status.PENDING, by["high"]


def test_a_gpu_a_victim_and_another_stopping_task_both_use_stays_held_from_its_preemptor(
        ) -> None:
    """victim (high's) and pinned (a plain service pinning two GPUs) both stop on the
    first RTX 4090 of gpu-node-2, pinned on the second too; filler holds the other six.
    urgent (priority 200, asking more than the node has) is visited first. pinned's
    container still runs on the first GPU: high waits, its GPU held from all (the
    spared hold's own words). Before: the spared hold took the GPU first, the other
    stopping hold got only the second, and high's visit gave the first back: high was
    placed on a GPU pinned's container ran on."""
    uuids = tuple(g.uuid for g in FACTS["n-4090"].gpus)
    victim, pinned = svc("victim", {}, gated=False), svc("pinned", {}, gated=False)
    filler = svc("filler", {f"{P}gpus": "6"})
    urgent = svc("urgent", {f"{P}gpus": "8", f"{P}priority": "200",
                            f"{P}gpu-product": "*RTX 4090*"})
    high = svc("high", {f"{P}gpus": "1", f"{P}priority": "100",
                        f"{P}gpu-product": "*RTX 4090*"})
    held = Holding("filler", "n-4090", uuids[2:], (1000,) * 6)
    nodes = [replace(R4090, labels={assign_key(P, "filler"): held.label_value(),
                                    gate_key(P, "filler"): "true"})]
    t_v = SwarmTask("t-v", victim.id, "n-4090", 1, "running", "shutdown",
                    (f"NVIDIA_VISIBLE_DEVICES={uuids[0]}",))
    t_p = SwarmTask("t-p", pinned.id, "n-4090", 1, "running", "shutdown",
                    (f"NVIDIA_VISIBLE_DEVICES={uuids[0]},{uuids[1]}",))
    tasks = [SwarmTask("t-f", filler.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-u", urgent.id, "", 1, "pending", "running", ()),
             SwarmTask("t-h", high.id, "", 1, "pending", "running", ())]
    nom = Nomination("high", 100, "n-4090", uuids[:1], victims=(victim.id,))
    plan = Planner(prefix=P).plan(nodes, [victim, pinned, filler, urgent, high], tasks,
                                  {"n-4090": FACTS["n-4090"]}, stopping=[t_v, t_p],
                                  nominated=[nom])
    by = {sp.name: sp for sp in plan.services}
    assert by["high"].status == Status.PENDING and not by["high"].placements, by["high"]
    assert plan.stopping_held[("n-4090", uuids[0])][0] == "tasks stopping on n-4090"


def test_the_daemons_hold_and_plans_record_of_it_end_together_after_a_long_stop() -> None:
    """high's victim stops the longest a hold waits for it (``STOP_WAIT_S``), the daemon's
    cycles 5 s apart: its nomination and `plan`'s stand-in for it (the victim's record,
    ``recorded_nominations``) both end a settle time after that wait, not before. Before:
    the daemon settled from its last cycle within the wait, up to a cycle earlier than
    `plan` said (the two bounds written apart)."""
    settle = Config().preemption.settle_s
    snap, victim = victim_stopping_on_4090s(1000.0)
    waited = {(victim.id, "n-4090")}
    noms = Nominations(settle)
    noms.by["high"] = (Nomination("high", 100, "n-4090", R_UUIDS[:2],
                                  victims=(victim.id,)), 995.0, 995.0)
    pending = make_plan(snap, Config(), nominated=[])  # high waits without the hold
    for now in range(1000, int(995.0 + STOP_WAIT_S) + 1, 5):
        noms.keep(pending, float(now), stopping=waited)
    end = 995.0 + STOP_WAIT_S + settle
    for now in (end - 2, end + 1):
        noms.keep(pending, now, stopping=waited)
        daemon = [n.service for n in noms.current(now)]
        one_shot = [n.service for n in recorded_nominations(
            snap.services, snap.stopping, facts_by_node(snap), P, now, settle, waited,
            stopped=frozenset({995}))]
        assert daemon == one_shot == (["high"] if now < end else []), now
