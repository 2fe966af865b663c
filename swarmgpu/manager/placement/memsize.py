"""A ``gpu-memory`` no GPU of the cluster has, where one comes close: the reason names
that model, the MiB it reports and the request that fits it (``short_of``).

nvidia-smi and NVML report a GPU's memory below the size the card is sold as (an H100
80GB HBM3: 81559 MiB), and ``gpu-memory`` reads GB as Docker's ``--memory`` does, 1024
MiB: ``gpu-memory: 80GB`` for that card waited for ever, its reason naming whichever
node came closest, "0 free". The units stay (documented, and Docker's).
"""

from __future__ import annotations

from collections.abc import Iterable

from swarmgpu.allocator.fragmentation import product_key
from swarmgpu.core.model import Gpu
from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.services.requests import matches_products

# A GPU is taken for the card the owner meant when the size asked is at most this many
# percent above what it reports. In the captures (tests/fixtures/SOURCES.md) the size a
# card is sold as is 0 % above what it reports (A100-SXM4-80GB, 81920 MiB), 0.4 % (H100
# 80GB HBM3 81559, H200 143771 of 141GB), 1.0 and 3.6 % (A100-SXM4-40GB 40537, 39538),
# 2.7 % (RTX 2070 7979 of 8GB), up to 8.4 % (a Tesla T4: 15109 MiB free of 16GB, idle);
# the next size a model is sold in is further (48GB over 40537: 21 %, 94GB over 81559: 18 %).
NEAR_ABOVE_PERCENT = 10

# A product name with one of these would not be a gpu-product pattern matching itself
_NOT_LITERAL = frozenset('*?[]|,"\\')


def short_of(
    want_mib: int, products: tuple[str, ...], gpus: Iterable[Gpu], prefix: str = "swarmgpu."
) -> str | None:
    """Why no GPU takes ``want_mib``, when it is at most NEAR_ABOVE_PERCENT above what a
    model of the ``products`` asked reports: the closest model, the MiB it reports and
    the requests that fit it. None when a GPU asked has that much, or none comes close.
    A GPU in MIG mode is never handed out whole: it neither has the memory nor comes
    close."""
    seen: dict[str, tuple[int, int, str]] = {}  # model -> (least, most MiB, its name)
    for g in gpus:
        if g.mig_enabled or not matches_products(g.product, products):
            continue
        if g.memory_mib >= want_mib:
            return None
        key = product_key(g.product)  # GFD's NVIDIA-H100-80GB-HBM3 is nvidia-smi's
        lo, hi, name = seen.get(key, (g.memory_mib, g.memory_mib, g.product))
        seen[key] = (min(lo, g.memory_mib), max(hi, g.memory_mib), name)
    near = [
        (hi, name, lo)
        for lo, hi, name in seen.values()
        if want_mib * 100 <= hi * (100 + NEAR_ABOVE_PERCENT)
    ]
    if not near:
        return None
    hi, product, lo = max(near)
    name = peer_text(product, 48)
    mib = f"{lo} MiB" if lo == hi else f"{lo} to {hi} MiB"
    # the least a model reports: every GPU of it fits
    fix = f"ask {prefix}gpu-memory: {lo} (MiB)"
    if not products and name == product and not _NOT_LITERAL & set(product):
        fix += f', or drop it and pin the model: {prefix}gpu-product: "{product}"'
    return (
        f"no GPU has {want_mib} MiB: the closest, {name}, reports {mib} (nvidia-smi "
        "reports a GPU's memory below the size the card is sold as, and gpu-memory's "
        f"GB is 1024 MiB, as Docker's --memory reads it); to take it {fix}"
    )
