"""The engine edge: everything that speaks Docker Swarm's language.

``client`` (the engine API, typed), ``labels`` (the node labels swarmgpu owns),
``constraints`` (Swarm's constraint language), ``identity`` (agent identity from the
swarm's own PKI), ``dockerproxy`` (the least-privilege door to the engine socket, with
``httpframe``, its strict HTTP framing, and ``jsonstrict``). Imports only
``swarmgpu.core``.
"""
