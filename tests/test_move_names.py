"""`plan`'s and `status`'s move lines name a move's nodes by hostnames cut as their
tables cut them (``peertext.cell``): where two nodes' cut names are alike, each beside
its node's whole ID, as the tables and `docker node ls` show it, which the daemon's moves
now carry (``from_node``, ``to_node``); a failing node's line the same.
Before, a move between two nodes whose long names are alike up to the cut read as a
move from a node to itself."""

from __future__ import annotations

import json
from pathlib import Path

from support.forged import P, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.placement import ReplicaPlacement, ServicePlan
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.web.cluster_view import render_status

LONG = "gpu-" + "x" * 196  # a 200-character hostname
CUT = LONG[:37] + "..."
ID_A, ID_B = "a" * 12 + "1" * 13, "b" * 12 + "2" * 13  # 25 characters, as Swarm's


def _move(**more: object) -> dict[str, object]:
    return {"service": "llm", "from": LONG + "a", "to": LONG + "b", "gpus": [0],
            "trigger": "pack", "window": "5m", "reason": "r", "gain": "g", **more}


def _plan_lines(moves: dict[str, object],
                nodes: tuple[tuple[str, str], ...] = ()) -> list[str]:
    sp = ServicePlan("web", "id-web", None, "gpus=1", "running", "Running", placements=(
        ReplicaPlacement(ID_A, LONG + "a", (0,), ("GPU-1",), (1000,)),))
    return render_plan([sp], ungranted=[], workload={}, moves=moves, listen="x",
                       health=[], nodes=nodes).splitlines()


def test_plan_names_the_nodes_of_a_move_between_names_cut_alike() -> None:
    lines = _plan_lines({"proposed": [_move(from_node=ID_A, to_node=ID_B)], "recent": [
        {"service": "llm", "from": LONG + "b", "to": LONG + "a", "to_node": ID_A,
         "from_node": ID_B, "outcome": "done", "reason": "r"}]})
    assert any(ln.startswith(f"move llm: {CUT} [{ID_A}] -> {CUT} [{ID_B}] ")
               for ln in lines), lines
    assert f"recent llm: {CUT} [{ID_B}] -> {CUT} [{ID_A}]: done (r)" in lines


def test_a_move_of_an_older_daemon_takes_the_id_of_the_one_node_of_its_name() -> None:
    """No ``from_node``: the placements' node of that hostname, else ``?``."""
    lines = _plan_lines({"proposed": [_move()]})
    assert any(ln.startswith(f"move llm: {CUT} [{ID_A}] -> {CUT} [?] ")
               for ln in lines), lines


def test_plan_names_the_nodes_failing_under_names_cut_alike() -> None:
    """Two failing nodes whose long hostnames are alike up to the cut read as one."""
    nodes = ((LONG + "a", ID_A), (LONG + "b", ID_B))
    lines = _plan_lines({"health": {"failing_nodes": {LONG + "a": "2 of 8 GPUs failed",
                                                      LONG + "b": "agent lost"}}}, nodes)
    assert f"node failing: {CUT} [{ID_A}]: 2 of 8 GPUs failed" in lines, lines
    assert f"node failing: {CUT} [{ID_B}]: agent lost" in lines, lines


def test_plan_names_each_failing_node_of_one_hostname_by_its_id() -> None:
    """The daemon keys two nodes of one hostname ``host (ID)``: cut, the ID was lost."""
    nodes = ((LONG, ID_A), (LONG, ID_B))
    lines = _plan_lines({"health": {"failing_nodes": {f"{LONG} ({ID_A})": "lost",
                                                      f"{LONG} ({ID_B})": "lost"}}}, nodes)
    assert f"node failing: {CUT} [{ID_A}]: lost" in lines, lines
    assert f"node failing: {CUT} [{ID_B}]: lost" in lines, lines


def test_a_failing_node_of_a_name_of_its_own_shows_no_id() -> None:
    lines = _plan_lines({"health": {"failing_nodes": {"gpu-2": "lost"}}},
                        (("gpu-2", ID_B),))
    assert "node failing: gpu-2: lost" in lines, lines


def test_a_move_between_names_cut_apart_shows_no_ids() -> None:
    lines = _plan_lines({"proposed": [_move(to="gpu-2", to_node=ID_B)]})
    assert any(ln.startswith(f"move llm: {CUT} -> gpu-2 GPUs") for ln in lines), lines


def test_status_names_the_nodes_of_a_proposed_move_between_names_cut_alike() -> None:
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    a, b = doc["nodes"][1:3]
    a["hostname"], b["hostname"] = LONG + "a", LONG + "b"
    doc["moves"]["proposed"] = [_move()]  # (no IDs: the nodes' own, by hostname)
    lines = render_status(doc).splitlines()
    assert (f"  llm: {CUT} [{a['id']}] -> {CUT} [{b['id']}] (pack): r"
            in lines), lines


def test_the_daemons_moves_and_records_carry_their_nodes_ids() -> None:
    m = victim_move()
    assert (m.to_dict()["from_node"], m.to_dict()["to_node"]) == ("n-dgx", "n-4090")
    sw = victim_cluster({})
    mover = Mover(sw, RebalanceConfig(dry_run=True), prefix=P,  # type: ignore[arg-type]
                  dry_run=True, clock=lambda: 1000.0)
    mover.run_cycle([m], sw.nodes(), sw.services(), sw.tasks())
    rec = mover.outcomes.recent[-1].to_dict()
    assert (rec["from"], rec["from_node"], rec["to"], rec["to_node"]) == (
        "gpu-node-1", "n-dgx", "gpu-node-2", "n-4090"), rec
