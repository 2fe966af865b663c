"""Trace-driven placement simulator (openb / FGD ATC'23 replay).

``cli_entry``     what ``swarmgpu simulate`` does (the click command calls it)
``trace``         the openb CSV files read (``traces/``: the bundled trace)
``variants``      heavier workloads derived from the default pod list
``runs``          what every replay shares: arrival order, pod kinds, result records
``replay``        the FGD paper's replay, for the baselines (``baselines``: the
                  published policies re-implemented)
``timeline``      the replay with departures
``swarm_replay``  the trace through the daemon's own planner (``FragmentationMover``:
                  ``--rebalance-moves`` as the daemon's mover ends each move;
                  ``swarm_rescue``: the defrag policy's room for a pod that finds no node)
``swarm_sched``   ``--cpu-pods swarm``: Swarm's own scheduler for the CPU-only pods
``rebalance``     moves for the baselines' replay, against a budget (``Defragmenter``,
                  ``MoveRescuer``)
``limits``        ``--move-limits daemon``: the daemon's budgets (rebalance admission's
                  rule) on every replay's moves, per call; ``--move-flight``
``priorities``    ``--priorities SHARE``: a queue, with and without priorities
``bound``, ``bound_model``, ``bound_runs``, ``bound_timed``  the upper bound beside every
                  table: the model, per seed, and beside the departures replay
``report``        policies over seeds, means as text, JSON or a plot
"""
