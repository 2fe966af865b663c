"""``swarmgpu doctor``'s ``agents.answers`` check: on a manager, each node's agent read
as the daemon reads it, and the node it answered for. Before, the doctor knew the nodes
only from Swarm's lists: a task of the agents' service running on a node said nothing of
an agent the daemon cannot read, or of one answering for another node (which the daemon
refuses, so that node's labels go stale). Pure: the answers are given as the CLI makes
them from ``agent_client`` results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.forged import sw_node, sw_svc

from swarmgpu.agent.doctor import AgentAnswer, Status, SwarmRead, run_doctor
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.swarm.client import SwarmNode

AGENT = sw_svc("swarmgpu_agent", {}, gated=False, mode={"Global": {}})
GPU_A = sw_node("n-a", "gpu-a", {"gpu": "true"})
GPU_B = sw_node("n-b", "gpu-b", {"gpu": "true"})
CPU = sw_node("n-c", "cpu-c")
ROOT = str(Path(__file__).parent / "doctor_roots" / "healthy")
WRONG = AgentAnswer(cause="facts of another host", fix="check agents.url_template",
                    wrong=True)


def _answers(agents: dict[str, AgentAnswer],
             nodes: tuple[SwarmNode, ...] = (GPU_A, GPU_B, CPU)) -> tuple[dict[str, Any], int]:
    read = SwarmRead(list(nodes), [AGENT], [], agents=agents)
    text, code = run_doctor(ROOT, as_json=True, agents_service="swarmgpu_agent", swarm=read)
    (c,) = [c for c in json.loads(text)["checks"] if c["id"] == "agents.answers"]
    return c, code


def test_an_agent_answering_for_another_node_fails_naming_the_node_and_the_fix() -> None:
    c, code = _answers({"n-a": AgentAnswer("gpu-a", 8), "n-b": WRONG,
                        "n-c": AgentAnswer(cause="no answer to connect")})
    assert c["status"] == Status.FAIL and code == 1, c
    assert "answered for another node: gpu-b (n-b)" in c["found"], c
    assert "1 of 3 node(s)' agents answered for their own node" in c["found"], c
    assert "agents.url_template" in c["fix"], c
    assert c["details"] == [
        "cpu-c (n-c): no answer (no sign of a GPU node: none expected): no answer to connect",
        "gpu-a (n-a): answered for gpu-a, 8 GPU(s)",
        "gpu-b (n-b): answered for another node: facts of another host; fix: check "
        "agents.url_template"], c


def test_a_gpu_node_whose_agent_does_not_answer_is_a_warning_a_cpu_node_none() -> None:
    c, code = _answers({"n-a": AgentAnswer("gpu-a", 8), "n-b": AgentAnswer(cause="timed out"),
                        "n-c": AgentAnswer(cause="no answer to connect")})
    assert c["status"] == Status.WARN and code == 0, c
    assert "no answer from GPU node(s): gpu-b (n-b)" in c["found"], c
    c, _ = _answers({"n-a": AgentAnswer("gpu-a", 8), "n-b": AgentAnswer("gpu-b", 4)},
                    nodes=(GPU_A, GPU_B))
    assert c["status"] == Status.OK and c["details"][1] == "gpu-b (n-b): answered for gpu-b, "\
        "4 GPU(s)", c


def test_agents_not_asked_add_no_check_and_a_hostile_host_shows_escaped() -> None:
    text, _ = run_doctor(ROOT, as_json=True, agents_service="swarmgpu_agent",
                         swarm=SwarmRead([GPU_A], [AGENT], []))
    assert "agents.answers" not in [c["id"] for c in json.loads(text)["checks"]]
    host = "gpu-\x1b[2K\nOK    forged"
    read = SwarmRead([sw_node("n-a", host, {"gpu": "true"})], [AGENT], [],
                     agents={"n-a": AgentAnswer(host, 1)})
    text, _ = run_doctor(ROOT, agents_service="swarmgpu_agent", swarm=read)
    lines = text.splitlines()
    (at,) = [i for i, ln in enumerate(lines) if "agents.answers" in ln]
    assert "\x1b" not in text, text
    shown = r"gpu-\x1b[2K\nOK    forged"
    assert lines[at + 1] == f"      {shown} (n-a): answered for {shown}, 1 GPU(s)", text
    doc, _ = run_doctor(ROOT, as_json=True, agents_service="swarmgpu_agent", swarm=read)
    (c,) = [c for c in json.loads(doc)["checks"] if c["id"] == "agents.answers"]
    assert c["details"] == [f"{host} (n-a): answered for {host}, 1 GPU(s)"], c  # whole


def test_the_cli_makes_each_nodes_answer_from_the_daemons_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from support.gpu_nodes import RTX4090

    from swarmgpu.cli.node import agent_answers
    from swarmgpu.core.config import Config
    from swarmgpu.manager.nodes import sync

    def fetched(_client: object, _cfg: object, nodes: list[object]) -> dict[str, FactsResult]:
        return {
            "n-a": FactsResult("n-a", "gpu-a", "u", RTX4090.facts(), None, 0.0, True),
            "n-b": FactsResult("n-b", "gpu-b", "u", None, "agent at u serves facts for "
                               "host 'gpu-a'; fix: x", 0.0, True, "facts of another host", "x"),
            "n-c": FactsResult("n-c", "cpu-c", "", None, "agent identity unusable: no CA",
                               0.0)}

    monkeypatch.setattr(sync, "fetch_agents", fetched)
    got = agent_answers(None, Config(), [GPU_A, GPU_B, CPU])
    assert got["n-a"] == AgentAnswer(RTX4090.facts().hostname, len(RTX4090.facts().gpus))
    assert got["n-b"] == AgentAnswer(cause="facts of another host", fix="x", wrong=True)
    assert got["n-c"] == AgentAnswer(cause="agent identity unusable: no CA")


UNNAMED = sw_node("n-u", "", {})  # Swarm reports no hostname; no GPU label yet


def test_an_answer_refused_for_a_node_of_no_hostname_is_a_warning_not_none_expected(
        ) -> None:
    """identity none, and Swarm names no host of n-u: its agent answered, and the daemon
    refuses the answer (nothing tells whose facts they are), so the node's GPUs are never
    given out. Before, the doctor said "no answer (no sign of a GPU node: none
    expected)" and passed: the daemon never labels such a node, so no label ever showed
    it is one."""
    untold = AgentAnswer(cause="node of no hostname, no certificate",
                         fix="give node n-u a hostname", untold=True)
    c, code = _answers({"n-a": AgentAnswer("gpu-a", 8), "n-u": untold},
                       nodes=(GPU_A, UNNAMED))
    assert c["status"] == Status.WARN and code == 0, c
    assert "answered but refused, no host name to tell the node by: n-u (no hostname)" \
        in c["found"], c
    assert "n-u (no hostname): answered, refused: node of no hostname, no certificate; " \
        "fix: give node n-u a hostname" in c["details"], c


def test_the_cli_marks_an_answer_refused_for_a_node_of_no_hostname(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmgpu.cli.node import agent_answers
    from swarmgpu.core.config import Config
    from swarmgpu.manager.nodes import sync

    def fetched(_client: object, _cfg: object, nodes: list[object]) -> dict[str, FactsResult]:
        return {"n-u": FactsResult("n-u", "", "u", None, "agent at u answered for Swarm "
                                   "node n-u, which reports no hostname", 0.0, True,
                                   "node of no hostname, no certificate", "x")}

    monkeypatch.setattr(sync, "fetch_agents", fetched)
    got = agent_answers(None, Config(), [UNNAMED])
    assert got["n-u"] == AgentAnswer(cause="node of no hostname, no certificate", fix="x",
                                     untold=True)
