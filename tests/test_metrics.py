"""metrics.py: dcgm-exporter names out; metrics_in.py: real captures and our output in."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from paths import FIXTURES as FIXTURES_DIR

from swarmgpu.agent.metrics import DCGM_FIELDS, AgentStats, render_metrics
from swarmgpu.core.metrics_in import FB_FREE, FB_USED, UTIL, parse_metrics
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.core.samples import GpuSample

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


def test_help_and_type_lines_match_dcgm_exporter() -> None:
    real = "\n".join(p.read_text() for p in DCGM_FILES)
    ours = render_metrics(_facts(), _samples()).decode()
    for f in DCGM_FIELDS:
        for kind in ("HELP", "TYPE"):
            want = re.search(rf"^# {kind} {f.name} .*$", real, re.M)
            got = re.search(rf"^# {kind} {f.name} .*$", ours, re.M)
            assert want is not None, f.name
            assert got is not None and got.group(0) == want.group(0)


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


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_output(tmp_path: Path) -> None:
    stats = AgentStats(facts_errors=0, facts_age_s=1.0, scrape_duration_s=0.1)
    text = render_metrics(_facts(), _samples(), stats)
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       timeout=30, check=False)
    out = (r.stdout + r.stderr).decode()
    # 3 = lint remarks only; the only remark allowed is dcgm-exporter's own camelCase
    assert r.returncode in (0, 3), out
    for line in out.splitlines():
        assert "camelCase" in line, line


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
    assert res.hostname == "new" and any("several hostnames" in e for e in res.errors)
    res = parse_metrics("bad line\n" * 500)
    assert len(res.errors) == 51
