"""The manager daemon's own Prometheus metrics, on a registry it is given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class DaemonMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycles = Counter(
            "swarmgpu_cycles", "Sync cycles run, by outcome (ok, partial, error, follower, "
            "over_budget, stopped)", ["outcome"], registry=r
        )
        self.cycles_started = Counter(  # (cycle.triggers)
            "swarmgpu_cycles_started", "Cycles the daemon started, by what started them "
            "(start, interval, facts, event, reconnect)", ["trigger"], registry=r
        )
        self.cycle_seconds = Histogram(
            "swarmgpu_cycle_duration_seconds", "Duration of one sync cycle", registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.label_writes = Counter(
            "swarmgpu_label_writes", "Node label writes that landed", registry=r
        )
        self.label_conflicts = Counter(
            "swarmgpu_label_conflicts",
            "Writes retried because the node changed under us (update out of sequence)",
            registry=r,
        )
        self.held_changes = Gauge(
            "swarmgpu_label_changes_held",
            "Label changes held back because they would stop running tasks",
            registry=r,
        )
        self.agents_unreachable = Gauge(
            "swarmgpu_agents_unreachable", "Nodes whose agent did not answer this cycle",
            registry=r,
        )
        self.facts_stale = Gauge(
            "swarmgpu_nodes_facts_stale",
            "Nodes whose agent has not answered for health.node_lost_grace_s (its last "
            "facts stand in for what they hold), or answers with facts read that long ago "
            "(X-Swarmgpu-Facts-Age): nothing new is placed on them",
            registry=r,
        )
        self.nodes_gpus_unread = Gauge(
            "swarmgpu_nodes_gpus_unread",
            "Nodes whose agent answers but cannot list their GPUs (NVML cannot initialise, "
            "its GPU count failed) this cycle; their labels are left as they are",
            registry=r,
        )
        self.identity_off = Gauge(
            "swarmgpu_agents_identity_off",
            "1 when agents are read without a checked identity (agents.identity: none)",
            registry=r,
        )
        self.errors = Counter(
            "swarmgpu_errors", "Errors by kind: swarm (the engine), label_write, cycle, "
            "watch, budget (a cycle ended at its engine budget)", ["kind"], registry=r
        )
        self.is_leader = Gauge(
            "swarmgpu_is_leader", "1 when this daemon's engine is the Swarm leader", registry=r
        )
        self.placements = Counter(
            "swarmgpu_placements", "Placement decisions applied", ["outcome"], registry=r
        )
        self.pending = Gauge(
            "swarmgpu_pending_requests", "GPU requests that cannot be placed now", registry=r
        )
        self.planned = Gauge(  # every status each cycle, 0 included: an alert needs it
            "swarmgpu_planned_services", "Services with a GPU request, by their plan's status "
            "(placed, pending, invalid, released, done, failed)", ["status"], registry=r
        )
        self.moves = Counter(
            "swarmgpu_moves", "Rebalancing moves, by outcome", ["outcome"], registry=r
        )
