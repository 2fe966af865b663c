"""The engine edge: everything that speaks Docker Swarm's language.

``client`` (the engine API, typed; ``errors``, what it could not do; ``swarmnode``, a
node as it describes one, and the GPU resource kinds; ``swarmservice``, a service as it
describes one; ``answerjson``, its answers refused where they name a key twice;
``engineaddr``, which engine it talks to and what to do when it cannot; ``engineskew``,
its spec writes refused while another manager runs a newer Docker; ``localstate``,
its own swarm node locked or failed to start), ``eventstream``
(its event stream, read bounded), ``unkeyed`` (the list entries without an ID, left out
and said), ``imageref`` (an image reference as the image list's filter), ``taskports``
(the host-mode ports a task binds, from its own status; a service's published ports; a
task's network drivers), ``taskstop`` (until when a task the constraint enforcer
rejected may still run), ``cache`` (nodes and services kept from the event stream),
``labels`` (the node labels swarmgpu owns), ``constraints`` (Swarm's constraint
language), ``plugins`` (its PluginFilter: the plugins a task needs, what a node lists),
``taskspec`` (which spec changes make Swarm replace a task), ``specread`` (a spec's
objects and numbers read as Docker sends them, or refused naming the field),
``identity`` (agent identity from the swarm's own PKI), ``dockerproxy`` (the
least-privilege door to the engine socket, with ``httpframe``, its strict HTTP framing,
``enginewire``, its side of the engine's connection, ``jsonstrict``, ``proxyhost``, the
Host its loopback TCP listener takes, ``proxystop``, its clean stop on SIGTERM, and
``surges``, its bound on the daemon's replica raises), ``agentservice`` (``agents.service`` against
Swarm: the service named, the GPU-labelled nodes its tasks run on).
Imports only ``swarmgpu.core``.
"""
