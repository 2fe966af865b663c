"""The daemon side: what runs on a Swarm manager.

The folder is the pipeline. ``daemon`` is the process (schedules cycles, watches events,
serves HTTP, wires the steps); ``cycle/`` is what it runs each cycle as leader: the
pipeline of declared steps in their order (label sync, placement, grants, metrics,
rebalance, preemption, observe, overshare), one module per step. The steps do their work
with the packages below them:

``nodes/``      what the agents say and what the daemon makes of it (facts, labels,
                GPU health, who owns which GPU)
``placement/``  the planner: snapshot in, plan out
``rebalance/``  moves of running GPU shares: windows, policies, the mover
``services/``   what a service asks for (the request language), may have (tenants), is
                told (sharing), sees without a grant (grants) and uses (overshare)
``engine/``     the engine edge: the only writer (actuator, writes) and what the
                docker-proxy lets it change
``web/``        the GPU map and /api: the cluster document, history, who may read
``commands/``   what the operator's commands compute: audit, plan, render

Imports ``core``, ``swarm`` and ``allocator``; never the agent.
"""
