"""Whether a GPU's MIG devices, as an agent lists them, fit on that GPU.

A GPU has 7 compute slices (A30: 4, and its largest profile says so; 7 bounds every
MIG GPU made) and its own memory; a broken or hostile agent may list more. The slices
are read from the profile names (``3g.40gb`` is 3; ``1c.3g.40gb``, a compute instance
of a 3g GPU instance, is 3 for its GPU instance, however many compute instances share
it). Compute instances of one GPU instance each report the instance's memory, so a GPU
instance is counted once: by ``gi_id``; without one, a whole-instance profile is its own
instance and compute instances of one profile are taken to share one (a lower bound:
real facts are never refused for what they leave out).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

MAX_COMPUTE_SLICES = 7
# Profile names, and the topo:/gfd: sources' nominal sizes, round memory up to whole
# GiB: each GPU instance may read up to this much above what it holds.
ROUNDING_MIB = 1024
_SLICES_RE = re.compile(
    r"^(?:mig[- ])?(?:(\d{1,2})c\.)?(\d{1,2})g\.\d+gb(?:[+-][a-z.]+)?$", re.IGNORECASE
)


class MigLike(Protocol):
    @property
    def profile(self) -> str: ...
    @property
    def uuid(self) -> str: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def gi_id(self) -> int | None: ...
    @property
    def ci_id(self) -> int | None: ...


def instance_slices(profile: str) -> tuple[int, bool] | None:
    """(compute slices of the GPU instance, whether the name is a compute instance of
    it: ``1c.3g.40gb``), or None for a name that is no MIG profile."""
    m = _SLICES_RE.match(profile.strip())
    return None if m is None else (int(m[2]), m[1] is not None)


def instance_key(d: MigLike, n: int) -> tuple[object, ...]:
    """The GPU instance that ``d``, the ``n``-th MIG device of its GPU, is part of (the
    module docstring's rule): its compute instances share one key, so the instance's
    memory, which each of them reports, is counted once."""
    if d.gi_id is not None:
        return ("gi", d.gi_id)
    got = instance_slices(d.profile)
    if got is not None and got[1]:
        return ("ci-of", got[0], d.profile.strip().lower().partition("c.")[2])
    return ("device", n)


def mig_layout_fault(devices: Sequence[MigLike], gpu_memory_mib: int) -> str | None:
    """What makes ``devices`` impossible on one GPU of ``gpu_memory_mib``, or None."""
    uuids: set[str] = set()
    ids: set[tuple[int, int]] = set()
    # GPU instance -> (its compute slices, its memory)
    instances: dict[tuple[object, ...], tuple[int, int]] = {}
    for n, d in enumerate(devices):
        if d.uuid in uuids:
            return f"UUID {d.uuid[:64]!r} appears twice"
        uuids.add(d.uuid)
        if d.gi_id is not None and d.ci_id is not None:
            if (d.gi_id, d.ci_id) in ids:
                return (
                    f"GPU instance {d.gi_id}, compute instance {d.ci_id} twice "
                    "(each MIG device is its own pair)"
                )
            ids.add((d.gi_id, d.ci_id))
        got = instance_slices(d.profile)
        slices = got[0] if got is not None else 0
        key = instance_key(d, n)
        had = instances.get(key, (0, 0))
        instances[key] = (max(had[0], slices), max(had[1], d.memory_mib))
    total = sum(s for s, _ in instances.values())
    if total > MAX_COMPUTE_SLICES:
        return (
            f"{total} compute slices in its MIG devices' profiles; a GPU has at most "
            f"{MAX_COMPUTE_SLICES}"
        )
    memory = sum(m for _, m in instances.values())
    if memory > gpu_memory_mib + ROUNDING_MIB * len(instances):
        return (
            f"{memory} MiB in its {len(instances)} GPU instance(s), more than the "
            f"GPU's {gpu_memory_mib} MiB"
        )
    return None
