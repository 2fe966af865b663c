"""A multi-GPU model server's ``/dev/shm``, for `swarmgpu render` and `swarmgpu audit`.

NCCL, which vLLM, SGLang, TGI and TensorRT-LLM run between their GPUs, "creates shared
memory segments, traditionally in /dev/shm", and "if insufficient shared memory is
available, NCCL will fail to initialize" (``NCCL WARN Error: failed to extend
/dev/shm/nccl-... to ... bytes``); for Docker its guide gives ``--shm-size=1g`` (NCCL
User Guide, Troubleshooting, "Shared memory"). Docker gives a container 64 MiB there,
and Swarm takes neither ``shm_size`` nor ``ipc: host``: a tmpfs mount at ``/dev/shm`` is
the one way in a stack. So a server that spans two GPUs or more (its own count, as
``model_servers`` reads it) without one of at least 1 GiB is warned about, never
refused. A mount there of another kind (the host's ``/dev/shm`` bound in), a tmpfs
without a size (no limit) or one whose size cannot be read is left unsaid. TGI without
``--num-shard`` shards over every GPU it sees (``seen_by_tgi``), so it counts too. Pure
(docs/requests.md, "Model servers").
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from swarmgpu.core.peertext import quoted
from swarmgpu.manager.commands.cudavisible import visible_named, visible_value
from swarmgpu.manager.commands.model_servers import server_count
from swarmgpu.manager.commands.swarmspec import memory_bytes
from swarmgpu.manager.services.requests import GpuRequest

SHM = "/dev/shm"  # noqa: S108 (a mount target named, no file made)
ENOUGH = 1 << 30  # NCCL's guide's --shm-size=1g
FIX = f"volumes: [{{type: tmpfs, target: {SHM}, tmpfs: {{size: {ENOUGH}}}}}]"

# A mount as both callers read it: (type, target, a tmpfs's size in bytes; None: no
# limit, or a size not read here)
Mount = tuple[str, str, int | None]


def shm_warnings(
    svc: Mapping[str, Any], mounts: Sequence[Mount],
    env_files: Mapping[str, str | None] | None = None, granted: int | None = None,
    dropped: str | None = None, interpolated: bool = True,
) -> list[str]:
    """A warning where the server ``svc`` runs (Compose keys, as ``server_count``
    reads them) spans GPUs through NCCL with less than ``ENOUGH`` at ``/dev/shm``.
    ``granted``: the GPUs the container is given (a share or a MIG device: one); None:
    not known, and a server that takes every GPU it sees is left unsaid. ``dropped``: a
    Compose ``tmpfs:`` entry there (``tmpfs_key_at_shm``), named as stack deploy drops it.
    ``interpolated``: as ``seen_by_tgi`` takes it."""
    seen = seen_by_tgi(svc, env_files or {}, granted, interpolated)
    used = server_count(svc, env_files, seen)
    if used is None or not used[0].nccl or used[1] < 2:
        return []
    server, n, said, _ = used
    shm = [(kind, size) for kind, target, size in mounts
           if _cleaned(target) == SHM]
    small = [size for kind, size in shm if kind == "tmpfs" and size is not None
             and size < ENOUGH]
    if len(small) < len(shm):  # the host's bound in, a tmpfs without a limit: its own
        return []
    have = (f"its tmpfs there holds {_mib(small[-1])}" if small else
            f"docker stack deploy drops its tmpfs: {quoted(dropped, 80)} (a stack mounts a "
            "tmpfs from volumes: alone), so Docker gives the container 64 MiB there"
            if dropped is not None else
            "Docker gives a container 64 MiB there, and Swarm takes no shm_size or ipc")
    return [f"{server.name} spans {n} GPUs ({said}) through NCCL, which keeps its shared "
            f"memory in {SHM}: {have}; with too little NCCL fails to initialize (\"failed "
            f"to extend {SHM}/nccl-...\"); mount a tmpfs of 1 GiB or more there: {FIX}"]


def seen_by_tgi(svc: Mapping[str, Any], files: Mapping[str, str | None],
                granted: int | None, interpolated: bool = True) -> tuple[int, str] | None:
    """The GPUs TGI without ``--num-shard`` shards over, and how to say so; None: not
    known here. Its launcher (huggingface/text-generation-inference launcher/src/main.rs,
    ``find_num_shards``: ``(None, None) => num_cuda_devices().unwrap_or(1)``) counts the
    comma-separated entries of ``CUDA_VISIBLE_DEVICES``, else of
    ``NVIDIA_VISIBLE_DEVICES`` (as written: ``all`` is one entry, one shard), which under
    swarmgpu is the grant's device list (the device template, with either
    ``placement.grants``): so the service's own line, else the GPUs granted. A ``$`` in
    it is a character like any other to TGI (no shell expands an environment value):
    substituted already (``interpolated``: ``$$`` is docker's ``$``; audit's Swarm
    ``Env``) or from an env file (docker passes it as written); not ``interpolated``, an
    ``environment`` value with a ``$`` is docker's to substitute: not known."""
    env = svc.get("environment")
    found = visible_value(env, files)
    if found is not None:
        value, said = found
        if "$" in value and not interpolated and not said.endswith(" from env_file"):
            return None
        return value.count(",") + 1, f"one shard per entry of {said}"  # (split(',').count())
    if visible_named(env, files) or granted is None:  # (the deploying shell's)
        return None
    return granted, "one shard per GPU it is given"


def granted_gpus(req: GpuRequest) -> int:
    """The GPUs a container of ``req`` sees: a share or a MIG device is one."""
    return 1 if req.is_fraction or req.mig_profile else req.gpus


def compose_mounts(volumes: object) -> list[Mount]:
    """A Compose service's ``volumes`` as mounts: the long syntax's type, target and
    ``tmpfs.size`` (docker's units), the short one's target (``SRC:TARGET[:MODE]``)."""
    out: list[Mount] = []
    for v in volumes if isinstance(volumes, list) else []:
        if isinstance(v, str):
            parts = v.split(":")
            out.append(("volume", parts[1] if len(parts) > 1 else parts[0], None))
        elif isinstance(v, Mapping) and isinstance(target := v.get("target"), str):
            tmpfs = v.get("tmpfs")
            size = tmpfs.get("size") if isinstance(tmpfs, Mapping) else None
            out.append((str(v.get("type", "")), target, _bytes(size)))
    return out


def tmpfs_key_at_shm(value: object) -> str | None:
    """The entry of a Compose service's ``tmpfs:`` (a path or a list, ``PATH[:OPTIONS]``)
    at ``/dev/shm``, as written; None: none. docker/cli's stack deploy drops the key
    (``composefile.CLI_DROPS``): never room."""
    for v in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
        if isinstance(v, str) and _cleaned(v.partition(":")[0]) == SHM:
            return v
    return None


def spec_mounts(mounts: object) -> list[Mount]:
    """A Swarm ContainerSpec's ``Mounts`` as mounts (``TmpfsOptions.SizeBytes``: 0 or
    none, no limit)."""
    out: list[Mount] = []
    for m in mounts if isinstance(mounts, list) else []:
        if isinstance(m, Mapping) and isinstance(target := m.get("Target"), str):
            opts = m.get("TmpfsOptions")
            size = opts.get("SizeBytes") if isinstance(opts, Mapping) else None
            ok = isinstance(size, int) and not isinstance(size, bool) and size > 0
            out.append((str(m.get("Type", "")), target, size if ok else None))
    return out


def _bytes(v: object) -> int | None:
    """A tmpfs size as docker reads it; None: none (0 too: no limit), or not read (render's
    schema check says what is wrong with it). No reservation's 4 MiB floor: a 1 MiB tmpfs
    is the smallest room there is, not a size left unread."""
    return None if v is None else memory_bytes(v) or None


def _cleaned(target: str) -> str:
    """A mount target as Docker cleans it (Go's ``filepath.Clean``): ``normpath`` keeps
    two leading slashes (POSIX leaves ``//`` to the system), Go makes them one."""
    path = posixpath.normpath(target or ".")
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _mib(n: int) -> str:
    """A size to say: MiB, or bytes below one (0 MiB read as none)."""
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
