"""A node whose engine answer cannot be read in part is that node's alone.

A node listed with ``Description.Resources`` a string (or ``Spec`` null, ``Spec.Labels``
a list, ``Version.Index`` "x", a generic resource with no Kind...: what a proxy, or an
engine API call no docker CLI makes, may send) raised out of ``node_from_api``, and the
whole node list failed, hence the whole cycle. Now that node is ``unread``, its message
naming the part and the fix: placement puts nothing new on it, its holdings are kept,
label sync and every other label write leave it as it is, and the rebalancer moves
nothing onto or off it; the other nodes are read, synced and placed on as ever. A node
without an ID is refused naming it (there is nothing to key it on)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import support.health as hp
import support.rebalance as rb
from support.forged import RecordingSwarm
from support.health import hold
from support.placement import FACTS, P, svc
from support.unread import listed_client

from swarmgpu.agent.doctor import check_unread_nodes
from swarmgpu.agent.doctor.read import read_view
from swarmgpu.agent.doctor.view import Status, SwarmRead
from swarmgpu.core.config import Config, SyncConfig
from swarmgpu.manager.commands.audit import audit as run_audit
from swarmgpu.manager.commands.audit import exit_code, render_table
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.manager.placement import Planner, plan_placement, read_ledger
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.manager.web.cluster_view import build_cluster, render_status
from swarmgpu.swarm.client import (
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    service_from_api,
)
from swarmgpu.swarm.specread import UnreadSpec
from swarmgpu.swarm.swarmnode import node_from_api, unread_source

HELD = FACTS["n-4090"].gpus[0].uuid
DOCTOR_ROOTS = Path(__file__).parent / "doctor_roots"


def raw_node(nid: str, host: str, labels: dict[str, str] | None = None,
             **parts: Any) -> dict[str, Any]:
    """A node as Docker sends it, ``parts`` replacing its top-level parts."""
    return {"ID": nid, "Version": {"Index": 7},
            "Spec": {"Role": "worker", "Availability": "active", "Labels": labels or {}},
            "Description": {"Hostname": host, "Platform": {"OS": "linux",
                                                           "Architecture": "x86_64"},
                            "Resources": {"NanoCPUs": 64_000_000_000,
                                          "MemoryBytes": 512 * 1024**3},
                            "Engine": {"Labels": {}}},
            "Status": {"State": "ready", "Addr": "10.0.0.2"}, **parts}


BAD_RESOURCES = raw_node("n-4090", "gpu-node-2", hold("held", [HELD]),
                         Description={"Hostname": "gpu-node-2", "Resources": "x"})


def _listed() -> list[SwarmNode]:
    return listed_client([raw_node("n-dgx", "gpu-node-1"), BAD_RESOURCES]).nodes()


def test_a_node_with_resources_a_string_is_unread_and_the_others_read() -> None:
    good, bad = _listed()
    assert not good.unread and good.cpu_milli == 64_000
    assert bad.unread.startswith("node gpu-node-2: Description.Resources is str 'x', "
                                 "not an object")
    assert "docker node update" in bad.unread
    assert bad.labels == hold("held", [HELD])  # what can be read is read


def test_an_unread_node_gets_no_placement_and_keeps_its_holding() -> None:
    nodes = _listed()
    services = [svc("held", {f"{P}gpus": "1"}), svc("new", {f"{P}gpus": "4"}),
                svc("more", {f"{P}gpus": "1"})]
    tasks = [SwarmTask("t1", "id-held", "n-4090", 1, "running", "running", ())]
    plan = plan_placement(nodes, services, tasks, FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["new"].status == "placed"  # the other node placed on
    assert [p.node_id for p in by["new"].placements] == ["n-dgx"]
    assert all(p.node_id == "n-dgx" for p in by["more"].placements)
    assert "n-4090" not in plan.node_remove and "n-4090" not in plan.node_set
    assert [(p.node_id, p.uuids) for p in by["held"].placements] == [("n-4090", (HELD,))]


def test_label_sync_writes_the_other_nodes_never_the_unread_one(tmp_path: Path) -> None:
    nodes = _listed()
    swarm = RecordingSwarm(nodes, [], [])
    facts = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in FACTS.items()}
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    sync = LabelSync(swarm, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    report = sync.cycle(Snapshot(nodes, [], [], facts, swarm_labels={}))
    assert ("node", "n-dgx") in swarm.calls
    assert ("node", "n-4090") not in swarm.calls
    assert swarm.node("n-4090").labels == hold("held", [HELD])
    assert any("Description.Resources" in e and "gpu-node-2" in e for e in report.errors)


def test_a_label_write_to_a_node_unread_at_write_time_is_refused() -> None:
    sw = listed_client([BAD_RESOURCES])
    with pytest.raises(SwarmError, match=re.escape(
            "label write refused: node gpu-node-2: Description.Resources")) as got:
        sw.update_node_labels("n-4090", lambda cur: {})
    assert type(got.value) is SwarmError  # (the message whole: the node's own unread)
    assert str(got.value) == f"label write refused: {node_from_api(BAD_RESOURCES).unread}"


@pytest.mark.parametrize(("parts", "said"), [
    ({"Spec": None}, "Spec is null"),
    ({"Spec": "worker"}, "Spec is str 'worker'"),
    ({"Spec": {"Labels": ["a=b"]}}, "Spec.Labels is list"),
    ({"Version": {"Index": "x"}}, "Version.Index is 'x'"),
    ({"ManagerStatus": "leader"}, "ManagerStatus is str"),
    ({"Status": {"State": 3}}, "Status.State is 3"),
    ({"Description": {"Resources": {"GenericResources": "gpu"}}},
     "Description.Resources.GenericResources is 'gpu', not a list"),
    ({"Description": {"Resources": {"GenericResources": ["gpu"]}}},
     "Description.Resources.GenericResources[0] is 'gpu', not an object"),
    ({"Description": {"Resources": {"GenericResources": [
        {"NamedResourceSpec": {"Value": "GPU-1"}}]}}},
     "GenericResources[0].NamedResourceSpec has no Kind or Value"),
    ({"Description": {"Resources": {"GenericResources": [
        {"DiscreteResourceSpec": {"Kind": "gpu", "Value": "many"}}]}}},
     "DiscreteResourceSpec.Value is 'many'"),
])
def test_a_node_part_not_as_docker_sends_it_leaves_the_node_unread(
        parts: dict[str, Any], said: str) -> None:
    got = node_from_api(raw_node("n1", "h1", **parts))
    assert said in got.unread
    assert got.id == "n1"


@pytest.mark.parametrize("raw", [None, "n1", {"Spec": {}}, {"ID": ""}, {"ID": 7}])
def test_a_node_read_without_an_id_is_refused_naming_it(raw: Any) -> None:
    """(An inspect's answer: a list leaves such an entry out, tests/test_unkeyed_answers.py)"""
    with pytest.raises(UnreadSpec, match="a node listed"):
        node_from_api(raw)


def test_nodes_as_docker_sends_them_read_as_ever() -> None:
    """A worker with no ManagerStatus, a node with no Resources or Platform, a named and
    a discrete generic resource: read, none unread."""
    bare = node_from_api({"ID": "n1", "Spec": {"Role": "worker"}, "Status": {},
                          "Description": {"Hostname": "h"}, "Version": {"Index": 1}})
    assert not bare.unread and bare.cpu_milli is None and bare.labels == {}
    gen = node_from_api(raw_node("n2", "h2", ManagerStatus={
        "Leader": True, "Addr": "10.0.0.9:2377"}, Description={"Resources": {
            "GenericResources": [
                {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "GPU-b"}},
                {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "GPU-a"}},
                {"DiscreteResourceSpec": {"Kind": "gpu", "Value": 2}}]}}))
    assert not gen.unread and gen.leader
    assert gen.generic_resources == {"NVIDIA-GPU": ("GPU-a", "GPU-b")}
    assert gen.discrete_resources == {"gpu": 2}
    assert replace(gen, unread="x").unread == "x"


def test_a_discrete_resource_of_none_reads_as_zero_not_unread() -> None:
    """dockerd advertises ``gpu=0`` (node-generic-resources) with no Value: Docker omits
    a zero Value (omitempty), so the node reads whole, its count 0."""
    got = node_from_api(raw_node("n1", "h1", Description={"Resources": {
        "GenericResources": [{"DiscreteResourceSpec": {"Kind": "gpu"}}]}}))
    assert got.unread == "" and got.discrete_resources == {"gpu": 0}


def _unread(nodes: list[SwarmNode], nid: str) -> list[SwarmNode]:
    return [replace(n, unread=f"node {n.hostname}: Description.Resources is str 'x'")
            if n.id == nid else n for n in nodes]


@pytest.mark.parametrize("which", ["n1", "n2"])
def test_no_hot_spot_move_onto_or_off_an_unread_node(which: str) -> None:
    """gpu-node-2's shared GPU runs hot: its share moved to gpu-node-1; with either node
    unread (gpu-node-2 the source, gpu-node-1 the target) none moves."""
    nodes, svcs, tasks = rb.cluster()
    sig = Signals(rb.CFG)
    times = [float(t) for t in range(13)]
    rb.feed(sig, nodes, times, {t: {0: 97.0} for t in times})
    moves = plan_moves(_inputs(sig, _unread(nodes, which), svcs, tasks)).moves
    assert moves == []
    assert len(plan_moves(_inputs(sig, nodes, svcs, tasks)).moves) == 1  # read: it moves


@pytest.mark.parametrize("which", ["n1", "n2"])
def test_no_defrag_move_onto_or_off_an_unread_node(which: str) -> None:
    """Pending p wants gpu-node-2's 8 GPUs: a (on its GPU 0) is moved to gpu-node-1;
    with either node unread, a stays."""
    n2 = {f"{P}assign.a": rb.U2[0], f"{P}service.a": "true"}
    nodes = [rb.node("n1", "gpu-node-1", {}), rb.node("n2", "gpu-node-2", n2)]
    svcs = [rb.service("a", {f"{P}gpus": "1"}), rb.service("p", {f"{P}gpus": "8"})]
    tasks = [rb.running("a", "n2")]
    sig = Signals(rb.CFG)
    rb.feed(sig, nodes, [float(t) for t in range(13)], {})
    assert plan_moves(_inputs(sig, _unread(nodes, which), svcs, tasks, ["p"])).moves == []
    assert plan_moves(_inputs(sig, nodes, svcs, tasks, ["p"])).moves != []


def _inputs(sig: Signals, nodes: list[SwarmNode], svcs: list[SwarmService],
            tasks: list[SwarmTask], pending: list[str] | None = None) -> Inputs:
    return Inputs(nodes, svcs, tasks, rb.FACTS, read_ledger(nodes, P), sig.gpus, sig.nodes,
                  rb.CFG, 12.0, pending or [], P)


@pytest.mark.parametrize("opted_out", [False, True])
def test_a_failed_gpu_s_holder_on_an_unread_node_stays_and_is_said(opted_out: bool) -> None:
    """a holds gpu-node-2's failed GPU 0: moved to gpu-node-1 (or, opted out of moves,
    released to placement); on an unread gpu-node-2, it stays, the note naming why."""
    labels = {"a": {f"{P}rebalance": "never"}} if opted_out else None
    nodes, svcs, tasks = hp.setup({"a": [rb.U2[0]]}, full_n2=not opted_out, svc_labels=labels)
    f2 = hp.mark(rb.F2, failed=[0])
    read = hp.plan(nodes, svcs, tasks, f2)
    assert read.moves or read.releases
    p = hp.plan(_unread(nodes, "n2"), svcs, tasks, f2)
    assert not p.moves and not p.releases
    assert any(n.startswith("a on gpu-node-2 stays: node gpu-node-2: Description.Resources")
               for n in p.notes), p.notes


def test_audit_status_plan_and_doctor_name_the_unread_node() -> None:
    nodes = _listed()
    facts = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in FACTS.items()}
    snap = Snapshot(nodes, [], [], facts, swarm_labels={})
    found = run_audit(snap)
    mine = [f for f in found if f.node == "n-4090"]
    assert [f.kind for f in mine] == ["node-unread"]  # no label drift read off it
    assert "Description.Resources" in mine[0].message and not mine[0].advisory
    assert exit_code(found) == 1
    doc = build_cluster(snap, None, findings=found)
    (n2,) = [n for n in doc["nodes"] if n["id"] == "n-4090"]
    assert n2["unread"] == nodes[1].unread
    assert f"  {nodes[1].unread}" in render_status(doc).splitlines()
    text = render_plan([], ungranted=[], workload={}, health=[], moves=None, listen="x",
                       unread=[nodes[1].unread])
    assert "node gpu-node-2: Description.Resources is str 'x'" in text
    read = SwarmRead(nodes=nodes)
    check = check_unread_nodes(replace(read_view(str(DOCTOR_ROOTS / "healthy")), swarm=read))
    assert check is not None and check.status == Status.WARN
    assert "node gpu-node-2: Description.Resources" in check.found
    assert check_unread_nodes(replace(read_view(str(DOCTOR_ROOTS / "healthy")),
                                      swarm=SwarmRead(nodes=nodes[:1]))) is None


def test_a_holder_on_a_node_whose_labels_cannot_be_read_is_left_as_it_is() -> None:
    """gpu-node-2's Spec.Labels a list: its holdings cannot be read. held, whose task
    runs there, was taken for holding nothing and placed on gpu-node-1 anew (its task
    replaced); now nothing is written for it, its plan naming the node; more is placed."""
    raw = raw_node("n-4090", "gpu-node-2")
    raw["Spec"]["Labels"] = [f"{k}={v}" for k, v in hold("held", [HELD]).items()]
    nodes = listed_client([raw_node("n-dgx", "gpu-node-1"), raw]).nodes()
    services = [svc("held", {f"{P}gpus": "1"}), svc("more", {f"{P}gpus": "1"})]
    tasks = [SwarmTask("t1", "id-held", "n-4090", 1, "running", "running", ())]
    plan = plan_placement(nodes, services, tasks, FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert not by["held"].placements and not by["held"].needs_service_write
    assert by["held"].reason is not None
    assert "node gpu-node-2: Spec.Labels is list" in by["held"].reason
    assert "spec cannot be read" not in by["held"].reason
    assert not any(k.endswith(".held") for k in plan.node_set.get("n-dgx", {}))
    assert [p.node_id for p in by["more"].placements] == ["n-dgx"]


def test_audit_s_table_and_status_show_an_unread_node_s_labels_kept() -> None:
    nodes = _listed()
    facts = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in FACTS.items()}
    snap = Snapshot(nodes, [], [], facts, swarm_labels={})
    found = run_audit(snap)
    (row,) = [ln for ln in render_table(found, snap, P).splitlines()
              if ln.startswith("gpu-node-2 ")]
    assert row.split()[4] == "kept"
    (n2,) = [n for n in build_cluster(snap, None, findings=found)["nodes"] if n["id"] == "n-4090"]
    assert n2["labels_state"] == "kept"


def test_a_node_read_whole_again_at_its_version_shows_its_holdings_again() -> None:
    """gpu-node-2's Spec.Labels a list, then read whole at the same spec version (a proxy
    between, mended): the planner remembers a node's ledger and gates by its version, so
    it kept the unread read's (none): held, running there, was moved to gpu-node-1 and
    more given every GPU of gpu-node-2, held's among them. Now as a fresh planner has it."""
    raw = raw_node("n-4090", "gpu-node-2")
    raw["Spec"]["Labels"] = [f"{k}={v}" for k, v in hold("held", [HELD]).items()]
    whole = raw_node("n-4090", "gpu-node-2", hold("held", [HELD]))
    unread, read = (listed_client([raw_node("n-dgx", "gpu-node-1"), n]).nodes()
                    for n in (raw, whole))
    assert unread[1].unread and unread[1].version == read[1].version
    services = [svc("held", {f"{P}gpus": "1"}), svc("more", {f"{P}gpus": "8"})]
    tasks = [SwarmTask("t1", "id-held", "n-4090", 1, "running", "running", ())]
    planner = Planner()
    planner.plan(unread, services, tasks, FACTS)
    by = {sp.name: sp for sp in planner.plan(read, services, tasks, FACTS).services}
    assert [(p.node_id, p.uuids) for p in by["held"].placements] == [("n-4090", (HELD,))]
    assert all(HELD not in p.uuids for p in by["more"].placements)


def test_a_global_service_waiting_on_an_unread_node_names_why() -> None:
    """A global service placed on every node but an unread one: that node's wait names
    the part that cannot be read, not "down, paused or drained" (it is neither)."""
    nodes = _listed()
    g = replace(svc("glob", {f"{P}gpus": "1"}), mode="global", replicas=None)
    (sp,) = plan_placement(nodes, [g], [], FACTS).services
    assert [p.node_id for p in sp.placements] == ["n-dgx"]
    assert sp.nodes_waiting == {"gpu-node-2": nodes[1].unread}


def test_an_unread_service_on_an_unread_node_is_named_by_its_own_field() -> None:
    """held's spec unread (TaskTemplate a string) and its task on gpu-node-2, whose
    labels cannot be read: its plan names its own spec's field, the fix its owner makes
    (the node's fault said the node's own way, apart)."""
    raw = raw_node("n-4090", "gpu-node-2")
    raw["Spec"]["Labels"] = ["x=y"]
    nodes = listed_client([raw_node("n-dgx", "gpu-node-1"), raw]).nodes()
    held = service_from_api({"ID": "id-held", "Version": {"Index": 2}, "Spec": {
        "Name": "held", "Labels": {f"{P}gpus": "1"}, "TaskTemplate": "x"}})
    tasks = [SwarmTask("t1", "id-held", "n-4090", 1, "running", "running", ())]
    (sp,) = plan_placement(nodes, [held], tasks, FACTS).services
    assert sp.status == "failed" and sp.unread
    assert "held's spec cannot be read: Spec.TaskTemplate is str 'x'" in (sp.reason or "")


def test_a_node_listed_without_its_spec_is_unread_its_holder_left_there() -> None:
    """gpu-node-2 listed with no Spec (Docker sends one with every node): read as empty,
    its labels seemed gone and held, running there, was moved to gpu-node-1."""
    raw = raw_node("n-4090", "gpu-node-2", hold("held", [HELD]))
    del raw["Spec"]
    nodes = listed_client([raw_node("n-dgx", "gpu-node-1"), raw]).nodes()
    assert nodes[1].unread.startswith("node gpu-node-2: Spec is null or missing, not an object")
    services = [svc("held", {f"{P}gpus": "1"})]
    tasks = [SwarmTask("t1", "id-held", "n-4090", 1, "running", "running", ())]
    (sp,) = plan_placement(nodes, services, tasks, FACTS).services
    assert not sp.placements and not sp.needs_service_write


def test_a_holding_s_node_is_unread_by_its_own_answer_alone() -> None:
    """``unread_source``, the one check the rebalance policies, their target search and
    the over-share restarts make of a holding's node: its part that cannot be read, ""
    for a node read whole or not listed."""
    good, bad = _listed()
    by_id = {n.id: n for n in (good, bad)}
    assert unread_source(by_id, bad.id) == bad.unread != ""
    assert unread_source(by_id, good.id) == unread_source(by_id, "n-gone") == ""
