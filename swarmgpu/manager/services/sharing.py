"""What a shared GPU holding tells its container: its share, as environment variables.

A fractional holding (``<p>gpu-fraction``) gets four variables, through the same
mechanism as the device list: one service label per variable and node (values differ
per node, because GPU memory does), read by an env template with ``.Node.ID``:

- ``SWARMGPU_GPU_FRACTION``    the share, e.g. ``0.5``;
- ``SWARMGPU_GPU_MEMORY_MIB``  share x that GPU's memory, e.g. ``20480``;
- ``CUDA_DEVICE_MEMORY_LIMIT`` HAMi-core's memory cap, ``<MiB>m``;
- ``CUDA_DEVICE_SM_LIMIT``     HAMi-core's compute cap, a percent.

Whole GPUs and MIG devices get no label, so the template yields an empty value. An
empty value is what HAMi-core reads as "no limit", without a warning
(Project-HAMi/HAMi-core ``get_limit_from_env`` returns 0 for an empty string; a memory
limit of 0 is skipped, an SM limit of 0 falls back to 100). The variables only limit
anything where HAMi-core (``libvgpu.so``) is preloaded in the container; elsewhere they
are information for the application (``swarmgpu doctor`` says which a node is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache, lru_cache

from swarmgpu.core.model import NodeFacts

SHARE = "share."

# (label field, environment variable)
FIELDS: tuple[tuple[str, str], ...] = (
    ("fraction", "SWARMGPU_GPU_FRACTION"),
    ("memory-mib", "SWARMGPU_GPU_MEMORY_MIB"),
    ("memory-limit", "CUDA_DEVICE_MEMORY_LIMIT"),
    ("sm-limit", "CUDA_DEVICE_SM_LIMIT"),
)


def share_key(prefix: str, field: str, node_id: str) -> str:
    return f"{prefix}{SHARE}{field}.{node_id}"


def is_share_key(key: str, prefix: str) -> bool:
    return key.startswith(prefix + SHARE)


@cache  # one per prefix
def env_lines(prefix: str) -> tuple[str, ...]:
    """The env template lines of a shared service, one per variable."""
    return tuple(
        f'{var}={{{{or (index .Service.Labels (print "{prefix}{SHARE}{field}." .Node.ID)) ""}}}}'
        for field, var in FIELDS
    )


def missing_env(prefix: str, env: Iterable[str]) -> list[str]:
    """Template lines whose variable the service does not set at all (a user's own
    value for one of them is theirs and kept)."""
    have = {e.split("=", 1)[0] for e in env}
    return [line for line, var in _env_vars(prefix) if var not in have]


@cache
def _env_vars(prefix: str) -> tuple[tuple[str, str], ...]:
    return tuple((line, line.split("=", 1)[0]) for line in env_lines(prefix))


def share_values(milli: int, gpu_memory_mib: int) -> dict[str, str]:
    """Label field -> value for a share of ``milli`` thousandths of a GPU."""
    return dict(_share_values(milli, gpu_memory_mib))


def share_mib(milli: int, gpu_memory_mib: int) -> int:
    """The MiB a share of ``milli`` thousandths of a GPU may use: floored, so that shares
    that add up to one GPU never ask for more than it has; at least 1, because HAMi-core
    reads a memory limit of 0 as no limit at all."""
    return max(1, gpu_memory_mib * milli // 1000)


@lru_cache(maxsize=4096)  # few shares and GPU sizes, asked for on every placed service
def _share_values(milli: int, gpu_memory_mib: int) -> tuple[tuple[str, str], ...]:
    mib = share_mib(milli, gpu_memory_mib)
    # Floor, so that shares that add up to one GPU never ask for more than 100%; at least
    # 1, as HAMi-core reads 0 as no limit.
    sm = max(1, milli // 10)
    return (("fraction", f"{milli / 1000:g}"), ("memory-mib", str(mib)),
            ("memory-limit", f"{mib}m"), ("sm-limit", str(sm)))


def share_labels(prefix: str, node_id: str, uuids: Sequence[str], milli: Sequence[int],
                 facts: NodeFacts | None) -> dict[str, str] | None:
    """Service labels telling the container on ``node_id`` its share; ``{}`` for whole
    GPUs and MIG devices; None when unknown (no facts, or the GPU is not in them):
    the caller then keeps what is written."""
    if len(uuids) != 1 or not milli or milli[0] >= 1000:
        return {}
    if facts is None:
        return None
    mem = next((g.memory_mib for g in facts.gpus if g.uuid == uuids[0]), None)
    if mem is None:
        return None
    return {share_key(prefix, f, node_id): v for f, v in _share_values(milli[0], mem)}


def node_of_key(key: str, prefix: str) -> str | None:
    """The node id a share label is for (None: not a share label)."""
    if not is_share_key(key, prefix):
        return None
    rest = key[len(prefix + SHARE):]
    field, _, node = rest.partition(".")
    return node if node and field in {f for f, _ in FIELDS} else None


def want_labels(prefix: str, placements: Iterable[tuple[str, Sequence[str], Sequence[int]]],
                facts: Mapping[str, NodeFacts], have: Mapping[str, str]) -> dict[str, str]:
    """All share labels a service should carry: (node id, uuids, milli) per placement.
    Where the GPU's memory is unknown, what is written stays."""
    out: dict[str, str] = {}
    for node_id, uuids, milli in placements:
        labels = share_labels(prefix, node_id, uuids, milli, facts.get(node_id))
        if labels is None:
            labels = {k: v for k, v in have.items() if node_of_key(k, prefix) == node_id}
        out.update(labels)
    return out
