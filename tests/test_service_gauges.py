"""The daemon's per-service GPU gauges (swarmgpu.manager.cycle.observe.ServiceGauges), set
from a cluster document, pure; the page they make goes through the real promtool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.prometheus import promtool_check

from swarmgpu.manager.cycle.observe import ServiceGauges
from swarmgpu.manager.services.overshare import Unattributed


def _node(node_id: str, hostname: str, service: str, util: int) -> dict[str, Any]:
    return {
        "id": node_id,
        "hostname": hostname,
        "gpus": [
            {
                "index": 0,
                "util_pct": util,
                "memory_used_mib": 1000,
                "memory_mib": 80000,
                "holders": [{"service": service, "share_milli": 500}],
            }
        ],
    }


def _stray(node_id: str, hostname: str, used: int) -> Unattributed:
    return Unattributed(node_id, hostname, 0, f"GPU-{node_id}", 7, used, "", "", "no task")


def _series(reg: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    page = generate_latest(reg)
    promtool_check(page)  # the page Prometheus scrapes is one it takes whole
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(page.decode()):
        out.setdefault(fam.name, []).extend((s.labels, s.value) for s in fam.samples)
    return out


def test_two_nodes_of_one_hostname_have_their_own_series() -> None:
    # A node re-joined under a new ID while its old entry is listed, or two machines
    # named alike: one hostname, two nodes, each GPU its own series.
    reg = CollectorRegistry()
    gauges = ServiceGauges(reg)
    gauges.set(
        {"nodes": [_node("id-old", "gpu-a", "train", 10), _node("id-new", "gpu-a", "train", 90)]},
        [_stray("id-old", "gpu-a", 100), _stray("id-new", "gpu-a", 300)],
    )
    got = _series(reg)
    util = sorted((s["node_id"], s["node"], v) for s, v in got["swarmgpu_service_gpu_util"])
    assert util == [("id-new", "gpu-a", 90.0), ("id-old", "gpu-a", 10.0)]
    for name in ("swarmgpu_service_gpu_memory_used_mib", "swarmgpu_service_gpu_memory_share_mib"):
        assert sorted(s["node_id"] for s, _ in got[name]) == ["id-new", "id-old"], name
    stray = sorted((s["node_id"], v) for s, v in got["swarmgpu_unattributed_gpu_memory_mib"])
    assert stray == [("id-new", 300.0), ("id-old", 100.0)]


def test_a_node_or_service_gone_leaves_no_series() -> None:
    reg = CollectorRegistry()
    gauges = ServiceGauges(reg)
    gauges.set(
        {"nodes": [_node("id-1", "gpu-a", "train", 10), _node("id-2", "gpu-b", "infer", 20)]},
        [_stray("id-2", "gpu-b", 5)],
    )
    gauges.set({"nodes": [_node("id-1", "gpu-a", "train", 30)]}, [])
    got = _series(reg)
    assert [(s["service"], s["node_id"], v) for s, v in got["swarmgpu_service_gpu_util"]] == [
        ("train", "id-1", 30.0)
    ]
    assert got.get("swarmgpu_unattributed_gpu_memory_mib", []) == []


def test_a_scrape_during_an_update_sees_one_whole_cycle() -> None:
    # The daemon serves /metrics from another thread while a cycle sets the gauges: a
    # scrape that lands mid-update must see the whole last cycle or the whole new one,
    # never some series missing (absent() alerts and rate/avg panels flapped). The
    # scrapes are taken from inside the update, as each node and stray is read.
    reg = CollectorRegistry()
    gauges = ServiceGauges(reg)
    first = {"nodes": [_node("id-1", "gpu-a", "train", 10), _node("id-2", "gpu-b", "infer", 20)]}
    gauges.set(first, [_stray("id-2", "gpu-b", 5)])
    before = generate_latest(reg)
    pages: list[bytes] = []

    def scraping(items: list[Any]) -> Iterator[Any]:
        for x in items:
            pages.append(generate_latest(reg))
            yield x
        pages.append(generate_latest(reg))

    nodes = [_node("id-1", "gpu-a", "train", 30), _node("id-2", "gpu-b", "infer", 40)]
    strays = [_stray("id-1", "gpu-a", 7), _stray("id-2", "gpu-b", 9)]
    gauges.set({"nodes": scraping(nodes)}, scraping(strays))
    after = generate_latest(reg)
    assert before != after
    assert pages, "the update read no node"
    for page in pages:
        assert page in (before, after), page.decode()
