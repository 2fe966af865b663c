"""A device list on a service is its owner's text; the ledger (node labels) is the
daemon's. A running task made from a list naming GPUs outside its holding on that node
runs on them: the daemon replaces it, not only the label."""

from __future__ import annotations

from dataclasses import replace

from support.placement import DGX, FACTS, apply, svc

from swarmgpu.manager.placement import plan_placement
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

DEV = "swarmgpu.devices."


def _two_placed() -> tuple[list[SwarmNode], SwarmService, SwarmService, list[SwarmTask]]:
    """``tenant`` and ``victim``, one GPU each on the DGX, both running."""
    tenant = svc("tenant", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"})
    victim = svc("victim", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"})
    plan = plan_placement([DGX], [tenant, victim], [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    tenant = replace(tenant, labels={**tenant.labels, **by["tenant"].service_labels_set})
    victim = replace(victim, labels={**victim.labels, **by["victim"].service_labels_set})
    runs = [SwarmTask(f"t-{s.name}", s.id, by[s.name].placements[0].node_id, 1, "running",
                      "running", ()) for s in (tenant, victim)]
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
