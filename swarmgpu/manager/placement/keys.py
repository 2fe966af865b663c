"""Label keys placement owns, and the task states that count as meant to run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import cache
from typing import TypeVar

from swarmgpu.swarm.client import MEANT_STATES as MEANT_STATES  # (re-exported)
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.constraints import ConstraintError, parse_constraint
from swarmgpu.swarm.taskstop import MAX_GRACE_S
from swarmgpu.swarm.taskstop import STOPPING_STATES as STOPPING_STATES  # (re-exported)

GATE = "service."
# The hold: a constraint an annotated stack deployed as written carries instead of the
# gate. No node ever has the label (label sync owns every other key under the prefix
# and removes it), so a task made from the file waits; swarmgpu replaces it with the
# gate when it writes the device map (docs/deploy.md, "Deploying without render").
HOLD = "hold"
ASSIGN = "assign."
DEVICES = "devices."
MOVE_STATE = "state.move"  # service label: a rebalancing move in progress (JSON)
MAX_STATE = "state.max-replicas"  # service label: the MaxReplicas swarmgpu set (packed)
# service label: swarmgpu appended CUDA_DEVICE_ORDER=PCI_BUS_ID (adoption), so it is its to
# take back on release; the same line without it is the owner's
ORDER_STATE = "state.order-env"
PARALLELISM_STATE = "state.update-parallelism"  # the owner's, while swarmgpu set 0
# service label: "<re-placements>@<epoch s of the last>" (``converge``'s back-off, kept in
# Swarm so `plan`, `status` and a new leader see it)
REPLACED_STATE = "state.replaced"
# service label: the ForceUpdate swarmgpu wrote to replace spread tasks Swarm ran
# together on one node (``converge.crowding``): no second one while that update rolls
RESPREAD_STATE = "state.respread"
# The renewal constraint ``node.labels.<p>state.renew!=<n>``: a change of placement alone
# that every node meets (no node has the label: label sync owns every key under the
# prefix it does not write, and removes it), so Swarm's updater replaces only a task
# without a node and leaves the running ones where they are (swarmkit ``IsTaskDirty``);
# ``n`` changes with each renewal (``converge``: a waiting task Swarm no longer tries).
RENEW_STATE = "state.renew"
# Every key under it is a record kept on a service or the swarm object, never on a node.
STATE = "state."
RENEW_DIGITS = 18  # the longest renewal value read as a number (spec versions are far below)
ACTIVE_STATES = (
    "running",
    "starting",
    "preparing",
    "assigned",
    "accepted",
    "ready",
    "pending",
    "new",
    "allocated",
)
# A task Swarm has put on its node and still means to run there: not one still waiting
# for a node (new, pending, allocated), nor one ended (a restart makes a new one).
ASSIGNED_STATES = frozenset(ACTIVE_STATES) - {"new", "pending", "allocated"}


def stopping(t: SwarmTask) -> bool:
    """A task Swarm is stopping that its scheduler still counts on its node: it uses the
    node's CPU, memory, host ports and its GPUs, but is none of its service's meant tasks
    (not a live replica, not a victim, not a move, keeps no holding)."""
    # swarmkit manager/scheduler/scheduler.go (updateTask, setupTasksList) and nodeinfo.go
    # (addTask/removeTask): reservations, generic resources and host ports count on a node
    # while the actual state is assigned..running, whatever the desired state.
    return bool(t.node_id) and t.desired_state in STOPPING_STATES and t.state in ASSIGNED_STATES


SKEW_S = 60  # of the Swarm leader's clock ahead of the daemon's, a rejected task held as ever


def stop_began(t: SwarmTask, now: float, looked: bool) -> float:
    """When a reader that first sees ``t`` stopping at ``now`` (epoch s) takes its stop
    to have begun: ``now``, or for a task already stopping at the reader's first look
    (``looked`` false: a one-shot `plan` or `status`, a daemon restarted mid-stop) its
    ``UpdatedAt`` where earlier, so that it times the hold as a daemon that saw the stop
    begin does (``stop_hold_end``)."""
    # Swarm sets UpdatedAt with every change to the task, its desired state's too: it is
    # never before the stop began, on the leader's clock. A time ahead of ``now`` (a
    # skewed clock, a forged time) is ``now``: it never lengthens a hold. One behind (the
    # leader's clock behind ours) ends it early by as much, SKEW_S of it absorbed, as a
    # rejected task's (``rejected_running``); a task a reader saw begin to stop is timed
    # by that sight alone, so only the tasks already stopping at its start are exposed.
    if looked or t.updated_at is None:
        return now
    return min(now, t.updated_at)


# Cycles a task's memory (its stop's start, a recreated entry's owner) outlives its last
# listing: an engine hiccup that leaves a task out of one listing forgets nothing, while
# one gone for good is forgotten (the memory stays bounded).
UNLISTED_CYCLES = 3
_K = TypeVar("_K")
_V = TypeVar("_V")


def kept_unlisted(kept: Mapping[_K, _V], unlisted: Mapping[_K, int],
                  listed: AbstractSet[_K]) -> tuple[dict[_K, _V], dict[_K, int]]:
    """The entries of ``kept`` (a memory across cycles) that are ``listed`` this cycle,
    or were not for at most ``UNLISTED_CYCLES`` cycles (``unlisted``: key -> cycles so;
    the second dict returned counts them on, the listed ones left out)."""
    missed = {k: unlisted.get(k, 0) + 1 for k in kept.keys() - listed}
    missed = {k: n for k, n in missed.items() if n <= UNLISTED_CYCLES}
    return {k: v for k, v in kept.items() if k in listed or k in missed}, missed


def kept_starts(began: Mapping[str, float], unlisted: Mapping[str, int],
                leaving: Sequence[SwarmTask], now: float, looked: bool,
                ) -> tuple[dict[str, float], dict[str, int]]:
    """Each task of ``leaving`` (stopping, or rejected and running) with its stop's start
    (``stop_began``; the one in ``began``, task id -> start, where known), and the tasks
    of ``began`` listed no more for at most ``UNLISTED_CYCLES`` cycles (``unlisted``:
    task id -> cycles so, counted on in the second dict returned), their start kept."""
    listed = {t.id: began[t.id] if t.id in began else stop_began(t, now, looked)
              for t in leaving}
    kept, missed = kept_unlisted(began, unlisted, listed.keys())
    return listed | kept, missed


def stop_hold_end(t: SwarmTask, began: float) -> float:
    """When the hold of a task Swarm is stopping (``stopping``) whose stop began at
    ``began`` (``stop_began``) ends (epoch s): its stop grace period after. Its GPUs, its
    overdue time (``stop_overdue``) and its node's end for a global job's run are all
    timed by it."""
    return began + t.stop_grace_s


def stop_overdue(t: SwarmTask, began: float, now: float) -> bool:
    """A task Swarm is stopping (``stopping``), whose stop began at ``began``
    (``stop_began``), is past its hold's end at ``now`` (epoch seconds): its stop grace
    period and the skew are over (as a rejected task's GPUs are held no longer), yet Swarm
    counts it on its node (its node down or paused, its stop stuck). Whoever waits for its
    stop waits no longer."""
    return now > stop_hold_end(t, began) + SKEW_S


def rejected_running(t: SwarmTask, now: float) -> bool:
    """A task Swarm is stopping that its constraint enforcer rejected (its gate closed)
    whose container may still run at ``now`` (epoch seconds): Swarm's scheduler freed its
    reservations, but its GPUs are in use until its stop grace period from its status
    time is over (``swarm.taskstop``)."""
    # ``now`` is the daemon's clock, the status time the Swarm leader's: Swarm's TLS and
    # raft want the managers' clocks in step, and a small skew moves the end of a hold
    # by as much. A hold never has more than the cap (and a minute of skew) left: a
    # status time far ahead (a skewed clock, a forged time) would otherwise hold the GPUs
    # for the whole skew.
    return (bool(t.node_id) and t.desired_state in STOPPING_STATES
            and t.rejected_until is not None
            and now < t.rejected_until <= now + MAX_GRACE_S + SKEW_S)


def gate_key(prefix: str, service: str) -> str:
    return f"{prefix}{GATE}{service}"


def gate_constraint(prefix: str, service: str) -> str:
    return f"node.labels.{gate_key(prefix, service)}==true"


def hold_constraint(prefix: str) -> str:
    return f"node.labels.{prefix}{HOLD}==true"


def _true_label(constraint: str, start: str) -> str | None:
    """The node label of a ``node.labels.<label>==true`` constraint whose label starts
    with ``start``, read as Swarm reads it (spaces around the parts, ``node.labels.``
    and the value in any case; the label key exact); None for any other constraint."""
    if start not in constraint:
        return None  # (nearly every constraint)
    try:
        c = parse_constraint(constraint)
    except ConstraintError:
        return None
    label = c.node_label or ""
    return label if c.op == "==" and c.value.lower() == "true" and label.startswith(start) else None


def is_hold(constraint: str, prefix: str) -> bool:
    """The hold constraint, read as ``gate_of`` reads a gate (``_true_label``)."""
    return _true_label(constraint, prefix + HOLD) == prefix + HOLD


def never_on_a_node(key: str, prefix: str) -> bool:
    """A node label no node carries: the hold and the renewal constraint are met (or not)
    because no node has their label (``HOLD``, ``RENEW_STATE``), and every other key
    under ``<p>state.`` is a record kept on a service or the swarm object. The daemon
    writes none on a node and label sync removes one it finds; the docker-proxy refuses
    a node write that sets one (a node with ``<p>state.renew=<n>`` fails that renewal)."""
    return key == prefix + HOLD or key.startswith(prefix + STATE)


def renew_constraint(prefix: str, n: int) -> str:
    return f"node.labels.{prefix}{RENEW_STATE}!={n}"


def renew_of(constraint: str, prefix: str) -> str | None:
    """The value of a renewal constraint (``node.labels.<p>state.renew!=<n>``, read as
    Swarm reads it), or None for any other constraint (``== <n>`` is the owner's)."""
    if prefix + RENEW_STATE not in constraint:
        return None  # (nearly every constraint)
    try:
        c = parse_constraint(constraint)
    except ConstraintError:
        return None
    return c.value if c.op == "!=" and c.node_label == prefix + RENEW_STATE else None


def is_renew(constraint: str, prefix: str) -> bool:
    return renew_of(constraint, prefix) is not None


def next_renewal(constraints: Sequence[str], prefix: str, version: int) -> tuple[str, ...]:
    """The renewal constraint to write next: ``n`` the service's spec version, past any
    value its constraints carry (a task made from one of them differs from it). A value
    too long to be ours (an owner's 5000 digits: ``int`` refuses it) is passed over as a
    non-numeric one is: the new value's text differs from it anyway."""
    old = [int(v) for c in constraints if (v := renew_of(c, prefix)) is not None
           and v.isdigit() and len(v) <= RENEW_DIGITS]
    return (renew_constraint(prefix, max([version, *(n + 1 for n in old)])),)


def gate_of(constraint: str, prefix: str) -> str | None:
    """The service whose gate ``constraint`` is, or None: a gate is exactly
    ``node.labels.<prefix>service.<name>==true``, read as Swarm reads it
    (``_true_label``). Any other constraint on such a label (``!= true``, ``== false``)
    is the owner's: kept, never taken for a gate (``owned_label_read``)."""
    label = _true_label(constraint, prefix + GATE)
    return label.removeprefix(prefix + GATE) or None if label else None


def is_gate_of(constraint: str, prefix: str, service: str) -> bool:
    """``service``'s own gate constraint (``gate_of``)."""
    return gate_of(constraint, prefix) == service


def owned_label_read(constraint: str, prefix: str) -> str | None:
    """The node label a constraint that is not a gate reads, where it is one placement
    writes (a gate or a ledger entry); None otherwise. Such labels change as swarmgpu
    places: audit and render warn of it (``OWNED_LABEL_RISK``), never refuse it."""
    if gate_of(constraint, prefix) is not None or not any(
        p in constraint for p in owned_prefixes(prefix)
    ):
        return None
    try:
        key = parse_constraint(constraint).node_label
    except ConstraintError:
        return None
    return key if key is not None and owned_by_placement(key, prefix) else None


# What a constraint ``owned_label_read`` names risks (audit's finding, render's note).
OWNED_LABEL_RISK = (
    "a node label swarmgpu writes and changes as it places (its gates and ledger "
    "entries), so the nodes that meet it change too: its tasks may find no node, and "
    "Swarm stops a running task when that label changes on its node; kept as written "
    "(only {gate} is a gate swarmgpu reads as one); constrain on a label you own instead"
)


def assign_key(prefix: str, service: str) -> str:
    return f"{prefix}{ASSIGN}{service}"


def devices_key(prefix: str, node_id: str, slot: int | None = None) -> str:
    """The service label a task on ``node_id`` reads its devices from; with ``slot``,
    the one of that task slot (replicas packed on one node)."""
    return f"{prefix}{DEVICES}{node_id}" if slot is None else f"{prefix}{DEVICES}{node_id}.{slot}"


def owned_by_placement(key: str, prefix: str) -> bool:
    return key.startswith(owned_prefixes(prefix))


@cache  # one per prefix: a node's labels are filtered by it every time the node changes
def owned_prefixes(prefix: str) -> tuple[str, str]:
    """What the keys ``owned_by_placement`` start with (for ``str.startswith``)."""
    return (prefix + GATE, prefix + ASSIGN)
