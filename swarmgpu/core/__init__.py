"""The base every layer stands on (lowest layer: imports nothing else of swarmgpu).

The value types and contracts the agent and the manager share (``model``: GPU facts
and their JSON; ``samples`` and ``metrics_in``: the agent's /metrics page and how it
reads back), the configuration every process loads (``config``, with Swarm's label-key
rule in ``labelkeys`` so a bad prefix fails at load), and small helpers both HTTP
servers and every YAML reader use (``httpguard``, ``yamlfile``), and ``peertext``, which
cuts and cleans what a peer wrote before any error or note repeats it. A package rather
than loose top-level modules so that the tree shows the layer.
"""
