"""metrics.py: dcgm-exporter names out; metrics_in.py: real captures and our output in."""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.request
from dataclasses import fields, replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.paths import FIXTURES as FIXTURES_DIR
from support.prometheus import promtool_check

from swarmgpu.agent.facts.topo import TopoSource
from swarmgpu.agent.metrics import DCGM_FIELDS, AgentStats, render_metrics
from swarmgpu.agent.server import build_server
from swarmgpu.core.health import HealthSignals
from swarmgpu.core.metrics_in import FB_FREE, FB_USED, PROCESS_MEMORY, UTIL, parse_metrics
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.core.samples import GpuProcess, GpuSample

CAPTURES = FIXTURES_DIR / "captures"
DCGM_FILES = sorted(CAPTURES.glob("dcgm_*.txt"))


def _facts() -> NodeFacts:
    return NodeFacts(
        hostname="node-a",
        gpus=(
            Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB", 40960, pci_bus_id="00000000:07:00.0"),
            Gpu(
                1, "GPU-bbbb", "NVIDIA A100-SXM4-40GB", 40960, mig_capable=True,
                mig_enabled=True, healthy=False, error="XID 79",
                mig_devices=(
                    MigDevice("3g.20gb", "MIG-1111", 19968, gi_id=1, ci_id=0),
                    MigDevice("3g.20gb", "MIG-2222", 19968, gi_id=2, ci_id=0),
                ),
            ),
        ),
    )


def _samples() -> list[GpuSample]:
    return [
        GpuSample("GPU-aaaa", 0, 42.0, 1000, 39960, 3.0, 55.0, 210.5),
        GpuSample("MIG-1111", 1, None, 500, 19468, None, None, None),
        GpuSample("MIG-2222", 1, None, 0, 19968, None, None, None),
    ]


def _lines(text: str, name: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(name + "{")]


DEFAULT_COUNTERS = FIXTURES_DIR / "dcgm-exporter" / "default-counters.csv"


def _default_counters() -> dict[str, tuple[str, str]]:
    """dcgm-exporter's etc/default-counters.csv: field -> (type, HELP), uncommented lines."""
    out = {}
    for line in DEFAULT_COUNTERS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind, help_ = (p.strip() for p in line.split(",", 2))
            out[name] = (kind, help_)
    return out


def _every_field_sample() -> GpuSample:
    values = {f.attr: 1.0 for f in DCGM_FIELDS}
    return replace(GpuSample("GPU-aaaa", 0, None, None, None, None, None, None), **values)


def test_help_and_type_lines_match_dcgm_exporter() -> None:
    """Every field of DCGM_FIELDS with the csv's type and HELP text; every field of the
    csv is served here or in the health block, or is the driver label."""
    csv = _default_counters()
    assert len(csv) == 26  # 25 metric fields and DCGM_FI_DRIVER_VERSION (a label)
    ours = render_metrics(_facts(), [_every_field_sample()]).decode()
    for f in DCGM_FIELDS:
        kind, help_ = csv[f.name]
        assert f"# HELP {f.name} {help_}\n" in ours, f.name
        assert f"# TYPE {f.name} {kind}\n" in ours, f.name
    from swarmgpu.agent.metrics import HEALTH_HELP

    health = set(HEALTH_HELP) | {"DCGM_FI_DEV_XID_ERRORS"}
    for name, (kind, help_) in csv.items():
        if name in health and name in HEALTH_HELP:
            assert HEALTH_HELP[name] == (kind, help_), name
    served = {f.name for f in DCGM_FIELDS} | health | {"DCGM_FI_DRIVER_VERSION"}
    assert set(csv) <= served, set(csv) - served


def test_names_are_in_the_real_captures() -> None:
    """What the agent serves is what real dcgm-exporters print: every name of a real
    capture's page that the csv lists; FB_RESERVED is in the csv, no capture has it."""
    real = "\n".join(p.read_text() for p in DCGM_FILES)
    in_captures = {f.name for f in DCGM_FIELDS if re.search(rf"^{f.name}{{", real, re.M)}
    assert {f.name for f in DCGM_FIELDS} - in_captures == {"DCGM_FI_DEV_FB_RESERVED"}
    for f in DCGM_FIELDS:  # and of the type the capture declares, where it declares one
        got = re.search(rf"^# TYPE {f.name} (\w+)$", real, re.M)
        assert got is None or got.group(1) == f.kind, f.name


def test_mig_devices_get_only_what_nvml_measures_per_instance() -> None:
    """A MIG device's sample carrying every value: only memory and the GPM ratios are
    written for it, never a per-slice GPU_UTIL (dcgm-exporter#216)."""
    mig = replace(_every_field_sample(), uuid="MIG-1111", index=1)
    text = render_metrics(_facts(), [_every_field_sample(), mig]).decode()
    per_slice = {ln.split("{")[0] for ln in text.splitlines()
                 if 'GPU_I_ID="1"' in ln and not ln.startswith("#")}
    assert per_slice == {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
                         "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                         "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"}
    assert len(_lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 1


def test_labels_and_values() -> None:
    text = render_metrics(_facts(), _samples()).decode()
    (util,) = _lines(text, "DCGM_FI_DEV_GPU_UTIL")
    for lab in ('gpu="0"', 'UUID="GPU-aaaa"', 'pci_bus_id="00000000:07:00.0"',
                'device="nvidia0"', 'modelName="NVIDIA A100-SXM4-40GB"', 'hostname="node-a"'):
        assert lab in util
    assert util.endswith(" 42.0")
    fb = _lines(text, "DCGM_FI_DEV_FB_USED")
    mig = [ln for ln in fb if 'GPU_I_ID="1"' in ln]
    assert len(mig) == 1
    assert 'GPU_I_PROFILE="3g.20gb"' in mig[0] and 'UUID="GPU-bbbb"' in mig[0]
    assert 'gpu="1"' in mig[0] and 'device="nvidia1"' in mig[0]
    assert "pci_bus_id" not in mig[0]  # unknown: absent, not empty


def test_unknown_values_are_omitted_never_zero() -> None:
    text = render_metrics(_facts(), _samples()).decode()
    # util of the MIG devices is unknown: only GPU 0 has a GPU_UTIL line
    assert len(_lines(text, "DCGM_FI_DEV_GPU_UTIL")) == 1
    assert len(_lines(text, "DCGM_FI_DEV_GPU_TEMP")) == 1
    nan = GpuSample("GPU-aaaa", 0, math.nan, None, None, None, None, None)
    text = render_metrics(_facts(), [nan]).decode()
    assert "DCGM_FI_DEV_GPU_UTIL" not in text and "DCGM_FI_DEV_FB_USED" not in text


def test_zero_gpus_is_valid() -> None:
    text = render_metrics(NodeFacts(hostname="cpu-only"), [], AgentStats()).decode()
    assert "DCGM_" not in text
    assert "swarmgpu_agent_facts_errors 0.0" in text


def test_self_metrics() -> None:
    stats = AgentStats(facts_errors=2, facts_age_s=3.5, refresh_failures_total=4,
                       scrape_duration_s=0.01, sampler_ok=False)
    text = render_metrics(_facts(), _samples(), stats).decode()
    assert 'swarmgpu_agent_gpu_healthy{UUID="GPU-aaaa",gpu="0"} 1.0' in text
    assert 'swarmgpu_agent_gpu_healthy{UUID="GPU-bbbb",gpu="1"} 0.0' in text
    assert "swarmgpu_agent_facts_errors 2.0" in text
    assert "swarmgpu_agent_facts_refresh_failures_total 4.0" in text
    assert "swarmgpu_agent_facts_age_seconds 3.5" in text
    assert "swarmgpu_agent_scrape_duration_seconds 0.01" in text
    assert "swarmgpu_agent_sampler_ok 0.0" in text


def test_sample_for_unknown_uuid_is_still_written() -> None:
    s = GpuSample("GPU-zzzz", 7, 10.0, None, None, None, None, None)
    text = render_metrics(_facts(), [s]).decode()
    (line,) = _lines(text, "DCGM_FI_DEV_GPU_UTIL")
    assert 'UUID="GPU-zzzz"' in line and 'gpu="7"' in line


def test_promtool_accepts_output() -> None:
    stats = AgentStats(facts_errors=0, facts_age_s=1.0, scrape_duration_s=0.1)
    promtool_check(render_metrics(_facts(), _samples(), stats))


def test_promtool_and_our_reader_accept_every_family_the_agent_writes() -> None:
    """Every family at once: each DCGM field, the health block, per-process memory, the
    driver version label and every agent stat (the test above writes neither health nor
    processes). promtool remarks only on dcgm-exporter's names; metrics_in, held to
    Prometheus' TYPE and HELP rules, reads the page without an error."""
    health = HealthSignals(**{f.name: 1 for f in fields(HealthSignals) if f.name != "xid_events"})
    facts = replace(_facts(), driver_version="550.54.15",
                    gpus=tuple(replace(g, health=health) for g in _facts().gpus))
    proc = GpuProcess(4242, 100, None, "c" * 64, "task-1", "svc")
    samples = [replace(_every_field_sample(), processes=(proc,)), *_samples()[1:]]
    stats = AgentStats(facts_errors=1, facts_age_s=1.0, refresh_failures_total=2,
                       scrape_duration_s=0.1, sampler_ok=False)
    page = render_metrics(facts, samples, stats)
    assert b"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{" in page and PROCESS_MEMORY.encode() in page
    promtool_check(page)
    assert parse_metrics(page.decode()).errors == []


def _series(text: str) -> list[tuple[str, frozenset[tuple[str, str]]]]:
    """Every sample as (name, labels), through prometheus_client's own parser."""
    return [(s.name, frozenset(s.labels.items()))
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def _seven_slice_agent_page() -> str:
    """/metrics of a real agent (HTTP on 127.0.0.1) over a topo: A100 80GB box with GPU
    0 cut into 7 x 1g.10gb, the facts source whose GI ids used to be unknown."""
    src = TopoSource(CAPTURES / "nvsmi_topo_a100-8x_nv12_stas00-mlengineering.txt",
                     hostname="dgx-1", product="NVIDIA A100-SXM4-80GB", memory_mib=81920,
                     mig_layout="0:1g.10gb*7")
    srv = build_server(src, "127.0.0.1:0", refresh_s=60)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while srv.cache.view().facts is None and time.monotonic() < deadline:
            time.sleep(0.02)
        host, port = srv.server_address[:2]
        with urllib.request.urlopen(f"http://{host!s}:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    finally:
        srv.shutdown()
        t.join(5)


def test_seven_mig_slices_give_unique_series() -> None:
    text = _seven_slice_agent_page()
    series = _series(text)
    dupes = {s for s in series if series.count(s) > 1}
    assert not dupes, dupes
    fb_free = [dict(lab) for name, lab in series if name == "DCGM_FI_DEV_FB_FREE"]
    mig = [lab for lab in fb_free if lab["gpu"] == "0"]
    assert len(mig) == 7 and len({lab["GPU_I_ID"] for lab in mig}) == 7
    assert {lab["GPU_I_PROFILE"] for lab in mig} == {"1g.10gb"}
    assert len(fb_free) == 7 + 7  # the 7 slices of GPU 0 and GPUs 1-7 whole
    # The manager's parser keeps each slice apart too (none folded into another).
    g0 = next(g for g in parse_metrics(text).samples_by_uuid.values() if g.index == 0)
    assert len(g0.mig) == 7 and g0.values.get(FB_FREE) is None
    promtool_check(text.encode())


def test_slices_without_gi_id_are_numbered_apart() -> None:
    """A facts file may leave gi_id null: every slice still gets a GPU_I_ID of its own,
    never one a known slice of that GPU already has."""
    slices = tuple(MigDevice("1g.10gb", f"MIG-{k}", 9984, gi_id=(1 if k == 0 else None))
                   for k in range(7))
    facts = NodeFacts(hostname="n", gpus=(
        Gpu(0, "GPU-x", "NVIDIA A100-SXM4-80GB", 81920, mig_capable=True, mig_enabled=True,
            mig_devices=slices),))
    samples = [GpuSample(m.uuid, 0, None, 0, 9984, None, None, None) for m in slices]
    series = _series(render_metrics(facts, samples).decode())
    ids = [dict(lab)["GPU_I_ID"] for name, lab in series if name == "DCGM_FI_DEV_FB_USED"]
    assert sorted(ids, key=int) == ["0", "1", "2", "3", "4", "5", "6"]


class _BuiltFacts:
    """Facts built in code, as a source of the agent's own makes them: no JSON, so the
    model's refusal of a lone surrogate (NodeFacts.from_dict) is not in their way."""

    spec = "fake:surrogates"

    def read(self) -> NodeFacts:
        return NodeFacts(hostname="n\ud800", driver_version="5\udfff", gpus=(
            Gpu(0, "GPU-a", "P\ud800", 100),
            Gpu(1, "GPU-b", "Q", 100, mig_capable=True, mig_enabled=True,
                mig_devices=(MigDevice("1g\udc00", "MIG-b1", 50, gi_id=1),))))


def test_a_lone_surrogate_in_facts_or_processes_still_gives_a_page_promtool_reads() -> None:
    """A lone surrogate (JSON's \\ud800, a name decoded with surrogateescape), which no
    UTF-8 can hold, naming the host, a GPU, a MIG profile or a process made every scrape
    of the agent's /metrics a 500 (UnicodeEncodeError) and a traceback. A facts file
    with one is now refused (test_hostile_inputs.py); the page still never fails on
    one: the label shows U+FFFD."""
    proc = GpuProcess(7, 10, None, "c\udc80", "t\ud800", "s\udfff")

    def sampler() -> list[GpuSample]:
        return [GpuSample("GPU-a", 0, 1.0, 10, 90, None, None, None, processes=(proc,)),
                GpuSample("MIG-b1", 1, None, 5, 45, None, None, None)]

    srv = build_server(_BuiltFacts(), "127.0.0.1:0", refresh_s=60, sampler=sampler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while srv.cache.view().facts is None and time.monotonic() < deadline:
            time.sleep(0.02)
        host, port = srv.server_address[:2]
        with urllib.request.urlopen(f"http://{host!s}:{port}/metrics", timeout=5) as r:
            page = r.read()
    finally:
        srv.shutdown()
        t.join(5)
    promtool_check(page)
    text = page.decode()
    assert 'hostname="n\ufffd"' in text and 'modelName="P\ufffd"' in text
    assert 'GPU_I_PROFILE="1g\ufffd"' in text and 'task="t\ufffd"' in text


def test_driver_version_and_label_set_match_dcgm_exporter() -> None:
    """Our label names for a MIG slice are dcgm-exporter's (A800 capture), with the
    lower-case hostname of current exporters and without its process-name label."""
    facts = replace(_facts(), driver_version="535.129.03")
    text = render_metrics(facts, _samples()).decode()
    ours = {n: dict(lab) for n, lab in _series(text) if dict(lab).get("GPU_I_ID") == "1"}
    assert ours["DCGM_FI_DEV_FB_FREE"]["DCGM_FI_DRIVER_VERSION"] == "535.129.03"
    (a800,) = [p for p in DCGM_FILES if "a800" in p.name]
    real = next(dict(lab) for n, lab in _series(_parsable(a800)) if "GPU_I_ID" in dict(lab))
    want = (set(real) - {"DCGM_FI_PROCESS_NAME", "Hostname"}) | {"hostname"}
    assert set(ours["DCGM_FI_DEV_FB_FREE"]) == want
    (util,) = _lines(text, "DCGM_FI_DEV_GPU_UTIL")
    assert 'pci_bus_id="00000000:07:00.0"' in util  # known: written, as newer exporters do
    assert "DCGM_FI_DRIVER_VERSION" not in render_metrics(_facts(), _samples()).decode()


def _parsable(path: Path) -> str:
    """A capture without the broken lines the exporter wrote (see the a800 test)."""
    return "\n".join(ln for ln in path.read_text().splitlines()
                     if ln.startswith("#") or "ERROR - FAILED" not in ln) + "\n"


# --- metrics_in ------------------------------------------------------------------


@pytest.mark.parametrize("path", DCGM_FILES, ids=lambda p: p.name[:40])
def test_every_capture_parses(path: Path) -> None:
    res = parse_metrics(path.read_text())
    assert res.samples_by_uuid, "no GPU found"
    assert res.hostname
    for uuid, g in res.samples_by_uuid.items():
        assert uuid.startswith("GPU-")
        assert g.index is not None
        assert g.values or g.mig


def test_a800_capture_broken_lines_reported_rest_kept() -> None:
    (path,) = [p for p in DCGM_FILES if "a800" in p.name]
    res = parse_metrics(path.read_text())
    assert len(res.samples_by_uuid) == 8
    assert res.hostname == "msxf-hpc-64-35-ai"
    assert len(res.errors) == 10 and all("sample cannot be parsed" in e for e in res.errors)
    # The broken value is named by its metric, never quoted (a page is not echoed).
    assert all("DCGM_" in e and "ERROR - FAILED" not in e for e in res.errors)
    g0 = res.samples_by_uuid["GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"]
    assert g0.util_pct is None  # MIG GPU: no whole-GPU util in the capture
    assert sorted(g0.mig) == [3, 5, 6]
    assert g0.mig[3].profile == "2g.20gb"
    assert g0.mig[3].values[FB_FREE] == 19957
    assert g0.fb_used_mib == 30  # sum of the three GPU instances
    g1 = res.samples_by_uuid["GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6"]
    assert g1.util_pct == 0 and g1.fb_free_mib == 81226 and g1.fb_used_mib == 2
    assert g1.index == 1 and g1.model_name == "NVIDIA A800-SXM4-80GB"


def test_a100_mig_capture() -> None:
    (path,) = [p for p in DCGM_FILES if "a100_mig" in p.name]
    res = parse_metrics(path.read_text())
    assert res.errors == []
    (g,) = res.samples_by_uuid.values()
    assert g.values[FB_USED] == 4845
    assert g.mig[13].profile == "1g.5gb"
    assert g.mig[13].values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.995687)


def test_h100_pod_labels_and_pci() -> None:
    (path,) = [p for p in DCGM_FILES if "h100" in p.name]
    res = parse_metrics(path.read_text())
    assert len(res.samples_by_uuid) == 3
    g = res.samples_by_uuid["GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"]
    assert g.pci_bus_id == "00000000:8D:00.0" and g.values[UTIL] == 0


def test_round_trip_through_our_output() -> None:
    text = render_metrics(_facts(), _samples(), AgentStats()).decode()
    res = parse_metrics(text)
    assert res.errors == [] and res.hostname == "node-a"
    a = res.samples_by_uuid["GPU-aaaa"]
    assert a.to_sample() == _samples()[0]
    b = res.samples_by_uuid["GPU-bbbb"]
    assert b.util_pct is None
    assert b.mig[1].values[FB_USED] == 500 and b.mig[2].values[FB_FREE] == 19968
    assert b.fb_used_mib == 500 and b.fb_free_mib == 19468 + 19968
    assert b.values["swarmgpu_agent_gpu_healthy"] == 0.0


@pytest.mark.parametrize(
    "text, n_gpus, n_errors",
    [
        ("", 0, 0),
        ("garbage\n", 0, 1),
        ('X{UUID="GPU-1",gpu="0"} 1\nX{UUID="GPU-1" 2\n', 1, 1),
        ('X{UUID="GPU-1",gpu="0"} NaN\n', 0, 0),  # NaN: unknown, dropped
        ('X{gpu="0"} 1\n', 0, 0),  # no UUID: not a GPU sample
        ('X{UUID="GPU-1",GPU_I_ID="x"} 1\n', 1, 1),
        ("\x00\xff" * 100 + "\n", 0, 1),
    ],
)
def test_broken_input_never_raises(text: str, n_gpus: int, n_errors: int) -> None:
    res = parse_metrics(text)
    assert len(res.samples_by_uuid) == n_gpus
    assert len(res.errors) == n_errors


def test_both_hostname_spellings_and_error_cap() -> None:
    res = parse_metrics('X{UUID="GPU-1",Hostname="old"} 1\nY{UUID="GPU-2",hostname="new"} 1\n')
    # Two hosts: no one of them is the page's (judge refuses it, naming both).
    assert res.hostname is None and res.hostnames == ("new", "old")
    assert any("several hostnames" in e for e in res.errors)
    res = parse_metrics("bad line\n" * 500)
    assert len(res.errors) == 51


def test_dcgm_counters_are_read_by_their_own_names() -> None:
    """A real dcgm-exporter page types TOTAL_ENERGY_CONSUMPTION a counter without _total;
    prometheus_client's parser would call its samples ..._total: the manager reads them
    by dcgm-exporter's name, as the health counters (ECC, remapped rows) must be."""
    page = parse_metrics((CAPTURES / "dcgm_tesla-t4_x1_drv460_Hostname_datadog-fixture-"
                          "excerpt.txt").read_text())
    (g,) = page.samples_by_uuid.values()
    assert g.values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 128996013
    assert g.values["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 0
    ours = parse_metrics(render_metrics(_facts(), [_every_field_sample()]).decode())
    assert ours.samples_by_uuid["GPU-aaaa"].values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 1
