"""What swarmgpu takes back from a service that no longer asks it for a GPU.

The owner removes a service's request labels (``docker service update --label-rm
swarmgpu.gpus``, or a re-deploy of a file that keeps the gate): placement releases its
holdings, closing its gates, but the gate constraint (or the hold) in its spec would
then match no node ever again, and Swarm could never place its tasks. The owner asked
for no GPU, not for the service to stop. So its spec loses, in one write, what is
swarmgpu's: its own gate constraint, the hold and the renewal (``keys.RENEW_STATE``),
its output labels (device maps, shares, its ``state.*`` records but a move's), the
share env lines and the ``MaxReplicas`` it recorded setting; the update parallelism
it recorded before setting 0 is given back, and the device template becomes
``NVIDIA_VISIBLE_DEVICES=void`` (with no line at all, a CUDA image's own ``all`` would
hand it every GPU of its node).

``CUDA_DEVICE_ORDER=PCI_BUS_ID`` goes too where adoption appended it (its record,
``state.order-env``, says so); the same line without the record is the owner's. A
record whose line the owner took out is dropped by the cycle that sees it gone
(``gating.stale_order_record``), so a line the owner writes again is theirs.

Everything else stays, a value of the owner's for the same thing included: a gate
naming another service, ``CUDA_DEVICE_ORDER`` not recorded as swarmgpu's, a
``MaxReplicas`` of 1 or with no record of swarmgpu's, generic reservations, the device
mount (``placement.grants: mounts``; with no device map it names no device). A service
whose request is only invalid is not here: it keeps what it held.

Only a service with something to take back is written: one whose holdings are
released in this cycle, or that carries its gate, the hold or the renewal. The spec
tells what is left to do, so a write that failed is made again next cycle, with no
ledger entry left.
Pure.
"""

from __future__ import annotations

from functools import cache

from swarmgpu.manager.placement.devicemap import kept_parallelism, parallelism_of
from swarmgpu.manager.placement.envs import (
    ORDER_ENV,
    VOID_LINE,
    env_template,
    env_template_per_node,
)
from swarmgpu.manager.placement.keys import (
    DEVICES,
    MAX_STATE,
    MOVE_STATE,
    ORDER_STATE,
    is_gate_of,
    is_hold,
    is_renew,
)
from swarmgpu.manager.placement.records import NO_WRITES, SpecWrites
from swarmgpu.manager.services.sharing import SHARE, env_lines
from swarmgpu.swarm.client import SwarmService

STATE = "state."  # swarmgpu's records on a service (keys)

# The decision its write is made under: it replaces the service's tasks (a constraint
# and env change), as the release of its GPUs must -- a running task's container keeps
# the devices it was started with.
UNGATED = (
    "release",
    "its GPU request labels were removed: swarmgpu's gate and device "
    "lines leave its spec, and its tasks run without a GPU",
)


def ungate(s: SwarmService, prefix: str, *, released: bool
           ) -> tuple[SpecWrites, tuple[str, ...]]:
    """The write that takes swarmgpu's own lines out of ``s``, a service with no
    request (module docstring); ``released``: its holdings are released in this cycle.
    ``NO_WRITES`` when there is nothing to take back. With it, its notes (a record
    not trusted: ``devicemap.kept_parallelism``)."""
    cons = tuple(
        c
        for c in s.constraints
        if prefix in c and (is_gate_of(c, prefix, s.name) or is_hold(c, prefix)
                            or is_renew(c, prefix))
    )
    if not cons and not released:
        return NO_WRITES, ()  # (nearly every service without a request, every cycle)
    owned, move = _owned_labels(prefix), prefix + MOVE_STATE
    labels = tuple(k for k in s.labels if k.startswith(owned) and k != move)
    templates = (env_template(prefix), env_template_per_node(prefix))
    voided = tuple((e, VOID_LINE) for e in dict.fromkeys(s.env) if e in templates)
    shares = tuple(e for e in dict.fromkeys(s.env) if e in env_lines(prefix))
    if s.labels.get(prefix + ORDER_STATE) == "true" and ORDER_ENV in s.env:
        shares += (ORDER_ENV,)  # appended by adoption, as its record says: swarmgpu's
    most = s.max_replicas_per_node
    mine = bool(most) and s.labels.get(prefix + MAX_STATE) == str(most)
    parallelism, untrusted = _parallelism(s, prefix)
    return SpecWrites(
        service_labels_remove=labels,
        remove_constraints=cons,
        replace_env=voided,
        remove_env=shares,
        set_max_replicas=0 if mine else None,
        set_update_parallelism=parallelism,
    ), (untrusted,) if untrusted else ()


def _parallelism(s: SwarmService, prefix: str) -> tuple[int | None, str | None]:
    """The owner's update parallelism, given back: swarmgpu set 0 (every waiting task
    at once) and recorded the owner's value (``devicemap``); a note where the record
    is not one to trust (``kept_parallelism``): this write removes it, the spec keeps 0."""
    now = parallelism_of(s)
    return kept_parallelism(s, prefix, released=True) if now == 0 else (None, None)


@cache  # one per prefix
def _owned_labels(prefix: str) -> tuple[str, ...]:
    """What its output labels start with: device maps, shares, its state records (but a
    move's, which is the mover's: it ends the move)."""
    return (prefix + DEVICES, prefix + SHARE, prefix + STATE)
