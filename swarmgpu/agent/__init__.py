"""What runs on a GPU node: the HTTP agent and what it reads and serves.

``server`` (the agent: /facts, /metrics), ``factscache`` (the facts, read at a fixed
rate, served from a cache), ``sampling`` (the GPU samples' source and deadline),
``access`` (who may read what: a manager certificate, the bearer token; a client's
wrong tokens limited), ``facts`` (NVML, GFD, file and topo sources), ``metrics`` (the
DCGM-style exposition), ``procattr`` (which task a GPU process belongs to),
``procroot`` (whether ``--proc-root`` shows the host's processes or only its own
container's), ``doctor`` and ``nodeconfig`` (checking and setting up a node).
Imports ``core``, ``swarm`` and ``allocator``; never the manager.
"""
