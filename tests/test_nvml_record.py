"""The fake pynvml against a real driver: every NVML call swarmgpu made on the project's own
H200 machines (driver 580.159.04, in a VM; stops 55 and 57, one GPU each), recorded by
scripts/nvml-record.py, replayed on the fake built from each machine's `nvidia-smi`
captures (layouts ``h200_vm`` and ``h200_vm_2``; tests/fixtures/SOURCES.md). Where the
driver refused a call, the fake must refuse it with the same code; where it answered, the
fake must answer, and with the same value for everything that does not move between two
reads; and swarmgpu's facts from the fake must be what it made of the real driver."""

from __future__ import annotations

import json
import runpy
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from support.fake_pynvml.builder import CAPTURES, build_layout, layouts
from support.fake_pynvml.pynvml import NVMLError
from support.prometheus import promtool_check

from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.facts.nvml_sampler import read_utilisation
from swarmgpu.core.metrics_in import parse_metrics

# layout -> that machine's recording: the layouts that name one (the project's own H200s)
RECORDS: dict[str, Path] = {n: spec["nvml_record"] for n, spec in layouts().items()
                            if "nvml_record" in spec}
MACHINES = pytest.mark.parametrize("machine", sorted(RECORDS))
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "nvml-record.py"
METRICS = CAPTURES / "swarmgpu_agent_metrics_h200_x1_vm_drv580_swarmgpu-device_load.txt"
DEVICE_2 = "h200_x1_vm_drv580_swarmgpu-device-2"
# Stop 57's machine's agent under load: its first scrape 12 s after start, two more back
# to back, a fourth 3 s later.
SCRAPES = [CAPTURES / f"swarmgpu_agent_metrics_{DEVICE_2}_load_scrape{i}.txt" for i in (1, 2, 3, 4)]


@cache
def record(machine: str = "h200_vm") -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORDS[machine].read_text())
    return data


def _text(v: Any) -> Any:
    """pynvml answers some strings as bytes, the recording as text."""
    return v.decode() if isinstance(v, bytes) else v


def _get(x: Any, key: str) -> Any:
    return _text(x[key] if isinstance(x, dict) else getattr(x, key))


# What does not move between two reads of an idle GPU, per call: the part compared.
_SAME: dict[str, Any] = {
    "nvmlDeviceGetCount": lambda r: r,
    "nvmlSystemGetDriverVersion": _text,
    "nvmlSystemGetCudaDriverVersion": lambda r: r,
    "nvmlSystemGetNVMLVersion": _text,
    "nvmlDeviceGetUUID": _text,
    "nvmlDeviceGetName": _text,
    "nvmlDeviceGetMemoryInfo": lambda r: _get(r, "total"),
    "nvmlDeviceGetPciInfo": lambda r: _get(r, "busId"),
    "nvmlDeviceGetCudaComputeCapability": lambda r: list(r),
    "nvmlDeviceGetMigMode": lambda r: list(r),
    "nvmlDeviceGetMemoryAffinity": lambda r: list(r),
    "nvmlDeviceGetCpuAffinity": lambda r: list(r),
    "nvmlDeviceGetTotalEccErrors": lambda r: r,
    "nvmlDeviceGetRemappedRows": lambda r: list(r),
    "nvmlDeviceGetCurrentClocksEventReasons": lambda r: r,
    "nvmlDeviceGetClockInfo": lambda r: r,
    "nvmlDeviceGetPcieReplayCounter": lambda r: r,
    "nvmlDeviceGetEncoderUtilization": lambda r: list(r),  # (utilisation, sampling period)
    "nvmlDeviceGetDecoderUtilization": lambda r: list(r),  # (utilisation, sampling period)
    "nvmlDeviceGetComputeRunningProcesses": lambda r: len(r),
    "nvmlGpmQueryDeviceSupport": lambda r: _get(r, "isSupportedDevice"),
    "nvmlDeviceGetGridLicensableFeatures": lambda r: _get(r, "isGridLicenseSupported"),
    "nvmlDeviceGetFieldValues": lambda r: [_get(f, "nvmlReturn") for f in r],
}
# Handles of the recording's own objects (event sets, GPM samples): their calls are
# checked by what swarmgpu made of them, not one by one.
_NOT_REPLAYED = {"nvmlInit", "nvmlEventSetCreate", "nvmlDeviceRegisterEvents",
                 "nvmlEventSetWait", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
                 "nvmlGpmSampleFree", "nvmlGpmMetricsGet"}


def _arg(nv: Any, a: Any) -> Any:
    if isinstance(a, dict) and "handle" in a:
        label = a["handle"]
        assert label.startswith("gpu") and "/" not in label, label  # no MIG on this GPU
        return nv.nvmlDeviceGetHandleByIndex(int(label[3:]))
    if isinstance(a, list):  # a field id with its scope, as pynvml takes it: a tuple
        return [tuple(x) if isinstance(x, list) else x for x in a]
    return a


@MACHINES
def test_the_fake_answers_each_call_as_the_driver_did(tmp_path: Path, machine: str) -> None:
    nv = build_layout(machine, tmp_path).nvml
    nv.nvmlInit()
    seen: set[str] = set()
    checked: set[str] = set()
    for c in record(machine)["calls"]:
        if not c["phase"].startswith("idle") or c["fn"] in _NOT_REPLAYED:
            continue
        key = json.dumps([c["fn"], c["args"]])
        if key in seen:
            continue
        seen.add(key)
        try:
            got: Any = ("ok", getattr(nv, c["fn"])(*(_arg(nv, a) for a in c["args"])))
        except NVMLError as e:
            got = ("error", e.value)
        want = ("error", c["error"]["value"]) if "error" in c else ("ok", c["result"])
        assert got[0] == want[0], (c["fn"], c["args"], got, want)
        if got[0] == "error":
            assert got[1] == want[1], (c["fn"], c["args"], got, want)
        elif c["fn"] in _SAME:
            assert _SAME[c["fn"]](got[1]) == _SAME[c["fn"]](want[1]), (c["fn"], c["args"])
        checked.add(c["fn"])
    # every call of the facts and the sampler on this GPU, bar the ones named above
    assert len(checked) >= 30, sorted(checked)


@MACHINES
def test_facts_from_the_fake_are_what_swarmgpu_made_of_the_driver(tmp_path: Path,
                                                                  machine: str) -> None:
    b = build_layout(machine, tmp_path)
    fake = NvmlSource(hostname="vm", nvml_module=b.nvml, sysfs_root=b.sysfs,
                      xid_events=False).read().to_dict()
    real = record(machine)["facts_idle"]  # shared by the tests: compared, not changed
    assert {**fake, "node": {**fake["node"], "collected_at": None}} == {
        **real, "node": {**real["node"], "collected_at": None}}
    # sysfs said -1 in the VM; NVML's memory affinity named node 0, as `topo -m` did
    assert real["gpus"][0]["numa_node"] == 0


@MACHINES
def test_samples_from_the_fake_know_what_the_driver_knew(tmp_path: Path, machine: str) -> None:
    """Same fields known (a value) and unknown (None) as the real idle scrape with a
    previous one; the values that do not move between reads equal."""
    b = build_layout(machine, tmp_path)
    read_utilisation(b.nvml)
    real = record(machine)["samples_idle"][1][0]
    fake = read_utilisation(b.nvml)[0].__dict__
    rates = {"gr_engine_active", "tensor_active", "dram_active"}  # GPM: no values in a fake
    known = {k for k, v in real.items() if v is not None} - rates
    assert known == {k for k, v in fake.items() if v is not None} - rates
    # not fb_reserved_mib: nvidia-smi prints 616 MiB (rounded up), NVML's bytes are 615.06
    for k in ("uuid", "index", "fb_used_mib", "fb_free_mib",
              "sm_clock_mhz", "mem_clock_mhz", "pcie_replays", "enc_util_pct",
              "dec_util_pct", "vgpu_licensed", "util_pct", "mem_copy_util_pct"):
        assert fake[k] == real[k], k


def test_the_manager_reads_the_real_agent_page_under_load() -> None:
    """The agent's /metrics on the H200 at 99 % (a bf16 matrix-product loop): the
    manager's parser takes every figure, GPM's profiling ratios included (the agent takes
    a first sample at start, so its first scrape has them)."""
    promtool_check(METRICS.read_bytes())  # Prometheus's own checker takes it too
    page = parse_metrics(METRICS.read_text())
    (s,) = page.samples_by_uuid.values()
    assert s.util_pct is not None and s.util_pct >= 99
    assert (s.get("DCGM_FI_DEV_POWER_USAGE") or 0) > 600
    assert (s.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE") or 0) > 0.8
    assert s.fb_used_mib == 1010
    assert [p.used_mib for p in s.processes] == [1002]  # the matrix-product process


def test_back_to_back_scrapes_on_the_real_gpu_repeat_the_last_interval() -> None:
    """Stop 57's machine's agent under load (the code as mended after the first): its
    first scrape already has GPM's ratios (the sample taken at start); scrapes a moment
    apart repeat the last full interval's ratios instead of a ratio over milliseconds
    (which read 0 % at 100 % busy on the first machine); one 3 s later is a new interval."""
    pages = [parse_metrics(p.read_text()) for p in SCRAPES]
    for p in SCRAPES:
        promtool_check(p.read_bytes())
    gr = []
    for page in pages:
        (s,) = page.samples_by_uuid.values()
        assert s.util_pct is not None and s.util_pct >= 99
        v = s.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        assert v is not None and 0.9 < v <= 1.0
        assert 0 < (s.get("DCGM_FI_PROF_DRAM_ACTIVE") or 0) < 1  # no NaN
        gr.append(v)
    assert gr[0] == gr[1] == gr[2] != gr[3]
    assert [p.used_mib for p in s.processes] == [1130]  # the matrix-product process


def test_a_compute_process_reads_as_on_the_driver(tmp_path: Path) -> None:
    """Under load the driver listed the one matrix-product process with 1002 MiB and no GPU
    instance; the fake fed the `-q` taken under the same load lists it alike."""
    b = build_layout("h200_vm", tmp_path, processes_file=CAPTURES
                     / "nvsmi_q_h200_x1_vm_drv580_swarmgpu-device_load.txt")
    fake = [(p.used_mib, p.gpu_instance_id) for p in read_utilisation(b.nvml)[0].processes]
    real = [(p["used_mib"], p["gpu_instance_id"])
            for p in record()["samples_load"][1][0]["processes"]]
    assert fake == real == [(1002, None)]


def test_the_recorder_runs_on_any_pynvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/nvml-record.py, the tool that made the record, over the fake: it writes
    what swarmgpu made of NVML and each call, so the next GPU machine's run is sure."""
    b = build_layout("h200_vm", tmp_path / "sysfs")
    monkeypatch.setitem(sys.modules, "pynvml", b.nvml)
    monkeypatch.setattr(sys, "argv", ["nvml-record.py", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert done.value.code == 0
    out = json.loads((tmp_path / "out" / "nvml-record.json").read_text())
    assert out["facts_idle"]["gpus"][0]["uuid"] == b.machine.gpus[0].uuid
    assert {"nvmlDeviceGetUUID", "nvmlDeviceGetMemoryAffinity"} <= {c["fn"] for c in out["calls"]}
