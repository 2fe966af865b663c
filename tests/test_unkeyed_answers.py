"""An entry the engine lists without an ID, and a node that cannot be read, each cost
only what they must.

A node or a service listed with no ``ID`` (or one that is no non-empty text), or as no
JSON object, failed the whole node or service list: every cycle wrote nothing. Now it
is left out of the list (nothing can be keyed to it, so nothing is written to it), the
daemon logs it each cycle naming its position, its name and the fix, and ``audit``,
``doctor`` and ``plan`` say it. While a service is left out any name in the ledger may
be its: none is released as a gone service's. While a node is, a service with a task
on a node not listed is left as it is (what it holds there is not known).

A global service whose task runs on a node whose labels cannot be read failed whole;
now only that node is skipped for it (its plan says why), its other nodes go on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from loguru import logger
from support.forged import RecordingSwarm
from support.health import hold
from support.placement import DGX, FACTS, R4090, P, svc
from support.render_compose import FACTS as RC_FACTS
from support.render_compose import NODES as RC_NODES
from support.write_time import gpu_present_after_sync

from swarmgpu.agent.doctor import check_unkeyed
from swarmgpu.agent.doctor.read import read_view
from swarmgpu.agent.doctor.view import Status, SwarmRead
from swarmgpu.core.config import Config, SyncConfig
from swarmgpu.manager.commands.audit import audit as run_audit
from swarmgpu.manager.commands.audit import exit_code, render_table
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.commands.render import render_stack
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.manager.placement import Planner, plan_placement
from swarmgpu.manager.placement.keys import devices_key
from swarmgpu.manager.rebalance.record import service_ledger
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmTask
from swarmgpu.swarm.unkeyed import UNKEYED_FIX, Unkeyed

HELD = FACTS["n-4090"].gpus[0].uuid
DGX_HELD = FACTS["n-dgx"].gpus[0].uuid
DOCTOR_ROOTS = Path(__file__).parent / "doctor_roots"


def raw_node(nid: str, host: str, labels: object = None) -> dict[str, object]:
    """A node as Docker sends it; ``labels`` as given (a list: no labels Docker makes)."""
    return {"ID": nid, "Version": {"Index": 7},
            "Spec": {"Role": "worker", "Availability": "active",
                     "Labels": {} if labels is None else labels},
            "Description": {"Hostname": host, "Resources": {"NanoCPUs": 64_000_000_000,
                                                            "MemoryBytes": 512 * 1024**3}},
            "Status": {"State": "ready", "Addr": "10.0.0.2"}}


class NodeApi:
    def __init__(self, raw: list[object]) -> None:
        self.raw = raw

    def nodes(self, filters: object = None) -> list[object]:
        return self.raw


def client(api: object) -> SwarmClient:
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api  # type: ignore[assignment]
    sw.on_write = sw.on_landed = None
    return sw


def test_a_global_service_on_a_node_whose_labels_cannot_be_read_skips_that_node() -> None:
    """glob runs on both nodes; gpu-node-2's Spec.Labels is a list (its holdings cannot
    be read): glob failed whole, nothing written for it on gpu-node-1 either. Now only
    gpu-node-2 is skipped, its plan naming why; gpu-node-1 keeps its holding."""
    labels = [f"{k}={v}" for k, v in hold("glob", [HELD]).items()]
    nodes = client(NodeApi([raw_node("n-dgx", "gpu-node-1", hold("glob", [DGX_HELD])),
                            raw_node("n-4090", "gpu-node-2", labels)])).nodes()
    assert nodes[1].unread and not nodes[0].unread
    g = replace(svc("glob", {f"{P}gpus": "1"}), mode="global", replicas=None)
    tasks = [SwarmTask("t1", g.id, "n-dgx", None, "running", "running", ()),
             SwarmTask("t2", g.id, "n-4090", None, "running", "running", ())]
    plan = plan_placement(nodes, [g], tasks, FACTS)
    (sp,) = plan.services
    assert sp.status != "failed", sp.reason
    assert [(p.node_id, p.uuids) for p in sp.placements] == [("n-dgx", (DGX_HELD,))]
    assert sp.nodes_waiting == {"gpu-node-2": nodes[1].unread}
    assert "n-4090" not in plan.node_set and "n-4090" not in plan.node_remove


class ServiceApi:
    def __init__(self, raw: object) -> None:
        self.raw = raw

    def services(self) -> object:
        return self.raw


def raw_service(sid: object, name: str) -> dict[str, object]:
    return {"ID": sid, "Version": {"Index": 2}, "Spec": {"Name": name, "Labels": {}}}


GOOD = raw_node("n-dgx", "gpu-node-1")
NO_ID = {k: v for k, v in raw_node("", "gpu-node-9").items() if k != "ID"}


def test_a_node_listed_without_an_id_is_left_out_the_others_read() -> None:
    sw = client(NodeApi([GOOD, NO_ID, "n-x", {**GOOD, "ID": 7}]))
    assert [n.id for n in sw.nodes()] == ["n-dgx"]
    first, second, third = sw.unkeyed().nodes
    assert first.startswith("the engine's answer lists node 2 of 4 (hostname 'gpu-node-9') "
                            "with ID None, not a non-empty text: it is left out")
    assert second.startswith("the engine's answer lists node 3 of 4 as str 'n-x', not an "
                             "object")
    assert "node 4 of 4 (hostname 'gpu-node-1') with ID 7" in third
    assert all("check the manager's Docker version" in m for m in (first, second, third))
    assert sw.unkeyed().services == ()


def test_a_node_label_filter_refuses_one_without_an_id() -> None:
    """Its reader (a service's ledger) takes the answer for every node carrying the
    label: one left out would be a holding read as none (the next test)."""
    sw = client(NodeApi([GOOD, NO_ID]))
    with pytest.raises(SwarmError, match="node 2 of 2"):
        sw.nodes_with_label("x")
    assert [n.id for n in client(NodeApi([GOOD])).nodes_with_label("x")] == ["n-dgx"]


def test_a_service_listed_without_an_id_is_left_out_the_others_read() -> None:
    sw = client(ServiceApi([raw_service("s1", "a"), raw_service("", "train"), None]))
    assert [s.name for s in sw.services()] == ["a"]
    no_id, nothing = sw.unkeyed().services
    assert no_id.startswith("the engine's answer lists service 2 of 3 (name 'train') with "
                            "ID '', not a non-empty text: it is left out")
    assert nothing.startswith("the engine's answer lists service 3 of 3 as NoneType None")
    sw = client(ServiceApi([raw_service("s1", "a")]))
    sw.services()
    assert sw.unkeyed().services == ()  # each list says its own


@pytest.mark.parametrize("raw", [{"ID": "s1"}, "x", None])
def test_a_list_that_is_no_list_still_fails_whole(raw: object) -> None:
    with pytest.raises(SwarmError, match=r"the engine's service list is .*, not a list"):
        client(ServiceApi(raw)).services()


LEFT_OUT = Unkeyed(
    nodes=("the engine's answer lists node 3 of 3 (hostname 'gpu-node-9') with ID None, "
           "not a non-empty text: it is left out, nothing is read of it or written to it; "
           f"{UNKEYED_FIX}",),
    services=("the engine's answer lists service 2 of 2 (name 'train') with ID '', not a "
              f"non-empty text: it is left out, nothing is read of it or written to it; "
              f"{UNKEYED_FIX}",))


def _snapshot() -> Snapshot:
    return Snapshot([DGX, R4090], [], [], {}, unkeyed=LEFT_OUT)


def test_the_snapshot_carries_what_the_lists_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    sw = RecordingSwarm([DGX, R4090], [], [])
    sw.left_out = LEFT_OUT
    assert sync.take_snapshot(sw, Config()).unkeyed == LEFT_OUT  # type: ignore[arg-type]


def test_the_daemon_logs_each_left_out_entry_every_cycle(tmp_path: Path) -> None:
    facts = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in FACTS.items()}
    snap = replace(_snapshot(), facts=facts)
    swarm = RecordingSwarm([DGX, R4090], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    labels = LabelSync(swarm, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    for _ in range(2):  # said each cycle it lasts, as an error
        lines: list[str] = []
        sink = logger.add(lines.append, level="ERROR")
        try:
            report = labels.cycle(snap)
        finally:
            logger.remove(sink)
        assert [e for e in report.errors if "left out" in e] == list(LEFT_OUT.said())
        assert sum("node 3 of 3 (hostname 'gpu-node-9')" in ln for ln in lines) == 1
        assert sum("service 2 of 2 (name 'train')" in ln for ln in lines) == 1
    assert ("node", "n-dgx") in swarm.calls  # the listed nodes synced as ever


def test_audit_plan_and_doctor_say_each_left_out_entry() -> None:
    snap = _snapshot()
    found = run_audit(snap)
    left = [(f.kind, f.message) for f in found if f.kind.endswith("-unkeyed")]
    assert left == [("node-unkeyed", LEFT_OUT.nodes[0]),
                    ("service-unkeyed", LEFT_OUT.services[0])]
    assert exit_code(found) == 1
    assert "service 2 of 2 (name 'train')" in render_table(found, snap, P)
    text = render_plan([], ungranted=[], workload={}, health=[], moves=None, listen="x",
                       unread=list(snap.unkeyed.said()))
    assert LEFT_OUT.nodes[0] in text and LEFT_OUT.services[0] in text
    view = read_view(str(DOCTOR_ROOTS / "healthy"))
    check = check_unkeyed(replace(view, swarm=SwarmRead(unkeyed=snap.unkeyed.said())))
    assert check is not None and check.status == Status.WARN
    assert "node 3 of 3 (hostname 'gpu-node-9')" in check.found
    assert "service 2 of 2 (name 'train')" in check.found
    assert "Docker version" in check.fix
    assert check_unkeyed(replace(view, swarm=SwarmRead())) is None


def test_doctor_names_the_first_five_left_out_and_counts_the_rest() -> None:
    said = tuple(f"service {i} of 7 has no ID" for i in range(1, 8))
    view = read_view(str(DOCTOR_ROOTS / "healthy"))
    check = check_unkeyed(replace(view, swarm=SwarmRead(unkeyed=said)))
    assert check is not None
    assert check.found == "; ".join(said[:5]) + "; and 2 more"
    five = check_unkeyed(replace(view, swarm=SwarmRead(unkeyed=said[:5])))
    assert five is not None and five.found == "; ".join(said[:5])


def test_while_a_service_is_left_out_no_ledger_name_is_released() -> None:
    """train holds a GPU of gpu-node-2 in the ledger; the engine lists it without an ID.
    Taken for gone, its entries were released and its GPU given to another while its
    task ran; now its holding stays held, and the others are placed."""
    nodes = [DGX, replace(R4090, labels=hold("train", [HELD]))]
    more = svc("more", {f"{P}gpus": "8"})
    plan = Planner().plan(nodes, [more], [], FACTS, unkeyed=LEFT_OUT)
    assert "train" not in plan.released
    assert not any("train" in k for k in plan.node_remove.get("n-4090", {}))
    (sp,) = plan.services
    assert all(HELD not in p.uuids for p in sp.placements)
    gone = Planner().plan(nodes, [more], [], FACTS)  # listed whole: train is gone
    assert "train" in gone.released


def test_while_a_node_is_left_out_a_holder_running_on_one_not_listed_is_left_as_is() -> None:
    """held runs on a node the list left out: what it holds there is not known, so it is
    not given GPUs elsewhere (its task would be replaced); its plan says why."""
    held = svc("held", {f"{P}gpus": "1"})
    tasks = [SwarmTask("t1", held.id, "n-gone", 1, "running", "running", ())]
    plan = Planner().plan([DGX, R4090], [held], tasks, FACTS, unkeyed=LEFT_OUT)
    (sp,) = plan.services
    assert not sp.placements and not sp.needs_service_write
    assert "a node the engine's list leaves out (the engine's answer lists node 3" in (
        sp.reason or "")
    (placed,) = Planner().plan([DGX, R4090], [held], tasks, FACTS).services
    assert placed.placements  # every node listed: placed as ever


def test_a_service_s_ledger_read_for_a_move_is_refused_while_a_node_carrying_it_has_no_id(
        ) -> None:
    """A move's start reads the service's ledger from every node whose labels carry its
    entry (``service_ledger``): a holding elsewhere makes it unconverged, never moved.
    The filtered list left a node without an ID out silently, so a holding left behind
    there read as none and the move started; now that read is refused (SwarmError, as
    before the lists left such an entry out), naming it, and no move starts."""
    keyed_node = raw_node("n-dgx", "gpu-node-1", hold("train", [DGX_HELD]))
    unkeyed_node = raw_node("n-4090", "gpu-node-2", hold("train", [HELD]))
    del unkeyed_node["ID"]
    sw = client(NodeApi([keyed_node, unkeyed_node]))
    with pytest.raises(SwarmError, match=r"node 2 of 2 \(hostname 'gpu-node-2'\)"):
        service_ledger(sw, P, "train")
    assert set(service_ledger(client(NodeApi([keyed_node])), P, "train")) == {"n-dgx"}


def test_render_keeps_the_holdings_a_service_listed_without_an_id_may_have() -> None:
    """Every GPU of gpu-node-2 is held under the name train, and the service list left
    one service out (no ID): the daemon takes no ledger name for gone, so train's GPUs
    stay held. render planned without the list's word: train's GPUs read as free, and
    the file named them for llm. Now render plans as the daemon does: llm waits."""
    gpus = [g.uuid for g in RC_FACTS["n-4090"].gpus]
    nodes = [replace(RC_NODES[1], labels=hold("train", gpus))]
    facts = {"n-4090": RC_FACTS["n-4090"]}
    stack = ('version: "3.8"\nservices:\n  llm:\n    image: vllm/vllm-openai\n'
             '    deploy:\n      labels:\n        swarmgpu.gpus: "1"\n')
    left_out = Unkeyed(services=("the engine's answer lists service 1 of 1 ...",))
    _, p = render_stack(stack, "ai", nodes, [], [], facts, unkeyed=left_out)
    assert not p.services[0].placements, p.services[0]
    _, p = render_stack(stack, "ai", nodes, [], [], facts)  # (train gone: its GPUs free)
    assert p.services[0].placements


def test_label_sync_holds_a_change_a_left_out_job_s_running_task_reads(tmp_path: Path) -> None:
    """A job's running task (desired state complete) is read only for a job the list
    shows: one left out (no ID) has no task in the snapshot, so no constraint of it was
    watched and its running task was not seen: gpu.present went from under it (Swarm's
    constraint enforcer stops it). While a service is left out, every change is checked
    against the node's tasks as Swarm has them at write time."""
    left_out = Unkeyed(services=("service 1 of 1 left out",))
    assert gpu_present_after_sync(tmp_path, "t-job", "s-job", "complete", left_out) == "true"


def test_the_daemon_s_log_of_left_out_entries_is_bounded_each_cycle(tmp_path: Path) -> None:
    """A proxy that strips every ID (5,000 nodes) had the daemon log 5,000 errors each
    cycle (one a cycle before, the list failing whole): the first few are said, the
    others counted in one line with the fix; the report carries the same."""
    many = Unkeyed(nodes=tuple(f"the engine's answer lists node {i} of 500 ..."
                               for i in range(1, 501)))
    swarm = RecordingSwarm([DGX], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    labels = LabelSync(swarm, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    lines: list[str] = []
    sink = logger.add(lines.append, level="ERROR")
    try:
        report = labels.cycle(Snapshot([DGX], [], [], {}, unkeyed=many))
    finally:
        logger.remove(sink)
    left = [e for e in report.errors if "of 500" in e or "more" in e]
    assert len(left) == 6 and left[:5] == list(many.nodes[:5])
    assert left[5].startswith("and 495 more") and UNKEYED_FIX in left[5]
    assert sum("of 500" in ln or "495 more" in ln for ln in lines) == 6


def test_a_global_service_running_on_a_node_not_listed_keeps_its_device_map_there() -> None:
    """glob runs on gpu-node-1 and on a node the list left out (no ID). Skipped there
    as an unread node is, its device map of that node was removed from its spec: the
    node is not known gone (its ledger unread, its task running), and a task it starts
    there again reads no GPUs. Now it is left as it is while a node is left out."""
    g = replace(svc("glob", {f"{P}gpus": "1", devices_key(P, "n-dgx"): DGX_HELD,
                             devices_key(P, "n-4090"): HELD}), mode="global", replicas=None)
    tasks = [SwarmTask("t1", g.id, "n-dgx", None, "running", "running", ()),
             SwarmTask("t2", g.id, "n-4090", None, "running", "running", ())]
    nodes = [replace(DGX, labels=hold("glob", [DGX_HELD]))]
    (sp,) = Planner().plan(nodes, [g], tasks, FACTS, unkeyed=LEFT_OUT).services
    assert sp.status == "failed" and "leaves out" in (sp.reason or ""), sp.reason
    assert devices_key(P, "n-4090") not in sp.writes.service_labels_remove
