"""GfdSource on every GPU feature discovery capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loguru import logger
from support.fifo import make_fifo, read_within
from support.gpu_nodes import DGX_A100
from support.paths import FIXTURES as FIXTURES_DIR

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.gfd import GfdSource, normalise_profile, parse_labels
from swarmgpu.agent.facts.naming import is_synthetic_uuid
from swarmgpu.core.model import NodeFacts

CAP = FIXTURES_DIR / "captures"
ALL_GFD = sorted(CAP.glob("gfd_*"))

# file -> (GPUs, product, memory, MIG profiles over the node, driver, CUDA)
EXPECTED: dict[str, tuple[int, str, int, list[str], str, str]] = {
    "gfd_labels_a100-pcie-40gb_mig-single-1g5gb_drv460_cloudnativedocs.json": (
        1, "A100-PCIE-40GB", 40 * 1024, ["1g.5gb"] * 7, "460.73.01", "11.2"
    ),
    "gfd_labels_a100-sxm4-40gb_dgx2h_k8sdeviceplugin_readme.yaml": (
        1, "A100-SXM4-40GB", 39538, [], "455.06", "11.1"
    ),
    "gfd_labels_a100-sxm4-40gb_mig-mixed_drv450_cloudnativedocs.json": (
        1, "A100-SXM4-40GB", 40537, ["3g.20gb", "2g.10gb", "1g.5gb"], "450.80.02", "11.0"
    ),
    "gfd_labels_a100-sxm4-40gb_mig-none_drv450_cloudnativedocs.json": (
        1, "A100-SXM4-40GB", 40537, [], "450.80.02", "11.0"
    ),
    "gfd_labels_a100-sxm4-40gb_mig-single_drv450_cloudnativedocs.json": (
        1, "A100-SXM4-40GB", 40 * 1024, ["1g.5gb"] * 7, "450.80.02", "11.0"
    ),
    "gfd_labels_h100-80gb-hbm3_mig-mixed_cloudnativedocs.json": (
        1, "NVIDIA-H100-80GB-HBM3", 81559, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        "550.54.15", "12.4",
    ),
    "gfd_labels_h100-80gb-hbm3_mig-single-disabled_cloudnativedocs.json": (
        1, "NVIDIA-H100-80GB-HBM3", 81559, [], "550.54.15", "12.4"
    ),
}


def test_every_capture_is_covered() -> None:
    assert {p.name for p in ALL_GFD} == set(EXPECTED)


@pytest.mark.parametrize("path", ALL_GFD, ids=lambda p: p.name)
def test_every_gfd_capture(path: Path) -> None:
    facts = GfdSource(path, hostname="n1").read()
    n, product, memory, profiles, driver, cuda = EXPECTED[path.name]
    assert len(facts.gpus) == n
    assert {g.product for g in facts.gpus} == {product}
    assert {g.memory_mib for g in facts.gpus} == {memory}
    assert [m.profile for g in facts.gpus for m in g.mig_devices] == profiles
    assert (facts.driver_version, facts.cuda_driver_version) == (driver, cuda)
    assert all(is_synthetic_uuid(g.uuid) for g in facts.gpus)
    assert all(is_synthetic_uuid(m.uuid) for g in facts.gpus for m in g.mig_devices)
    assert facts.links == ()
    again = GfdSource(path, hostname="n1").read()
    assert [g.uuid for g in again.gpus] == [g.uuid for g in facts.gpus]
    assert NodeFacts.from_dict(facts.to_dict()).gpus == facts.gpus


def test_single_strategy_notes_the_guesses() -> None:
    path = CAP / "gfd_labels_a100-sxm4-40gb_mig-single_drv450_cloudnativedocs.json"
    facts = GfdSource(path, hostname="n").read()
    assert any("--memory-mib" in e for e in facts.errors)
    exact = GfdSource(path, hostname="n", memory_mib=40537, product="NVIDIA A100-SXM4-40GB").read()
    assert exact.gpus[0].memory_mib == 40537
    assert exact.gpus[0].product == "NVIDIA A100-SXM4-40GB"
    assert not any("--memory-mib" in e for e in exact.errors)
    assert {m.memory_mib for m in exact.gpus[0].mig_devices} == {4864}


def test_gfd_naming_quirk_is_normalised() -> None:
    assert normalise_profile("3g.21gb", 20096) == "3g.20gb"
    assert normalise_profile("3g.40gb", 40320) == "3g.40gb"
    assert normalise_profile("1c.2g.11gb", 9984) == "1c.2g.10gb"
    assert normalise_profile("1g.10gb+me", 9984) == "1g.10gb+me"
    assert normalise_profile("3g.21gb", None) == "3g.21gb"


def test_features_file_form(tmp_path: Path) -> None:
    # GFD's own key=value file, written from the labels of a real capture.
    src = CAP / "gfd_labels_h100-80gb-hbm3_mig-mixed_cloudnativedocs.json"
    labels = json.loads(src.read_text())
    f = tmp_path / "gfd"
    f.write_text("".join(f"{k}={v}\n" for k, v in labels.items() if k.startswith("nvidia.com/")))
    from_kv = GfdSource(f, hostname="n").read()
    from_json = GfdSource(src, hostname="n").read()
    assert [m.profile for m in from_kv.gpus[0].mig_devices] == [
        m.profile for m in from_json.gpus[0].mig_devices
    ]
    assert from_kv.gpus[0].memory_mib == 81559


def test_bad_inputs(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("nvidia.com/gpu.product=X\n")
    with pytest.raises(SourceError, match=r"gpu\.count missing"):
        GfdSource(f, hostname="n").read()
    f.write_text("nvidia.com/gpu.count=two\nnvidia.com/gpu.product=X\n")
    with pytest.raises(SourceError, match="not a whole number"):
        GfdSource(f, hostname="n").read()
    f.write_text("nvidia.com/gpu.count=1\nnvidia.com/gpu.product=X\njunk line\n")
    with pytest.raises(SourceError, match=":3:"):
        GfdSource(f, hostname="n").read()
    f.write_text('{"a": "b"}')
    with pytest.raises(SourceError, match=r"no nvidia\.com"):
        GfdSource(f, hostname="n").read()
    with pytest.raises(SourceError, match="cannot read"):
        GfdSource(tmp_path / "missing", hostname="n").read()
    assert parse_labels("nvidia.com/gpu.count=2\nother=1\n") == {"gpu.count": "2"}


BASE = "nvidia.com/gpu.product=NVIDIA-A100\nnvidia.com/gpu.memory=40960\n"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("text", "match"), [
    (BASE + "nvidia.com/gpu.count=\u00b2\n", "gpu\\.count='\u00b2' is not a whole number"),
    (BASE + "nvidia.com/gpu.count=\uff18\n", "is not a whole number"),  # was 8
    (BASE + "nvidia.com/gpu.count=" + "9" * 5000 + "\n", "is not a whole number"),
    (BASE + "nvidia.com/gpu.count=2000000\n", r"at most 64 GPUs"),  # was 18 s, 2M GPUs
    (BASE + "nvidia.com/gpu.count=1\nnvidia.com/mig-1g.5gb.count=\u00b2\n",
     "mig-1g\\.5gb\\.count='\u00b2' is not a whole number"),
    (BASE + "nvidia.com/gpu.count=1\nnvidia.com/mig-1g.5gb.count=two\n",
     "is not a whole number"),  # was 0 MIG devices, silently
    (BASE + "nvidia.com/gpu.count=1\nnvidia.com/mig-1g.5gb.count=3000000\n",
     "at most 16 MIG devices per GPU"),  # was 29 s
    (BASE + "nvidia.com/gpu.count=1\nnvidia.com/gpu.count=8\n",
     r"nvidia\.com/gpu\.count given twice \(lines 3 and 4\)"),  # was 8
    ('{"nvidia.com/gpu.count": "1", "nvidia.com/gpu.count": "8"}',
     r"nvidia\.com/gpu\.count given twice"),  # was 8
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_hostile_labels_are_this_sources_error_naming_the_label(
        tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "gfd"
    f.write_text(text)
    with pytest.raises(SourceError, match=match):
        GfdSource(f, hostname="n").read()


def test_mig_devices_the_gpu_cannot_hold_are_this_sources_error(tmp_path: Path) -> None:
    """A --memory-mib far below what the labels' MIG devices hold (the fuzz found 23 MiB
    against 34,944): the facts were built and then refused by NodeFacts.from_dict (the
    daemon's check of any agent's); now the file is named, with the fix."""
    f = tmp_path / "features"
    f.write_text("\n".join([
        "nvidia.com/gpu.count=1", "nvidia.com/gpu.product=A100-SXM4-40GB",
        "nvidia.com/gpu.memory=40537", "nvidia.com/mig.strategy=mixed",
        "nvidia.com/mig-3g.20gb.count=1", "nvidia.com/mig-3g.20gb.memory=20096",
        "nvidia.com/mig-2g.10gb.count=1", "nvidia.com/mig-2g.10gb.memory=9984"]) + "\n")
    ok = GfdSource(f, hostname="n1").read()
    NodeFacts.from_dict(json.loads(json.dumps(ok.to_dict())))
    with pytest.raises(SourceError, match=r"GPU 0 .*--memory-mib") as exc:
        GfdSource(f, hostname="n1", memory_mib=23).read()
    assert str(f) in str(exc.value)


def test_a_fifo_is_this_sources_error_not_a_hang(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "gfd")
    got = read_within(GfdSource(fifo, hostname="n").read, fifo)
    assert isinstance(got, SourceError), got
    assert str(got) == (f"gfd:{fifo}: {fifo} is a FIFO (a named pipe), not a regular file; "
                        "give the path of GFD's features file or a dump of the node's labels")


def test_a_device_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "gfd").symlink_to("/dev/zero")  # was 8 MiB of NULs read, then refused
    with pytest.raises(SourceError, match="is a character device, not a regular file"):
        GfdSource(tmp_path / "gfd", hostname="n").read()


def test_a_labels_file_over_8_mib_is_refused_unread(tmp_path: Path) -> None:
    f = tmp_path / "gfd"
    f.write_text("nvidia.com/gpu.count=1\n" + "#" * (8 << 20))
    with pytest.raises(SourceError, match=r"^gfd:\S+: larger than 8 MiB; not read$"):
        GfdSource(f, hostname="n").read()


def test_a_features_file_saved_with_a_bom_is_read(tmp_path: Path) -> None:
    """A features file saved by an editor that writes a UTF-8 BOM: its first label was
    read as '\\ufeffnvidia.com/gpu.count', not nvidia.com/*, and the file refused with
    'gpu.count missing; is GFD running there?'."""
    f = tmp_path / "gfd"
    f.write_bytes(b"\xef\xbb\xbf" + BASE.replace("\n", "\r\n").encode()
                  + b"nvidia.com/gpu.count=1\r\n")
    facts = GfdSource(f, hostname="n").read()
    assert [(g.product, g.memory_mib) for g in facts.gpus] == [("NVIDIA-A100", 40960)]


SHARED = "nvidia.com/gpu.replicas=4\nnvidia.com/gpu.sharing-strategy=time-slicing\n"


def test_a_time_sliced_nodes_shared_product_is_the_gpus_model(tmp_path: Path) -> None:
    """GFD appends -SHARED to gpu.product when the device plugin time-slices (or MPS-shares)
    the GPUs, replicas > 1: the single strategy's 'A100-…-MIG-1g.5gb-SHARED' was not
    recognised, and its 7 MIG devices were served as 7 whole GPUs of 4,864 MiB; a whole
    GPU's model was served as 'NVIDIA-A100-SXM4-40GB-SHARED', which no model pin matches."""
    f = tmp_path / "gfd"
    f.write_text("nvidia.com/gpu.count=7\nnvidia.com/mig.strategy=single\n"
                 "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED\n"
                 "nvidia.com/gpu.memory=4864\n" + SHARED)
    facts = GfdSource(f, hostname="n").read()
    assert [g.product for g in facts.gpus] == ["NVIDIA-A100-SXM4-40GB"]
    assert [m.profile for m in facts.gpus[0].mig_devices] == ["1g.5gb"] * 7
    f.write_text("nvidia.com/gpu.count=2\nnvidia.com/gpu.memory=40960\n"
                 "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED\n" + SHARED)
    facts = GfdSource(f, hostname="n").read()
    assert [g.product for g in facts.gpus] == ["NVIDIA-A100-SXM4-40GB"] * 2
    assert facts.errors == ()
    # Not shared (replicas 1): a name that ends so is the name.
    f.write_text(BASE.replace("NVIDIA-A100", "X-SHARED") + "nvidia.com/gpu.count=1\n"
                 "nvidia.com/gpu.replicas=1\n")
    assert GfdSource(f, hostname="n").read().gpus[0].product == "X-SHARED"


def refused_with_or_without_memory(f: Path, match: str) -> None:
    """Reading ``f`` is this source's error matching ``match`` and naming the file, with
    --memory-mib and without."""
    for memory in (None, 40960):
        with pytest.raises(SourceError, match=match) as exc:
            GfdSource(f, hostname="n", memory_mib=memory).read()
        assert str(f) in str(exc.value)


def test_gfds_invalid_single_strategy_is_this_sources_error_saying_so(tmp_path: Path) -> None:
    """GFD's labels for a MIG layout mig.strategy=single cannot describe: product
    '<model>-MIG-INVALID', count and memory 0. They were refused as 'gpu.memory missing;
    pass --memory-mib', and with --memory-mib served as a node with no GPUs, silently."""
    f = tmp_path / "gfd"
    f.write_text("nvidia.com/gpu.count=0\nnvidia.com/gpu.memory=0\nnvidia.com/gpu.replicas=0\n"
                 "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\n"
                 "nvidia.com/mig.strategy=single\n")
    refused_with_or_without_memory(f, r"MIG-INVALID'.*invalid for mig\.strategy=single.*mixed")


@pytest.mark.parametrize("label", ["gpu.product", "cuda.driver-version.full",
                                   "cuda.runtime-version.full"])
def test_a_label_longer_than_the_facts_hold_is_this_sources_error(
        tmp_path: Path, label: str) -> None:
    """A value over the 256 characters NodeFacts.from_dict (the daemon's check of any
    agent's facts) allows was served, and the daemon refused the node's whole facts
    naming facts.gpus[0].product, not the file or the label."""
    labels = {"gpu.count": "1", "gpu.product": "NVIDIA-A100", "gpu.memory": "40960",
              label: "5" * 300}
    f = tmp_path / "gfd"
    f.write_text("".join(f"nvidia.com/{k}={v}\n" for k, v in labels.items()))
    with pytest.raises(SourceError, match=rf"{label}=.*300 characters; at most 256") as exc:
        GfdSource(f, hostname="n").read()
    assert str(f) in str(exc.value)


def test_the_helpers_dgx_a100_has_the_memory_a_real_one_reports() -> None:
    """tests/support's DGX A100 stands in for the captured one: its GPUs have the MiB
    the driver reports there (GFD's gpu.memory on an NVIDIA DGX A100-SXM4-40GB), not the
    round 40 GiB of the name, which hid every "a 40GiB request fits no 40GB GPU" path."""
    real = GfdSource(CAP / "gfd_labels_a100-sxm4-40gb_mig-none_drv450_cloudnativedocs.json",
                     hostname="dgx").read()
    assert {g.memory_mib for g in DGX_A100.facts().gpus} == {real.gpus[0].memory_mib} == {40537}


def test_a_count_that_may_be_gpus_times_replicas_is_told_or_warned_once(
        tmp_path: Path) -> None:
    """GFD builds from its main branch before v0.6.0 labelled gpu.count GPUs x replicas
    when the device plugin time-sliced (NVIDIA/gpu-feature-discovery 1b5b104, undone by
    aa6bdec); every release counts the GPUs. What the labels can tell is told: a
    sharing-strategy label (GFD in the device plugin, v0.15.0 on) or a count no multiple
    of the replicas means GPUs. Otherwise the count is taken as the releases write it,
    and the node and the fix are said: once in the log, and in the facts' errors."""
    f = tmp_path / "gfd"
    base = BASE + "nvidia.com/gpu.count=8\nnvidia.com/gpu.replicas=4\n"
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for told in ("nvidia.com/gpu.sharing-strategy=time-slicing\n", ""):
            f.write_text(base + told)
            facts = GfdSource(f, hostname="gpu-node-9").read()
            assert len(facts.gpus) == 8
            assert (facts.errors == ()) == bool(told), facts.errors
        f.write_text(base.replace("gpu.count=8", "gpu.count=6"))  # 6 x 4 is no count of 8
        assert GfdSource(f, hostname="gpu-node-9").read().errors == ()
        f.write_text(base)
        src = GfdSource(f, hostname="gpu-node-9")
        first, second = src.read(), src.read()
    finally:
        logger.remove(sink)
    (err,) = first.errors
    assert second.errors == first.errors and len(err) <= 256
    assert "gpu.count=8" in err and "gpu.replicas=4" in err and "upgrade GFD" in err
    said = [ln for ln in lines if "gpu-node-9" in ln]
    assert len(said) == 2, lines  # the source of the loop's 2nd read; src: once
    assert "2 GPUs" in said[-1] and "nvidia.com/gpu.sharing-strategy=time-slicing" in said[-1]


def test_compute_instances_in_gfds_labels_share_their_gpu_instance(tmp_path: Path) -> None:
    """GFD's mixed strategy names a compute instance smaller than its GPU instance
    ``mig-1c.3g.20gb`` (go-nvlib's profile name), with the instance's memory. Three of
    them are one 3g GPU instance: each was taken for its own (3 x 3 slices), and the node
    refused for "12 compute slices ... at most 7"."""
    f = tmp_path / "gfd"
    f.write_text(BASE.replace("NVIDIA-A100", "NVIDIA-A100-SXM4-40GB").replace("40960", "40537")
                 + "nvidia.com/gpu.count=1\nnvidia.com/mig.strategy=mixed\n"
                 "nvidia.com/mig-1c.3g.20gb.count=3\nnvidia.com/mig-1c.3g.20gb.memory=20096\n"
                 "nvidia.com/mig-3g.20gb.count=1\nnvidia.com/mig-3g.20gb.memory=20096\n")
    (gpu,) = GfdSource(f, hostname="n").read().gpus
    by = [(m.profile, m.gi_id, m.ci_id, m.memory_mib) for m in gpu.mig_devices]
    cis = [b for b in by if b[0] == "1c.3g.20gb"]
    assert len(cis) == 3 and len({b[1] for b in cis}) == 1 and {b[3] for b in cis} == {20096}
    assert sorted(b[2] for b in cis) == [0, 1, 2]
    (whole,) = [b for b in by if b[0] == "3g.20gb"]
    assert whole[1] != cis[0][1]
    # The single strategy: six 1c.3g.20gb are two 3g instances of one GPU (not three
    # GPUs, two of them then served whole)
    f.write_text("nvidia.com/gpu.count=6\nnvidia.com/mig.strategy=single\n"
                 "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb\n"
                 "nvidia.com/gpu.memory=20096\n")
    (gpu,) = GfdSource(f, hostname="n", memory_mib=40537).read().gpus
    assert [(m.gi_id, m.ci_id) for m in gpu.mig_devices] == [(0, 0), (0, 1), (0, 2),
                                                             (1, 0), (1, 1), (1, 2)]


KUBECTL_NODES = """\
apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      nvidia.com/gpu-driver-upgrade-enabled: "true"
    labels:
      kubernetes.io/hostname: node-a
      nvidia.com/gpu.count: "4"
      nvidia.com/gpu.memory: "40537"
      nvidia.com/gpu.product: A100-SXM4-40GB
    name: node-a
- apiVersion: v1
  kind: Node
  metadata:
    labels:
      kubernetes.io/hostname: node-b
      nvidia.com/gpu.count: "8"
      nvidia.com/gpu.memory: "81559"
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
    name: node-b
kind: List
"""


def test_a_dump_of_several_nodes_is_read_for_this_node_only(tmp_path: Path) -> None:
    """`kubectl get nodes -o yaml` lists every node: the first with nvidia.com labels was
    read, whichever node the agent runs on (node-b served node-a's 4 A100s), and a node
    whose annotations (listed before its labels) hold an nvidia.com key was read from
    those ("gpu.count missing"). Now the node named as the agent's hostname is read,
    from its labels; a dump naming no such node among several is refused, naming them."""
    f = tmp_path / "nodes.yaml"
    f.write_text(KUBECTL_NODES)
    b = GfdSource(f, hostname="node-b").read()
    assert (len(b.gpus), b.gpus[0].product) == (8, "NVIDIA-H100-80GB-HBM3")
    a = GfdSource(f, hostname="node-a").read()
    assert (len(a.gpus), a.gpus[0].memory_mib) == (4, 40537)
    with pytest.raises(SourceError, match=r"2 GPU nodes \(node-a, node-b\), none named "
                       r"'node-c'.*--hostname") as exc:
        GfdSource(f, hostname="node-c").read()
    assert str(f) in str(exc.value)
    one = tmp_path / "one.json"  # one node's object (kubectl get node X -o json): its own
    one.write_text(json.dumps({"kind": "Node", "metadata": {
        "annotations": {"nvidia.com/gpu-driver-upgrade-enabled": "true"}, "name": "x",
        "labels": {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "81559",
                   "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}))
    assert len(GfdSource(one, hostname="node-c").read().gpus) == 2


def test_single_strategy_with_no_mig_devices_is_this_sources_error(tmp_path: Path) -> None:
    """mig.strategy=single labels with gpu.count=0 beside a '-MIG-<profile>' product (MIG
    mode with no MIG devices made, where GFD does not write '-MIG-INVALID'): the read
    raised IndexError, naming neither the file nor the labels. Now it is this source's
    error, as '-MIG-INVALID' is, naming the labels and the fix."""
    f = tmp_path / "gfd"
    f.write_text("nvidia.com/gpu.count=0\nnvidia.com/mig.strategy=single\n"
                 "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb\n"
                 "nvidia.com/gpu.memory=4864\n")
    refused_with_or_without_memory(f, r"gpu\.count=0.*MIG-1g\.5gb.*no MIG devices.*mixed")


@pytest.mark.parametrize(("labels", "said"), [
    ({"gpu.memory": str((1 << 24) + 1)}, "label nvidia.com/gpu.memory=16777217"),
    ({"mig.strategy": "single", "gpu.product": "NVIDIA H100 99999999GB-MIG-1g.10gb",
      "gpu.count": "7"}, "estimated from label nvidia.com/gpu.product"),
])
def test_a_gfd_gpu_memory_past_16_tib_is_refused_at_the_agent(
        labels: dict[str, str], said: str) -> None:
    """The daemon refuses a GPU of more than 16 TiB (a garbled reading, believed a GPU
    that fits any request), and with it the node's whole facts; the GFD reader served
    it. Now it is refused here, naming the label, with the daemon's limit."""
    from swarmgpu.agent.facts.gfd import facts_from_labels
    from swarmgpu.core.model import MAX_GPU_MEMORY_MIB

    base = {"gpu.count": "1", "gpu.product": "NVIDIA H100 80GB HBM3"}
    with pytest.raises(SourceError) as e:
        facts_from_labels({**base, **labels}, hostname="n1", origin="features")
    assert said in str(e.value) and "past the 16 TiB no GPU has" in str(e.value), e.value
    at_limit = facts_from_labels({**base, "gpu.memory": str(MAX_GPU_MEMORY_MIB)},
                                 hostname="n1", origin="features")
    assert NodeFacts.from_dict(at_limit.to_dict()).gpus[0].memory_mib == MAX_GPU_MEMORY_MIB
