"""The daemon side: what runs on a Swarm manager.

The cycle: ``daemon`` (schedules cycles, serves HTTP), ``cycle/`` (the pipeline of
declared steps and their session), ``host`` (what a step sees of the daemon), ``sync``
(label sync), ``actuator`` and ``writes`` (the only writer; bounded parallel writes),
``heap`` (garbage collection between cycles), ``daemon_metrics``.
Placement: ``placement/`` (the planner), ``placement_step`` (its step and writes),
``requests``, ``tenants``, ``sharing``, ``compose_gpu`` (Compose's GPU syntax),
``composefile`` (the stack file render writes, checked against ``schema/``), ``release``
(held changes written on the operator's word), ``preempt_step``.
GPU access without a grant: ``grants`` (found) and ``grants_step`` (reported, voided).
GPU health and ownership: ``gpuhealth`` (states per GPU), ``gpuowners`` (each node
speaks for its own GPUs). ``rebalance/`` (moves), ``overshare`` (use against share).
The agents as the daemon sees them: ``agent_client``, ``agentbook``, ``boundedhttp``.
What it tells people: ``audit``, ``render``, ``cluster_view``, ``observe``,
``history``, ``webmap``, ``webguard``, ``webauth`` (who may read), ``web/`` (the map's
static files). ``proxy_policy``: what the docker-proxy lets the daemon's writes change.
Imports ``core``, ``swarm`` and ``allocator``; never the agent.
"""
