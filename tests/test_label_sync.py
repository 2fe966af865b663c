"""Label sync's cycle (``LabelSync.cycle``) over an in-memory Swarm: which nodes it
writes and which it leaves as they are, and what it reports. Pure (support.forged's
RecordingSwarm; the real swarm's are in test_label_sync_swarm.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from loguru import logger
from prometheus_client import generate_latest
from support.forged import R4090_F, RecordingSwarm, sw_node
from support.write_paths import svc

from swarmgpu.core.config import Config, PlacementConfig, SyncConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import CycleReport, LabelSync, Snapshot
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.labels import desired_labels

P = "swarmgpu."
NID, HOST = "n-4090", "gpu-node-2"
MISMATCH = "nvml: cannot initialise NVML (NVMLError_LibNvmlVersionMismatch)"


@pytest.fixture
def logs() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    yield lines
    logger.remove(sink)


def _labelled(running: bool) -> RecordingSwarm:
    """The 4090 node with label sync's labels and one of the user's; with ``running``, a
    model server runs there whose constraint reads them."""
    node = sw_node(NID, HOST, {**desired_labels(R4090_F, P), "zone": "a"})
    llm = svc("llm", {}, [], [f"node.labels.{P}gpu.present==true"])
    tasks = [SwarmTask("t1", llm.id, NID, 1, "running", "running", ())] if running else []
    return RecordingSwarm([node], [llm], tasks)


def _cycle(
    sw: RecordingSwarm,
    tmp: Path,
    res: FactsResult,
    *,
    allow_disruptive: bool = False,
    hold: bool = False,
) -> tuple[CycleReport, DaemonMetrics]:
    cfg = Config(
        state_dir=str(tmp), sync=SyncConfig(allow_disruptive=allow_disruptive, watch_events=False)
    )
    metrics = DaemonMetrics()
    sync = LabelSync(sw, cfg, metrics, AgentBook())  # type: ignore[arg-type]
    report = sync.cycle(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: res}), hold=hold)
    sync.flush()
    return report, metrics


def _facts(facts: NodeFacts | None, error: str | None = None) -> FactsResult:
    return FactsResult(NID, HOST, f"https://{HOST}:9101/facts", facts, error, time.time())


def test_a_node_whose_gpus_cannot_be_read_keeps_its_labels(tmp_path: Path, logs: list[str]) -> None:
    # NVML cannot initialise (a driver/library mismatch after a driver upgrade), or
    # its GPU count fails: the agent answers with no GPU and says why. Writing count=0
    # and removing the rest would stop the model server whose constraint reads them
    # (with allow_disruptive) or hold back a few keys and drop the others.
    for facts in (
        NodeFacts(hostname=HOST, errors=(MISMATCH,)),
        NodeFacts(
            hostname=HOST,
            driver_version="550.54.15",
            errors=("nvml: nvmlDeviceGetCount failed; no GPUs can be listed",),
        ),
    ):
        for allow_disruptive in (False, True):
            for hold in (False, True):
                sw = _labelled(running=True)
                before = dict(sw.node(NID).labels)
                logs.clear()
                report, metrics = _cycle(
                    sw, tmp_path, _facts(facts), allow_disruptive=allow_disruptive, hold=hold
                )
                assert sw.node(NID).labels == before and sw.calls == []
                assert metrics.held_changes._value.get() == 0
                assert metrics.nodes_gpus_unread._value.get() == 1
                assert metrics.agents_unreachable._value.get() == 0  # it answered
                (err,) = report.errors
                assert err.startswith(f"{HOST}: ") and facts.errors[0] in err
                assert any(
                    "labels left as they are" in ln and facts.errors[0] in ln for ln in logs
                ), logs


def test_an_unreachable_agent_keeps_the_labels(tmp_path: Path, logs: list[str]) -> None:
    sw = _labelled(running=True)
    before = dict(sw.node(NID).labels)
    why = f"agent at https://{HOST}:9101/facts: timed out after 3s"
    report, metrics = _cycle(sw, tmp_path, _facts(None, why), allow_disruptive=True)
    assert sw.node(NID).labels == before and sw.calls == []
    assert report.errors == [f"{HOST}: {why}"]
    assert metrics.agents_unreachable._value.get() == 1
    assert any("labels left as they are" in ln for ln in logs), logs


def test_a_node_that_lists_no_gpu_without_an_error_is_labelled_so(tmp_path: Path) -> None:
    # Zero GPUs and no error is an answer (the GPUs were taken out): count=0, the rest
    # of label sync's labels removed, the user's kept.
    sw = _labelled(running=False)
    report, metrics = _cycle(sw, tmp_path, _facts(NodeFacts(hostname=HOST)))
    assert sw.node(NID).labels == {f"{P}gpu.count": "0", "zone": "a"}
    assert report.writes == 1 and report.errors == []
    assert metrics.nodes_gpus_unread._value.get() == 0


def test_the_gpus_unread_gauge_falls_when_the_agent_lists_its_gpus_again(
    tmp_path: Path,
) -> None:
    # set each cycle, not counted up: a node whose agent reads NVML again leaves it
    sw = _labelled(running=False)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    metrics = DaemonMetrics()
    sync = LabelSync(sw, cfg, metrics, AgentBook())  # type: ignore[arg-type]
    for facts, want in ((NodeFacts(hostname=HOST, errors=(MISMATCH,)), 1), (R4090_F, 0)):
        sync.cycle(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: _facts(facts)}))
        assert metrics.nodes_gpus_unread._value.get() == want
    text = generate_latest(metrics.registry).decode()
    assert "# HELP swarmgpu_nodes_gpus_unread Nodes whose agent answers" in text


def test_a_node_problem_that_lasts_is_logged_once(tmp_path: Path, logs: list[str]) -> None:
    """An agent unreachable, or one whose GPUs cannot be read, for two cycles: each line
    once, not every cycle; said again when it comes back after the node was fine."""
    sw = _labelled(running=False)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    down = _facts(None, f"agent at https://{HOST}:9101/facts: timed out after 3s")
    unread = _facts(NodeFacts(hostname=HOST, errors=(MISMATCH,)))
    for res in (down, down, unread, unread, _facts(R4090_F), down):
        sync.cycle(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: res}))
    assert [ln for ln in logs if "agent unreachable" in ln] == [
        f"agent unreachable, labels left as they are: {down.error}"
    ] * 2, logs
    assert len([ln for ln in logs if ln.startswith("agent reports:")]) == 1, logs
    assert len([ln for ln in logs if "labels left as they are" in ln and MISMATCH in ln]) == 1, logs


def test_a_problem_of_two_nodes_is_said_of_each_once_while_it_lasts_there(
    tmp_path: Path,
) -> None:
    """The same agent error on two nodes is said of each; once while it lasts on that
    node, again of the one that was fine for a cycle and fails again."""
    hosts = {"n-a": "host-a", "n-b": "host-b"}
    nodes = [sw_node(nid, h, desired_labels(R4090_F, P)) for nid, h in hosts.items()]
    sw = RecordingSwarm(nodes, [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]

    def res(nid: str, down: bool) -> FactsResult:
        facts = None if down else replace(R4090_F, hostname=hosts[nid])
        return FactsResult(
            nid,
            hosts[nid],
            f"https://{hosts[nid]}:9101/facts",
            facts,
            "timed out after 3s" if down else None,
            time.time(),
        )

    said: list[str] = []
    sink = logger.add(
        lambda m: said.append(m.record["extra"]["node"]),
        level="WARNING",
        filter=lambda r: "agent unreachable" in r["message"],
    )
    try:
        for a_down in (True, True, False, True):
            sync.cycle(
                Snapshot(sw.nodes(), [], [], {"n-a": res("n-a", a_down), "n-b": res("n-b", True)})
            )
    finally:
        logger.remove(sink)
    assert said == ["host-a", "host-b", "host-a"]


def test_a_gpu_uuid_in_two_nodes_facts_is_said_once_while_it_lasts(tmp_path: Path) -> None:
    """A GPU UUID both nodes' facts list is said of each once while it lasts, again of
    each once it was gone for a cycle and came back."""
    hosts = {"n-a": "host-a", "n-b": "host-b"}
    nodes = [sw_node(nid, h, desired_labels(R4090_F, P)) for nid, h in hosts.items()]
    sw = RecordingSwarm(nodes, [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    one = R4090_F.gpus[0]

    def res(nid: str, uuid: str) -> FactsResult:
        facts = replace(R4090_F, hostname=hosts[nid], gpus=(replace(one, uuid=uuid),))
        return FactsResult(nid, hosts[nid], f"https://{hosts[nid]}:9101/facts", facts, None,
                           time.time())

    said: list[str] = []
    sink = logger.add(lambda m: said.append(m.record["extra"]["node"]), level="WARNING",
                      filter=lambda r: one.uuid in r["message"])
    try:
        for b_uuid in (one.uuid, one.uuid, "GPU-b-own", one.uuid, one.uuid):
            sync.cycle(Snapshot(sw.nodes(), [], [], {"n-a": res("n-a", one.uuid),
                                                     "n-b": res("n-b", b_uuid)}))
    finally:
        logger.remove(sink)
    assert said == ["host-a", "host-b", "host-a", "host-b"]


def test_a_task_placed_after_the_snapshot_listed_the_tasks_holds_the_change(
    tmp_path: Path,
) -> None:
    """The snapshot lists the tasks before the agents are read (up to their deadline, a
    slow one's whole timeout) and the writes come after planning: a task Swarm placed on
    the node meanwhile, whose constraint reads a label this cycle changes, would be
    stopped by it. The write checks the node's tasks as Swarm has them; before, only the
    snapshot's were, and the label was removed under the new task."""
    for hold in (False, True):
        sw = _labelled(running=False)
        before = dict(sw.node(NID).labels)
        cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
        sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
        none = _facts(NodeFacts(hostname=HOST))  # no GPU: gpu.present goes
        snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: none})
        llm = sw.services()[0]
        sw.run_task(SwarmTask("t1", llm.id, NID, 1, "running", "running", ()))  # placed now
        report = sync.cycle(snap, hold=hold)
        sync.flush()
        assert sw.node(NID).labels[f"{P}gpu.present"] == "true", hold
        # what no running task reads still changes
        assert sw.node(NID).labels != before and report.errors == []


def test_a_gpu_uuid_in_the_facts_of_two_nodes_of_one_hostname_names_each_apart(
    tmp_path: Path,
) -> None:
    """Two nodes may share a hostname (one re-joined under a new ID while its old entry is
    still listed, where both reach the same agent): the warning names each node by its
    hostname and ID. Before: "gpu-1 lists GPU ... as gpu-1 does"."""
    nodes = [sw_node(nid, HOST, desired_labels(R4090_F, P)) for nid in ("n-old", "n-new")]
    sw = RecordingSwarm(nodes, [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m.record["message"])), level="WARNING",
                      filter=lambda r: R4090_F.gpus[0].uuid in r["message"])
    try:
        sync.cycle(Snapshot(sw.nodes(), [], [], {
            nid: FactsResult(nid, HOST, "http://10.0.0.5:9401/facts", R4090_F, None, time.time())
            for nid in ("n-old", "n-new")}))
    finally:
        logger.remove(sink)
    assert sorted(ln.partition(" does: ")[0] for ln in said) == sorted(
        f"{HOST} ({me}) lists GPU {R4090_F.gpus[0].uuid} in its facts, as {HOST} ({other})"
        for me, other in (("n-new", "n-old"), ("n-old", "n-new"))), said


def test_a_node_advertising_the_configured_generic_kind_expects_an_agent(
        tmp_path: Path, logs: list[str]) -> None:
    """A node whose engine advertises ``placement.generic_resource_kind`` is a GPU node
    (placement keeps it off the CPU-only nodes too): its agent not answering is said,
    as for one advertising NVIDIA-GPU. Before, only the usual kinds counted, and it was
    taken for a node without GPUs (debug: "no agent")."""
    node = replace(sw_node(NID, HOST, {}), discrete_resources={"A100": 2})
    sw = RecordingSwarm([node], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=PlacementConfig(generic_resource_kind="A100"))
    metrics = DaemonMetrics()
    sync = LabelSync(sw, cfg, metrics, AgentBook())  # type: ignore[arg-type]
    why = f"agent at https://{HOST}:9101/facts: connection refused"
    sync.cycle(Snapshot(sw.nodes(), [], [], {NID: _facts(None, why)}))
    assert metrics.agents_unreachable._value.get() == 1
    assert any("agent unreachable" in ln for ln in logs), logs


def test_a_label_no_node_carries_goes_from_a_node_whose_agent_does_not_answer(
    tmp_path: Path,
) -> None:
    """``<p>state.*`` and ``<p>hold`` are never right on a node (``keys.never_on_a_node``):
    a hand-set ``<p>state.renew=<n>`` there fails that renewal constraint
    (``!=<n>``) on that node. Label sync removed them only from nodes whose agent
    answered; an unreachable agent, a node whose GPUs cannot be read and a CPU node with
    no agent kept them. Now they go from every node (the other labels stay as they are);
    dry-run writes nothing; a change a running task's constraint reads is held back."""
    strays = {f"{P}state.renew": "7", f"{P}hold": "true", f"{P}state.x": "1"}
    why = f"agent at https://{HOST}:9101/facts: timed out after 3s"
    answers = (_facts(None, why), _facts(NodeFacts(hostname=HOST, errors=(MISMATCH,))),
               FactsResult(NID, HOST, "", None, "connection refused", time.time()))
    llm = svc("llm", {}, [], [f"node.labels.{P}gpu.present==true"])
    ours = {**desired_labels(R4090_F, P), "zone": "a"}
    for i, res in enumerate(answers):
        before = ours if i < 2 else {"zone": "a"}  # the last: a CPU node, no agent
        for hold in (False, True):
            sw = RecordingSwarm([sw_node(NID, HOST, {**before, **strays})], [llm],
                                [SwarmTask("t1", llm.id, NID, 1, "running", "running", ())])
            report, _ = _cycle(sw, tmp_path, res, hold=hold)
            assert sw.node(NID).labels == before, (i, hold)
            assert report.writes == 1
    # Dry-run: nothing written.
    sw = RecordingSwarm([sw_node(NID, HOST, {**ours, **strays})], [llm], [])
    cfg = Config(state_dir=str(tmp_path), dry_run=True, sync=SyncConfig(watch_events=False))
    sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    sync.cycle(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: answers[0]}))
    assert sw.node(NID).labels == {**ours, **strays} and sw.calls == []
    # An owner's running task whose constraint reads one keeps it (held back).
    held = svc("held", {}, [], [f"node.labels.{P}state.x==1"])
    sw = RecordingSwarm([sw_node(NID, HOST, {"zone": "a", **strays})], [held],
                        [SwarmTask("t2", held.id, NID, 1, "running", "running", ())])
    _cycle(sw, tmp_path, answers[0])
    assert sw.node(NID).labels == {"zone": "a", f"{P}state.x": "1"}


def test_the_line_of_a_node_left_as_it_is_names_the_labels_removed_from_it(
    tmp_path: Path, logs: list[str],
) -> None:
    """An unreachable agent, or one whose GPUs cannot be read: its labels are left as
    they are, but those no node carries (``keys.never_on_a_node``) go all the same. The
    line said "labels left as they are" while the cycle removed them; it names them now,
    and says the rest are left (dry-run: that they would go)."""
    strays = {f"{P}state.renew": "7", f"{P}hold": "true"}
    down = _facts(None, f"agent at https://{HOST}:9101/facts: timed out after 3s")
    unread = _facts(NodeFacts(hostname=HOST, errors=(MISMATCH,)))
    for res, dry in ((down, False), (unread, False), (down, True)):
        logs.clear()
        sw = RecordingSwarm([sw_node(NID, HOST, {**desired_labels(R4090_F, P), **strays})],
                            [], [])
        cfg = Config(state_dir=str(tmp_path), dry_run=dry,
                     sync=SyncConfig(watch_events=False))
        sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
        sync.cycle(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: res}))
        (line,) = [ln for ln in logs if "left as they are" in ln]
        removed = f"{P}hold, {P}state.renew {'would be removed' if dry else 'removed'}"
        assert removed in line and "the other labels left as they are" in line, line
        assert (res.error or MISMATCH) in line, line


def test_a_node_left_as_it_is_is_said_once_when_its_strays_are_gone(
    tmp_path: Path, logs: list[str],
) -> None:
    """The first cycle of an unreachable agent (or unread GPUs) removes the labels no
    node carries and names them in its line; the next cycle, with them gone, said the
    node again ("labels left as they are" was a new text). Once per episode now."""
    strays = {f"{P}state.renew": "7", f"{P}hold": "true"}
    down = _facts(None, f"agent at https://{HOST}:9101/facts: timed out after 3s")
    unread = _facts(NodeFacts(hostname=HOST, errors=(MISMATCH,)))
    for res in (down, unread):
        logs.clear()
        sw = RecordingSwarm([sw_node(NID, HOST, {**desired_labels(R4090_F, P), **strays})],
                            [], [])
        cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
        sync = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
        for _ in range(3):
            sync.cycle(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {NID: res}))
        assert f"{P}hold" not in sw.node(NID).labels  # the strays went in the first
        said = [ln for ln in logs if "left as they are" in ln]
        assert len(said) == 1 and "removed" in said[0], said
