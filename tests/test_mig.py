"""MIG profile names and the choice of a free MIG device."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from support.paths import FIXTURES as FIXTURES_DIR

from swarmgpu.allocator.mig import MigChoice, MigMiss, MigMissReason, pick_mig_device
from swarmgpu.core.migprofile import (
    MigProfileError,
    compute_share,
    known_profiles,
    normalize_profile,
    not_offered,
    profiles_for_product,
)
from swarmgpu.core.model import FactsError, Gpu, MigDevice, NodeFacts

FIXTURES = FIXTURES_DIR


def _fixture(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def test_known_profiles_cover_mig_parted_default_config() -> None:
    text = _fixture("mig/mig-parted_config-default.yaml")
    in_config = set(re.findall(r'"(\dg\.\d+gb[^"]*)":', text))
    assert in_config and in_config <= set(known_profiles())


@pytest.mark.parametrize(
    ("capture", "product"),
    [
        ("mig/mig_h100_80gb_lgip_lgipp.txt", "NVIDIA H100 80GB HBM3"),
        ("mig/mig_a100_pcie_40gb_lgip_lgipp_olddriver.txt", "A100-PCIE-40GB"),
        ("captures/nvsmi_mig-lgip_a30-24gb_summerlo.txt", "NVIDIA A30"),
        # the project's own H200 (device check): all seven profiles, exactly the table's
        ("captures/nvsmi_mig-lgip_h200_x1_vm_drv580_swarmgpu-device.txt", "NVIDIA H200"),
    ],
)
def test_lgip_captures_match_per_product_table(capture: str, product: str) -> None:
    listed = {p.lower() for p in re.findall(r"MIG (\dg\.\d+gb\S*)", _fixture(capture))}
    table = profiles_for_product(product)
    assert listed and table is not None and listed <= table


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("1g.10gb", "1g.10gb"),
        ("mig-1g.10gb", "1g.10gb"),
        ("MIG 3g.40gb", "3g.40gb"),
        ("nvidia.com/mig-2g.20gb", "2g.20gb"),
        ("1G.5GB", "1g.5gb"),
        ("1g.10gb+me", "1g.10gb+me"),
        ("mig-3g.21gb", "3g.20gb"),  # GFD's decimal-GB label for A100-40GB's 3g.20gb
        ("3g.42gb", "3g.40gb"),  # same for 3g.40gb (40320 MiB)
    ],
)
def test_normalize(name: str, want: str) -> None:
    assert normalize_profile(name) == want


@pytest.mark.parametrize(
    ("name", "match"),
    [("3g", "malformed"), ("big", "malformed"), ("1g.9gb", "1g.10gb"), ("9g.10gb", "malformed")],
)
def test_normalize_rejects(name: str, match: str) -> None:
    with pytest.raises(MigProfileError, match=match):
        normalize_profile(name)


def test_gfd_labels_resolve() -> None:
    text = _fixture("captures/gfd_labels_a100-sxm4-40gb_mig-mixed_drv450_cloudnativedocs.json")
    names = set(re.findall(r"mig-(\dg\.\d+gb)\.count", text))
    assert {normalize_profile(n) for n in names} == {"1g.5gb", "2g.10gb", "3g.20gb"}


def _dev(profile: str, uuid: str, mib: int) -> MigDevice:
    return MigDevice(profile=profile, uuid=uuid, memory_mib=mib)


# Two A100-40GB in the all-balanced layout, plus a GPU without MIG.
BALANCED = (
    _dev("3g.20gb", "MIG-a3", 20096),
    _dev("2g.10gb", "MIG-a2", 9984),
    _dev("1g.5gb", "MIG-a1x", 4864),
    _dev("1g.5gb", "MIG-a1y", 4864),
)
NODE = (
    Gpu(
        index=0,
        uuid="GPU-0",
        product="A100-SXM4-40GB",
        memory_mib=40960,
        mig_enabled=True,
        mig_devices=BALANCED,
    ),
    Gpu(
        index=1,
        uuid="GPU-1",
        product="A100-SXM4-40GB",
        memory_mib=40960,
        mig_enabled=True,
        mig_devices=tuple(
            _dev(d.profile, d.uuid.replace("-a", "-b"), d.memory_mib) for d in BALANCED
        ),
    ),
    Gpu(index=2, uuid="GPU-2", product="A100-SXM4-40GB", memory_mib=40960),
)


@pytest.mark.parametrize(
    ("profile", "assigned", "want"),
    [
        ("1g.5gb", set(), MigChoice(0, "MIG-a1x", "1g.5gb")),
        # GPU 1 is partly used: take from it, keep GPU 0 whole.
        ("1g.5gb", {"MIG-b3"}, MigChoice(1, "MIG-b1x", "1g.5gb")),
        ("mig-1g.5gb", {"MIG-b3", "MIG-b1x"}, MigChoice(1, "MIG-b1y", "1g.5gb")),
        ("3g.21gb", {"MIG-a1x"}, MigChoice(0, "MIG-a3", "3g.20gb")),
        ("2g.10gb", {"MIG-a2", "MIG-b2"}, MigMissReason.ALL_ASSIGNED),
        ("7g.40gb", set(), MigMissReason.PROFILE_ABSENT),
    ],
)
def test_pick(profile: str, assigned: set[str], want: MigChoice | MigMissReason) -> None:
    got = pick_mig_device(NODE, profile, assigned)
    if isinstance(want, MigChoice):
        assert got == want
    else:
        assert isinstance(got, MigMiss) and got.reason is want and profile[:2] in got.detail


def test_pick_without_mig_and_unhealthy() -> None:
    miss = pick_mig_device(NODE[2:], "1g.5gb", ())
    assert isinstance(miss, MigMiss) and miss.reason is MigMissReason.NO_MIG_DEVICES
    sick = (
        Gpu(
            index=0, uuid="GPU-0", product="A100", memory_mib=1, healthy=False, mig_devices=BALANCED
        ),
    )
    miss = pick_mig_device(sick, "1g.5gb", ())
    assert isinstance(miss, MigMiss) and miss.reason is MigMissReason.NO_MIG_DEVICES
    with pytest.raises(MigProfileError):
        pick_mig_device(NODE, "huge", ())


@pytest.mark.parametrize(
    "product",
    [
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 NVL",
        "NVIDIA H200",
        "NVIDIA A30",
    ],
)
def test_a_profile_is_its_compute_slices_of_its_gpus(product: str) -> None:
    """What a queue counts a MIG device as (placement.queues): its slices over its GPU's,
    7, or 4 on an A30; each model's largest profile is its whole GPU."""
    profiles = profiles_for_product(product)
    assert profiles
    shares = {p: compute_share(p) for p in profiles}
    total = 4 if "A30" in product else 7
    assert {t for _, t in shares.values()} == {total}
    assert max(g for g, _ in shares.values()) == total
    assert compute_share("3g.40gb") == (3, 7) and compute_share("MIG-2g.48gb") == (2, 4)


@pytest.mark.parametrize(
    ("product", "share"),
    [
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", (1, 4)),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", (1, 4)),
        ("NVIDIA H100 NVL", (1, 7)),
        ("NVIDIA GeForce RTX 9999", (1, 7)),  # a model the table does not know: the profile's
        (None, (1, 7)),
    ],
)
def test_1g_24gb_is_a_share_of_the_gpu_it_is_on(
    product: str | None, share: tuple[int, int]
) -> None:
    """Plain 1g.24gb exists on the H100 NVL (7 slices) and the RTX PRO 6000 (4): the GPU's
    model decides where it is known. Before: 1/7 whatever the GPU."""
    assert compute_share("1g.24gb", product) == share
    assert compute_share("2g.12gb", "NVIDIA A30") == (2, 4)


def test_a_gh200_is_not_taken_for_an_h200() -> None:
    """The H200's pattern had no word boundary, so "NVIDIA GH200 480GB" (whose 96 GB
    profiles are 3g.48gb...) got the H200's table: a 3g.48gb request pending there was
    told no model has it and to ask for an H200 profile the GH200 does not offer."""
    assert profiles_for_product("NVIDIA GH200 480GB") is None  # not in the table: allowed
    assert not_offered("3g.48gb", ["NVIDIA GH200 480GB"]) is None
    assert profiles_for_product("NVIDIA H200 NVL") == profiles_for_product("NVIDIA H200")
    assert profiles_for_product("NVIDIA RTX A3000 Laptop GPU") is None  # not an A30


def test_a_compute_instance_profile_is_its_own_name_and_share() -> None:
    """A compute instance smaller than its GPU instance (the MIG user guide's
    ``1c.3g.20gb``: one compute slice of a 3g.20gb GPU instance) was refused as a
    request ("malformed") and counted as a whole GPU by a queue; its GPU-instance part
    is read as any profile is (GFD's decimal 21gb included); as many compute slices as
    the instance's is the instance (``3c.3g.20gb`` is ``3g.20gb``, as nvidia-smi names
    it), more is no compute instance."""
    assert normalize_profile("1c.3g.20gb") == "1c.3g.20gb"
    assert normalize_profile("nvidia.com/mig-1C.3G.21GB") == "1c.3g.20gb"
    assert normalize_profile("MIG 2c.7g.80gb") == "2c.7g.80gb"
    assert compute_share("1c.3g.20gb") == (1, 7)
    assert compute_share("2c.4g.24gb", "NVIDIA A30") == (2, 4)
    assert normalize_profile("3c.3g.20gb") == "3g.20gb"
    for bad, match in (("4c.3g.20gb", "more compute slices"), ("0c.3g.20gb", "malformed"),
                       ("1c.3g.19gb", "not known")):
        with pytest.raises(MigProfileError, match=match):
            normalize_profile(bad)
    assert not_offered("1c.3g.20gb", ["NVIDIA A100-SXM4-40GB"]) is None
    assert "offers" in (not_offered("1c.3g.40gb", ["NVIDIA A100-SXM4-40GB"]) or "")


def test_a_compute_instance_device_is_handed_out_by_its_own_name_only() -> None:
    """The three compute instances of one 3g.20gb GPU instance: a request for 1c.3g.20gb
    gets one (its own UUID); a 3g.20gb request gets none of them (a third of it)."""
    cis = tuple(MigDevice("1c.3g.20gb", f"MIG-ci{c}", 20096, gi_id=2, ci_id=c) for c in range(3))
    gpu = Gpu(index=0, uuid="GPU-0", product="NVIDIA A100-SXM4-40GB", memory_mib=40537,
              mig_capable=True, mig_enabled=True, mig_devices=cis)
    assert pick_mig_device([gpu], "1c.3g.20gb", set()) == MigChoice(0, "MIG-ci0", "1c.3g.20gb")
    assert pick_mig_device([gpu], "1C.3g.21gb", {"MIG-ci0"}) == MigChoice(0, "MIG-ci1",
                                                                          "1c.3g.20gb")
    miss = pick_mig_device([gpu], "3g.20gb", set())
    assert isinstance(miss, MigMiss) and miss.reason is MigMissReason.PROFILE_ABSENT
    assert "it has 1c.3g.20gb" in miss.detail


def _ci_gpu(index: int, devices: tuple[MigDevice, ...]) -> Gpu:
    return Gpu(index=index, uuid=f"GPU-{index}", product="NVIDIA A100-SXM4-40GB",
               memory_mib=40537, mig_capable=True, mig_enabled=True, mig_devices=devices)


def test_a_gpu_instance_s_memory_counts_once_in_the_mig_device_ranking() -> None:
    """Compute instances of one GPU instance each report the instance's memory: two of
    the three 1c.3g.20gb of GPU 0 handed out made GPU 0 look 40 GB used (twice 20 GB),
    more than GPU 1's 3g.20gb and 2g.10gb (30 GB), so a 1g.5gb went to GPU 0. Counted
    once, GPU 0 has 20 GB used: the 1g.5gb goes to GPU 1, the most used."""
    cis = tuple(MigDevice("1c.3g.20gb", f"MIG-ci{c}", 20096, gi_id=1, ci_id=c)
                for c in range(3))
    gpu0 = _ci_gpu(0, (*cis, MigDevice("1g.5gb", "MIG-a-small", 4864, gi_id=5, ci_id=0)))
    gpu1 = _ci_gpu(1, (MigDevice("3g.20gb", "MIG-b-3g", 20096, gi_id=1, ci_id=0),
                       MigDevice("2g.10gb", "MIG-b-2g", 9984, gi_id=2, ci_id=0),
                       MigDevice("1g.5gb", "MIG-b-small", 4864, gi_id=5, ci_id=0)))
    taken = {"MIG-ci0", "MIG-ci1", "MIG-b-3g", "MIG-b-2g"}
    assert pick_mig_device([gpu0, gpu1], "1g.5gb", taken) == MigChoice(1, "MIG-b-small",
                                                                       "1g.5gb")
    # Without gi_id (a facts file that leaves it out) the compute instances of one
    # profile are taken to share one instance, as the facts' own check reads them.
    bare = tuple(replace(d, gi_id=None, ci_id=None) for d in gpu0.mig_devices)
    assert pick_mig_device([replace(gpu0, mig_devices=bare), gpu1], "1g.5gb",
                           taken) == MigChoice(1, "MIG-b-small", "1g.5gb")


def test_the_facts_check_counts_a_gpu_instance_s_memory_once() -> None:
    """The facts' check of a GPU's MIG devices against its memory (not a fault, checked
    here): seven 1c.7g.40gb compute instances of one 7g.40gb instance, 40 GB each, are
    one 40 GB instance on a 40 GB GPU, with gi_id or without; two instances are not."""
    def gpu(devices: list[dict[str, object]]) -> dict[str, object]:
        return {"index": 0, "uuid": "GPU-0", "product": "NVIDIA A100-SXM4-40GB",
                "memory_mib": 40537, "mig_enabled": True, "mig_devices": devices}

    def facts(devices: list[dict[str, object]]) -> NodeFacts:
        return NodeFacts.from_dict({"node": {"hostname": "n"}, "gpus": [gpu(devices)]})

    cis = [{"profile": "1c.7g.40gb", "uuid": f"MIG-c{c}", "memory_mib": 40192, "gi_id": 0,
            "ci_id": c} for c in range(7)]
    assert len(facts(cis).gpus[0].mig_devices) == 7
    assert len(facts([{k: v for k, v in d.items() if k not in ("gi_id", "ci_id")}
                      for d in cis]).gpus[0].mig_devices) == 7
    with pytest.raises(FactsError, match="60288 MiB in its 2 GPU instance"):
        facts([{"profile": "1c.3g.20gb", "uuid": f"MIG-w{c}", "memory_mib": 30144,
                "gi_id": c, "ci_id": 0} for c in range(2)])


@pytest.mark.parametrize("name", ["nv\u0131d\u0131a.com/m\u0131g-1g.10gb", "m\u0131g-1g.10gb",
                                  "M\u0130G-3g.40gb", "nvidia.com/mig-1g.10gb\u212a"])
def test_a_profile_with_a_lookalike_letter_is_refused_naming_it(name: str) -> None:
    """Only ASCII spells a profile: a dotless i (U+0131) matched i case-blind, so
    ``nv\u0131d\u0131a.com/m\u0131g-1g.10gb`` read as 1g.10gb where no other reader takes
    it (the Kelvin sign, U+212A, lowered to k)."""
    odd = next(c for c in name if not c.isascii())
    with pytest.raises(MigProfileError, match=f"U\\+{ord(odd):04X} at {name.index(odd) + 1}"):
        normalize_profile(name)
