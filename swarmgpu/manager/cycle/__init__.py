"""The daemon's cycle: a pipeline of declared steps and what they hand each other.

``session``   CycleSession: one cycle's slots (the snapshot, the facts with their GPU
              health states, the placement plan, the metrics, the moves, ...), each
              written by the one step that provides it and read by the steps that
              require it
``pipeline``  the Step protocol (name, requires, provides, run) and Pipeline, which
              checks the order when the daemon starts and runs the steps each cycle
``wiring``    the daemon's steps in their order (``daemon_steps``): what `swarmgpu run`
              runs, and what tests build
``label_sync`` the first step: node labels from facts, its node writes held for placement
``scrape``    every node's GPU metrics, read once per cycle for the rebalancer and the map
``overshare`` placement.overshare: restart, acting on observe's watch
"""
