"""Rebalancing: metrics in, windows, pure policies, one safe actuator (the mover).

Layers, outer to inner (the daemon's step is ``cycle.rebalance``): ``mover`` (the only writer;
``repin`` for a move between GPUs of one node, ``startchecks`` for a move's fresh checks
before its first write, ``findings`` for what it says and mends of forged, mismatched and
unreadable records, ``admission`` for which moves may start and
the move budgets, ``budget`` for the fragmentation moves'
budget, ``record`` for a move's record in Swarm, ``endedlist`` for the moves ended by
service (what a cool-down mark is read against), ``outcomes`` for what is said of each
move (its end once, kept in the record), ``verdict`` for which records are
moves in flight and audit's findings of them) -> ``planner`` -> ``policies/*`` (pure
plugins) over ``context`` (what policies see; ``targets``: Swarm's filters for a move's
target; ``trial``: a check's allocator made on the pass's kept one, taken back after;
``heldgpus``: what of a held GPU a hold keeps from a service, for the policies and
the mover alike; ``swarmkeeps``: which of a down or drained node's GPU services Swarm
itself does not move) -> ``signals``/``windows`` (utilisation
windows), ``attribution`` (who holds what) and ``scrape`` (the metrics pages read).
``moves`` holds the values all of them pass: Move, MoveRecord, Proposal, Trigger.
"""
