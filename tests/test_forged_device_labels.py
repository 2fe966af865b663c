"""A device list on a service is its owner's text; the ledger (node labels) is the
daemon's. A running task made from a list naming GPUs outside its holding on that node
runs on them: the daemon replaces it, not only the label. One made before the list came
(a label change makes no task: a saved stack re-deployed after a repin) keeps running,
where the daemon's sight or Swarm's record proves it older."""

from __future__ import annotations

from dataclasses import replace

from support.placement import DGX, FACTS, apply, svc

from swarmgpu.manager.placement import Planner, ServicePlan, plan_placement
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api

DEV = "swarmgpu.devices."
MADE = "2026-12-01T10:00:00.5Z"  # when Swarm made the running tasks
LATER = "2026-12-01T11:00:00Z"  # an update an hour after


def _two_placed(made: str = "") -> tuple[list[SwarmNode], SwarmService, SwarmService,
                                         list[SwarmTask]]:
    """``tenant`` and ``victim``, one GPU each on the DGX, both running (made at ``made``)."""
    tenant = svc("tenant", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"})
    victim = svc("victim", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"})
    plan = plan_placement([DGX], [tenant, victim], [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    tenant = replace(tenant, labels={**tenant.labels, **by["tenant"].service_labels_set})
    victim = replace(victim, labels={**victim.labels, **by["victim"].service_labels_set})
    runs = [SwarmTask(f"t-{s.name}", s.id, by[s.name].placements[0].node_id, 1, "running",
                      "running", (), created_at=made) for s in (tenant, victim)]
    return apply([DGX], plan), tenant, victim, runs


def test_a_running_task_made_from_a_forged_device_list_is_replaced() -> None:
    """The tenant's own list, rewritten (``docker service update --label-add
    swarmgpu.devices.<node>=<victim's GPU> --force``): Swarm made its running task with
    the victim's GPU. Before, the daemon wrote its list back and left that task running
    on the victim's GPU (no ForceUpdate: the ledger had not changed)."""
    nodes, tenant, victim, runs = _two_placed()
    nid = runs[0].node_id
    theirs = victim.labels[DEV + nid]
    assert tenant.labels[DEV + nid] != theirs
    forged = replace(tenant, labels={**tenant.labels, DEV + nid: theirs})
    plan = plan_placement(nodes, [forged, victim], runs, FACTS)
    by = {sp.name: sp for sp in plan.services}
    t = by["tenant"]
    assert t.service_labels_set.get(DEV + nid) == tenant.labels[DEV + nid]
    assert t.force_update, "its running task keeps the victim's GPU"
    assert any(DEV + nid in w and "tenant" in w for w in t.warnings), t.warnings
    # the victim keeps its GPU, untouched
    v = by["victim"]
    assert v.placements[0].uuids == (theirs,) and not v.force_update


def test_a_device_list_as_the_ledger_says_replaces_nothing() -> None:
    nodes, tenant, victim, runs = _two_placed()
    plan = plan_placement(nodes, [tenant, victim], runs, FACTS)
    assert not any(sp.force_update or sp.service_labels_set for sp in plan.services)


def test_a_device_list_a_redeploy_took_away_replaces_nothing() -> None:
    """A stack deploy rewrites the labels: the list is gone, the running task was made
    before (a label change alone makes no task), so it is written back, nothing restarts."""
    nodes, tenant, victim, runs = _two_placed()
    nid = runs[0].node_id
    bare = replace(tenant, labels={k: v for k, v in tenant.labels.items()
                                   if not k.startswith(DEV)})
    plan = plan_placement(nodes, [bare, victim], runs, FACTS)
    t = {sp.name: sp for sp in plan.services}["tenant"]
    assert t.service_labels_set.get(DEV + nid) == tenant.labels[DEV + nid]
    assert not t.force_update


def test_the_warning_of_many_forged_lists_stays_short() -> None:
    """The labels are the owner's text, as many as it writes: the warning names a few
    and counts the rest. Before, it named every one (a thousand: about 90,000
    characters in each cycle's plan and log line)."""
    nodes, tenant, victim, runs = _two_placed()
    nid = runs[0].node_id
    theirs = victim.labels[DEV + nid]
    many = {f"{DEV}{nid}.{i}": theirs for i in range(1000)}
    forged = replace(tenant, labels={**tenant.labels, DEV + nid: theirs, **many})
    plan = plan_placement(nodes, [forged, victim], runs, FACTS)
    t = {sp.name: sp for sp in plan.services}["tenant"]
    assert t.force_update
    said = [w for w in t.warnings if "outside its holding" in w]
    assert len(said) == 1 and len(said[0]) < 2000, len(said[0])
    assert "998 more" in said[0], said[0]


def _stale_list(tenant: SwarmService, nid: str) -> SwarmService:
    """``tenant`` as a saved stack re-deployed puts it back: its list names the GPU it
    held before the daemon repinned it to its GPU now (free since), a label-only update."""
    own = tenant.labels[DEV + nid]
    before = next(g.uuid for g in FACTS[nid].gpus if g.uuid != own)
    return replace(tenant, labels={**tenant.labels, DEV + nid: before},
                   version=tenant.version + 1)


def test_a_saved_stack_redeployed_after_a_repin_restarts_nothing() -> None:
    """The daemon saw its task run under its own list; the re-deploy puts the list from
    before the repin back (a label change makes no task): written back, its task made
    before it keeps running. Before, it was restarted (ForceUpdate) on every such
    re-deploy ("re-deploying an unchanged rendered stack restarts nothing")."""
    nodes, tenant, victim, runs = _two_placed(MADE)
    nid = runs[0].node_id
    daemon = Planner()
    first = daemon.plan(nodes, [tenant, victim], runs, FACTS)
    assert not any(sp.force_update for sp in first.services)
    plan = daemon.plan(nodes, [_stale_list(tenant, nid), victim], runs, FACTS)
    t = {sp.name: sp for sp in plan.services}["tenant"]
    assert t.service_labels_set.get(DEV + nid) == tenant.labels[DEV + nid]
    assert not t.force_update, t.warnings
    assert any("keep running" in w for w in t.warnings), t.warnings


def test_a_task_restarted_under_a_settled_plan_is_seen_made_from_clean_lists() -> None:
    """Its task died and Swarm made another (same node, same count: the service's last
    plan still holds, not planned again): the daemon notes it made under its own list
    too, so the saved stack re-deployed after restarts nothing. Before, only a service
    planned anew was noted: the new task counted as unseen (restarted, "may")."""
    nodes, tenant, victim, runs = _two_placed(MADE)
    nid = runs[0].node_id
    daemon = Planner()
    nodes = apply(nodes, daemon.plan(nodes, [tenant, victim], runs, FACTS))  # gates open
    daemon.plan(nodes, [tenant, victim], runs, FACTS)  # settled: no writes
    again = [replace(runs[0], id="t-tenant-2", created_at="2026-12-01T10:30:00Z"), runs[1]]
    daemon.plan(nodes, [tenant, victim], again, FACTS)
    plan = daemon.plan(nodes, [_stale_list(tenant, nid), victim], again, FACTS)
    t = {sp.name: sp for sp in plan.services}["tenant"]
    assert t.service_labels_set and not t.force_update, t.warnings


def _forced_forgery(made: str, remade: str, update_ran: bool = True) -> ServicePlan:
    """The tenant's plan by a daemon that saw the lists clean (tasks made at ``made``),
    once tenant's list names the victim's GPU, updated with ``--force`` (its new task
    made at ``remade``; ``update_ran``: Swarm's record says the update ran)."""
    nodes, tenant, victim, runs = _two_placed(made)
    nid = runs[0].node_id
    daemon = Planner()
    daemon.plan(nodes, [tenant, victim], runs, FACTS)
    forged = replace(tenant, labels={**tenant.labels, DEV + nid: victim.labels[DEV + nid]},
                     version=tenant.version + 1, force_update=tenant.force_update + 1,
                     previous_spec={"Labels": dict(tenant.labels)}, updated_at=LATER,
                     update_ran=update_ran)
    again = [replace(runs[0], id="t-tenant-2", created_at=remade), runs[1]]
    plan = daemon.plan(nodes, [forged, victim], again, FACTS)
    return {sp.name: sp for sp in plan.services}["tenant"]


def test_a_forged_list_with_force_is_still_replaced_by_a_daemon_that_saw_it_clean() -> None:
    """``--label-add ... --force``: Swarm made a new task from the forged list, after
    the daemon last saw the lists clean: replaced."""
    t = _forced_forgery(MADE, "2026-12-01T11:00:01Z")
    assert t.force_update
    assert any("may have been made from them" in w for w in t.warnings), t.warnings


def test_a_fresh_daemon_reads_the_lists_age_from_swarms_record() -> None:
    """No memory of the service (a restart, a new leader): Swarm's record says the
    update that brought the list (PreviousSpec: the ledger's list) came an hour after
    the task was made, and made no task (no UpdateStatus): nothing restarts. Where
    PreviousSpec had that list already, or Swarm's updater ran since, or the task was
    made after, the task may carry it: replaced, said as "may"."""
    nodes, tenant, victim, runs = _two_placed(MADE)
    nid = runs[0].node_id
    stale = replace(_stale_list(tenant, nid), previous_spec={"Labels": dict(tenant.labels)},
                    updated_at=LATER)

    def tenant_plan(s: SwarmService, tasks: list[SwarmTask] = runs) -> ServicePlan:
        plan = plan_placement(nodes, [s, victim], tasks, FACTS)
        return {sp.name: sp for sp in plan.services}["tenant"]

    t = tenant_plan(stale)
    assert t.service_labels_set.get(DEV + nid) == tenant.labels[DEV + nid]
    assert not t.force_update, t.warnings
    for may in (replace(stale, previous_spec={"Labels": dict(stale.labels)}),
                replace(stale, update_ran=True), replace(stale, updated_at="soon")):
        t = tenant_plan(may)
        assert t.force_update
        assert any("may have been made from them" in w for w in t.warnings), t.warnings
    for made in ("2026-12-01T10:59:30Z", "2026-12-01T11:00:01Z", "yesterday"):  # skew, after
        assert tenant_plan(stale, [replace(runs[0], created_at=made), runs[1]]).force_update


def test_swarms_record_of_a_service_update_is_read_as_sent() -> None:
    """UpdatedAt as its text (read strictly where used); UpdateStatus present: Swarm's
    updater ran since the last spec update (each update resets it to none)."""
    raw = {"ID": "s1", "Version": {"Index": 3}, "UpdatedAt": LATER,
           "Spec": {"Name": "a", "TaskTemplate": {}}}
    s = service_from_api(raw)
    assert (s.updated_at, s.update_ran) == (LATER, False)
    s = service_from_api({**raw, "UpdateStatus": {"State": "completed"}})
    assert s.update_ran


def test_an_evacuation_off_a_failed_gpu_accuses_no_owner_of_its_list() -> None:
    """A GPU the tenant held failed: the daemon re-places it on a healthy one of the
    same node (its task restarts: an evacuation). The list on the service is the
    daemon's own, naming the ledger's GPU. Before, it was read against the new holding
    and said forged ("leave swarmgpu.devices.* labels to swarmgpu"), and a daemon that
    had seen it clean said its task would "keep running" beside the restart."""
    nodes, tenant, victim, runs = _two_placed(MADE)
    nid = runs[0].node_id
    daemon = Planner()
    nodes = apply(nodes, daemon.plan(nodes, [tenant, victim], runs, FACTS))
    own = tenant.labels[DEV + nid]
    sick = replace(FACTS[nid], gpus=tuple(replace(g, healthy=False) if g.uuid == own else g
                                          for g in FACTS[nid].gpus))
    plan = daemon.plan(nodes, [tenant, victim], runs, {**FACTS, nid: sick})
    t = {sp.name: sp for sp in plan.services}["tenant"]
    assert t.force_update and t.service_labels_set.get(DEV + nid) not in (None, own)
    assert t.decision is not None and t.decision[0] == "evacuate", t.decision
    assert not any("outside its holding" in w or "keep running" in w
                   for w in t.warnings), t.warnings


def test_a_forged_list_with_force_under_a_clock_behind_is_still_replaced() -> None:
    """The daemon saw the tenant's task (made at 10:00:30 by a Swarm leader whose clock
    ran ahead) under clean lists; a new leader, its clock 40 s behind, made the task of a
    forced forged list at 10:00:10 by its clock. Before, the daemon's memory was the
    newest CreatedAt seen clean, and an earlier time read as a task made before the
    list: it kept the victim's GPU. Now the memory is the tasks seen clean themselves."""
    t = _forced_forgery("2026-12-01T10:00:30Z", "2026-12-01T10:00:10Z")
    assert t.force_update, t.warnings


def test_a_one_shot_plans_may_says_the_running_daemon_may_keep_the_task() -> None:
    """``swarmgpu plan`` plans with no memory: where Swarm's record cannot show the task
    older (the re-deploy within a minute of it), it says "may". Before, it said the
    daemon's sight did not show it older, though the running daemon, which saw the task
    run under its own lists, keeps it."""
    nodes, tenant, victim, runs = _two_placed(MADE)
    nid = runs[0].node_id
    soon = replace(_stale_list(tenant, nid), previous_spec={"Labels": dict(tenant.labels)},
                   updated_at="2026-12-01T10:00:30Z")
    plan = plan_placement(nodes, [soon, victim], runs, FACTS)
    t = {sp.name: sp for sp in plan.services}["tenant"]
    said = [w for w in t.warnings if "may have been made from them" in w]
    assert t.force_update and said, t.warnings
    assert "the daemon's sight" not in said[0], said[0]
    assert "a daemon that saw it run under the ledger's lists keeps it" in said[0], said[0]


def test_a_task_whose_created_at_is_the_zero_time_is_never_proved_older() -> None:
    """Docker writes a time it does not have as Go's zero time (0001-01-01T00:00:00Z):
    every such task reads alike. Before, the daemon that saw one under clean lists took
    a task of a forced forged list answered so as that one: it kept the victim's GPU."""
    zero = "0001-01-01T00:00:00Z"
    assert _forced_forgery(zero, zero, update_ran=False).force_update


def test_the_memory_of_clean_lists_forgets_nodes_gone_from_the_swarm() -> None:
    """Nodes come and go (an autoscaled pool: each joins with a new ID): a long-lived
    service's memory kept an entry for every node it ever ran on. Now it keeps those of
    nodes in the swarm."""
    daemon = Planner()
    tenant = svc("tenant", {"swarmgpu.gpus": "1"})
    for i in range(30):
        node = replace(DGX, id=f"n-{i}")
        facts = {node.id: FACTS[DGX.id]}
        sp = daemon.plan([node], [tenant], [], facts).services[0]
        tenant = replace(tenant, labels={**tenant.labels, **sp.service_labels_set},
                         version=tenant.version + 1)
        nodes = apply([node], daemon.plan([node], [tenant], [], facts))
        run = SwarmTask(f"t-{i}", tenant.id, node.id, 1, "running", "running", (),
                        created_at=MADE)
        daemon.plan(nodes, [tenant], [run], facts)
        tenant = replace(tenant, labels={k: v for k, v in tenant.labels.items()
                                         if not k.startswith(DEV)}, version=tenant.version + 1)
    assert len(daemon._clean_made[tenant.id]) <= 2, daemon._clean_made
