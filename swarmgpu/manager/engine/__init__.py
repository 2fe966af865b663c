"""The engine edge: every write swarmgpu makes to Swarm.

``actuator``     the only writer: dry-run, read-back, budgets; ``Writes`` is the gate each
                 engine write passes, with its decision when it restarts a task
``writes``       bounded parallel writes to different Swarm objects (one per node)
``stop``         the daemon's stop request: once asked, no write starts (the rest of the
                 step's writes are left for the next leader or start), nor a node read
                 (agents' facts, metrics pages)
``proxy_policy`` what the docker-proxy lets the daemon's writes change, and what it hides
"""
