"""Recent GPU samples for the map: a bounded ring per GPU, served at /api/v1/history.

The daemon records one sample per GPU per cycle (utilisation, memory used, temperature,
power; each may be unknown) from the cluster document it just built. Memory is bounded
twice: ``history.samples`` per GPU (a ring) and ``history.max_gpus`` GPUs (the GPU not
seen for longest goes first), so a fleet that grows or churns UUIDs cannot grow it
without end. One sample costs 24 bytes (a float64 time and four float32 values) in
preallocated arrays; see docs/gpu-map.md for the measured total. A ring is one node's
GPU, keyed by (node id, UUID): a node that names another node's GPU UUID writes into a
ring of its own, never into that GPU's.
"""

from __future__ import annotations

import math
import re
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from swarmgpu.core.config import HistoryConfig

SCHEMA = "swarmgpu.history/v1"
FIELDS = ("util_pct", "memory_used_mib", "temp_c", "power_w")
MAX_POINTS = 240  # per GPU in one answer: a sparkline needs no more
MAX_GPUS_PER_ANSWER = 512  # ask per node or per service for more
_NAN = float("nan")


class Ring:
    """One GPU's last ``cap`` samples, oldest overwritten first."""

    __slots__ = ("cap", "head", "index", "n", "node", "services", "t", "v")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = 0  # next slot to write
        self.n = 0
        self.t = array("d", bytes(8 * cap))
        self.v = array("f", [_NAN]) * (cap * len(FIELDS))
        self.node = ""
        self.index = -1
        self.services: tuple[str, ...] = ()

    def add(self, at: float, values: Iterable[float | None]) -> None:
        i = self.head
        self.t[i] = at
        base = i * len(FIELDS)
        for k, x in enumerate(values):
            self.v[base + k] = _NAN if x is None else float(x)
        self.head = (i + 1) % self.cap
        self.n = min(self.n + 1, self.cap)

    def since(self, t0: float) -> list[int]:
        """Slots with time >= t0, oldest first."""
        start = (self.head - self.n) % self.cap
        slots = [(start + j) % self.cap for j in range(self.n)]
        return [s for s in slots if self.t[s] >= t0]

    def nbytes(self) -> int:
        return self.t.itemsize * len(self.t) + self.v.itemsize * len(self.v)

    def copy(self) -> Ring:
        """The same samples in arrays of its own (a C copy: microseconds)."""
        out = Ring.__new__(Ring)
        out.cap, out.head, out.n = self.cap, self.head, self.n
        out.t, out.v = self.t[:], self.v[:]
        out.node, out.index, out.services = self.node, self.index, self.services
        return out


def _json_num(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 1)


class History:
    def __init__(self, limits: HistoryConfig | None = None) -> None:
        self.limits = limits or HistoryConfig()
        if self.limits.samples < 2 or self.limits.max_gpus < 1:
            raise ValueError("history.samples must be >= 2 and history.max_gpus >= 1")
        # (node id, uuid) -> ring, oldest seen first
        self.rings: OrderedDict[tuple[str, str], Ring] = OrderedDict()
        self._lock = threading.Lock()  # the cycle records while HTTP threads query

    def record(self, doc: Mapping[str, Any], at: float | None = None) -> None:
        """One sample per GPU of a cluster document (``swarmgpu.cluster/v1``)."""
        at = float(at if at is not None else doc.get("generated_at") or time.time())
        with self._lock:
            self._record(doc, at)

    def _record(self, doc: Mapping[str, Any], at: float) -> None:
        for n in doc.get("nodes", []):
            node = str(n.get("id") or n.get("hostname"))
            for g in n.get("gpus", []):
                uuid = g.get("uuid")
                if not uuid:
                    continue
                key = (node, str(uuid))
                ring = self.rings.get(key)
                if ring is None:
                    ring = self.rings[key] = Ring(self.limits.samples)
                    while len(self.rings) > self.limits.max_gpus:
                        self.rings.popitem(last=False)
                else:
                    self.rings.move_to_end(key)
                ring.node, ring.index = str(n.get("hostname")), int(g.get("index", -1))
                held = [h["service"] for h in g.get("holders", [])]
                held += [m["holder"]["service"] for m in g.get("mig", []) if m.get("holder")]
                ring.services = tuple(dict.fromkeys(held))
                ring.add(at, (g.get(f) for f in FIELDS))

    def nbytes(self) -> int:
        """Bytes held in sample arrays (the part that scales with the bound)."""
        return sum(r.nbytes() for r in self.rings.values())

    def query(self, *, node: str | None = None, service: str | None = None,
              window_s: float = 1800.0, points: int = 60,
              now: float | None = None) -> dict[str, Any]:
        """GPUs of one node and/or service (all when neither), over the window that ends
        at ``now`` (default: the newest sample, so a paused daemon still shows its
        last data), averaged into at most ``points`` buckets each."""
        with self._lock:
            if now is None:
                now = max((r.t[(r.head - 1) % r.cap] for r in self.rings.values() if r.n),
                          default=time.time())
            matched, rings = self._matching(node, service)
        # Averaged outside the lock: at 512 GPUs that takes ~0.7 s, which the cycle's
        # record would wait, behind every query a caller sends.
        return self._answer(matched, rings, window_s, max(2, min(points, MAX_POINTS)), now)

    def _matching(self, node: str | None, service: str | None,
                  ) -> tuple[int, list[tuple[str, Ring]]]:
        """How many GPUs match, and copies of the first MAX_GPUS_PER_ANSWER (lock held)."""
        rings: list[tuple[str, Ring]] = []
        matched = 0
        for (_, uuid), r in self.rings.items():
            if node is not None and r.node != node:
                continue
            if service is not None and service not in r.services:
                continue
            matched += 1
            if len(rings) < MAX_GPUS_PER_ANSWER:
                rings.append((uuid, r.copy()))
        return matched, rings

    def _answer(self, matched: int, rings: list[tuple[str, Ring]], window_s: float,
                points: int, now: float) -> dict[str, Any]:
        t0 = now - window_s
        out: list[dict[str, Any]] = []
        for uuid, r in rings:
            slots = r.since(t0)
            series: dict[str, list[float | None]] = {f: [] for f in FIELDS}
            times: list[float] = []
            per = max(1, math.ceil(len(slots) / points))
            for b in range(0, len(slots), per):
                chunk = slots[b:b + per]
                times.append(round(r.t[chunk[-1]], 1))
                for k, f in enumerate(FIELDS):
                    vals = [r.v[s * len(FIELDS) + k] for s in chunk]
                    vals = [x for x in vals if not math.isnan(x)]
                    series[f].append(_json_num(sum(vals) / len(vals)) if vals else None)
            out.append({"uuid": uuid, "node": r.node, "index": r.index,
                        "services": list(r.services), "t": times, **series})
        out.sort(key=lambda g: (g["node"], g["index"]))
        doc: dict[str, Any] = {"schema": SCHEMA, "now": now, "window_s": window_s,
                               "fields": list(FIELDS), "gpus": out}
        if matched > len(out):
            doc["truncated"] = (f"{matched} GPUs match; the first {len(out)} are shown. "
                                "Ask for one node (?node=) or service (?service=).")
        return doc


# 0-9 only: \d and int() also read other scripts' digits (and int() refuses '²' in words
# of its own, naming no parameter)
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_query(query: Mapping[str, list[str]]) -> dict[str, Any]:
    """/api/v1/history?node=&service=&window=15m&points=60 -> query() arguments.
    Raise ValueError naming the bad parameter and what it accepts."""
    known = {"node", "service", "window", "points"}
    extra = sorted(set(query) - known)
    if extra:
        raise ValueError(f"unknown parameter {extra[0][:40]!r}: use node, service, window, "
                         "points")
    for k, v in query.items():
        if len(v) > 1:  # which one counts is anyone's guess: refused, as /login does
            raise ValueError(f"{k} is given {len(v)} times: give it once")
    one = {k: v[-1] for k, v in query.items() if v}
    args: dict[str, Any] = {}
    for k in ("node", "service"):
        if k in one:
            if len(one[k]) > 256:
                raise ValueError(f"{k} is longer than 256 characters")
            args[k] = one[k]
    if "window" in one:
        m = _DURATION.fullmatch(one["window"].strip())
        secs = float(m.group(1)) * _UNIT[m.group(2)] if m else 0.0
        if not m or not 0 < secs <= 7 * 86400:
            raise ValueError(f"window {one['window'][:40]!r} is not a duration up to 7d: "
                             "use e.g. 900, 15m or 2h")
        args["window_s"] = secs
    if "points" in one:
        if not re.fullmatch(r"[0-9]{1,4}", one["points"]) or not (
                2 <= int(one["points"]) <= MAX_POINTS):
            raise ValueError(f"points must be a whole number from 2 to {MAX_POINTS}")
        args["points"] = int(one["points"])
    return args
