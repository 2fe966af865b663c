"""The one allocator: the daemon, ``render``, ``plan`` and ``simulate`` all use it.

GPU picking, pure: ``core`` (the allocator), ``values`` (node spec, demand, choice),
``scorer`` (SwarmScorer) and ``scores`` (its score memo), ``topology``, ``mig``,
``fragmentation``, ``untouched`` (what a whole node is worth to the tasks only it can
host), ``defrag`` (defragmenting moves), ``rescue`` (room for a pending
task), ``shortfall`` (a pending request's words for what its closest node lacks),
``rollout`` (a sampled roll-out among near-best nodes, an experiment, off), and
``workload`` (the task mix the scoring expects, learned or pinned).
Imports only ``swarmgpu.core``.
"""
