"""NvmlSource and read_utilisation against a fake pynvml built from real captures."""

from __future__ import annotations

import copy
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.fake_pynvml import pynvml as fake
from support.fake_pynvml.builder import CAPTURES, build_layout, layouts, parse_l, parse_q

from swarmgpu.agent.facts.nvml import NvmlSource, cpu_list, cuda_version_text, read_utilisation
from swarmgpu.agent.facts.nvml_session import ensure_init, shutdown, shutdown_within
from swarmgpu.core.model import NodeFacts


def _read(name: str, tmp_path: Path, **kw: object) -> tuple[NodeFacts, object]:
    b = build_layout(name, tmp_path, **kw)
    facts = NvmlSource(hostname="node-a", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    return facts, b


@pytest.mark.parametrize("name", sorted(layouts()))
def test_facts_match_the_captures(name: str, tmp_path: Path) -> None:
    facts, b = _read(name, tmp_path)
    spec = layouts()[name]
    assert facts.errors == ()
    assert all(g.healthy for g in facts.gpus)
    # Topology, CPU affinity, NUMA: as `topo -m` printed them.
    assert facts.links == b.topo.links  # type: ignore[attr-defined]
    assert [g.cpu_affinity for g in facts.gpus] == list(b.topo.cpu_affinity)  # type: ignore[attr-defined]
    assert [g.numa_node for g in facts.gpus] == list(b.topo.numa_node)  # type: ignore[attr-defined]
    if "q_file" in spec:
        q = parse_q(spec["q_file"])
        assert facts.driver_version == q.driver
        assert facts.cuda_driver_version == q.cuda
        for g, qg in zip(facts.gpus, q.gpus, strict=False):
            assert (g.uuid, g.product, g.memory_mib, g.pci_bus_id) == (
                qg.uuid, qg.name, qg.fb_total, qg.bus_id
            )
    else:
        assert {g.product for g in facts.gpus} == {spec["product"]}
    # Round-trips through the JSON form the agent serves.
    assert NodeFacts.from_dict(facts.to_dict()).gpus == facts.gpus


def test_dgx_a100_spot_values(tmp_path: Path) -> None:
    facts, _ = _read("dgx_a100_nv12", tmp_path)
    assert len(facts.gpus) == 8
    assert {facts.link(i, j) for i in range(8) for j in range(8) if i != j} == {"NV12"}
    assert [g.numa_node for g in facts.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert facts.gpus[0].cpu_affinity == "48-63,176-191"
    assert facts.gpus[0].uuid == "GPU-31515c3d-1414-7c2c-004a-f86a898946ac"
    assert facts.gpus[0].product == "NVIDIA A100-SXM4-80GB"
    assert facts.gpus[0].memory_mib == 81920
    assert (facts.gpus[0].compute_major, facts.gpus[0].compute_minor) == (8, 0)


def test_rtx4090_pcie_levels(tmp_path: Path) -> None:
    facts, _ = _read("rtx4090_pix_sys", tmp_path)
    assert facts.link(0, 3) == "PIX"
    assert facts.link(3, 4) == "SYS"
    assert facts.gpus[4].cpu_affinity == "36-71,108-143"
    assert facts.gpus[7].numa_node == 1


def test_v100_hybrid_cube_mesh_direct_links(tmp_path: Path) -> None:
    facts, _ = _read("dgx1_v100_direct_nvlink", tmp_path)
    assert facts.link(0, 3) == "NV2"
    assert facts.link(0, 1) == "NV1"
    assert facts.link(0, 5) == "SYS"
    assert facts.gpus[0].numa_node is None  # that capture has no NUMA column


def test_h100_mig_profiles_and_uuids(tmp_path: Path) -> None:
    facts, _ = _read("h100_mig", tmp_path)
    (gpu,) = facts.gpus
    listed = parse_l(CAPTURES / "nvsmi_L_h100-80gb-hbm3_mig-mixed_drv590_masked_nvgpuexporter.txt")
    assert gpu.mig_enabled and gpu.mig_capable
    assert [(m.profile, m.uuid) for m in gpu.mig_devices] == listed[0]
    assert [m.profile for m in gpu.mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [(m.gi_id, m.ci_id, m.memory_mib) for m in gpu.mig_devices] == [
        (2, 0, 40448), (3, 0, 20096), (9, 0, 9984), (10, 0, 9984)
    ]
    assert facts.cuda_driver_version == "13.1"
    assert facts.driver_version == "590.48.01"


def test_mig_profile_without_profile_table_is_derived(tmp_path: Path) -> None:
    facts, _ = _read(
        "h100_mig", tmp_path, missing=frozenset({"nvmlDeviceGetGpuInstanceProfileInfo"})
    )
    assert [m.profile for m in facts.gpus[0].mig_devices] == [
        "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"
    ]


def test_mig_devices_that_cannot_be_listed_are_said(tmp_path: Path) -> None:
    """MIG mode on, its devices not listable: the GPU is neither whole nor sliced, and the
    facts say why rather than look like a GPU split into nothing."""
    facts, _ = _read("h100_mig", tmp_path, missing=frozenset({"nvmlDeviceGetMaxMigDeviceCount"}))
    (gpu,) = facts.gpus
    assert gpu.mig_enabled and gpu.mig_devices == ()
    assert gpu.healthy and gpu.error and "MIG devices could not be listed" in gpu.error


@pytest.mark.parametrize(
    "code", [fake.NVML_ERROR_LIBRARY_NOT_FOUND, fake.NVML_ERROR_DRIVER_NOT_LOADED]
)
def test_init_failure_gives_zero_gpus_and_a_reason(code: int, tmp_path: Path) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.init_error = code
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    assert facts.gpus == ()
    assert len(facts.errors) == 1
    assert "cannot initialise NVML" in facts.errors[0]
    assert "NVMLError_" in facts.errors[0]
    assert read_utilisation(b.nvml) == []


def test_one_lost_gpu_is_unhealthy_the_rest_served(tmp_path: Path) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.gpus[2].lost = True
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    assert len(facts.gpus) == 8
    lost = facts.gpus[2]
    assert not lost.healthy
    assert lost.error is not None and "GPU is lost" in lost.error
    assert all(g.healthy for k, g in enumerate(facts.gpus) if k != 2)
    assert facts.link(0, 1) == "NV18"
    assert facts.link(0, 2) == "SYS"  # unknown counts as the worst
    assert any("GPU 2" in e for e in facts.errors)
    assert NodeFacts.from_dict(facts.to_dict()).gpus == facts.gpus
    assert [s.index for s in read_utilisation(b.nvml)] == [0, 1, 3, 4, 5, 6, 7]


def test_missing_optional_functions_read_as_unknown(tmp_path: Path) -> None:
    missing = frozenset({
        "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetCudaComputeCapability", "nvmlSystemGetNVMLVersion",
        "nvmlDeviceGetMigMode", "nvmlDeviceGetPowerUsage",
    })
    b = build_layout("rtx4090_pix_sys", tmp_path / "x", missing=missing)
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=tmp_path / "empty").read()
    g = facts.gpus[0]
    assert g.healthy
    assert (g.cpu_affinity, g.numa_node) == (None, None)
    assert (g.compute_major, g.mig_capable) == (None, False)
    assert facts.nvml_version is None
    assert facts.link(0, 1) == "PIX"  # the PCIe ancestor still answers
    assert read_utilisation(b.nvml)[0].power_w is None


def test_missing_topology_call_reports_unknown_links(tmp_path: Path) -> None:
    b = build_layout(
        "rtx4090_all_sys", tmp_path, missing=frozenset({"nvmlDeviceGetTopologyCommonAncestor"})
    )
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    assert any("unknown" in e for e in facts.errors)


def test_read_utilisation_from_capture(tmp_path: Path) -> None:
    b = build_layout("dgx_a100_nv12", tmp_path)
    samples = read_utilisation(b.nvml)
    q = parse_q(layouts()["dgx_a100_nv12"]["q_file"])
    s0 = samples[0]
    assert s0.uuid == q.gpus[0].uuid
    assert (s0.util_pct, s0.mem_copy_util_pct, s0.temp_c) == (0.0, 0.0, 25.0)
    assert s0.power_w == 59.77
    # nvmlMemory_v2, as nvidia-smi -q: used leaves out the 763 MiB the driver reserves
    assert s0.fb_used_mib == 1 and s0.fb_free_mib == 81920 - 763 - 1
    assert s0.fb_reserved_mib == 763
    assert samples[5].util_pct is None  # GPUs the capture lacks have no readings


def test_no_pynvml_module_reads_as_zero_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import swarmgpu.agent.facts.nvml_session as nvml_mod

    def boom() -> object:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_mod, "load_pynvml", boom)
    facts = NvmlSource(hostname="n").read()
    assert facts.gpus == () and "nvidia-ml-py" in facts.errors[0]
    assert read_utilisation() == []


def test_nvml_shutdown_gives_up_on_an_init_or_a_shutdown_that_never_returns() -> None:
    """A process that is ending (the agent on SIGTERM, the exit hook) waits a bounded
    time: before, the hook waited on the lock a hung nvmlInit holds, for as long."""
    release = threading.Event()
    entered = threading.Event()

    def hang() -> None:
        entered.set()
        release.wait(30)

    hung = types.SimpleNamespace(nvmlInit=hang, nvmlShutdown=lambda: None)
    t = threading.Thread(target=ensure_init, args=(hung,), daemon=True)
    t.start()
    try:
        assert entered.wait(5)
        # False: it gave up on the lock (waiting on the hung init would end only at its
        # 30 s guard, the lock then free: True).
        assert shutdown(lock_timeout_s=0.2) is False
        assert shutdown_within(0.2) is False
    finally:
        release.set()
        t.join(5)
    assert shutdown(hung) is True  # the lock is free again: shut down as before
    stuck = types.SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=hang)
    entered.clear()
    release.clear()
    assert ensure_init(stuck) is None
    try:
        assert shutdown_within(0.2) is False and entered.is_set()
    finally:
        release.set()


def test_fake_matches_real_pynvml_names() -> None:
    real = pytest.importorskip("pynvml")
    for name in dir(fake):
        if name.startswith(("NVML_", "NVMLError")):
            assert hasattr(real, name), name
            if name.startswith("NVML_"):
                assert getattr(real, name) == getattr(fake, name), name
    assert fake.NVMLError(15).__class__.__name__ == "NVMLError_GpuIsLost"
    assert real.NVMLError(15).__class__.__name__ == "NVMLError_GpuIsLost"


def test_pure_helpers() -> None:
    assert cuda_version_text(12020) == "12.2"
    assert cuda_version_text(13010) == "13.1"
    assert cpu_list([(1 << 36) - 1, ((1 << 36) - 1) << 8]) == "0-35,72-107"
    assert cpu_list([0b1011]) == "0-1,3"
    assert cpu_list([0, 1]) == "64"
    assert cpu_list([0]) is None


@pytest.fixture
def hang_gpu() -> Iterator[Callable[[fake.FakeGpu], None]]:
    """Makes a fake GPU's every call hang until the test is over (30 s at most: a hang
    guard), then answer at once again. Its reads left running past their deadline (as
    a hung GPU's are) then end: left hanging, each went on for minutes of hung calls,
    and the interpreter's exit waited on them (the NVML pool joins its threads), agent
    threads still running meanwhile."""
    hung: list[fake.FakeGpu] = []
    over = threading.Event()

    def make(gpu: fake.FakeGpu) -> None:
        gpu.hang_s, gpu.hang_until = 30.0, over
        hung.append(gpu)

    yield make
    over.set()
    for gpu in hung:
        gpu.hang_s, gpu.hang_until = 0.0, None


def test_hung_gpu_answers_within_deadline_and_is_not_asked_again(
        tmp_path: Path, hang_gpu: Callable[[fake.FakeGpu], None]) -> None:
    """A GPU whose NVML calls hang (fallen off the bus, Xid): the read returns at its
    deadline, while the call still hangs (not waiting on it), that GPU is unhealthy,
    the other seven are served. An event order, not a time: the call hangs until the
    test ends."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    hang_gpu(b.machine.gpus[5])
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs, gpu_deadline_s=0.5)
    facts = src.read()
    hanging = b.machine.gpus[5].hanging
    assert hanging >= 1  # returned while its calls still hang
    assert not facts.gpus[5].healthy and "did not return within" in (facts.gpus[5].error or "")
    assert all(g.healthy for k, g in enumerate(facts.gpus) if k != 5)
    assert facts.link(0, 1) == "NV18" and facts.link(0, 5) == "SYS"
    # Asked again while the stuck call has not returned: answers without asking it
    # again (no second call hangs beside the first).
    again = src.read()
    assert b.machine.gpus[5].hanging == hanging and not again.gpus[5].healthy


def test_a_gpu_that_hangs_later_keeps_its_identity(
        tmp_path: Path, hang_gpu: Callable[[fake.FakeGpu], None]) -> None:
    """A GPU read well once, whose calls then hang (or fail), is the same GPU gone
    unhealthy: its UUID, model and memory from the last good read, not
    ``GPU-unknown-index-N``. Under a placeholder the daemon saw its holding's GPU gone
    and re-placed the service at once (a restart), past the health states' wait and
    the health policy's budget. One never read well keeps the placeholder."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs, gpu_deadline_s=0.5)
    good = src.read()
    hang_gpu(b.machine.gpus[5])
    b.machine.gpus[3].lost = True
    hung = src.read()
    for k, why in ((5, "did not return within"), (3, "GPU is lost")):
        g, was = hung.gpus[k], good.gpus[k]
        assert not g.healthy and why in (g.error or ""), g
        assert (g.uuid, g.product, g.memory_mib, g.pci_bus_id) == (
            was.uuid, was.product, was.memory_mib, was.pci_bus_id)
        assert "last good read" in (g.error or "")
    assert [g.uuid for g in hung.gpus] == [g.uuid for g in good.gpus]
    fresh = build_layout("hgx_h100_nv18", tmp_path / "fresh")
    hang_gpu(fresh.machine.gpus[5])
    first = NvmlSource(hostname="n", nvml_module=fresh.nvml, sysfs_root=fresh.sysfs,
                       gpu_deadline_s=0.5).read()
    assert first.gpus[5].uuid == "GPU-unknown-index-5" and not first.gpus[5].healthy


def test_running_processes_from_a_real_capture(tmp_path: Path) -> None:
    """nvidia-smi -q 'Processes' of a real machine, served by the fake's
    nvmlDeviceGetComputeRunningProcesses, read as per-GPU processes."""
    from swarmgpu.agent.facts.nvml import read_utilisation
    from swarmgpu.core.samples import GpuProcess

    b = build_layout("rtx4090_pix_sys", tmp_path, processes_file=CAPTURES
                     / "nvsmi_processes_rtx2070_x2_drv450_excerpt.txt")
    samples = read_utilisation(b.nvml)
    assert samples[0].processes == (GpuProcess(12769, 6757), GpuProcess(12810, 1217))
    assert all(s.processes == () for s in samples[1:])
    b.machine.gpus[1].processes = [fake.FakeProcess(4242, None)]  # NVML_VALUE_NOT_AVAILABLE
    assert read_utilisation(b.nvml)[1].processes == (GpuProcess(4242, None),)
    b2 = build_layout("rtx4090_pix_sys", tmp_path / "b2",
                      missing=frozenset({"nvmlDeviceGetComputeRunningProcesses"}))
    assert all(s.processes == () for s in read_utilisation(b2.nvml))


def test_processes_on_a_driver_before_r510_come_from_v2(tmp_path: Path) -> None:
    """nvidia-ml-py's unversioned nvmlDeviceGetComputeRunningProcesses calls ``_v3``; on a
    driver before R510 it raises NVMLLibraryMismatchError, which is no NVMLError. It
    escaped the session's guard and every scrape failed: no GPU of the node had a sample.
    Now the processes come from ``_v2``, which those drivers have."""
    from swarmgpu.core.samples import GpuProcess

    b = build_layout("rtx4090_pix_sys", tmp_path, processes_file=CAPTURES
                     / "nvsmi_processes_rtx2070_x2_drv450_excerpt.txt")
    b.nvml.inject("nvmlDeviceGetComputeRunningProcesses", fake.NVMLLibraryMismatchError(
        "Unversioned function called and the pyNVML version does not match the NVML lib "
        "version."))
    samples = read_utilisation(b.nvml)
    assert len(samples) == 8
    assert samples[0].processes == (GpuProcess(12769, 6757), GpuProcess(12810, 1217))
    b.nvml.inject("nvmlDeviceGetComputeRunningProcesses_v2", fake.NVML_ERROR_FUNCTION_NOT_FOUND)
    samples = read_utilisation(b.nvml)
    assert len(samples) == 8 and samples[0].processes == ()


@pytest.mark.parametrize("code", [fake.NVML_ERROR_UNKNOWN, fake.NVML_ERROR_TIMEOUT])
def test_a_mig_mode_that_cannot_be_read_is_not_given_out_whole(code: int, tmp_path: Path) -> None:
    """nvmlDeviceGetMigMode failing (not NOT_SUPPORTED) read as "not MIG capable": a GPU
    in MIG mode, its slices held, was served as a whole healthy GPU with no MIG devices.
    Now it counts as in MIG mode: its MIG devices are listed when they can be, and a GPU
    that has none is given out neither whole nor by slices until the mode reads."""
    b = build_layout("h100_mig", tmp_path)
    good = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    b.nvml.inject("nvmlDeviceGetMigMode", code, gpu=0)
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    (gpu,) = facts.gpus
    assert gpu.mig_enabled and gpu.mig_devices == good.gpus[0].mig_devices
    assert gpu.healthy and "MIG mode could not be read" in (gpu.error or "")
    pcie = build_layout("rtx4090_pix_sys", tmp_path / "pcie")
    pcie.nvml.inject("nvmlDeviceGetMigMode", code, gpu=3)
    facts = NvmlSource(hostname="n", nvml_module=pcie.nvml, sysfs_root=pcie.sysfs).read()
    g3 = facts.gpus[3]
    assert g3.healthy and g3.mig_enabled and g3.mig_devices == ()
    assert "MIG mode could not be read" in (g3.error or "")
    assert not any(g.mig_enabled for k, g in enumerate(facts.gpus) if k != 3)


def test_one_nvlink_that_cannot_be_read_costs_only_that_link(tmp_path: Path) -> None:
    """Links were read until the first failed state, taken for "past the last link": an
    UNKNOWN on link 2 of GPU 3 of an NV18 board made every pair of GPU 3 NV2, silently.
    Now only NOT_SUPPORTED / INVALID_ARGUMENT end the links; the failed one is left out
    and named in the GPU's error."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.gpus[3].nvlink_errors = {2: 1}
    b.nvml.inject("nvmlDeviceGetNvLinkState", fake.NVML_ERROR_UNKNOWN, gpu=3, arg=2)
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    assert facts.link(3, 0) == "NV17" and facts.link(0, 1) == "NV18"
    g3 = facts.gpus[3]
    assert g3.healthy and "NVLink 2 state could not be read" in (g3.error or "")
    assert g3.health is not None and g3.health.nvlink_crc_errors == 17


def test_an_exception_from_one_gpu_fails_only_that_gpu(tmp_path: Path) -> None:
    """nvidia-ml-py decodes a UUID or name with bytes.decode(): bytes not UTF-8 (a corrupt
    InfoROM) raise UnicodeDecodeError, no NVMLError. It failed the whole read, every GPU
    of the node stale, and every scrape. Now that GPU is unhealthy, saying why."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs)
    good = src.read()
    bad = UnicodeDecodeError("utf-8", b"GPU-\xff", 4, 5, "invalid start byte")
    b.nvml.inject("nvmlDeviceGetUUID", bad, gpu=4)
    facts = src.read()
    g4 = facts.gpus[4]
    assert not g4.healthy and "UnicodeDecodeError" in (g4.error or "")
    assert g4.uuid == good.gpus[4].uuid  # from its last good read
    assert all(g.healthy for k, g in enumerate(facts.gpus) if k != 4)
    assert [s.index for s in read_utilisation(b.nvml)] == [0, 1, 2, 3, 5, 6, 7]


def test_a_memory_read_that_fails_once_keeps_the_gpus_memory(tmp_path: Path) -> None:
    """nvmlDeviceGetMemoryInfo failing (UNKNOWN) on a GPU whose UUID reads served that
    GPU healthy with 1 MiB, and forgot its memory for later reads. Now its memory
    (model, bus) comes from its last good read, said in its error."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs)
    good = src.read()
    b.nvml.inject("nvmlDeviceGetMemoryInfo", fake.NVML_ERROR_UNKNOWN, gpu=6)
    twice = [src.read(), src.read()]
    for facts in twice:
        g6 = facts.gpus[6]
        assert g6.memory_mib == good.gpus[6].memory_mib and g6.uuid == good.gpus[6].uuid
        assert g6.healthy and "last good read" in (g6.error or "")


def test_nvml_not_available_and_out_of_range_readings_are_unknown(tmp_path: Path) -> None:
    """0xFFFFFFFF is NVML_VALUE_NOT_AVAILABLE for an unsigned int: it was served as a GPU
    at 4294967295 % and 4294967 W (the daemon's scrape refuses a percentage past 100).
    A utilisation past 100 % is no reading either."""
    b = build_layout("dgx_a100_nv12", tmp_path)
    g = b.machine.gpus[0]
    g.util_gpu, g.util_memory, g.power_mw, g.temp_c = 0xFFFFFFFF, 101, 0xFFFFFFFF, 0xFFFFFFFF
    s0 = read_utilisation(b.nvml)[0]
    assert (s0.util_pct, s0.mem_copy_util_pct, s0.power_w, s0.temp_c) == (None,) * 4


def test_a_gpu_count_past_any_node_lists_no_gpus_and_says_so(tmp_path: Path) -> None:
    """nvmlDeviceGetCount answering more GPUs than a node can have (a broken driver or
    library; 4294967295 is -1 read unsigned): every index was read, one thread task per
    GPU, and facts of thousands of lost GPUs served, which the daemon refuses whole. Now
    no GPU is listed, the error names the answer, and the sampler samples none."""
    b = build_layout("dgx_a100_nv12", tmp_path)
    b.nvml.nvmlDeviceGetCount = lambda: 1000  # type: ignore[method-assign]
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    assert facts.gpus == () and facts.gpus_unread
    assert "nvmlDeviceGetCount answered 1000" in facts.errors[0]
    assert read_utilisation(b.nvml) == []


def test_a_mig_device_count_past_any_gpu_hands_out_none_of_it(tmp_path: Path) -> None:
    """nvmlDeviceGetMaxMigDeviceCount answering more than a GPU holds was looped over
    index by index (4294967295: billions of NVML calls, the read hung). Now the GPU is
    neither whole nor sliced, its error says why, and its samples stop at the bound."""
    b = build_layout("h100_mig", tmp_path)
    b.machine.gpus[0].max_migs = 100_000
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    (gpu,) = facts.gpus
    assert gpu.mig_enabled and gpu.mig_devices == ()
    assert "100000" in (gpu.error or "") and "none is handed out" in (gpu.error or "")
    assert len(read_utilisation(b.nvml)) == 1 + 4  # the GPU and its four MIG devices


def test_a_malformed_identity_fails_that_gpu_not_the_nodes_facts(tmp_path: Path) -> None:
    """A UUID NVML answers that is not in NVIDIA's form ('GPU-a,GPU-b' would read as two
    GPUs in the ledger and the device list), or a model name past the 256 characters the
    facts hold, was served as it was: the daemon refuses such facts whole, and every
    GPU of the node went unread. Now that GPU is unhealthy, naming what it answered; a
    MIG device with such a UUID is left out, said; the rest is served and read."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs)
    good = src.read()
    b.machine.gpus[2].uuid = "GPU-a,GPU-b"
    b.machine.gpus[5].name = "N" * 300
    facts = src.read()
    again = NodeFacts.from_dict(facts.to_dict())  # what the daemon reads
    g2, g5 = again.gpus[2], again.gpus[5]
    assert not g2.healthy and "GPU-a,GPU-b" in (g2.error or "")
    assert g2.uuid == good.gpus[2].uuid  # from its last good read
    assert not g5.healthy and "300 characters" in (g5.error or "")
    assert all(g.healthy for k, g in enumerate(again.gpus) if k not in (2, 5))
    m = build_layout("h100_mig", tmp_path / "m")
    m.machine.gpus[0].migs[1].uuid = "MIG-x y"
    (gpu,) = NvmlSource(hostname="n", nvml_module=m.nvml, sysfs_root=m.sysfs).read().gpus
    assert [d.profile for d in gpu.mig_devices] == ["3g.40gb", "1g.10gb", "1g.10gb"]
    assert "'MIG-x y'" in (gpu.error or "")


def test_gpus_answering_one_uuid_fail_those_gpus_not_the_nodes_facts(tmp_path: Path) -> None:
    """Two GPUs answering one UUID (a cloned vGPU, a driver fault) were served as NVML
    said: the daemon refuses facts with a UUID twice, and every GPU of the node went
    unread. Now those GPUs are unhealthy, the error naming the UUID; the rest is served."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.gpus[5].uuid = b.machine.gpus[1].uuid
    facts = NodeFacts.from_dict(NvmlSource(
        hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read().to_dict())
    for k in (1, 5):
        assert not facts.gpus[k].healthy
        assert "also GPU" in (facts.gpus[k].error or "")
    assert all(g.healthy for k, g in enumerate(facts.gpus) if k not in (1, 5))


def test_a_memory_total_of_zero_is_unknown_not_a_one_mib_gpu(tmp_path: Path) -> None:
    """nvmlDeviceGetMemoryInfo answering a total of 0 (a GPU half off the bus) was served
    as a healthy GPU of 1 MiB, said nowhere, and its last good memory forgotten. Now it
    is memory unknown, said, and kept from its last good read."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs)
    good = src.read()
    b.machine.gpus[3].memory_total_mib = 0
    g3 = src.read().gpus[3]
    assert g3.memory_mib == good.gpus[3].memory_mib
    assert "memory total 0" in (g3.error or "")


@pytest.mark.parametrize("fault", ["memory unknown", "instance too big", "one GI/CI twice"])
def test_mig_devices_a_gpu_cannot_hold_fail_that_gpus_slices_alone(
        fault: str, tmp_path: Path) -> None:
    """MIG devices NVML lists that the GPU cannot hold (its memory unread on a first read,
    so 1 MiB; an instance larger than the GPU; one GI/CI pair twice) were served: the
    daemon refuses such facts whole, every GPU of the node unread. Now that GPU hands out
    none of its slices (nor itself whole), said; the rest is served."""
    b = build_layout("h100_mig", tmp_path)
    migs = b.machine.gpus[0].migs
    if fault == "memory unknown":
        b.nvml.inject("nvmlDeviceGetMemoryInfo", fake.NVML_ERROR_UNKNOWN, gpu=0)
    elif fault == "instance too big":
        migs[0].memory_mib = 10**6
    else:
        migs[1].gi_id, migs[1].ci_id = migs[2].gi_id, migs[2].ci_id
    facts = NodeFacts.from_dict(NvmlSource(
        hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read().to_dict())
    (gpu,) = facts.gpus
    assert gpu.mig_enabled and gpu.mig_devices == ()
    assert "cannot hold" in (gpu.error or "") and "none is handed out" in (gpu.error or "")


def test_a_mig_uuid_another_gpu_also_answers_is_left_out(tmp_path: Path) -> None:
    """A MIG device answering the UUID of another GPU's MIG device was served: the daemon
    refuses such facts whole, every GPU of the node unread. Now the later GPU's device is
    left out, said; the first GPU's devices and the rest of the node are served."""
    b = build_layout("h100_mig", tmp_path)
    twin = copy.deepcopy(b.machine.gpus[0])  # its MIG devices answer the first's UUIDs
    twin.uuid, twin.bus_id = "GPU-7717e000-0000-0000-0000-000000000001", "00000000:99:00.0"
    twin.migs[1].uuid = "MIG-7717e000-0000-0000-0000-000000000002"  # this one unique
    b.machine.gpus.append(twin)
    facts = NodeFacts.from_dict(NvmlSource(
        hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read().to_dict())
    first, second = facts.gpus
    assert len(first.mig_devices) == 4 and first.healthy
    assert [d.uuid for d in second.mig_devices] == [twin.migs[1].uuid]
    assert "also GPU 0's" in (second.error or "")


def test_a_gpus_many_problems_are_cut_to_what_the_facts_hold(tmp_path: Path) -> None:
    """One NVML call failing on every link of a GPU (UNKNOWN on each NVLink state) said
    each link in the GPU's error, 2,000 characters and more: the daemon refuses an error
    past 256 characters, and with it every GPU of the node. Now the error is cut."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.nvml.inject("nvmlDeviceGetNvLinkState", fake.NVML_ERROR_UNKNOWN, gpu=0)
    facts = NodeFacts.from_dict(NvmlSource(
        hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read().to_dict())
    g0 = facts.gpus[0]
    assert g0.healthy and (g0.error or "").startswith("NVLink 0 state could not be read")
    assert all(g.healthy for g in facts.gpus)


def test_a_bus_id_not_in_pcis_form_costs_that_value_not_the_gpu(tmp_path: Path) -> None:
    """A PCI bus id whose domain is not hex (a garbled nvmlPciInfo) raised ValueError in
    its normalising, and the whole GPU was served lost. Now only its bus id is unknown,
    said (kept from its last good read); its UUID, memory and health are served."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    good = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    b.machine.gpus[2].bus_id = "zz:00:00.0"
    g2 = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read().gpus[2]
    assert g2.healthy and g2.pci_bus_id == good.gpus[2].pci_bus_id
    assert (g2.uuid, g2.memory_mib) == (good.gpus[2].uuid, good.gpus[2].memory_mib)
    assert "'zz:00:00.0'" in (g2.error or "")


def test_a_memory_total_no_gpu_has_is_unknown_not_a_fact(tmp_path: Path) -> None:
    """nvmlDeviceGetMemoryInfo answering 2^44 MiB (16 EiB: a garbled answer) was served
    as the GPU's memory, a GPU that fits any request. Now a total past 16 TiB is this
    GPU's memory unknown, said on it, and kept from its last good read."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs)
    good = src.read()
    b.machine.gpus[3].memory_total_mib = 1 << 44
    b.machine.gpus[4].memory_total_mib = 1 << 24  # 16 TiB: still believed
    facts = NodeFacts.from_dict(src.read().to_dict())
    g3 = facts.gpus[3]
    assert g3.memory_mib == good.gpus[3].memory_mib
    assert f"memory total {1 << 64} bytes" in (g3.error or "") and "16 TiB" in (g3.error or "")
    assert facts.gpus[4].memory_mib == 1 << 24 and facts.gpus[4].error is None
    fresh = build_layout("hgx_h100_nv18", tmp_path / "fresh")
    fresh.machine.gpus[3].memory_total_mib = 1 << 44
    first = NvmlSource(hostname="n", nvml_module=fresh.nvml, sysfs_root=fresh.sysfs).read()
    assert first.gpus[3].memory_mib == 1 and "memory unknown" in (first.gpus[3].error or "")
