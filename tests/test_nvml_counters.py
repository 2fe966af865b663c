"""dcgm-exporter's default counters as far as NVML reaches (issue 33, point 4): the NVML
sampler over the fake pynvml built from real captures, and what the agent writes of it.

Clocks, memory temperature, PCIe replays and throughput, encoder/decoder use and the
reserved framebuffer come from the `nvidia-smi -q` captures; energy, NVLink counters and
GPM values (no capture has them) are set as tests/fixtures/SOURCES.md says."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.fake_pynvml.builder import (
    CAPTURED_ENERGY_MJ,
    build_layout,
    layouts,
    parse_q,
    with_uncaptured_counters,
)

from swarmgpu.agent.facts import nvml_sampler
from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.facts.nvml_sampler import MIN_RATE_INTERVAL_S, read_utilisation
from swarmgpu.agent.metrics import DCGM_FIELDS, render_metrics
from swarmgpu.core.metrics_in import parse_metrics


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sampler's clock, stepped by the test: two scrapes are 2 s apart unless a test
    moves it otherwise (rates need MIN_RATE_INTERVAL_S between them)."""
    now = [1000.0]

    def read() -> float:
        return now[0]

    monkeypatch.setattr(nvml_sampler, "_clock", read)
    return now


def scrape(b: Any, clock: list[float], step_s: float = 2.0) -> list[Any]:
    clock[0] += step_s
    return read_utilisation(b.nvml)


def test_whole_gpu_counters_come_from_the_capture(tmp_path: Path) -> None:
    b = build_layout("dgx_a100_nv12", tmp_path)
    s0 = read_utilisation(b.nvml)[0]
    # nvsmi_q_a100-sxm4_x4_thamada.txt, GPU 0
    assert (s0.sm_clock_mhz, s0.mem_clock_mhz) == (210.0, 1593.0)
    assert s0.memory_temp_c == 43.0
    assert s0.pcie_replays == 0.0
    assert (s0.pcie_tx_bytes_s, s0.pcie_rx_bytes_s) == (0.0, 0.0)
    assert (s0.enc_util_pct, s0.dec_util_pct) == (0.0, 0.0)
    assert s0.fb_reserved_mib == 763
    assert s0.vgpu_licensed == 0.0  # bare metal, as DCGM's 0 in every capture
    assert s0.energy_mj is None  # no capture has it: unknown, never 0
    assert s0.gr_engine_active is None  # an A100 has no GPM


def test_h100_throughput_and_energy(tmp_path: Path) -> None:
    b = with_uncaptured_counters(build_layout("hgx_h100_nv18", tmp_path))
    s = read_utilisation(b.nvml)
    q = parse_q(layouts()["hgx_h100_nv18"]["q_file"])
    assert s[0].pcie_tx_bytes_s == 567 * 1024 and s[0].pcie_rx_bytes_s == 559 * 1024
    assert s[0].pcie_replays == 7.0  # "Replays Since Reset: 7"
    assert s[0].energy_mj == CAPTURED_ENERGY_MJ
    assert s[0].memory_temp_c == 36.0
    assert s[0].uuid == q.gpus[0].uuid


def test_nvlink_rate_and_gpm_ratios_need_two_scrapes(tmp_path: Path, clock: list[float]) -> None:
    b = with_uncaptured_counters(build_layout("hgx_h100_nv18", tmp_path))
    first = scrape(b, clock)[0]
    assert first.nvlink_mb_s is None and first.gr_engine_active is None
    g = b.machine.gpus[0]
    g.nvlink_data_kib = (300_000, 200_000)  # 500,000 KiB more, rx + tx
    second = scrape(b, clock, 2.0)[0]
    assert second.nvlink_mb_s == 500_000 / 1000 / 2.0  # MB/s over the 2 s between
    assert second.gr_engine_active == 0.99563
    assert second.tensor_active == 0.92926 and second.dram_active == 0.690789


def test_a_scrape_too_soon_repeats_the_last_interval(tmp_path: Path, clock: list[float]) -> None:
    """Two scrapes a moment apart (an HA pair of Prometheus servers): the second gets the
    last interval's figures, not a rate over milliseconds (on the real H200 that read 0 %
    busy at 99 % and NaN for DRAM), and the baseline stays, so the next full interval
    counts from it."""
    b = with_uncaptured_counters(build_layout("hgx_h100_nv18", tmp_path))
    g = b.machine.gpus[0]
    scrape(b, clock)
    g.nvlink_data_kib = (300_000, 200_000)
    full = scrape(b, clock, 2.0)[0]
    g.nvlink_data_kib = (900_000, 200_000)  # 600,000 KiB more
    g.gpm = {None: {1: 10.0, 5: 20.0, 10: 30.0}}
    soon = scrape(b, clock, MIN_RATE_INTERVAL_S / 10)[0]
    assert (soon.nvlink_mb_s, soon.gr_engine_active, soon.dram_active) == (
        full.nvlink_mb_s, full.gr_engine_active, full.dram_active)
    later = scrape(b, clock, 3.0 - MIN_RATE_INTERVAL_S / 10)[0]
    assert later.nvlink_mb_s == 600_000 / 1000 / 3.0  # from the kept baseline, 3 s back
    assert later.gr_engine_active == 0.1 and later.dram_active == 0.3


def test_a_nan_ratio_is_unknown_not_nan(tmp_path: Path, clock: list[float]) -> None:
    """GPM's DRAM ratio came back NaN on the real H200 (tests/fixtures/captures/SOURCES.md):
    unknown, left off the page, never a NaN sample."""
    b = with_uncaptured_counters(build_layout("hgx_h100_nv18", tmp_path))
    for g in b.machine.gpus:
        g.gpm = {None: {1: 41.8, 5: 38.1, 10: math.nan}}
    facts = NvmlSource(hostname="h", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    scrape(b, clock)
    s = scrape(b, clock)
    assert s[0].gr_engine_active == 0.418 and s[0].dram_active is None
    text = render_metrics(facts, s).decode()
    assert "NaN" not in text and "DCGM_FI_PROF_DRAM_ACTIVE{" not in text


def test_mig_devices_get_memory_and_gpm_never_util(tmp_path: Path, clock: list[float]) -> None:
    b = with_uncaptured_counters(build_layout("h100_mig", tmp_path))
    facts = NvmlSource(hostname="h", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    scrape(b, clock)
    samples = scrape(b, clock)
    migs = {m.uuid: m for g in facts.gpus for m in g.mig_devices}
    whole = [s for s in samples if s.uuid not in migs]
    slices = [s for s in samples if s.uuid in migs]
    assert len(whole) == 1 and len(slices) == len(migs) == 4
    assert whole[0].util_pct is None  # MIG on: NVML has no whole-GPU utilisation either
    assert whole[0].gr_engine_active == 0.99563
    for s in slices:
        assert s.util_pct is None and s.temp_c is None and s.power_w is None
        assert s.gr_engine_active == 0.995687 and s.dram_active == 0.800339
    # nvsmi_q_h100-80gb-hbm3_mig-enabled: MIG device 0, "Shared FB Memory Usage" Used 26
    assert slices[0].fb_used_mib == 26 and slices[0].fb_reserved_mib == 0
    text = render_metrics(facts, samples).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    util = families["DCGM_FI_DEV_GPU_UTIL"].samples if "DCGM_FI_DEV_GPU_UTIL" in families \
        else []
    assert util == []  # no whole-GPU util on a MIG GPU, and none made up per slice
    gr = families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples
    assert len(gr) == 1 + 4 and len({s.labels.get("GPU_I_ID") for s in gr}) == 5
    sm = families["DCGM_FI_DEV_SM_CLOCK"].samples
    assert len(sm) == 1 and "GPU_I_ID" not in sm[0].labels
    # the manager reads the slices apart, under the parent
    g0 = next(iter(parse_metrics(text).samples_by_uuid.values()))
    assert len(g0.mig) == 4


def test_every_default_counter_nvml_gives_is_served(tmp_path: Path, clock: list[float]) -> None:
    """On the H100 box with every counter known, every DCGM_FIELDS family is on the page
    (the vGPU licence one too: 0 on bare metal), each series once."""
    b = with_uncaptured_counters(build_layout("hgx_h100_nv18", tmp_path))
    facts = NvmlSource(hostname="h", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    scrape(b, clock)
    text = render_metrics(facts, scrape(b, clock)).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    names = {n.removesuffix("_total") for n in names}
    assert {f.name for f in DCGM_FIELDS} <= names, {f.name for f in DCGM_FIELDS} - names
    series = [(s.name, tuple(sorted(s.labels.items())))
              for f in text_string_to_metric_families(text) for s in f.samples]
    assert len(series) == len(set(series))


def test_missing_nvml_calls_leave_fields_unknown(tmp_path: Path) -> None:
    """An older nvidia-ml-py or driver without a call: that field is left out, the
    rest is served."""
    b = build_layout("dgx_a100_nv12", tmp_path, missing=frozenset({
        "nvmlDeviceGetClockInfo", "nvmlDeviceGetFieldValues", "nvmlGpmQueryDeviceSupport",
        "nvmlDeviceGetGridLicensableFeatures"}))
    s0 = read_utilisation(b.nvml)[0]
    assert s0.sm_clock_mhz is None and s0.memory_temp_c is None and s0.vgpu_licensed is None
    assert s0.fb_reserved_mib == 763 and s0.temp_c == 25.0
