"""The nodes as the daemon sees them: what each agent says and what the daemon makes of it.

``agent_client`` a node's facts fetched from its agent: bounded, never trusted
``boundedhttp``  one HTTP(S) GET with a wall-clock deadline and a byte cap
``nodeurl``      a node's agent or metrics URL, its hostname filled in only as a host name
``agentbook``    each agent's last good facts and failures, kept for ``audit``
``termlooks``    an agent's silence as the daemon counts it: the term's first looks
``sync``         the snapshot, and label sync: facts -> node labels (through the actuator)
``gpuhealth``    GPU health states per GPU, kept across cycles
``gpuowners``    which node speaks for which GPU (each for the GPUs its facts list)
``watchmissed``  the agents the facts watch did not read in time, said once per change
``watchkey``     what the facts watch compares: the GPUs and their health as judged
"""
