"""Turn a source spec (``nvml``, ``gfd:PATH``, ``file:PATH``, ``topo:PATH``) into a source."""

from __future__ import annotations

import socket
from typing import Any

from swarmgpu.agent.facts import FactSource, SourceError
from swarmgpu.agent.facts.file import FileSource
from swarmgpu.agent.facts.gfd import GfdSource
from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.facts.topo import TopoSource
from swarmgpu.core.model import MAX_GPU_MEMORY_MIB, MAX_STR_LEN

KINDS = ("nvml", "gfd:PATH", "file:PATH", "topo:PATH")


def open_source(
    spec: str,
    *,
    hostname: str | None = None,
    product: str | None = None,
    memory_mib: int | None = None,
    mig_layout: str | None = None,
    nvml_module: Any = None,
) -> FactSource:
    """The fact source a spec names; SourceError for a spec that can never work.

    ``hostname`` defaults to this machine's. ``product``/``memory_mib`` are required
    by ``topo:`` and override GFD's labels for ``gfd:``; ``mig_layout`` is for
    ``topo:`` (see docs/facts-schema.md); ``nvml_module`` injects a pynvml-like module.
    Nothing is read here: files are read, and checked, on ``read()``.
    """
    # What NodeFacts.from_dict holds every agent's facts to: an operator's option past it
    # is said here, naming the option, not served for the daemon to refuse the node.
    for option, text in (("--hostname", hostname), ("--product", product)):
        if text is not None and len(text) > MAX_STR_LEN:
            raise SourceError(f"source {spec!r}: {option} {text[:40]!r}...: {len(text)} "
                              f"characters; at most {MAX_STR_LEN}")
    host = hostname or socket.gethostname()
    kind, sep, arg = spec.strip().partition(":")
    if kind == "nvml" and not sep:
        return NvmlSource(hostname=host, nvml_module=nvml_module)
    if kind in ("gfd", "file", "topo") and sep:
        if not arg:
            raise SourceError(f"source {spec!r}: needs a path, e.g. {kind}:/etc/swarmgpu/node")
        if memory_mib is not None and memory_mib < 1:
            raise SourceError(f"source {spec!r}: --memory-mib must be at least 1, got {memory_mib}")
        if memory_mib is not None and memory_mib > MAX_GPU_MEMORY_MIB:  # (the daemon's)
            raise SourceError(f"source {spec!r}: --memory-mib must be at most "
                              f"{MAX_GPU_MEMORY_MIB} (16 TiB; MiB per GPU, e.g. 81559)")
        if kind == "gfd":
            return GfdSource(arg, hostname=host, product=product, memory_mib=memory_mib)
        if kind == "file":
            return FileSource(arg, hostname=hostname)
        if not product or memory_mib is None:
            raise SourceError(
                f"source {spec!r}: a topo -m capture has no GPU model or memory; "
                "pass --product NAME --memory-mib N (e.g. --product 'NVIDIA H100 80GB HBM3' "
                "--memory-mib 81559)"
            )
        return TopoSource(
            arg, hostname=host, product=product, memory_mib=memory_mib, mig_layout=mig_layout
        )
    raise SourceError(
        f"source {spec!r} is not understood; accepted kinds: {', '.join(KINDS)}"
    )
