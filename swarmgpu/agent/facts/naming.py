"""Names shared by the fact sources: synthetic UUIDs and MIG profile names.

Sources that only know *how many* GPUs a node has (``topo:``, ``gfd:``) still need
one UUID per GPU. They get synthetic ones that are stable across runs and can never
be mistaken for a real NVIDIA UUID: the first group is always ``5ca1ab1e``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

SYNTHETIC_PREFIX = "5ca1ab1e"
# ASCII digits: \d alone takes any script's, and int() reads them ('1g.\u0665gb')
_PROFILE_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(\+me)?$", re.ASCII)


def synthetic_uuid(kind: str, *parts: object) -> str:
    """``GPU-5ca1ab1e-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (or ``MIG-...``) from ``parts``.

    Deterministic: the same hostname, file name and index give the same UUID on every
    run and every machine, so labels and generic resources do not churn.
    """
    key = "\0".join(str(p) for p in parts).encode()
    h = hashlib.sha256(key).hexdigest()
    return f"{kind}-{SYNTHETIC_PREFIX}-{h[0:4]}-{h[4:8]}-{h[8:12]}-{h[12:24]}"


def is_synthetic_uuid(uuid: str) -> bool:
    return uuid.split("-")[1:2] == [SYNTHETIC_PREFIX]


def mig_profile_name(gi_slices: int, memory_mib: int, ci_slices: int | None = None) -> str:
    """Profile name as nvidia-smi prints it: ``3g.40gb``, or ``1c.3g.40gb`` for a CI split.

    nvidia-smi's ``<n>gb`` is the GI memory in GiB rounded up (9.75 GiB -> ``10gb``,
    39.5 GiB -> ``40gb``; see ``nvidia-smi mig -lgip``).
    """
    gb = math.ceil(memory_mib / 1024)
    name = f"{gi_slices}g.{gb}gb"
    if ci_slices is not None and ci_slices < gi_slices:
        name = f"{ci_slices}c.{name}"
    return name


def parse_profile(name: str) -> tuple[int, int]:
    """``(gi_slices, gb)`` of a profile name like ``1g.10gb`` / ``1c.2g.10gb`` / ``1g.10gb+me``.

    Raises ValueError for anything else.
    """
    m = _PROFILE_RE.match(name.strip())
    if not m:
        raise ValueError(f"{name!r} is not a MIG profile name like '1g.10gb' or '3g.40gb'")
    return int(m.group(2)), int(m.group(3))


def instance_ids(profiles: Sequence[str]) -> list[tuple[int, int | None]]:
    """(GPU instance id, compute instance id) of each MIG device of one GPU, in order, for
    sources that know only profiles (``topo:``, ``gfd:``). A whole-instance profile is
    its own instance (no compute instance id, as before); compute instances of one
    instance profile (``1c.3g.20gb``: the MIG user guide's naming) share one instance
    while their compute slices fit in it, the next starts another: three 1c.3g.20gb are
    one 3g.20gb instance, as on the GPU. Ids count from 0 in order of first device."""
    out: list[tuple[int, int | None]] = []
    open_: dict[str, list[int]] = {}  # instance profile -> [its id, slices used, CIs]
    instances = 0
    for prof in profiles:
        m = _PROFILE_RE.match(prof.strip())
        if m is None or m.group(1) is None:
            out.append((instances, None))
            instances += 1
            continue
        c, g, key = int(m.group(1)), int(m.group(2)), prof.strip().partition("c.")[2]
        slot = open_.get(key)
        if slot is None or slot[1] + c > g:
            slot = open_[key] = [instances, 0, 0]
            instances += 1
        out.append((slot[0], slot[2]))
        slot[1], slot[2] = slot[1] + c, slot[2] + 1
    return out


def max_instances(profile: str, parent_memory_mib: int) -> int:
    """How many GIs of ``profile`` fit on an empty GPU (7 compute and 8 memory slices).

    Compute: 1g x7, 2g x3, 3g x2, 4g/7g x1. Memory: the profile's share of the 8 slices,
    so 1g.10gb on an 80 GB GPU fits 7 times but 1g.20gb only 4 times.
    """
    g, gb = parse_profile(profile)
    by_compute = {1: 7, 2: 3, 3: 2, 4: 1, 7: 1}.get(g, max(1, 7 // g))
    slice_gb = parent_memory_mib / 1024 / 8
    mem_slices = max(1, round(gb / slice_gb)) if slice_gb > 0 else 1
    return max(1, min(by_compute, 8 // mem_slices))
