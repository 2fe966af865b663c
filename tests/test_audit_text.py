"""What `audit` prints of others' long or wide text: a finding's line cut (its subject
to ``CELL_WIDTH``, its message to ``FINDING_WIDTH`` columns), the whole in --json; the
table's columns in line by the columns a CJK name takes."""

from __future__ import annotations

from support.gpu_nodes import RTX4090

from swarmgpu.core.peertext import text_width
from swarmgpu.manager.commands.audit import FINDING_WIDTH, audit, render_table
from swarmgpu.manager.commands.auditnodes import Finding
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.labels import desired_labels

FACTS = RTX4090.facts()
UUIDS = tuple(sorted(g.uuid for g in FACTS.gpus))


def node(node_id: str, hostname: str) -> SwarmNode:
    return SwarmNode(id=node_id, hostname=hostname, addr="10.0.0.2", role="worker",
                     state="ready", availability="active", labels=desired_labels(FACTS),
                     engine_labels={}, version=1, generic_resources={"NVIDIA-GPU": UUIDS},
                     discrete_resources={})


def snapshot(nodes: list[SwarmNode]) -> Snapshot:
    return Snapshot(nodes, [], [], {n.id: FactsResult(n.id, n.hostname, "http://x/facts",
                                                       FACTS, None, 0.0) for n in nodes})


def test_a_finding_on_a_long_service_name_is_cut_in_the_text() -> None:
    """A tenant's 500-character service name, subject and in the message, made one
    finding fill the terminal: the line shows it cut, the rest of the message kept."""
    name = "svc-" + "n" * 496
    f = Finding("dangling-constraint", name, f"service {name} is constrained to no node; "
                "fix its placement constraint", advisory=True)
    s = snapshot([node("n1", "gpu-1")])
    (line,) = [x for x in render_table([f], s, "swarmgpu.").splitlines() if "[dangling" in x]
    assert name not in line and len(line) < 200, line
    cut = "svc-" + "n" * 33 + "..."
    assert line == (f"  [dangling-constraint] {cut}: service {cut} is constrained to no "
                    "node; fix its placement constraint"), line
    assert f.to_dict()["subject"] == name and name in f.to_dict()["message"]


def test_a_finding_message_is_cut_at_finding_width() -> None:
    said = "m" * 5000
    f = Finding("wrong", "gpu-1", said, node="n1")
    line = next(x for x in render_table([f], snapshot([node("n1", "gpu-1")]),
                                        "swarmgpu.").splitlines() if "[wrong]" in x)
    assert line.startswith("  [wrong] gpu-1: mmm") and line.endswith("...")
    assert text_width(line) <= FINDING_WIDTH + 20, len(line)


def test_a_finding_on_a_hostname_cut_alike_names_its_node() -> None:
    """Two hostnames alike up to the cut: each node's finding names its node's ID."""
    base = "gpu-" + "x" * 60
    nodes = [node("id-0", base + "a"), node("id-1", base + "b")]
    findings = [Finding("stale", n.hostname, "stale labels", node=n.id) for n in nodes]
    text = render_table(findings, snapshot(nodes), "swarmgpu.")
    cut = "gpu-" + "x" * 33 + "..."
    assert f"  [stale] {cut} (id-0): stale labels" in text.splitlines(), text
    assert f"  [stale] {cut} (id-1): stale labels" in text.splitlines(), text


def test_the_table_columns_stay_in_line_with_a_cjk_hostname() -> None:
    """A CJK hostname takes two columns a character: padded by characters, the row's
    ROLE column stood further right than the header's."""
    nodes = [node("n1", "计算节点-一号机器-甲"), node("n2", "gpu-2"),
             node("n3", "e\u0301" * 20)]
    s = snapshot(nodes)
    rows = render_table(audit(s), s, "swarmgpu.").splitlines()[:4]
    cols = {text_width(r[:r.index(" worker" if r[0] != "N" else " ROLE")]) for r in rows}
    assert len(cols) == 1, rows


def test_a_finding_line_cut_never_parts_its_subjects_escape() -> None:
    """A long subject with an escape (``\\x1b``) where the message's cut falls: the
    subject's cut was written into the message escaped, then cut again, so the line
    ended ``svc\\x1...``, an escape cut in two."""
    name = "svc\x1b" + "n" * 60
    for pre in range(560, 600):
        f = Finding("wrong", name, "v" * pre + f" service {name} is constrained")
        line = next(x for x in render_table([f], snapshot([node("n1", "gpu-1")]),
                                            "swarmgpu.").splitlines() if "[wrong]" in x)
        said = line.split(": ", 1)[1]
        assert said.replace("\\x1b", "").count("\\") == 0, (pre, said[-12:])
        assert text_width(said) <= FINDING_WIDTH, pre


def test_a_finding_cuts_its_subject_only_where_the_message_names_it_whole() -> None:
    """A message naming a longer name that begins with the subject (``name-2``) had
    that one cut too, as the subject's cut and the longer name's tail."""
    name = "svc-" + "n" * 60
    f = Finding("dangling-constraint", name, f"service {name} clashes with {name}-2 and "
                f"{name}.b; fix {name}.", advisory=True)
    (line,) = [x for x in render_table([f], snapshot([node("n1", "gpu-1")]),
                                       "swarmgpu.").splitlines() if "[dangling" in x]
    cut = "svc-" + "n" * 33 + "..."
    assert line == (f"  [dangling-constraint] {cut}: service {cut} clashes with "
                    f"{name}-2 and {name}.b; fix {cut}."), line
