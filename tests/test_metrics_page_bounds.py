"""What one node's metrics page may cost the daemon, bounded before and while it is read.

The fetch caps a page at 8 MiB and a deadline; parsing came after both, on the daemon's
cycle: 4 MiB of short sample lines took ~2 s and ~100 MiB, 8 MiB of escapes in one label
value ~3 s. Now a page past a cap (lines, samples of one metric) is refused unread past
it, naming the node, the cap and the fix; a label value or line longer than any exporter
writes is skipped unread. Work is counted here (calls, tracemalloc), not timed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import sw_node
from support.traced import traced_peak

from swarmgpu.core import metrics_in, promtext
from swarmgpu.core.metrics_in import parse_metrics
from swarmgpu.core.peertext import PEER_TEXT_LIMIT
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.rebalance import scrape

CAPTURES = Path(__file__).resolve().parent / "fixtures" / "captures"
GOOD = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",gpu="0",Hostname="gpu-1"} 5\n'


def _counted_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each line metrics_in hands to promtext.parse_sample from now on."""
    made: list[str] = []
    real = metrics_in.parse_sample

    def counted(line: str) -> promtext.Sample:
        made.append(line[:16])
        return real(line)

    monkeypatch.setattr(metrics_in, "parse_sample", counted)
    return made


def _short_lines_page() -> str:
    """~4.5 MiB of short sample lines, each a metric of its own."""
    return GOOD + "".join(f"m{i} 1\n" for i in range(500_000))


def test_a_page_of_short_sample_lines_is_refused_after_a_bounded_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    page = _short_lines_page()
    parsed = _counted_parses(monkeypatch)
    res, peak = traced_peak(lambda: parse_metrics(page))
    assert len(parsed) <= 20_000  # was every one of the 500,001 lines
    assert peak < 24 * 2**20, peak  # was ~100 MiB: every line a string, every sample kept
    assert not res.samples_by_uuid  # no partial page: the cut could fall among one GPU's
    assert res.refused is not None and res.errors[0] == res.refused
    assert f"more than {metrics_in.MAX_PAGE_LINES} lines" in res.refused
    assert "serve fewer series" in res.refused


def test_one_metric_with_more_samples_than_any_gpu_page_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    page = GOOD + "".join(f'DCGM_FI_DEV_SM_CLOCK{{UUID="GPU-1",x="{i}"}} 1\n'
                          for i in range(10_000))
    parsed = _counted_parses(monkeypatch)
    res = parse_metrics(page)
    assert len(parsed) <= 4_200  # was all 10,001
    assert not res.samples_by_uuid
    assert res.refused is not None
    assert f"more than {metrics_in.MAX_METRIC_SAMPLES} samples of DCGM_FI_DEV_SM_CLOCK" \
        in res.refused


class _CountedEscapes(dict[str, str]):
    """promtext's escape table, each lookup (one per escape unescaped) counted."""

    looked = 0

    def __getitem__(self, key: str) -> str:
        type(self).looked += 1
        return super().__getitem__(key)


def test_a_label_value_of_8_mib_of_escapes_is_never_unescaped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promtext, "_UNESCAPE", _CountedEscapes(promtext._UNESCAPE))
    _CountedEscapes.looked = 0
    hostile = ('DCGM_FI_DEV_FB_USED{UUID="GPU-1",modelName="' + "\\\\" * (4 * 2**20)
               + '"} 7\n')
    res = parse_metrics(GOOD + hostile)
    assert _CountedEscapes.looked == 0  # was 4 Mi lookups, ~3 s of the daemon's cycle
    gpu = res.samples_by_uuid["GPU-1"]  # the page's other lines are read as ever
    assert gpu.util_pct == 5 and gpu.fb_used_mib is None
    assert any("line 2: longer than" in e and "skipped unread" in e for e in res.errors)


def test_a_label_value_longer_than_any_exporter_writes_is_refused_unescaped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promtext, "_UNESCAPE", _CountedEscapes(promtext._UNESCAPE))
    _CountedEscapes.looked = 0
    line = 'DCGM_FI_DEV_FB_USED{UUID="GPU-1",pod="' + "\\n" * 3000 + '"} 7'
    with pytest.raises(promtext.LineError, match="label pod has a value longer than 4096"):
        promtext.parse_sample(line)
    assert _CountedEscapes.looked == 0  # was 3,000
    at_cap = 'DCGM_FI_DEV_FB_USED{UUID="GPU-1",pod="' + "\\n" * 2048 + '"} 7'
    assert promtext.parse_sample(at_cap).labels["pod"] == "\n" * 2048


def test_a_refused_page_names_the_node_and_blocks_no_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pages = {"10.0.0.1": _short_lines_page(), "10.0.0.2": GOOD.replace("gpu-1", "gpu-2")}

    def fetched(url: str, **_kw: Any) -> boundedhttp.Fetched:
        return boundedhttp.Fetched(200, pages[url.split("/")[2]].encode())

    monkeypatch.setattr(boundedhttp, "get", fetched)
    nodes = [replace(sw_node("n1", "gpu-1"), addr="10.0.0.1"),
             replace(sw_node("n2", "gpu-2"), addr="10.0.0.2")]
    got = scrape.scrape_all(nodes, "http://{addr}/metrics", 5.0)
    bad, good = got["n1"], got["n2"]
    assert bad.result is None and bad.error is not None
    assert bad.error.startswith("metrics of node gpu-1 at http://10.0.0.1/metrics: page "
                                "refused unread: more than 16384 lines")
    assert "serve fewer series" in bad.error
    assert good.error is None and good.result is not None
    assert good.result.samples_by_uuid["GPU-1"].util_pct == 5


def test_every_real_capture_is_far_below_each_cap() -> None:
    """The caps refuse no real page: each capture is at most a tenth of each."""
    pages = [p.read_text() for p in sorted(CAPTURES.glob("*.txt"))
             if p.name.startswith(("dcgm_", "swarmgpu_agent_metrics_"))]
    assert len(pages) >= 5
    for page in pages:
        lines = page.split("\n")
        names: dict[str, int] = {}
        for line in lines:
            if line.strip() and not line.lstrip().startswith("#"):
                name = line.strip().split("{")[0].split(" ")[0]
                names[name] = names.get(name, 0) + 1
        assert len(lines) * 10 < metrics_in.MAX_PAGE_LINES
        assert max(names.values()) * 10 < metrics_in.MAX_METRIC_SAMPLES
        assert max(map(len, lines)) * 10 < metrics_in.MAX_LINE_LEN
        res = parse_metrics(page)
        assert res.refused is None and res.samples_by_uuid


def test_a_page_of_many_labels_is_read_in_little_memory() -> None:
    """Every sample was held whole, every label of it, until the page's end: 4,000 lines
    of 60 labels (1.5 MiB) held ~20 MiB, a page at the fetch's 8 MiB cap ~100 MiB. Only
    the series and labels the scrape reads are kept."""
    labels = ",".join(f'l{j}=""' for j in range(60))
    page = "".join(f'DCGM_FI_DEV_{i % 4}{{UUID="GPU-1",gpu="0",x="{i}",{labels}}} 1\n'
                   for i in range(4_000))
    res, peak = traced_peak(lambda: parse_metrics(page))
    assert peak < 8 * 2**20, peak
    assert res.refused is None and res.samples_by_uuid["GPU-1"].get("DCGM_FI_DEV_3") == 1


def test_a_sample_with_more_labels_than_any_exporter_writes_is_refused() -> None:
    many = ",".join(f'l{j}="v"' for j in range(64))
    with pytest.raises(promtext.LineError, match="more than 64 labels"):
        promtext.parse_sample(f'm{{UUID="GPU-1",{many}}} 1')
    assert len(promtext.parse_sample(f"m{{{many}}} 1").labels) == 64


def test_a_refused_pages_fix_is_kept_whole_beside_a_long_host_and_url() -> None:
    # The whole line was cut at 300 characters as one peer text: with a host and URL of
    # ordinary length, the fix ("serve fewer series ... metrics_url_template") was lost.
    host = "gpu-node-12.cluster-a.example.internal"
    page = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1"} 1\n' * (metrics_in.MAX_METRIC_SAMPLES + 1)
    got = scrape.judge(sw_node("n1", host), f"http://{host}:9400/metrics", page, 0.0)
    assert got.result is None and got.error is not None
    assert got.error.startswith(f"metrics of node {host[:12]}")
    assert got.error.endswith("or check rebalance.metrics_url_template"), got.error
    # (the node and URL cut to what the fix leaves of the limit: tests/test_hostile_inputs)
    assert len(got.error) <= PEER_TEXT_LIMIT and "characters]: page refused" in got.error
