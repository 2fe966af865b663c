"""An agent's loss to the health policy: how long, and what it moves.

``health.node_lost_grace_s`` after its agent's last answer, a node is reported failing.
The loss is counted on the daemon's monotonic clock, from the later of that answer and
its term's first look, so a wall clock step neither delays nor hastens it. Pure."""

from __future__ import annotations

from pathlib import Path

from support.forged import victim_cluster

from swarmgpu.core.config import Config
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot


def test_an_agents_loss_is_counted_on_the_monotonic_clock(tmp_path: Path) -> None:
    """The term's first look and the agent's last answer at wall 1000, monotonic 100.
    The wall clock stepped back an hour: 400 s later by the monotonic clock the agent is
    lost 400 s, past the grace (before: 0 s, for the hour: its node's evacuation waited
    the step). Stepped forward an hour: 10 s later it is lost 10 s (before: 3610 s, its
    node failing at once)."""
    sw = victim_cluster({})
    d = Daemon(Config(state_dir=str(tmp_path)), swarm=sw)  # type: ignore[arg-type]
    rb = Rebalancer(d)
    mono = [100.0]
    rb.clock = lambda: mono[0]
    node = next(n for n in sw.nodes() if n.id == "n-4090")
    answer = FactsResult(node.id, node.hostname, "", NodeFacts(node.hostname), None, 1000.0,
                         fetched_mono=100.0)
    d.book.record(answer)
    assert rb.health_inputs(Snapshot(sw.nodes(), [], [], {node.id: answer},
                                     taken_at=1000.0)).lost == {}

    def lost(wall: float, at: float) -> float:
        mono[0] = at
        silent = FactsResult(node.id, node.hostname, "", None, "timed out", wall,
                             fetched_mono=at)
        got = rb.health_inputs(Snapshot(sw.nodes(), [], [], {node.id: silent},
                                        taken_at=wall)).lost
        return got[node.id]

    assert lost(1000.0 - 3600 + 400, 500.0) == 400.0
    assert lost(1000.0 + 3600 + 10, 110.0) == 10.0
