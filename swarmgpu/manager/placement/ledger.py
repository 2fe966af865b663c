"""The ledger: what each service holds on each node, as the node's assign label says."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from swarmgpu.manager.placement.keys import ASSIGN
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.swarm.client import SwarmNode


@dataclass(frozen=True)
class Holding:
    """What one service holds on one node: device UUIDs and the share of each.

    ``slots`` is empty for one replica on the node; for replicas packed on it, the
    task slot each UUID belongs to (as long as ``uuids``, in slot order)."""

    service: str
    node_id: str
    uuids: tuple[str, ...]
    milli: tuple[int, ...]
    slots: tuple[int, ...] = ()

    def __hash__(self) -> int:
        # Kept on the instance: holdings key the planner's per-cycle memos (a dataclass
        # hash re-hashes every field on every lookup).
        got: int | None = self.__dict__.get("_hash")
        if got is None:
            got = self.__dict__["_hash"] = hash(
                (self.service, self.node_id, self.uuids, self.milli, self.slots))
        return got

    def __getstate__(self) -> dict[str, object]:
        # Without the kept hash: another process hashes strings with another seed.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def label_value(self) -> str:
        # Kept on the instance once written: every cycle compares each holding's value
        # (functools.cached_property takes a lock per read on Python 3.11).
        got: str | None = self.__dict__.get("_value")
        if got is None:
            if not self.slots:
                got = _uuid_list(self.uuids, self.milli)
            else:
                got = ";".join(f"s{slot}={_uuid_list(u, m)}"
                               for slot, (u, m) in self.per_slot_milli().items())
            self.__dict__["_value"] = got
        return got

    @property
    def packed(self) -> bool:
        return bool(self.slots)

    @property
    def replicas(self) -> int:
        """Replicas the holding serves on its node."""
        return len(set(self.slots)) if self.slots else 1

    def per_slot_milli(self) -> dict[int, tuple[tuple[str, ...], tuple[int, ...]]]:
        """slot -> (uuids, milli), in slot order (packed holdings)."""
        out: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        for slot, u, m in zip(self.slots, self.uuids, self.milli, strict=True):
            got = out.get(slot, ((), ()))
            out[slot] = ((*got[0], u), (*got[1], m))
        return dict(sorted(out.items()))

    def per_slot(self) -> dict[int, tuple[str, ...]]:
        return {k: v[0] for k, v in self.per_slot_milli().items()}


def packed_holding(service: str, node_id: str,
                   per_slot: Mapping[int, tuple[Sequence[str], Sequence[int]]]) -> Holding:
    """A holding of replicas packed on one node: slot -> (uuids, milli)."""
    uuids: list[str] = []
    milli: list[int] = []
    slots: list[int] = []
    for slot in sorted(per_slot):
        u, m = per_slot[slot]
        uuids.extend(u)
        milli.extend(m)
        slots.extend(slot for _ in u)
    return Holding(service, node_id, tuple(uuids), tuple(milli), tuple(slots))


def _uuid_list(uuids: Sequence[str], milli: Sequence[int]) -> str:
    return ",".join(u if m >= 1000 else f"{u}@{m}" for u, m in zip(uuids, milli, strict=True))


# ASCII digits: \d took 'GPU-a@\u0665\u0660\u0660' (Arabic-Indic 500) as a milli
_HOLD_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9\-_/:.]*?)(?:@(\d{1,4}))?", re.ASCII)
_SLOT_RE = re.compile(r"^s([1-9][0-9]{0,5})=(.*)$")


def _parse_list(value: str) -> tuple[list[str], list[int]] | None:
    uuids: list[str] = []
    milli: list[int] = []
    for part in value.split(","):
        m = _HOLD_RE.fullmatch(part.strip())
        if not m:
            return None
        uuids.append(m.group(1))
        milli.append(int(m.group(2)) if m.group(2) else 1000)
    if not uuids or any(not 0 < x <= 1000 for x in milli):
        return None
    if len(set(uuids)) != len(uuids):  # one GPU twice: never written so, and it would
        return None  # count as two holdings of it (its milli summed past 1000)
    return uuids, milli


def parse_holding(service: str, node_id: str, value: str) -> Holding | None:
    """A ledger value; None when it is not one (never a guess). ``s<slot>=`` groups
    separated by ``;`` are replicas packed on the node (a ledger from before packing
    has none, and reads as it always did)."""
    if not value:  # a holding of no GPU: a service placed by its CPU (swarmgpu.gpus=0);
        return Holding(service, node_id, (), ())  # a GPU request's is refused as it fits none
    if "=" not in value:
        got = _parse_list(value)
        return None if got is None else Holding(service, node_id, tuple(got[0]),
                                                tuple(got[1]))
    per: dict[int, tuple[Sequence[str], Sequence[int]]] = {}
    for group in value.split(";"):
        m = _SLOT_RE.match(group.strip())
        got = _parse_list(m.group(2)) if m else None
        if m is None or got is None or int(m.group(1)) in per:
            return None
        per[int(m.group(1))] = got
    h = packed_holding(service, node_id, per)
    return h if len(set(h.uuids)) == len(h.uuids) else None  # a GPU in two slots: not ours


def holds_other(value: str | None, h: Holding) -> bool:
    """Whether the ledger entry ``value`` (None: none) holds other than ``h``: read, not
    compared as text. The same holding spelled another way (``@1000``, spaces, slot
    groups in another order: a hand edit, another release's spelling) is no change of
    GPUs, and taken for one it restarted the running task as a re-placement."""
    if value is None:
        return True
    return value != h.label_value() and parse_holding(h.service, h.node_id, value) != h


def read_ledger(nodes: Sequence[SwarmNode], prefix: str,
                cache: dict[str, tuple[int, list[Holding]]] | None = None,
                ) -> dict[str, dict[str, Holding]]:
    """service name -> node id -> holding, from the nodes' assign labels. ``cache`` (a
    long-lived planner's) keeps each node's parse while its spec version is unchanged,
    and a label whose value did not change keeps its ``Holding`` object when the node
    changes (one placement re-parsed every holding on its node; the memos keyed on
    holdings compare the same object at once)."""
    out: dict[str, dict[str, Holding]] = {}
    ak = prefix + ASSIGN
    for n in nodes:
        got = cache.get(n.id) if cache is not None else None
        if got is None or got[0] != n.version:
            before = {h.service: h for h in got[1]} if got is not None else {}
            held = []
            for k, v in n.labels.items():
                if k.startswith(ak):
                    svc = k[len(ak):]
                    h = before.get(svc)
                    if h is None or h.label_value() != v:
                        h = parse_holding(svc, n.id, v)
                    if h is not None:
                        held.append(h)
            got = (n.version, held)
            if cache is not None:
                cache[n.id] = got
        nid = n.id
        for h in got[1]:
            per = out.get(h.service)
            if per is None:
                out[h.service] = {nid: h}
            else:
                per[nid] = h
    return out


def holdings_of(service: str, placements: Sequence[ReplicaPlacement]) -> dict[str, Holding]:
    """node id -> the ledger holding of a service's placements (packed ones merged)."""
    out: dict[str, Holding] = {}
    packed: dict[str, dict[int, tuple[Sequence[str], Sequence[int]]]] = {}
    for p in placements:
        if p.slot is None:
            out[p.node_id] = Holding(service, p.node_id, p.uuids, p.milli)
        else:
            packed.setdefault(p.node_id, {})[p.slot] = (p.uuids, p.milli)
    for nid, per in packed.items():
        out[nid] = packed_holding(service, nid, per)
    return out
