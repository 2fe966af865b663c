"""GPU requests -> placement in Swarm terms. Pure: snapshot in, plan out.

How a placement is expressed (every piece verified on a real swarm, see README):

- node label ``<p>assign.<service>=UUID[@milli],...`` on each chosen node: the
  ledger. Node labels survive ``docker stack deploy``, so the daemon can always
  rebuild who holds which GPU from Swarm itself (no database, restarts lose nothing).
  Replicas packed on one node hold one entry per task slot:
  ``<p>assign.<service>=s1=UUID,...;s2=UUID,...``.
- service label ``<p>devices.<nodeID>=UUID,...``: the copy the env template reads:
  ``NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "<p>devices." .Node.ID "."
  .Task.Slot)) (index .Service.Labels (print "<p>devices." .Node.ID)) "void"}}``
  (``env_template``; the older template without the per-slot lookup is still accepted
  for services that are not packed). Changing service labels restarts no task.
- node label ``<p>service.<service>=true``: the gate. The service carries the
  constraint ``node.labels.<p>service.<service>==true``; no node has the label until
  swarmgpu opens it, so the service cannot start anywhere else, and never before its
  devices are written (the service label is written first, the gate after). Only that
  exact form is a gate (``keys.gate_of``); another constraint on the label (``!= true``,
  ``== false``) is the owner's, kept and obeyed as Swarm obeys it.
- replicas spread one per node (``max_replicas_per_node=1`` when several replicas are
  placed: one device list per node), or, when they cannot be spread and one node holds
  them all (``<p>pack``: auto/always), packed on that one node: its gate alone opens,
  ``MaxReplicas`` is lifted, and each task slot reads its own list
  ``<p>devices.<nodeID>.<slot>``. Spread replicas never get per-slot lists: Swarm
  chooses which slot runs on which node, so two slots' lists on one node could
  collide; packed replicas cannot, because every slot runs on the one gated node.
  Whole GPUs only: a share or a MIG device keeps one replica per node.
- service labels ``<p>share.<field>.<nodeID>`` for a shared (fractional) holding: what
  the container is told of its share, read by env templates (``swarmgpu.manager.services.sharing``).

The package, by responsibility; each module imports only modules listed before it
(docs/layout.md says what each owns; tests/test_layout.py checks both): ``keys``,
``records``; ``envs``, ``ledger``, ``recreated``, ``repinned``, ``specs``, ``tasks``,
``backoff``, ``generic``;
``hostports``; ``memsize``, ``reasons``, ``cpunodes``, ``cluster``, ``replicas``, ``filters``,
``quiet``, ``memo``; ``queues``;
``cycle``, ``jobs``, ``preemptroom``, ``preempted``, ``victimsearch``, ``preemptview``,
``heldroom``, ``victimmoves``, ``preempt``,
``heldchoice``, ``nominated``, ``recorded``, ``existing``, ``reads``, ``learning``;
``packing``, ``gating``,
``converge``, ``devicemap``;
``spread``, ``globalmode``; ``planned``, ``specwrite``, ``restarts``, ``ungate``,
``release``; ``service``;
``isolate``, ``commitpass``; ``planner``.
This module re-exports what the rest of swarmgpu uses.
"""

from __future__ import annotations

from swarmgpu.manager.placement.backoff import (
    REPLACE_BACKOFF_MAX_S,
    REPLACE_BACKOFF_S,
    Backoff,
)
from swarmgpu.manager.placement.cluster import (
    ClusterAllocator,
)
from swarmgpu.manager.placement.converge import (
    GATE_GRACE_S,
)
from swarmgpu.manager.placement.envs import (
    ORDER_ENV,
    device_env,
    env_template,
    env_template_per_node,
)
from swarmgpu.manager.placement.filters import (
    SwarmFilters,
)
from swarmgpu.manager.placement.hostports import (
    HostPorts,
)
from swarmgpu.manager.placement.keys import (
    ACTIVE_STATES,
    ASSIGN,
    DEVICES,
    GATE,
    HOLD,
    MAX_STATE,
    MOVE_STATE,
    OWNED_LABEL_RISK,
    REPLACED_STATE,
    assign_key,
    devices_key,
    gate_constraint,
    gate_key,
    gate_of,
    hold_constraint,
    is_gate_of,
    is_hold,
    owned_by_placement,
    owned_label_read,
)
from swarmgpu.manager.placement.ledger import (
    Holding,
    holdings_of,
    packed_holding,
    parse_holding,
    read_ledger,
)
from swarmgpu.manager.placement.nominated import (
    Nomination,
    Nominations,
)
from swarmgpu.manager.placement.planner import (
    Planner,
    plan_placement,
)
from swarmgpu.manager.placement.queues import (
    Moving,
)
from swarmgpu.manager.placement.records import (
    NodeWrites,
    PlacementPlan,
    ReplicaPlacement,
    ServicePlan,
    State,
    Status,
)
from swarmgpu.manager.placement.specs import (
    demand_of,
    node_spec,
    user_labels,
)
from swarmgpu.manager.placement.tasks import (
    NO_WAITING,
    Waiting,
)

__all__ = [
    "ACTIVE_STATES",
    "ASSIGN",
    "DEVICES",
    "GATE",
    "GATE_GRACE_S",
    "HOLD",
    "MAX_STATE",
    "MOVE_STATE",
    "NO_WAITING",
    "ORDER_ENV",
    "OWNED_LABEL_RISK",
    "REPLACED_STATE",
    "REPLACE_BACKOFF_MAX_S",
    "REPLACE_BACKOFF_S",
    "Backoff",
    "ClusterAllocator",
    "Holding",
    "HostPorts",
    "Moving",
    "NodeWrites",
    "Nomination",
    "Nominations",
    "PlacementPlan",
    "Planner",
    "ReplicaPlacement",
    "ServicePlan",
    "State",
    "Status",
    "SwarmFilters",
    "Waiting",
    "assign_key",
    "demand_of",
    "device_env",
    "devices_key",
    "env_template",
    "env_template_per_node",
    "gate_constraint",
    "gate_key",
    "gate_of",
    "hold_constraint",
    "holdings_of",
    "is_gate_of",
    "is_hold",
    "node_spec",
    "owned_by_placement",
    "owned_label_read",
    "packed_holding",
    "parse_holding",
    "plan_placement",
    "read_ledger",
    "user_labels",
]
