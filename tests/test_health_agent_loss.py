"""An agent's loss to the health policy: how long, and what it moves.

``health.node_lost_grace_s`` after its agent's last answer, a node is reported failing.
The loss is counted on the daemon's monotonic clock, from the later of that answer and
its term's first look, so a wall clock step neither delays nor hastens it. The loss
alone moves nothing (the node's GPUs and tasks are not known bad), and nothing moves off
a node Swarm reports down or that is drained (Swarm moves its tasks itself). Pure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from support.forged import victim_cluster
from support.health import CFG, F1, F2, U2, mark, plan, setup

from swarmgpu.core.config import Config
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.rebalanceconfig import HealthPolicyConfig
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.rebalance.moves import HealthInputs
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


class _Term:
    """A daemon's term over victim_cluster, its monotonic clock at 100 until a look sets it."""

    def __init__(self, tmp_path: Path) -> None:
        self.sw = victim_cluster({})
        self.d = Daemon(Config(state_dir=str(tmp_path)), swarm=self.sw)  # type: ignore[arg-type]
        self.rb = Rebalancer(self.d)
        self.mono = 100.0
        self.rb.clock = lambda: self.mono

    def all_refused(self, at: float, nodes: list[SwarmNode]) -> dict[str, float]:
        """The losses the health policy is given when every agent of ``nodes`` refused
        at monotonic ``at`` (wall 1000 + ``at``), label sync's record of it before."""
        self.mono = at
        silent = {n.id: FactsResult(n.id, n.hostname, "", None, "refused", 1000.0 + at,
                                    fetched_mono=at) for n in nodes}
        for res in silent.values():
            self.d.book.record(res)
        return dict(self.rb.health_inputs(Snapshot(nodes, [], [], silent,
                                                   taken_at=1000.0 + at)).lost)


def test_an_agents_loss_is_counted_on_the_monotonic_clock(tmp_path: Path) -> None:
    """The term's first look and the agent's last answer at wall 1000, monotonic 100.
    The wall clock stepped back an hour: 400 s later by the monotonic clock the agent is
    lost 400 s, past the grace (before: 0 s, for the hour: its node's evacuation waited
    the step). Stepped forward an hour: 10 s later it is lost 10 s (before: 3610 s, its
    node failing at once)."""
    term = _Term(tmp_path)
    sw, rb = term.sw, term.rb
    node = next(n for n in sw.nodes() if n.id == "n-4090")
    answer = FactsResult(node.id, node.hostname, "", NodeFacts(node.hostname), None, 1000.0,
                         fetched_mono=100.0)
    term.d.book.record(answer)
    assert rb.health_inputs(Snapshot(sw.nodes(), [], [], {node.id: answer},
                                     taken_at=1000.0)).lost == {}

    def lost(wall: float, at: float) -> float:
        term.mono = at
        silent = FactsResult(node.id, node.hostname, "", None, "timed out", wall,
                             fetched_mono=at)
        got = rb.health_inputs(Snapshot(sw.nodes(), [], [], {node.id: silent},
                                        taken_at=wall)).lost
        return got[node.id]

    assert lost(1000.0 - 3600 + 400, 500.0) == 400.0
    assert lost(1000.0 + 3600 + 10, 110.0) == 10.0


def test_a_new_term_counts_the_loss_of_an_agent_it_never_heard_from_its_first_look(
        tmp_path: Path) -> None:
    """A failover (or a restart) while gpu-node-2's agent is down: this daemon never had
    an answer from it, but Swarm says it is a GPU node (label sync's labels: an agent
    answered before). Its loss counts from the term's first look, the grace as after any
    answer; before, only a node whose agent this daemon had heard counted, so a new leader
    never reported it failing, however long it stayed lost."""
    term = _Term(tmp_path)
    nodes = [replace(n, labels={**n.labels, "swarmgpu.gpu.count": "2"})
             if n.id == "n-4090" else n for n in term.sw.nodes()]
    # (the manager and gpu-node-1 say no GPUs)
    assert term.all_refused(100.0, nodes) == {"n-4090": 0.0}
    assert term.all_refused(450.0, nodes) == {"n-4090": 350.0}


def test_a_gpu_node_that_joins_mid_term_counts_its_agents_loss_from_its_first_look(
        tmp_path: Path) -> None:
    """The term began at monotonic 100 with the manager and gpu-node-1; gpu-node-2 joins
    an hour later, labelled ``gpu=true`` for the agents' stack, its agent still pulling
    its image. Its loss counts from the cycle that first listed it: 0 s then, 350 s
    350 s later. Before, from the term's first look: an hour at once, past the grace,
    the new node reported failing ("its agent has not answered for 3600s") before its
    agent could start."""
    term = _Term(tmp_path)
    joined = next(n for n in term.sw.nodes() if n.id == "n-4090")
    joined = replace(joined, labels={**joined.labels, "gpu": "true"})
    first = [n for n in term.sw.nodes() if n.id != joined.id]
    assert term.all_refused(100.0, first) == {}  # (no GPU node among them)
    assert term.all_refused(3700.0, [*first, joined]) == {"n-4090": 0.0}
    assert term.all_refused(4050.0, [*first, joined]) == {"n-4090": 350.0}


DRAIN = replace(CFG, health=HealthPolicyConfig(drain_node=True))


def _on(state: str, availability: str = "active") -> tuple[
        list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """'a' on GPU 0 and 'c' on GPU 5 of gpu-node-2, which Swarm reports so."""
    nodes, svcs, tasks = setup({"a": [U2[0]], "c": [U2[5]]}, full_n2=False)
    return ([replace(n, state=state, availability=availability) if n.id == "n2" else n
             for n in nodes], svcs, tasks)


def test_an_agents_loss_alone_moves_no_model_server_off_a_node_swarm_runs() -> None:
    """swarmgpu's own agent on gpu-node-2 is lost past the grace; Swarm reports the node
    ready and 'c' running on a GPU nothing says is bad. Before: with drain_node the health
    policy moved 'c' (a model server's restart) for the loss of swarmgpu's reader alone.
    The node is still reported failing, and why nothing moves is said."""
    nodes, svcs, tasks = _on("ready")
    p = plan(nodes, svcs, tasks, F2, HealthInputs(left=5, lost={"n2": 400.0}), cfg=DRAIN)
    assert p.failing_nodes == {"gpu-node-2": "its agent has not answered for 400s"}
    assert not p.moves and not p.releases, p.moves
    assert any("its agent's loss alone moves nothing" in n for n in p.notes), p.notes
    # its GPUs failing, with drain_node: drained, as before
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]), HealthInputs(left=5), cfg=DRAIN)
    assert sorted(m.service for m in p.moves) == ["a", "c"]


def test_a_node_swarm_reports_down_is_left_to_swarm_though_its_agent_answers() -> None:
    """A split view: Swarm reports gpu-node-2 down, its agent still answers, GPU 0 failed
    (and GPU 1, the node failing). Swarm restarts the node's replicated tasks elsewhere
    itself, and placement re-places the holding the new task waits on. Before: the health
    policy moved 'a' off it too (and with drain_node 'c'): twice."""
    nodes, svcs, tasks = _on("down")
    for f2, cfg in ((mark(F2, failed=[0]), CFG), (mark(F2, failed=[0, 1]), DRAIN)):
        p = plan(nodes, svcs, tasks, f2, HealthInputs(left=5), cfg=cfg)
        assert not p.moves and not p.releases, p.moves
        assert any(n.startswith("a on gpu-node-2: left to Swarm, which moves its task "
                                "(Swarm reports gpu-node-2 down)") for n in p.notes), p.notes
    # placement does re-place it, once Swarm's new task waits: no GPU on the down node
    waiting = [SwarmTask("t-a2", "id-a", "", 1, "pending", "running", ())]
    planner = Planner()
    planner.keep_failed_holdings(lambda _svc, _nid: True)  # the policy on
    a = [s for s in svcs if s.name == "a"]
    sp = planner.plan(nodes, a, waiting, {"n1": F1, "n2": mark(F2, failed=[0])}).services[0]
    assert [pl.node_id for pl in sp.placements] == ["n1"], sp


def test_a_drained_node_is_left_to_swarm_and_a_paused_one_is_not() -> None:
    """`docker node update --availability drain`: Swarm moves the node's tasks itself;
    the health policy moved them as well. A paused node keeps its tasks: its failed
    GPU's holder moves, and with drain_node its other GPU services (two GPUs failed)."""
    nodes, svcs, tasks = _on("ready", "drain")
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]), HealthInputs(left=5), cfg=DRAIN)
    assert not p.moves and not p.releases, p.moves
    assert any("Swarm moves its tasks itself (gpu-node-2 is drained (availability drain))"
               in n for n in p.notes), p.notes
    nodes, svcs, tasks = _on("ready", "pause")
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]), HealthInputs(left=5), cfg=DRAIN)
    assert sorted(m.service for m in p.moves) == ["a", "c"]


def test_a_down_nodes_holder_swarm_never_runs_elsewhere_is_not_left_to_swarm() -> None:
    """Swarm reports gpu-node-2 down, GPU 0 failed under 'g'. Swarm re-creates only a
    replicated service's task elsewhere: a global service's task is its node's, a job's
    orchestrator acts on no node's state, and a task its constraints pin to the node has
    nowhere else to go. Before: each was 'left to Swarm, which moves its task' (said in
    plan and the log), a move that never comes; now the policy's own path says why it
    stays, as on a node Swarm reports ready."""
    pinned = ["node.hostname==gpu-node-2"]
    for mode, constraints in (("global", []), ("replicated-job", []),
                              ("replicated", pinned)):
        nodes, svcs, tasks = setup({"g": [U2[0]]}, full_n2=False, modes={"g": mode},
                                   constraints={"g": constraints})
        nodes = [replace(n, state="down") if n.id == "n2" else n for n in nodes]
        p = plan(nodes, svcs, tasks, mark(F2, failed=[0]), HealthInputs(left=5))
        assert not p.moves, (mode, p.moves)
        assert not any("left to Swarm" in n for n in p.notes), (mode, p.notes)
        assert any(n.startswith("g on gpu-node-2 stays: ") for n in p.notes), (mode, p.notes)
