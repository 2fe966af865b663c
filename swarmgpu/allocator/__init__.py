"""The one allocator: the daemon, ``render``, ``plan`` and ``simulate`` all use it.

GPU picking, pure: ``core`` (the allocator), ``topology``, ``mig``, ``fragmentation``,
``defrag``, and ``workload`` (the task mix the scoring expects, learned or pinned).
Imports only ``swarmgpu.core``.
"""
