"""The daemon's cycle: a pipeline of declared steps and what they hand each other.

The machinery:

``pipeline``  the Step protocol (name, requires, provides, run) and Pipeline, which
              checks the order when the daemon starts and runs the steps each cycle
``session``   CycleSession: one cycle's slots (the snapshot, the facts with their GPU
              health states, the placement plan, the metrics, the moves, ...), each
              written by the one step that provides it and read by the steps that
              require it
``wiring``    the daemon's steps in their order (``daemon_steps``): what `swarmgpu run`
              runs, and what tests build
``host``      CycleHost: what a step sees of the daemon (read-only)
``heap``      garbage collection between cycles, not in one
``term``      the leader's term: each write asks again whether this engine still leads
``budget``    the cycle's engine budget: past it no read is sent, no write or step
              starts, so the watchdog's ping comes in time
``schedule``  the daemon's repeating jobs (cycle, facts watch): one at a time, a late
              run run, a clock far ahead reached in one step
``daemon_metrics`` the daemon's own Prometheus metrics
``triggers``  what started each cycle (start, interval, facts, event, reconnect), counted
``healthz``   /healthz and the last cycle's outcome in one word (the map says it too)

The steps, in the order ``wiring`` runs them:

``label_sync`` node labels from facts; its node writes held for placement
``placement``  the plan (``placement/``) and its writes, in the only safe order
               (``releases``: a service's releases judged against its spec first;
               ``oneshot_holds``: a one-shot's preemption holds, from the records;
               ``workloadstore``: the workload model it starts from and stores)
``grants``     services that see GPUs without a grant: reported, voided
``scrape``     every node's GPU metrics, read once per cycle for the rebalancer and the map
``rebalance``  windows, policies, movers (``rebalance/``)
``preemption`` the preemption actuator: budgets, dry-run, the victims' writes
               (``preempt_step``: the step that runs it;
               ``preempt_budget``: the budgets' hour, kept on the swarm object;
               ``preempt_hour``: its writes, before the victims' and after;
               ``victimlist``: the victims it names, which their records must match;
               ``victimspec``: a victim's spec write, its waiting task renewed;
               ``victimstop``: the victims stopped as one, their gates in one write;
               ``victimback``: a victim's move rolled back, not cooling down
               nor spent where no task of it stopped;
               ``preempt_notes``: what a preemptor's plan says of the decision;
               ``oneshot_plan``: `plan` and `status`'s plan, as the daemon's with
               its preemption previewed)
``observe``    the cluster document, the over-share watch, the map
``overshare``  placement.overshare: restart, acting on observe's watch
"""
