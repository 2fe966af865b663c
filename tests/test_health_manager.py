"""The daemon's health book (manager.nodes.gpuhealth) and the summary label: a failed GPU is
unhealthy in the cycle's facts (so the allocator gives it no room), a degraded one is
still used, the operator's label brings one back and is never label sync's, and the
healthy-count label follows the hysteresis state, not each read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from loguru import logger
from prometheus_client import CollectorRegistry, generate_latest

from swarmgpu.core.config import HealthConfig
from swarmgpu.core.health import DCGM_XID, HealthSignals, XidEvent
from swarmgpu.core.metrics_in import GpuMetrics
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.gpuhealth import HealthBook, apply_saved, health_rows, operator_key
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import node_spec
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.labels import desired_labels, owned_by_label_sync, plan_node_labels

P = "swarmgpu."


def _node(labels: dict[str, str] | None = None) -> SwarmNode:
    return SwarmNode(
        "n1", "gpu-node-1", "10.0.0.1", "worker", "ready", "active", labels or {}, {}, 1, {}, {}
    )


def _facts(h0: HealthSignals | None = None, h1: HealthSignals | None = None) -> NodeFacts:
    return NodeFacts(
        "gpu-node-1",
        gpus=(
            Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", 81920, health=h0 or HealthSignals()),
            Gpu(1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", 81920, health=h1 or HealthSignals()),
        ),
    )


def _res(f: NodeFacts) -> dict[str, FactsResult]:
    return {"n1": FactsResult("n1", "gpu-node-1", "", f, None, 0.0)}


def _apply(
    book: HealthBook, f: NodeFacts, now: float, labels: dict[str, str] | None = None
) -> NodeFacts:
    out = book.apply([_node(labels)], _res(f), now=now)["n1"].facts
    assert out is not None
    return out


def test_failed_gpu_is_unhealthy_in_the_cycle_facts_and_counted() -> None:
    reg = CollectorRegistry()
    book = HealthBook(HealthConfig(clean_window_s=600), P, reg)
    x79 = HealthSignals(xid_events=(XidEvent(79, 100.0),))
    f = _apply(book, _facts(h0=x79, h1=HealthSignals(row_remap_pending=True)), 100)
    g0, g1 = f.gpus
    assert not g0.healthy and g0.error is not None
    assert g0.error.startswith("health: failed: Xid 79") and "suggested: reboot" in g0.error
    assert g1.healthy and g1.error is not None and "degraded" in g1.error  # still used
    assert desired_labels(f)[f"{P}gpu.healthy-count"] == "1"
    # The planner's node model: the failed GPU has no room (allocator: free 0 when
    # unhealthy), the degraded one is offered as before.
    assert [g.healthy for g in node_spec(_node(), f).gpus] == [False, True]
    text = generate_latest(reg).decode()
    assert 'swarmgpu_gpus_by_health{level="failed"} 1.0' in text
    assert 'swarmgpu_gpus_by_health{level="degraded"} 1.0' in text
    rows = book.view(now=160)
    assert [(r["gpu"], r["level"], r["for_s"]) for r in rows] == [
        (0, "failed", 60.0),
        (1, "degraded", 60.0),
    ]
    # The agent reads it fine again (a fresh read lists the same old event): still failed
    # within the clean window, so the label does not flap.
    for t in (130, 400, 699):
        f = _apply(book, _facts(h0=x79), t)
        assert not f.gpus[0].healthy and desired_labels(f)[f"{P}gpu.healthy-count"] == "1"
    f = _apply(book, _facts(h0=x79), 700)
    assert f.gpus[0].healthy and desired_labels(f)[f"{P}gpu.healthy-count"] == "2"


def test_lost_gpu_fails_and_application_xid_changes_nothing() -> None:
    book = HealthBook(HealthConfig(), P)
    lost = replace(
        _facts(),
        gpus=(
            replace(_facts().gpus[0], healthy=False, error="nvmlDeviceGetUUID: GPU is lost"),
            replace(_facts().gpus[1], health=HealthSignals(xid_events=(XidEvent(13, 5.0),))),
        ),
    )
    f = _apply(book, lost, 10)
    assert not f.gpus[0].healthy and "GPU lost" in (f.gpus[0].error or "")
    assert f.gpus[1] == lost.gpus[1]  # Xid 13: untouched
    # The agent's own problem text is kept beside ours, never stacked on later cycles.
    f = _apply(book, lost, 20)
    assert (f.gpus[0].error or "").count("health:") == 1


def test_operator_label_resets_and_is_not_label_syncs() -> None:
    book = HealthBook(HealthConfig(), P)
    x48 = HealthSignals(xid_events=(XidEvent(48, 10.0),))
    assert not _apply(book, _facts(h0=x48), 10).gpus[0].healthy
    key = operator_key(P, "GPU-aaaa")
    assert key == "swarmgpu.gpu.GPU-aaaa.health"
    f = _apply(book, _facts(h0=x48), 20, labels={key: "ok"})
    assert f.gpus[0].healthy
    assert not owned_by_label_sync(key, P) and owned_by_label_sync(f"{P}gpu.count", P)
    node = _node({key: "ok", f"{P}gpu.count": "2"})
    plan = plan_node_labels(node, f, prefix=P)
    assert key not in plan.remove and key not in plan.set


def test_saved_states_are_what_plan_status_and_audit_show(tmp_path: Path) -> None:
    """The daemon saves its states each cycle; a restarted daemon, and plan, status and
    audit (their own snapshot), apply the same hysteresis from that file."""
    book = HealthBook(HealthConfig(), P)
    x79 = HealthSignals(xid_events=(XidEvent(79, 100.0),))
    _apply(book, _facts(h0=x79, h1=HealthSignals(row_remap_pending=True)), 100)
    book.save(str(tmp_path))
    again = HealthBook(HealthConfig(), P)
    again.load(str(tmp_path))
    assert again.states == book.states and again.view(now=160) == book.view(now=160)
    # A fresh read with the old event already counted: still failed, not failed anew.
    facts = _res(_facts(h0=x79))
    rows = apply_saved([_node()], facts, HealthConfig(), P, str(tmp_path), now=160)
    assert [(r["gpu"], r["level"]) for r in rows] == [(0, "failed"), (1, "degraded")]
    hr = health_rows(facts)
    assert [r["gpu"] for r in hr] == [0, 1]  # GPU 1 reads clean now; its window still runs
    assert hr[1]["health"].startswith("degraded: row remapping pending")
    assert hr[0]["health"].startswith("failed: Xid 79")
    snap = Snapshot([_node()], [], [], facts)
    found = [f for f in audit(snap, prefix=P) if f.kind.startswith("gpu-")]
    assert [(f.kind, f.advisory) for f in found] == [("gpu-failed", False), ("gpu-degraded", True)]
    assert "suggested: reboot" in found[0].message
    (tmp_path / "gpu-health.json").write_text("{not json")
    broken = HealthBook(HealthConfig(), P)
    broken.load(str(tmp_path))  # a damaged file is ignored, never fatal
    assert broken.states == {}


def test_node_with_several_failed_gpus_is_reported_failing() -> None:
    book = HealthBook(HealthConfig(), P)
    x = HealthSignals(xid_events=(XidEvent(79, 5.0),))
    facts = _res(_facts(h0=x, h1=HealthSignals(ecc_dbe_volatile=3)))
    facts.update(book.apply([_node()], facts, now=5))
    assert book.failing_nodes() == ["gpu-node-1"]
    found = audit(Snapshot([_node()], [], [], facts), prefix=P)
    failing = [f for f in found if f.kind == "node-failing"]
    assert len(failing) == 1 and failing[0].message.startswith("2 of 2 GPUs failed")


def test_two_nodes_with_one_hostname_keep_their_own_failing_state() -> None:
    """The book's per-node summary is keyed by node ID: two nodes may share a hostname
    (one re-joined under a new ID, or two machines named alike). Before: keyed by
    hostname, the healthy one read after the failing one overwrote it, so the failing
    node was not listed and its warning was logged again every cycle."""
    book = HealthBook(HealthConfig(), P)
    x = HealthSignals(xid_events=(XidEvent(79, 5.0),))
    sick = _facts(h0=x, h1=HealthSignals(ecc_dbe_volatile=3))
    well = replace(_facts(), gpus=tuple(replace(g, uuid=g.uuid + "-2") for g in _facts().gpus))
    twin = replace(_node(), id="n2", addr="10.0.0.2")
    facts = {**_res(sick), "n2": FactsResult("n2", "gpu-node-1", "", well, None, 0.0)}
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        for now in (5, 6, 7):
            book.apply([_node(), twin], facts, now=now)
    finally:
        logger.remove(sink)
    assert book.failing_nodes() == ["gpu-node-1"]
    assert sum("is failing" in line for line in lines) == 1, lines


def test_map_says_what_the_last_xid_means() -> None:
    from swarmgpu.core.metrics_in import GpuMetrics
    from swarmgpu.manager.web.cluster_view import xid_effect

    def gm(x: float) -> GpuMetrics:
        return GpuMetrics("GPU-aaaa", values={"DCGM_FI_DEV_XID_ERRORS": x})

    assert xid_effect(gm(13)) == "none"  # the application's: a warning on the map
    assert xid_effect(gm(79)) == "fail" and xid_effect(gm(94)) == "degrade"
    assert xid_effect(gm(0)) is None and xid_effect(None) is None


def test_an_agent_cannot_fail_another_nodes_gpu() -> None:
    """States are per node and UUID: a forged agent on node 2 naming node 1's GPU UUID
    with Xid 79 fails only what it claims on node 2, never node 1's GPU."""
    book = HealthBook(HealthConfig(), P)
    n2 = replace(_node(), id="n2", hostname="gpu-node-2")
    forged = _facts(h0=HealthSignals(xid_events=(XidEvent(79, 5.0),)))
    facts = {
        **_res(_facts()),
        "n2": FactsResult(
            "n2", "gpu-node-2", "", replace(forged, hostname="gpu-node-2"), None, 0.0
        ),
    }
    out = book.apply([_node(), n2], facts, now=5)
    n1_facts, n2_facts = out["n1"].facts, out["n2"].facts
    assert n1_facts is not None and n2_facts is not None
    assert all(g.healthy for g in n1_facts.gpus)
    assert not n2_facts.gpus[0].healthy
    assert [r["node"] for r in book.view(now=5)] == ["gpu-node-2"]


def test_save_writes_only_when_a_state_changed(tmp_path: Path) -> None:
    book = HealthBook(HealthConfig(), P)
    _apply(book, _facts(), 100)
    book.save(str(tmp_path))
    saved = next(tmp_path.glob("*.json"))
    saved.write_text("{}")  # a marker: a save with nothing changed leaves it
    _apply(book, _facts(), 130)
    book.save(str(tmp_path))
    assert saved.read_text() == "{}"
    _apply(book, _facts(h0=HealthSignals(xid_events=(XidEvent(79, 140.0),))), 140)
    book.save(str(tmp_path))
    assert "Xid 79" in saved.read_text()


def test_a_damaged_saved_state_drops_that_gpu_never_the_daemon(tmp_path: Path) -> None:
    """A saved state whose times are not finite numbers, or whose place is not a host and
    an index, is left out: an integer too large for a float, or an index that is no
    number, raised from the load (the daemon did not start; plan and audit failed), and a
    NaN or infinite time was kept, so the GPU never healed (``last_bad_at`` inf) or no
    later XID ever counted (``xid_seen_until`` inf)."""
    book = HealthBook(HealthConfig(), P)
    _apply(book, _facts(h0=HealthSignals(xid_events=(XidEvent(79, 100.0),))), 100)
    book.save(str(tmp_path))
    path = tmp_path / "gpu-health.json"
    good = json.loads(path.read_text())
    saved = good["n1/GPU-aaaa"] if "n1/GPU-aaaa" in good else next(iter(good.values()))
    damaged = {
        "n/huge": {**saved, "last_bad_at": 10**400},
        "n/nan": {**saved, "since": float("nan")},
        "n/inf": {**saved, "xid_seen_until": float("inf")},
        "n/failures": {**saved, "failures": [float("-inf")]},
        "n/where": {**saved, "where": ["gpu-node-1", "zero"]},
        "n/where-inf": {**saved, "where": ["gpu-node-1", float("inf")]},
    }
    path.write_text(json.dumps({**good, **damaged}))
    again = HealthBook(HealthConfig(), P)
    again.load(str(tmp_path))
    assert set(again.states) == set(good) and set(again.where) == set(good)


def test_an_agent_clock_ahead_does_not_hide_later_xids(tmp_path: Path) -> None:
    """An agent whose clock ran an hour ahead dated its XID an hour in the future; that
    time became the mark below which no XID counted, so after its clock was put right a
    real XID 79 was ignored for that hour. The daemon's own clock bounds the mark: the
    future-dated event counts once, and a later one counts at once, across a restart."""
    book = HealthBook(HealthConfig(clean_window_s=600), P)
    ahead = XidEvent(92, 100.0 + 3600)  # high single-bit ECC rate: degraded
    f = _apply(book, _facts(h0=HealthSignals(xid_events=(ahead,))), 100)
    assert f.gpus[0].error is not None and "degraded: Xid 92" in f.gpus[0].error
    book.save(str(tmp_path))
    book = HealthBook(HealthConfig(clean_window_s=600), P)
    book.load(str(tmp_path))
    f = _apply(book, _facts(h0=HealthSignals(xid_events=(ahead,))), 400)
    assert f.gpus[0].error is not None  # listed again, counted once: the window runs
    f = _apply(book, _facts(h0=HealthSignals(xid_events=(ahead,))), 700)
    assert f.gpus[0].error is None  # clean for 600 s since it was seen
    # The agent's clock is put right; the GPU falls off the bus.
    later = HealthSignals(xid_events=(ahead, XidEvent(79, 800.0)))
    f = _apply(book, _facts(h0=later), 801)
    assert not f.gpus[0].healthy and f.gpus[0].error is not None
    assert "failed: Xid 79" in f.gpus[0].error
    # The remembered event is saved; a state of an earlier version (none) still loads.
    book.save(str(tmp_path))
    path = tmp_path / "gpu-health.json"
    saved = json.loads(path.read_text())["n1/GPU-aaaa"]
    assert saved["xid_ahead"] == [[92, 3700.0]]
    older = {k: v for k, v in saved.items() if k != "xid_ahead"}
    path.write_text(
        json.dumps({"n1/GPU-aaaa": older, "n1/GPU-bad": {**saved, "xid_ahead": [["92", 1.0]]}})
    )
    again = HealthBook(HealthConfig(), P)
    again.load(str(tmp_path))
    assert list(again.states) == ["n1/GPU-aaaa"]


def test_a_new_term_judges_no_gpu_by_the_last_terms_metrics_pages() -> None:
    """The pages a daemon scraped in its last cycle as leader stood in for the next
    ``apply``, whenever that came: after hours as a follower, a page's old XID 79 (since
    mended by a reset) failed the GPU for its whole clean window at the new term's first
    cycle, and the health policy moved its holders off it."""
    book = HealthBook(HealthConfig(clean_window_s=600), P, CollectorRegistry())
    plain = NodeFacts("gpu-node-1", gpus=(Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", 81920),))
    book.feed_metrics({"n1": {"GPU-aaaa": GpuMetrics("GPU-aaaa", values={DCGM_XID: 79.0})}})
    book.stand_by()  # this daemon no longer leads; hours later it leads again
    assert _apply(book, plain, 5000).gpus[0].healthy
