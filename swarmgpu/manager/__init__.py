"""The daemon side: what runs on a Swarm manager.

The cycle (``daemon``, ``sync``, ``actuator``), placement (``placement``,
``placement_step``, ``requests``, ``sharing``), the agents as the daemon sees them
(``agent_client``, ``agentbook``, ``boundedhttp``), what it tells people (``audit``,
``render``, ``cluster_view``, ``observe``, ``overshare``, ``history``, ``webmap``,
``webguard``, ``web/``), ``rebalance/``, and ``proxy_policy`` (what the docker-proxy
lets the daemon's writes change). Imports ``core``, ``swarm`` and
``allocator``; never the agent.
"""
