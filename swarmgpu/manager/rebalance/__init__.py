"""Rebalancing: metrics in, windows, pure policies, one safe actuator (the mover).

Layers, outer to inner: ``step`` (daemon hook) -> ``mover`` (the only writer) ->
``planner`` -> ``policies/*`` (pure) -> ``signals``/``attribution``/``scrape``.
"""
