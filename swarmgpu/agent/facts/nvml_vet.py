"""NVML's answers the facts cannot carry as they are, failed on the GPU or MIG device
they belong to.

``NodeFacts.from_dict`` refuses a node's facts whole for a UUID given twice or MIG
devices a GPU cannot hold (``core.miglayout``), and a daemon older than this agent for a
GPU's error past 256 characters (a newer one cuts it); served as NVML answered them, one
GPU's odd answer left every GPU of the node unread. Checked here against the same rules,
the rest of the node is served.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from swarmgpu.core.miglayout import mig_layout_fault
from swarmgpu.core.model import MAX_STR_LEN, Gpu, MigDevice
from swarmgpu.core.peertext import peer_text


def vet_gpus(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """``gpus`` as the daemon accepts them: impossible MIG layouts, GPU UUIDs answered
    for several GPUs and MIG UUIDs answered for several devices taken out, each said on
    its GPU; each GPU's error cut to what the facts hold (one call failing on each of
    18 NVLinks says 18 problems)."""
    vetted = _unique_mig_uuids(_unique_gpu_uuids(tuple(_vet_migs(g) for g in gpus)))
    return tuple(replace(g, error=peer_text(g.error, MAX_STR_LEN))
                 if g.error is not None and len(g.error) > MAX_STR_LEN else g for g in vetted)


def _with_error(g: Gpu, note: str, *, first: bool = False) -> str:
    return "; ".join(e for e in ((note, g.error) if first else (g.error, note)) if e)


def _vet_migs(g: Gpu) -> Gpu:
    """A GPU whose MIG devices it cannot hold (its memory unread, so 1 MiB; one larger
    than the GPU; a GI/CI pair twice): none of them handed out, nor the GPU whole (MIG
    mode stays on), as when they cannot be listed."""
    fault = mig_layout_fault(g.mig_devices, g.memory_mib)
    if fault is None:
        return g
    return replace(g, mig_devices=(), error=_with_error(
        g, f"MIG devices as NVML lists them: {fault}; the GPU cannot hold them, so none "
        "is handed out"))


def _unique_gpu_uuids(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """GPUs answering one UUID: which GPU it names is not known, so each is unhealthy
    under a placeholder UUID (unique by its index, as an unreadable GPU's)."""
    counts = Counter(g.uuid for g in gpus)
    out = []
    for g in gpus:
        if counts[g.uuid] < 2:
            out.append(g)
            continue
        others = ", ".join(str(h.index) for h in gpus if h.uuid == g.uuid and h is not g)
        note = (f"NVML answered its UUID {peer_text(g.uuid, 64)!r}, also GPU {others}'s; "
                "which GPU it names is not known")
        out.append(replace(g, uuid=f"GPU-unknown-index-{g.index}", healthy=False,
                           error=_with_error(g, note, first=True)))
    return tuple(out)


def _unique_mig_uuids(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """A MIG device answering the UUID of an earlier GPU's MIG device: left out, said
    (within one GPU, ``_vet_migs`` has looked)."""
    owner: dict[str, int] = {}
    out = []
    for g in gpus:
        kept: list[MigDevice] = []
        notes: list[str] = []
        for d in g.mig_devices:
            if d.uuid in owner:
                notes.append(f"MIG device {peer_text(d.uuid, 64)!r}: its UUID is also GPU "
                             f"{owner[d.uuid]}'s MIG device's; left out")
                continue
            kept.append(d)
        owner.update((d.uuid, g.index) for d in kept)
        out.append(replace(g, mig_devices=tuple(kept), error=_with_error(
            g, "; ".join(notes))) if notes else g)
    return tuple(out)
