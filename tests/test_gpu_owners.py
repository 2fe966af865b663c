"""Each node speaks only for its own GPUs (issue 32, item 4).

Per-GPU series were keyed by UUID alone, the first point at a timestamp winning: a node
that reported another node's GPU UUID at 100 % marked that GPU hot. Now series are keyed
by (node, UUID), a node's page is read only for the GPUs its own facts list, and a UUID
that a second node starts to list stays with the node that listed it first; audit and
the log name the one that reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.rebalance import CFG, U2, P, cluster, node, page, samples_of

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.gpuowners import conflicts, owners, strays
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.scrape import NodeScrape, judge
from swarmgpu.manager.rebalance.signals import GpuSignal, Signals
from swarmgpu.manager.rebalance.windows import State
from swarmgpu.manager.web.history import History
from swarmgpu.swarm.client import SwarmNode

F1 = dataclasses.replace(RTX4090.facts(), hostname="gpu-node-1",
                         gpus=tuple(dataclasses.replace(g, uuid=g.uuid[:-4] + "1111")
                                    for g in RTX4090.facts().gpus))
F2 = RTX4090.facts()
assert [g.uuid for g in F2.gpus] == U2
# gpu-node-3 names gpu-node-2's GPU 0 as its own, and reports it at 100 %.
FORGED = dataclasses.replace(F2, hostname="gpu-node-3", gpus=(F2.gpus[0],))
TIMES = [float(t) for t in range(13)]
Util = Mapping[str, Mapping[int, float]]  # node id -> GPU index -> util


def run(nodes: Sequence[SwarmNode], facts_at: Mapping[float, Mapping[str, NodeFacts]],
        util: Util, pages_extra: Mapping[str, NodeFacts] | None = None
        ) -> tuple[Signals, list[str], dict[str, NodeFacts]]:
    """Every cycle: each node's page from its facts (and, for ``pages_extra``, a page of
    other facts appended: a node reporting GPUs it does not list)."""
    sig = Signals(CFG)
    warned: list[str] = []
    facts: dict[str, NodeFacts] = {}
    ledger = read_ledger(nodes, P)
    for t in TIMES:
        facts = dict(facts_at[max(k for k in facts_at if k <= t)])
        scr: dict[str, NodeScrape] = {}
        for n in nodes:
            if n.id not in facts:
                continue
            text = page(facts[n.id], util.get(n.id, {}))
            if pages_extra and n.id in pages_extra:
                text += samples_of(page(pages_extra[n.id], {0: 100.0})).replace(
                    f'Hostname="{pages_extra[n.id].hostname}"', f'Hostname="{n.hostname}"')
            scr[n.id] = judge(n, "https://x/metrics", text, t)
        warned += sig.observe(scr, facts, {n.id: n.hostname for n in nodes}, ledger, t)
    return sig, warned, facts


def moves(sig: Signals, nodes: list[SwarmNode], facts: Mapping[str, NodeFacts]) -> list[Move]:
    _, svcs, tasks = cluster()
    inp = Inputs(nodes, svcs, tasks, dict(facts), read_ledger(nodes, P), sig.gpus, sig.nodes,
                 CFG, TIMES[-1], (), P)
    return plan_moves(inp).moves


def base_nodes() -> list[SwarmNode]:
    nodes, _, _ = cluster()  # a and b share GPU 0 of gpu-node-2 (n2), half each
    return [dataclasses.replace(nodes[0]), nodes[1], node("n3", "gpu-node-3", {})]


def signal(sig: Signals, nid: str, uuid: str) -> GpuSignal:
    return sig.gpus[(nid, uuid)]


def test_a_node_naming_another_nodes_gpu_at_100_changes_nothing_for_it() -> None:
    nodes = base_nodes()
    honest = {0.0: {"n1": F1, "n2": F2}}
    # The forger first: with series keyed by UUID alone its point at each timestamp won.
    forged = {0.0: {"n1": F1, "n2": F2}, 4.0: {"n3": FORGED, "n1": F1, "n2": F2}}
    util = {"n2": {0: 5.0}, "n3": {0: 100.0}}
    ref, _, ref_facts = run(nodes, honest, util)
    sig, warned, facts = run(nodes, forged, util)
    # gpu-node-2's GPU 0: the same signal as without the forger (cold, idle, known).
    assert signal(sig, "n2", U2[0]) == signal(ref, "n2", U2[0])
    assert signal(sig, "n2", U2[0]).hot is State.FALSE
    assert sig.nodes["n2"] == ref.nodes["n2"] and sig.nodes["n2"].known
    # Nothing is hot anywhere; the forger's copy is read from nobody.
    assert not [g for g in sig.gpus.values() if g.hot is State.TRUE]
    fake = signal(sig, "n3", U2[0])
    assert fake.util_pct is None and fake.hot is State.UNKNOWN
    assert fake.why_unknown and "gpu-node-2" in fake.why_unknown
    assert not sig.nodes["n3"].known  # no move starts from or lands on the forger
    assert moves(sig, nodes, facts) == moves(ref, nodes, ref_facts)
    # Flagged: the log (the rebalancer's warnings) names both.
    said = [w for w in warned if U2[0] in w]
    assert said and any(w.startswith("gpu-node-3:") and "read on gpu-node-2" in w
                        for w in said), said
    assert any(w.startswith("gpu-node-2:") and "read here" in w for w in said), said


def test_a_real_hot_spot_stays_hot_whatever_another_node_says() -> None:
    nodes = base_nodes()
    forged = {0.0: {"n1": F1, "n2": F2}, 3.0: {"n3": FORGED, "n1": F1, "n2": F2}}
    sig, _, facts = run(nodes, forged, {"n2": {0: 97.0}, "n3": {0: 0.0}})
    assert signal(sig, "n2", U2[0]).hot is State.TRUE
    got = moves(sig, nodes, facts)
    assert got and all(m.source_host == "gpu-node-2" for m in got), got


def test_both_from_the_start_neither_speaks_and_nothing_moves() -> None:
    """A new leader cannot tell which came first: the GPU is UNKNOWN on both (no move
    from or to either because of it), never hot."""
    nodes = base_nodes()
    sig, warned, facts = run(nodes, {0.0: {"n3": FORGED, "n1": F1, "n2": F2}},
                             {"n2": {0: 5.0}, "n3": {0: 100.0}})
    for nid in ("n2", "n3"):
        g = signal(sig, nid, U2[0])
        assert g.util_pct is None and g.hot is State.UNKNOWN, g
        assert not sig.nodes[nid].known
    assert moves(sig, nodes, facts) == []
    assert any("read on neither" in w for w in warned), warned


def test_a_page_reporting_another_nodes_gpu_is_not_read_for_it() -> None:
    nodes = base_nodes()
    own3 = dataclasses.replace(FORGED, gpus=(dataclasses.replace(
        F2.gpus[1], index=0, uuid="GPU-33333333-3333-3333-3333-333333333333"),))
    facts = {0.0: {"n1": F1, "n2": F2, "n3": own3}}
    ref, _, _ = run(nodes, facts, {"n2": {0: 5.0}})
    # gpu-node-3's page also carries gpu-node-2's GPU 0 at 100 %.
    sig, warned, _ = run(nodes, facts, {"n2": {0: 5.0}}, pages_extra={"n3": FORGED})
    assert signal(sig, "n2", U2[0]) == signal(ref, "n2", U2[0])
    assert ("n3", U2[0]) not in sig.gpus
    assert any(w.startswith("gpu-node-3:") and U2[0] in w and "of gpu-node-2" in w
               for w in warned), warned


def test_a_page_naming_two_hosts_is_refused_whichever_sorts_first() -> None:
    # A page carrying gpu-node-2's samples and another host's was judged by the host
    # name that sorted first: accepted beside "zz-other", refused beside "aa-other".
    n2 = node("n2", "gpu-node-2", {})
    own = page(F2, {0: 5.0})
    for other in ("aa-other", "zz-other"):
        extra = samples_of(page(dataclasses.replace(F1, hostname=other), {0: 100.0}))
        got = judge(n2, "https://x/metrics", own + extra, 0.0)
        assert got.result is None, other
        assert "'gpu-node-2'" in (got.error or "") and f"'{other}'" in (got.error or "")
        assert "one host" in (got.error or "")
    assert judge(n2, "https://x/metrics", own, 0.0).result is not None


def test_audit_flags_the_node_that_reports_another_nodes_uuid() -> None:
    nodes = base_nodes()
    res = {n: FactsResult(n, f.hostname, "", f, None, 0.0)
           for n, f in {"n1": F1, "n2": F2, "n3": FORGED}.items()}
    snap = Snapshot(nodes, [], [], res)
    found = [f for f in audit(snap, prefix=P) if f.kind.startswith("gpu-uuid")]
    assert {(f.kind, f.subject) for f in found} == {("gpu-uuid-conflict", "gpu-node-2"),
                                                    ("gpu-uuid-conflict", "gpu-node-3")}
    assert {f.node for f in found} == {"n2", "n3"}  # the node's ID: hostnames may repeat
    assert all(not f.advisory and f.key == U2[0] for f in found)
    three = next(f for f in found if f.subject == "gpu-node-3")
    assert "gpu-node-2" in three.message and "forged agent" in three.message
    # The daemon's audit (the map) also reads the pages: a stray UUID on one.
    honest = {n: r for n, r in res.items() if n != "n3"}
    metrics = {"n1": {U2[0]: object(), F1.gpus[0].uuid: object()}}
    got = [f for f in audit(Snapshot(nodes, [], [], honest), prefix=P, metrics=metrics)
           if f.kind.startswith("gpu-uuid")]
    assert [(f.kind, f.subject, f.key) for f in got] == [
        ("gpu-uuid-stray", "gpu-node-1", U2[0])]
    assert "of gpu-node-2" in got[0].message


def test_ownership_rules() -> None:
    f = {"a": F2, "b": FORGED}
    own = owners(f)
    assert not own.speaks_for("a", U2[0]) and not own.speaks_for("b", U2[0])
    assert own.speaks_for("a", U2[1]) and own.others("b", U2[0]) == ("a",)
    kept = owners(f, previous={U2[0]: "a"})
    assert kept.speaks_for("a", U2[0]) and not kept.speaks_for("b", U2[0])
    # A previous owner that no longer lists it keeps nothing.
    assert not owners({"b": FORGED, "c": FORGED}, previous={U2[0]: "a"}).owner.get(U2[0])
    assert strays("b", [U2[1], "GPU-unknown"], own) == [(U2[1], "a")]
    assert [(c.node_id, c.where) for c in conflicts(f)] == [("a", "facts"), ("b", "facts")]


def test_history_keeps_one_ring_per_node_and_gpu() -> None:
    h = History()
    doc = {"generated_at": 100.0, "nodes": [
        {"id": "n2", "hostname": "gpu-node-2",
         "gpus": [{"index": 0, "uuid": U2[0], "util_pct": 5.0, "holders": []}]},
        {"id": "n3", "hostname": "gpu-node-3",
         "gpus": [{"index": 0, "uuid": U2[0], "util_pct": 100.0, "holders": []}]}]}
    h.record(doc)
    h.record({**doc, "generated_at": 130.0})
    (g,) = h.query(node="gpu-node-2", window_s=600)["gpus"]
    assert g["uuid"] == U2[0] and g["util_pct"] == [5.0, 5.0]
    (g3,) = h.query(node="gpu-node-3", window_s=600)["gpus"]
    assert g3["util_pct"] == [100.0, 100.0]


def test_a_node_that_joined_again_owns_its_gpus_not_its_old_down_entry() -> None:
    """gpu-node-2 left the swarm and joined again under a new node ID (n2b); its old
    entry (n2) stays in Swarm's node list, down, until `docker node rm`, and with
    agents.identity: none its agent answers for both (or the old entry's last facts
    stand in). Before: n2, the owner of the cycles before, kept every GPU, so n2b's
    readings were ignored and its GPUs stayed UNKNOWN to the rebalancer for good. Now
    the entry Swarm says is down, beside a live node of its hostname, owns nothing that
    node lists; a node of another hostname gains nothing by it."""
    from swarmgpu.manager.nodes.gpuowners import rejoined

    n1 = node("n1", "gpu-node-1", {})
    old = node("n2", "gpu-node-2", {})
    new = node("n8", "gpu-node-2", {})
    sig = Signals(CFG)
    warned: list[str] = []
    for t in TIMES:
        up = t >= 4.0  # the re-join: the old entry is down, the new one reports
        nodes = [n1, replace(old, state="down"), new] if up else [n1, old]
        facts = {"n1": F1, "n2": F2, **({"n8": F2} if up else {})}
        scr = {n.id: judge(n, "https://x/metrics", page(facts[n.id], {0: 5.0}), t)
               for n in nodes if n.state != "down"}
        warned += sig.observe(scr, facts, {n.id: n.hostname for n in nodes}, {}, t,
                              rejoined(nodes))
    got = signal(sig, "n8", U2[0])
    assert got.util_pct == 5.0 and got.hot is State.FALSE, got
    assert sig.nodes["n8"].known, sig.nodes["n8"]
    assert not signal(sig, "n2", U2[0]).util_pct
    said = [w for w in warned if U2[0] in w and "joined again" in w]
    assert said and all("docker node rm n2" in w for w in said), warned
    # Pure: a claimant of another hostname never takes what a down entry held.
    nodes = [replace(old, state="down"), new, node("n3", "gpu-node-3", {})]
    assert rejoined(nodes) == {"n2": frozenset({"n8"})}
    own = owners({"n2": F2, "n3": FORGED}, previous={U2[0]: "n2"}, rejoined=rejoined(nodes))
    assert own.owner.get(U2[0]) == "n2"
    own = owners({"n2": F2, "n8": F2}, previous={U2[0]: "n2"}, rejoined=rejoined(nodes))
    assert own.speaks_for("n8", U2[0]) and own.others("n8", U2[0]) == ("n2",)
    # A down entry with no live node of its hostname is no re-join: as before.
    assert rejoined([replace(old, state="down"), node("n3", "gpu-node-3", {})]) == {}
