"""`swarmgpu doctor`'s text report cuts hostnames as `plan` and `status` do
(``peertext.cell``): a 200-character hostname ran each line it was in off the screen.
``--json`` keeps them whole."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from support.forged import sw_node, sw_svc
from support.gpu_nodes import RTX4090

from swarmgpu.agent.doctor import AgentAnswer, SwarmRead, run_doctor

ROOT = str(Path(__file__).parent / "doctor_roots" / "healthy")
AGENT = sw_svc("swarmgpu_agent", {}, gated=False, mode={"Global": {}})
LONG = "gpu-" + "x" * 196  # a 200-character hostname
CUT = LONG[:37] + "..."


def test_the_doctor_header_cuts_a_long_hostname_and_its_json_keeps_it() -> None:
    facts = replace(RTX4090.facts(), hostname=LONG)
    text, _ = run_doctor(ROOT, facts=facts)
    head = text.splitlines()[0]
    assert LONG not in text and f"host {CUT}  " in head, head
    doc, _ = run_doctor(ROOT, facts=facts, as_json=True)
    assert json.loads(doc)["hostname"] == LONG


def test_agents_answers_lines_cut_hostnames_and_the_json_keeps_them_whole() -> None:
    nodes = [sw_node("n-a", LONG + "a", {"gpu": "true"}),
             sw_node("n-b", LONG + "b", {"gpu": "true"})]
    read = SwarmRead(nodes, [AGENT], [], agents={
        "n-a": AgentAnswer(LONG + "a", 8), "n-b": AgentAnswer(cause="timed out")})
    text, _ = run_doctor(ROOT, agents_service="swarmgpu_agent", swarm=read)
    assert LONG not in text, text
    lines = text.splitlines()
    assert f"      {CUT} (n-a): answered for {CUT}, 8 GPU(s)" in lines, text
    assert f"      {CUT} (n-b): no answer: timed out" in lines, text
    assert any(ln.endswith(f"no answer from GPU node(s): {CUT} (n-b)") for ln in lines), text
    doc, _ = run_doctor(ROOT, as_json=True, agents_service="swarmgpu_agent", swarm=read)
    (c,) = [c for c in json.loads(doc)["checks"] if c["id"] == "agents.answers"]
    assert c["details"][0] == f"{LONG}a (n-a): answered for {LONG}a, 8 GPU(s)", c
    assert c["found"].endswith(f"no answer from GPU node(s): {LONG}b (n-b)"), c


def test_agents_service_names_nodes_cut_alike_by_their_ids() -> None:
    """GPU nodes with no agent task: named cut in the text, each beside its ID where
    two names read alike once cut; whole in the JSON."""
    nodes = [sw_node("n-a", LONG + "a", {"gpu": "true"}),
             sw_node("n-b", LONG + "b", {"gpu": "true"})]
    read = SwarmRead(nodes, [AGENT], [])
    text, _ = run_doctor(ROOT, agents_service="swarmgpu_agent", swarm=read)
    (line,) = [ln for ln in text.splitlines() if "agents.service:" in ln]
    assert LONG not in line and line.endswith(f"node(s): {CUT} (n-a), {CUT} (n-b)"), line
    doc, _ = run_doctor(ROOT, as_json=True, agents_service="swarmgpu_agent", swarm=read)
    (c,) = [c for c in json.loads(doc)["checks"] if c["id"] == "agents.service"]
    assert c["found"].endswith(f"node(s): {LONG}a, {LONG}b"), c


def test_doctor_names_nodes_by_whole_ids_as_docker_node_ls_and_the_tables() -> None:
    """A node's ID beside its name is whole (25 characters), as `docker node ls`,
    `plan`, `status` and `audit` show it: doctor showed its first 12 alone."""
    ida, idb = "a" * 12 + "1" * 13, "b" * 12 + "2" * 13
    nodes = [sw_node(ida, LONG + "a", {"gpu": "true"}),
             sw_node(idb, LONG + "b", {"gpu": "true"})]
    text, _ = run_doctor(ROOT, agents_service="swarmgpu_agent",
                         swarm=SwarmRead(nodes, [AGENT], []))
    (line,) = [ln for ln in text.splitlines() if "agents.service:" in ln]
    assert line.endswith(f"node(s): {CUT} ({ida}), {CUT} ({idb})"), line
    read = SwarmRead(nodes, [AGENT], [], agents={ida: AgentAnswer(cause="timed out"),
                                                 idb: AgentAnswer(cause="timed out")})
    text, _ = run_doctor(ROOT, agents_service="swarmgpu_agent", swarm=read)
    assert f"      {CUT} ({ida}): no answer: timed out" in text.splitlines(), text
