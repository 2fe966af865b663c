"""A placed service's desired Swarm state: device labels, ledger, gates, task replacement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from swarmgpu.core.peertext import peer_text, tenant_text
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.generic import int_or0
from swarmgpu.manager.placement.keys import (
    DEVICES,
    PARALLELISM_STATE,
    SKEW_S,
    assign_key,
    devices_key,
    gate_key,
    is_gate_of,
)
from swarmgpu.manager.placement.ledger import (
    Holding,
    holdings_of,
    holds_other,
    packed_holding,
    parse_holding,
)
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.manager.placement.tasks import Waiting
from swarmgpu.manager.services.sharing import SHARE, node_of_key, want_labels
from swarmgpu.manager.services.startfirst import stalled
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.specread import spec_object
from swarmgpu.swarm.taskstop import rfc3339_ns


@dataclass(frozen=True, slots=True)
class DeviceMap:
    """The device map step's answer: the service labels (device lists, share values,
    the ForceUpdate and parallelism records) to set and remove, the task renewal and
    pacing, its decision, and per node its ledger entry and gate (``node_set``, in node
    order); ``all_open``: every gate is open or opens in this plan."""

    labels_set: Mapping[str, str]
    labels_remove: tuple[str, ...]
    node_set: tuple[tuple[str, Mapping[str, str]], ...]
    all_open: bool
    gates_deferred: bool = False
    force_update: bool = False
    set_update_parallelism: int | None = None
    decision: tuple[str, str] | None = None
    warnings: tuple[str, ...] = ()


def write_devices_and_gates(
    s: SwarmService,
    placements: Sequence[ReplicaPlacement],
    draining: Mapping[int, tuple[tuple[str, ...], tuple[int, ...]]],
    running_on: Mapping[str, int],
    waiting: Waiting,
    cyc: Cycle,
) -> DeviceMap:
    """The desired Swarm state for the service: device labels, ledger, gates."""
    prefix, by_id = cyc.prefix, cyc.by_id
    held = holdings_of(s.name, placements)
    for nid, h in list(held.items()):
        if h.packed and draining:  # the ledger keeps them until the lists are gone
            held[nid] = packed_holding(s.name, nid, {**draining, **h.per_slot_milli()})
    labels_set, labels_remove = _service_labels(s, placements, cyc)
    # Swarm copies the service's labels into a task when it creates it, and a pending
    # task exists from the moment the service does: a task created before its device
    # map was written would start with NVIDIA_VISIBLE_DEVICES=void. So when the map
    # changes, waiting tasks are replaced (ForceUpdate, whose new value is recorded in
    # <p>state.devices-gen) and gates open only once every waiting task is newer.
    # The force is needed even where the map names no device (gpus "0"): Swarm's
    # scheduler never retries a waiting task of an older service revision (swarmkit
    # noSuitableNode; docs/deploy.md), so without it the task stays pending.
    gen_key = f"{prefix}state.devices-gen"
    gen = int_or0(s.labels.get(gen_key))
    ak, gk = assign_key(prefix, s.name), gate_key(prefix, s.name)
    changed_for_running = bool(running_on) and any(
        running_on.get(nid) and holds_other(by_id[nid].labels.get(ak), h)
        for nid, h in held.items()
    )
    force = False
    decision: tuple[str, str] | None = None
    warnings: tuple[str, ...] = ()
    if labels_set:
        gen = s.force_update  # tasks created from now on carry the map
    # Only a waiting task that reads a changed list needs replacing: one on a node whose
    # list did not change was made with it (a global service's node joining, while
    # another node's task waits, restarted every node's task).
    stale = bool(labels_set) and waiting.reads_map_of(
        _nodes_of([*labels_set, *labels_remove], prefix)
    )
    foreign, made_from = _foreign_lists(s, held, running_on, cyc)  # (its warning)
    if made_from or (labels_set and (stale or not running_on or changed_for_running)):
        force, gen = True, s.force_update + 1
        decision = _decision(s, held, running_on, changed_for_running, cyc, made_from)
        warnings = (RESTART_SAID,) if running_on else ()
    warnings += (foreign,) if foreign else ()
    if gen and s.labels.get(gen_key) != str(gen):
        labels_set[gen_key] = str(gen)
    gate_ready = not labels_set and not force and waiting.all_newer(gen)
    # The rolling updater replaces one task at a time and waits for it to run, which a
    # closed gate never allows: replace all waiting tasks at once (parallelism 0) when
    # nothing runs yet, and give the user's parallelism back once the gates are open.
    # A replicated service with no more replicas than its parallelism has every task in
    # the first batch already: no change, and no write to give it back.
    par_key = f"{prefix}state.update-parallelism"
    current_par = int_or0(str(parallelism_of(s)))
    parallelism: int | None = None
    if force and not running_on and (owners := all_at_once(s)) is not None:
        labels_set.setdefault(par_key, owners)
        parallelism = 0
    elif gate_ready and par_key in s.labels and current_par == 0:
        parallelism, untrusted = kept_parallelism(s, prefix)  # (one not trusted stays)
        warnings += (untrusted,) if untrusted else ()
        labels_remove += () if untrusted else (par_key,)
    node_set, deferred = _node_writes(s, held, gate_ready, ak, gk, cyc, running_on, waiting)
    warnings += stalled(s.spec, deferred and not waiting.all_newer(gen))  # (start-first)
    return DeviceMap(
        labels_set,
        tuple(labels_remove),
        tuple(node_set),
        not deferred,
        deferred,
        force,
        parallelism,
        decision,
        warnings,
    )


def _foreign_lists(s: SwarmService, held: Mapping[str, Holding],
                   running_on: Mapping[str, int], cyc: Cycle) -> tuple[str | None, bool]:
    """What to say of the service's device-list labels for a node it holds and runs on
    that name a GPU outside its holding there (None: none does), and whether a running
    task may have been made from one (its tasks are then replaced). The list is its
    owner's text (``--label-add``, a stack file), the holding the ledger's (node labels,
    the daemon's alone): a task Swarm made from such a list runs on those GPUs, and
    writing the list back leaves it there. Swarm expands the list into a task when it
    makes it, and a label change makes no task, so one made before the list came (a
    saved stack re-deployed after a repin) runs on its own GPUs: the list is written
    back and it keeps running (``_made_before``)."""
    keys: list[str] = []
    made_from: list[str] = []  # the nodes where a running task may carry such a list
    made = cyc.task_made.get(s.id, {})
    for nid, h in held.items():
        if not running_on.get(nid):
            continue
        own = set(h.uuids) | _ledger_gpus(s.name, nid, cyc)
        bad = _outside(s.labels, devices_key(cyc.prefix, nid), own)
        if not bad:
            note_clean(cyc, s.id, (nid,))
            continue
        keys += bad
        if not _made_before(s, nid, own, _times(made.get(nid, ())), cyc):
            made_from.append(cyc.by_id[nid].hostname if nid in cyc.by_id else nid)
    if not keys:
        return None, False
    # (as many labels as its owner writes: a few named, the rest counted)
    keys.sort()
    named = ", ".join(f"{tenant_text(k)}={tenant_text(s.labels[k])}" for k in keys[:NAMED])
    named += f" and {len(keys) - NAMED} more" if len(keys) > NAMED else ""
    said = (f"service {s.name}'s label(s) {named} name GPU(s) outside its holding there "
            "(the ledger): a task made from them runs on GPUs it was not given; its lists "
            "are written back from the ledger")
    if made_from:
        said += (f" and its tasks replaced (ForceUpdate): its task on "
                 f"{peer_text(', '.join(sorted(made_from)))} may have been made from them "
                 "(not seen run under the ledger's lists by this planner, nor shown older "
                 "by Swarm's record; a daemon that saw it run under the ledger's lists "
                 "keeps it: a one-shot plan has no such memory)")
    else:
        said += (", and its running task(s), made before them (a label change makes no "
                 "task), keep running")
    return said + f"; leave {cyc.prefix}devices.* labels to swarmgpu", bool(made_from)


def _ledger_gpus(name: str, nid: str, cyc: Cycle) -> set[str]:
    """The GPUs the ledger names for service ``name`` on ``nid`` as it stands (before
    this plan's write). A re-placement (an evacuation) changes the holding while the
    lists still name these: they are the daemon's own, not foreign, and the running
    task restarts for the re-placement anyway (``changed_for_running``)."""
    n = cyc.by_id.get(nid)
    value = n.labels.get(assign_key(cyc.prefix, name)) if n is not None else None
    h = parse_holding(name, nid, value) if value is not None else None
    return set(h.uuids) if h is not None else set()


def note_clean(cyc: Cycle, sid: str, nodes: Iterable[str]) -> None:
    """The service's device lists for ``nodes`` are seen as the ledger says (a settled
    plan's too: it writes none): its tasks running there were not made from a foreign
    list since, so their CreatedAt are kept, in place of those seen before
    (``Cycle.clean_made``; one unknown: none kept), and nodes gone from the swarm
    forgotten."""
    made = cyc.task_made.get(sid, {})
    for nid in nodes:
        times = _times(made.get(nid, ()))
        if times:
            book = cyc.clean_made.setdefault(sid, {})
            book[nid] = times
            if len(book) > len(cyc.by_id):  # nodes gone (each joins with a new ID)
                for gone in book.keys() - cyc.by_id.keys():
                    del book[gone]


def _outside(labels: Mapping[str, object], key: str, own: set[str]) -> list[str]:
    """The device lists of node key ``key`` in ``labels`` (``key``, ``key.<slot>``) that
    name a GPU outside ``own`` (a value that is not text too: not read)."""
    return [k for k, v in labels.items()
            if isinstance(k, str) and (k == key or k.startswith(key + "."))
            and not (isinstance(v, str) and {u for u in v.split(",") if u} <= own)]


def _times(created: Sequence[str]) -> frozenset[int]:
    """Tasks' CreatedAt (ns); none where one is not an RFC 3339 time or is Go's zero
    time, which Docker writes for a time it does not have (its age unknown: never
    proved older; every such task reads alike)."""
    times = [rfc3339_ns(c) for c in created]
    if None in times or GO_ZERO_NS in times:
        return frozenset()
    return frozenset(t for t in times if t is not None)


def _made_before(s: SwarmService, nid: str, own: set[str], made: frozenset[int],
                 cyc: Cycle) -> bool:
    """Every task of ``s`` running on ``nid`` (made at ``made``) was made before its
    foreign device lists there came: the daemon saw each run there under lists the
    ledger agrees with (``Cycle.clean_made``: the tasks, not a time, as a task made
    after under a Swarm leader whose clock is behind has an earlier one), or Swarm's record
    shows it. That record: the service's last update (``UpdatedAt``) changed those lists
    from ones within the holding (``PreviousSpec``), made no task (no ``UpdateStatus``:
    each update resets it and Swarm's updater sets it once it replaces tasks), and came
    past the clocks' skew (``SKEW_S``: managers' clocks) after the task was made. Older
    specs Swarm does not keep: a list forged and taken back unseen is not known."""
    if not made:
        return False
    if made <= cyc.clean_made.get(s.id, {}).get(nid, frozenset()):
        return True
    prev = s.previous_spec.get("Labels") if s.previous_spec is not None else None
    changed = rfc3339_ns(s.updated_at)
    if not isinstance(prev, Mapping) or s.update_ran or changed is None:
        return False
    key = devices_key(cyc.prefix, nid)
    was = {k: v for k, v in prev.items() if k == key or str(k).startswith(key + ".")}
    now = {k: v for k, v in s.labels.items() if k == key or k.startswith(key + ".")}
    if was == now or _outside(was, key, own):
        return False
    return max(made) + SKEW_S * 10**9 < changed


NAMED = 3  # the forged lists a warning names
GO_ZERO_NS = rfc3339_ns("0001-01-01T00:00:00Z")  # Go's time.Time{}, as Docker writes it
RESTART_SAID = ("its running replicas restart once (rolling) so that every task carries "
                "the new device map")
# What a record's note starts with: one that is not a value swarmgpu wrote (hand-edited)
UNTRUSTED_RECORD = "record not trusted:"
UINT64_MAX = 2**64 - 1  # Docker's UpdateConfig.Parallelism is a uint64


def kept_parallelism(s: SwarmService, prefix: str, *, released: bool = False
                     ) -> tuple[int | None, str | None]:
    """The owner's update parallelism recorded in ``<p>state.update-parallelism``, to
    give back (0 reads as 1, as ever): (None, None) with no record. A record that is not
    a decimal integer Docker takes (0 to 2**64-1) was edited by hand: written back,
    Docker would refuse the service's write every cycle and its gate or release write
    would never land. It is read as no record, with a note (said once) of what to do.
    ``released``: the record leaves the spec in this write with swarmgpu's other labels
    (``ungate``), so the note says so rather than asking the owner to remove it."""
    key = prefix + PARALLELISM_STATE
    kept = s.labels.get(key)
    if kept is None:
        return None, None
    if kept.isascii() and kept.isdigit() and len(kept) <= 20 and int(kept) <= UINT64_MAX:
        return int(kept) or 1, None
    said = (f"{UNTRUSTED_RECORD} service {s.name}'s label {key}={kept!r} is no "
            f"parallelism Docker takes (a whole number, 0 to {UINT64_MAX}): not written "
            "back, ")
    if released:
        return None, (said + "it is removed with swarmgpu's other labels as the service "
                      "is released, and the spec's update parallelism stays 0 (every task "
                      "at once); give yours back with `docker service update "
                      f"--update-parallelism N {s.name}`")
    return None, (said + "the spec's stays 0; give yours back with `docker service "
                  f"update --update-parallelism N --label-rm {key} {s.name}`")


def parallelism_of(s: SwarmService) -> object:
    """``Spec.UpdateConfig.Parallelism`` as sent (absent: 1, Swarm's default);
    ``UnreadSpec`` where UpdateConfig is no object (its plan names it, not a fault)."""
    return spec_object(s.spec.get("UpdateConfig"), "Spec.UpdateConfig").get("Parallelism", 1)


def all_at_once(s: SwarmService) -> str | None:
    """The owner's update parallelism to record where a forced update of a service that
    runs nothing sets 0 (every waiting task replaced at once: the rolling updater waits
    for each new task to run); None where it is 0 already, or every task is in the first
    batch anyway."""
    current = int_or0(str(parallelism_of(s)))
    one_batch = s.mode == "replicated" and (s.replicas or 0) <= current
    return None if current == 0 or one_batch else str(current)


def _service_labels(
    s: SwarmService, placements: Sequence[ReplicaPlacement], cyc: Cycle
) -> tuple[dict[str, str], list[str]]:
    """The device lists and share labels to set on the service, and those to remove."""
    prefix = cyc.prefix
    want_devices = {devices_key(prefix, p.node_id, p.slot): ",".join(p.uuids) for p in placements}
    ours = (prefix + DEVICES, prefix + SHARE)  # device lists and share labels
    have_devices = {k: v for k, v in s.labels.items() if k.startswith(ours)}
    # A shared GPU's container is told its share the same way (swarmgpu.manager.services.sharing).
    # (Whole GPUs and MIG devices carry no share labels: only shares are asked.)
    shares = [
        (p.node_id, p.uuids, p.milli)
        for p in placements
        if p.slot is None and len(p.uuids) == 1 and p.milli and p.milli[0] < 1000
    ]
    if shares:
        want_devices.update(want_labels(prefix, shares, cyc.facts, have_devices))
    dk = prefix + DEVICES
    labels_set = {k: v for k, v in want_devices.items() if have_devices.get(k) != v
                  and not (k.startswith(dk) and _same_gpus(have_devices.get(k), v))}
    labels_remove = sorted(k for k in have_devices if k not in want_devices)
    return labels_set, labels_remove


def _same_gpus(have: str | None, want: str) -> bool:
    """A device list that names the GPUs ``want`` does in another order: no new map. The
    container gets the same GPUs, which CUDA numbers in its own device order, not the
    list's (written again, the order alone made a new map, and the ForceUpdate that
    gives it to a waiting task restarted the running ones)."""
    return have is not None and sorted(have.split(",")) == sorted(want.split(","))


def _node_writes(
    s: SwarmService,
    held: Mapping[str, Holding],
    gate_ready: bool,
    ak: str,
    gk: str,
    cyc: Cycle,
    running_on: Mapping[str, int],
    waiting: Waiting,
) -> tuple[list[tuple[str, Mapping[str, str]]], bool]:
    """Per node its ledger entry and gate to write; whether a gate waits (deferred)."""
    deferred = False
    node_set: list[tuple[str, Mapping[str, str]]] = []
    for nid, h in held.items():
        labels = cyc.by_id[nid].labels
        value = h.label_value()
        diff = {ak: value} if labels.get(ak) != value else {}
        if labels.get(gk) == "true" or (
            gate_ready and not _old_task_stays(s, nid, running_on, waiting, cyc)
        ):
            if labels.get(gk) != "true":
                diff[gk] = "true"
        else:
            deferred = True
        if diff:
            node_set.append((nid, diff))
    return node_set, deferred


def _old_task_stays(s: SwarmService, nid: str, running_on: Mapping[str, int],
                    waiting: Waiting, cyc: Cycle) -> bool:
    """A closed gate stays closed while a task of the service still runs on ``nid``
    beside a failed GPU: a health repin that ended at its hold limit left it closed on
    purpose (``rebalance/repin.py`` ``_health_over``), the task was made with the failed
    GPU's devices, and opened, Swarm would keep it running there. It opens once Swarm has
    let the task go, as the repin's own step 3 does. A task Swarm put on ``nid`` that does
    not run yet (assigned to ready) is as old: Swarm's scheduler assigns none to a node
    whose gate is closed, so it was put there before the gate closed (its ForceUpdate may
    be the map's own: a repin writes none beside a running task). The new task the gate
    exists for is not on the node yet (pending), and is not counted. Only a task whose
    constraints read the gate (or are not known) counts: Swarm never stops one made
    before its service had a gate (adopted ungated, ``update_config.order: start-first``,
    whose new task waits for this gate) for a closed gate, and waiting for it was a
    stall for good."""
    f = cyc.facts.get(nid)
    old = bool(running_on.get(nid)) or nid in waiting.assigned
    if not (old and f is not None and any(not g.healthy for g in f.gpus)):
        return False
    rules = cyc.task_rules.get(s.id, {}).get(nid)
    return rules is None or any(
        c is None or any(is_gate_of(x, cyc.prefix, s.name) for x in c) for c in rules)


def _nodes_of(keys: Sequence[str], prefix: str) -> set[str]:
    """The nodes device lists and share labels ``keys`` are for (a node id has no dot:
    ``<node>.<slot>`` is a packed replica's list)."""
    dk = prefix + DEVICES
    out: set[str] = set()
    for k in keys:
        nid = k[len(dk) :].partition(".")[0] if k.startswith(dk) else node_of_key(k, prefix)
        if nid:
            out.add(nid)
    return out


def _decision(
    s: SwarmService,
    held: Mapping[str, Holding],
    running_on: Mapping[str, int],
    changed: bool,
    cyc: Cycle,
    foreign: bool = False,
) -> tuple[str, str]:
    """Why the ForceUpdate that gives every task the new device map is written: the
    placement of tasks made before their map, or, where a task runs on GPUs that change
    under it, a re-placement (an evacuation when a GPU it held has failed); ``foreign``:
    a running task may carry a list naming GPUs it does not hold (``_foreign_lists``)."""
    if not running_on:
        return (
            "place",
            "placement of its new task(s): made before their device map, replaced before any runs",
        )
    if foreign and not changed:
        return ("place", "its running task(s) may carry a device list naming GPUs it does "
                         "not hold: replaced with the ledger's")
    if not changed:
        return (
            "place",
            "placement of its waiting task(s): made before their device map; "
            "ForceUpdate replaces every task, its running one(s) too",
        )
    ak = assign_key(cyc.prefix, s.name)
    failed = sorted(
        cyc.by_id[nid].hostname
        for nid, h in held.items()
        if running_on.get(nid)
        and (f := cyc.facts.get(nid)) is not None
        and any(not g.healthy and g.uuid in cyc.by_id[nid].labels.get(ak, "") for g in f.gpus)
    )
    if failed:
        return (
            "evacuate",
            f"a GPU it held on {', '.join(failed)} failed: re-placed on "
            "healthy ones, its task restarts there",
        )
    return (
        "place",
        "re-placement: the GPUs it holds where its task runs changed (its "
        "request or its replicas did); its task restarts on them",
    )
