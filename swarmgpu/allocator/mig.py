"""Which free MIG device a request gets, on one node.

MIG layouts are made by an operator (nvidia-smi or mig-parted), not by swarmgpu: this
module only hands out MIG devices that already exist. Profile names and their one
spelling are core's (``swarmgpu.core.migprofile``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from swarmgpu.core.miglayout import instance_key
from swarmgpu.core.migprofile import canonical_profile, normalize_profile
from swarmgpu.core.model import Gpu

# --- choosing a device --------------------------------------------------------------


@dataclass(frozen=True)
class MigChoice:
    gpu_index: int
    mig_uuid: str
    profile: str  # as the device names it (nvidia-smi spelling)


class MigMissReason(StrEnum):
    NO_MIG_DEVICES = "no-mig-devices"  # no healthy GPU on the node has MIG devices
    PROFILE_ABSENT = "profile-absent"  # MIG devices exist, none of this profile
    ALL_ASSIGNED = "all-assigned"  # every device of this profile is taken


@dataclass(frozen=True)
class MigMiss:
    reason: MigMissReason
    detail: str


def pick_mig_device(
    gpus: Sequence[Gpu], profile: str, assigned: Collection[str]
) -> MigChoice | MigMiss:
    """A free MIG device of ``profile`` on one node, or why there is none.

    ``assigned`` holds the MIG UUIDs already handed out. To keep whole GPUs (and big free
    slices) for the requests that need them, the device comes from the GPU that is most
    used already (most assigned MIG memory), then the one with least free MIG memory,
    then the lowest index (a GPU instance's memory counted once, however many of its
    compute instances list it: ``_instance_memory``); on that GPU, the first device in
    the GPU's own order.
    Raise MigProfileError when ``profile`` itself is malformed or unknown.
    """
    want = normalize_profile(profile)
    taken = set(assigned)
    with_mig = [g for g in gpus if g.healthy and g.mig_devices]
    if not with_mig:
        return MigMiss(
            MigMissReason.NO_MIG_DEVICES,
            "no healthy GPU on this node has MIG devices; enable MIG and create "
            f"{want} instances (nvidia-smi mig -cgi / mig-parted)",
        )
    best: tuple[tuple[int, int, int], MigChoice] | None = None
    of_profile = 0
    for gpu in with_mig:
        used_mib, free_mib = _instance_memory(gpu, taken)
        for dev in gpu.mig_devices:
            if canonical_profile(dev.profile) != want:
                continue
            of_profile += 1
            if dev.uuid in taken:
                continue
            rank = (-used_mib, free_mib, gpu.index)
            if best is None or rank < best[0]:
                best = (rank, MigChoice(gpu.index, dev.uuid, dev.profile))
            break  # first free device of the profile on this GPU
    if best is not None:
        return best[1]
    if of_profile == 0:
        present = sorted({canonical_profile(d.profile) for g in with_mig for d in g.mig_devices})
        return MigMiss(
            MigMissReason.PROFILE_ABSENT,
            f"no {want} MIG device on this node; it has {', '.join(present)}",
        )
    return MigMiss(
        MigMissReason.ALL_ASSIGNED,
        f"all {of_profile} {want} MIG device(s) on this node are assigned",
    )


def _instance_memory(gpu: Gpu, taken: Collection[str]) -> tuple[int, int]:
    """(MiB of the GPU instances with a device handed out, MiB of those with none):
    compute instances of one GPU instance each report the instance's memory, which
    counts once; an instance partly handed out is used (its free compute instances
    serve only requests of their own profile)."""
    memory: dict[tuple[object, ...], int] = {}
    used: set[tuple[object, ...]] = set()
    for n, d in enumerate(gpu.mig_devices):
        key = instance_key(d, n)
        memory[key] = max(memory.get(key, 0), d.memory_mib)
        if d.uuid in taken:
            used.add(key)
    return (sum(m for k, m in memory.items() if k in used),
            sum(m for k, m in memory.items() if k not in used))
