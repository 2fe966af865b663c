"""parse_topo and TopoSource on every real `nvidia-smi topo -m` capture."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from support.fifo import make_fifo, read_within
from support.paths import FIXTURES as FIXTURES_DIR

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.naming import SYNTHETIC_PREFIX, is_synthetic_uuid
from swarmgpu.agent.facts.topo import TopoSource, parse_mig_layout, parse_topo
from swarmgpu.core.model import FactsError, NodeFacts

FIX = FIXTURES_DIR
ALL_TOPO = sorted([*FIX.glob("topology/*.txt"), *FIX.glob("captures/nvsmi_topo_*")])

# file -> (gpus, links seen off the diagonal, NUMA per GPU, CPU affinity of GPU0)
EXPECTED: dict[str, tuple[int, set[str], Sequence[int | None], str | None]] = {
    "topo_dgx_a100_nv12.txt": (8, {"NV12"}, [3, 3, 1, 1, 7, 7, 5, 5], "48-63,176-191"),
    "topo_hgx_h100_nv18_partial_nics.txt": (8, {"NV18"}, [0] * 4 + [1] * 4, "0-79"),
    "topo_pcie_8x_rtx4090_all_sys.txt": (8, {"SYS"}, [0] * 4 + [1] * 4, "0-55,112-167"),
    "topo_pcie_8x_rtx4090_pix_sys.txt": (8, {"PIX", "SYS"}, [0] * 4 + [1] * 4, "0-35,72-107"),
    "nvsmi_topo_a100-8x_nv12_stas00-mlengineering.txt": (8, {"NV12"}, [0] * 4 + [1] * 4, "0-23"),
    "nvsmi_topo_a30-x4_nv4-bridge-pairs_2numa_vllm-issue29070.txt": (
        4, {"NV4", "SYS"}, [0, 0, 1, 1], "0-23,48-71"
    ),
    "nvsmi_topo_dgx1-v100_mlx5x4_msccl.txt": (8, {"NV1", "NV2", "SYS"}, [None] * 8, "0-19,40-59"),
    "nvsmi_topo_h100-80gb-hbm3_x1_vm_drv590_nvgpuexporter.txt": (1, set(), [0], "0-19"),
    "nvsmi_topo_h100-8x_nv18_2numa_stas00-mlengineering.txt": (
        8, {"NV18"}, [0] * 4 + [1] * 4, "0-51,104-155"
    ),
    "nvsmi_topo_h200-8x_nv18_12nic_distributedai.txt": (
        8, {"NV18"}, [0] * 4 + [1] * 4, "0-55,112-167"
    ),
    "nvsmi_topo_h200_x1_vm_drv580_swarmgpu-device.txt": (1, set(), [0], "0-15"),
    "nvsmi_topo_v100-sxm2-32gb-x8_hybrid-cube-mesh_drv580_vast-llamacpp.txt": (
        8, {"NV1", "NV2", "SYS"}, [0] * 4 + [1] * 4, "0-19,40-59"
    ),
}


def test_every_capture_is_covered() -> None:
    assert {p.name for p in ALL_TOPO} == set(EXPECTED)


@pytest.mark.parametrize("path", ALL_TOPO, ids=lambda p: p.name)
def test_parse_every_capture(path: Path) -> None:
    t = parse_topo(path.read_text())
    n, kinds, numa, cpu0 = EXPECTED[path.name]
    assert t.gpu_count == n
    assert {t.links[i][j] for i in range(n) for j in range(n) if i != j} == kinds
    assert list(t.numa_node) == list(numa)
    assert t.cpu_affinity[0] == cpu0
    assert all(t.links[i][i] == "X" for i in range(n))


def test_specific_cells() -> None:
    pix = parse_topo((FIX / "topology/topo_pcie_8x_rtx4090_pix_sys.txt").read_text())
    assert pix.links[0][3] == "PIX" and pix.links[3][4] == "SYS"
    mesh = parse_topo((FIX / "captures/nvsmi_topo_dgx1-v100_mlx5x4_msccl.txt").read_text())
    assert mesh.links[0][3] == "NV2" and mesh.links[1][5] == "NV2" and mesh.links[0][5] == "SYS"
    a30 = parse_topo(
        (FIX / "captures/nvsmi_topo_a30-x4_nv4-bridge-pairs_2numa_vllm-issue29070.txt").read_text()
    )
    assert a30.links[2][3] == "NV4" and a30.cpu_affinity[3] == "24-47,72-95"


def test_ansi_header_and_soc() -> None:
    text = "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tSOC\t0-3\nGPU1\tSOC\t X \t4-7\n"
    t = parse_topo(text)
    assert t.links == (("X", "SYS"), ("SYS", "X"))
    assert t.cpu_affinity == ("0-3", "4-7") and t.numa_node == (None, None)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("hello world\n", ":1:"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tXYZ\t X \n", ":3:"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "2 GPUs but 1"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tPIX\t X \n", "not symmetric"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", ":2:"),
        ("\tGPU0\tCPU Affinity\nGPU0\t X \tabc\n", "CPU Affinity"),
    ],
)
def test_garbage_names_the_line(text: str, needle: str) -> None:
    with pytest.raises(FactsError, match=needle):
        parse_topo(text, where="t.txt")


@pytest.mark.parametrize(("cell", "needle"), [
    ("0\t\u00b2", "NUMA Affinity"),  # '²'.isdigit(), yet int() raises ValueError
    ("0\t\u0663", "NUMA Affinity"),  # Arabic-Indic 3: int() read it as node 3
    ("\u0660-\u0663\t0", "CPU Affinity"),  # the CPU list regex took any Unicode digit
])
def test_a_non_ascii_digit_in_an_affinity_column_names_the_line(cell: str, needle: str
                                                                  ) -> None:
    """nvidia-smi prints ASCII digits only. A superscript NUMA node crashed the parse
    with a bare ValueError (not the source's error), other digits were read as numbers."""
    text = f"\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t{cell}\n"
    with pytest.raises(FactsError, match=f"t.txt:2: {needle}"):
        parse_topo(text, where="t.txt")


@pytest.mark.parametrize("path", ALL_TOPO, ids=lambda p: p.name)
def test_topo_source_synthetic_uuids(path: Path) -> None:
    src = TopoSource(path, hostname="gpu-7", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    a, b = src.read(), src.read()
    assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus]  # stable across reads
    assert all(g.uuid.startswith(f"GPU-{SYNTHETIC_PREFIX}-") for g in a.gpus)
    assert all(is_synthetic_uuid(g.uuid) for g in a.gpus)
    assert len({g.uuid for g in a.gpus}) == len(a.gpus)
    other = TopoSource(path, hostname="gpu-8", product="x", memory_mib=1).read()
    assert {g.uuid for g in other.gpus}.isdisjoint(g.uuid for g in a.gpus)
    assert NodeFacts.from_dict(a.to_dict()).links == a.links
    assert a.source == f"topo:{path}"


def test_mig_layouts() -> None:
    assert parse_mig_layout("all-1g.10gb", 2, 81559) == {0: ["1g.10gb"] * 7, 1: ["1g.10gb"] * 7}
    assert parse_mig_layout("all-1g.20gb", 1, 81559) == {0: ["1g.20gb"] * 4}
    assert parse_mig_layout("all-3g.40gb", 1, 81559) == {0: ["3g.40gb"] * 2}
    assert parse_mig_layout("0:3g.40gb,1g.10gb*2;1:7g.80gb", 2, 81559) == {
        0: ["3g.40gb", "1g.10gb", "1g.10gb"], 1: ["7g.80gb"]
    }
    for bad in ("0:3g", "5:1g.10gb", "x", "0:1g.10gb*z"):
        with pytest.raises(SourceError, match="--mig "):
            parse_mig_layout(bad, 2, 81559)


def test_topo_source_with_mig_layout() -> None:
    path = FIX / "captures/nvsmi_topo_h100-80gb-hbm3_x1_vm_drv590_nvgpuexporter.txt"
    src = TopoSource(
        path, hostname="h", product="NVIDIA H100 80GB HBM3", memory_mib=81559,
        mig_layout="0:3g.40gb,2g.20gb,1g.10gb*2",
    )
    (gpu,) = src.read().gpus
    assert gpu.mig_enabled
    assert [m.profile for m in gpu.mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert all(m.uuid.startswith(f"MIG-{SYNTHETIC_PREFIX}-") for m in gpu.mig_devices)
    assert len({m.uuid for m in gpu.mig_devices}) == 4


def test_a_mig_layout_no_gpu_holds_is_this_sources_error() -> None:
    """``--mig`` was taken as written: ``1g.10gb*100000`` built a hundred thousand MIG
    devices (a larger count, the agent's memory), and a layout past the GPU's 7 slices
    or its memory was served, for the daemon to refuse the node's whole facts. Now both
    are this source's error, naming the option, the GPU and what it holds."""
    path = FIX / "captures/nvsmi_topo_h100-80gb-hbm3_x1_vm_drv590_nvgpuexporter.txt"
    for layout, match in (("0:1g.10gb*100000", r"1g\.10gb\*100000.*at most 16"),
                          ("all-1g.10gb;0:7g.80gb,7g.80gb", r"GPU 0.*14 compute slices"),
                          ("0:4g.40gb,3g.40gb,1g.10gb", r"GPU 0.*8 compute slices")):
        src = TopoSource(path, hostname="h", product="NVIDIA H100 80GB HBM3",
                         memory_mib=81559, mig_layout=layout)
        with pytest.raises(SourceError, match=rf"--mig .*{match}"):
            src.read()


def test_unreadable_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="cannot read"):
        TopoSource(tmp_path / "nope", hostname="h", product="p", memory_mib=1).read()
    bad = tmp_path / "bad.txt"
    bad.write_text("not a matrix\n")
    with pytest.raises(SourceError, match=r"bad\.txt:1"):
        TopoSource(bad, hostname="h", product="p", memory_mib=1).read()


def test_a_fifo_is_this_sources_error_not_a_hang(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "topo.txt")
    src = TopoSource(fifo, hostname="h", product="p", memory_mib=1)
    got = read_within(src.read, fifo)
    assert isinstance(got, SourceError), got
    assert str(got) == (f"topo:{fifo}: {fifo} is a FIFO (a named pipe), not a regular "
                        "file; give the path of a saved 'nvidia-smi topo -m' output")


def test_a_capture_over_1_mib_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "topo.txt"
    big.write_text((FIXTURES_DIR / "topology" / "topo_dgx_a100_nv12.txt").read_text()
                   + "\n" * (2 << 20))  # was read whole, any size
    src = TopoSource(big, hostname="h", product="p", memory_mib=1)
    with pytest.raises(SourceError, match=r"topo\.txt is larger than 1 MiB; not read"):
        src.read()


def test_an_x_off_the_diagonal_is_refused() -> None:
    """nvidia-smi prints X for a GPU with itself only. An X between two GPUs (a capture
    with shifted cells, a forged agent) was read as a link of score 0, silently."""
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \t X \tNV4\nGPU1\t X \t X \tNV4\nGPU2\tNV4\tNV4\t X \n"
    with pytest.raises(FactsError, match=r"GPU0/GPU1.*only on the diagonal"):
        parse_topo(text, where="t.txt")
    facts = TopoSource(FIX / "topology/topo_dgx_a100_nv12.txt", hostname="h",
                       product="NVIDIA A100", memory_mib=40960).read().to_dict()
    facts["links"][0][1] = facts["links"][1][0] = "X"
    with pytest.raises(FactsError, match=r"links\[0\]\[1\].*only on the diagonal"):
        NodeFacts.from_dict(facts)
