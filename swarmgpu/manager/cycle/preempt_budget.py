"""The preemption budgets' hour, kept in Swarm: a new leader spends what is left of it.

``preemption.max_per_hour`` and each tenant's ``preemptions_per_hour`` count the
victims stopped in the last hour. Kept only in the leader daemon's memory, a fail-over
or a restart gave every tenant a whole new hour. So the hour is also kept on the swarm
object, as the mover keeps its finished moves (``rebalance.budget``): the times of the
victims stopped, ``<prefix>state.preemptions``, and per preemptor's tenant
``<prefix>state.preemptions.<tenant>``, written before the victims' writes (those about
to be stopped reserved; one moved instead, before its move's first write), corrected
after them when fewer were stopped, and read every cycle. What counts is both together:
per second, the larger count of the two (one preemption's victims share its second).

A label is anyone's text: unreadable entries are dropped (``times_in``), and so are
times older than the hour or more than ``MAX_SKEW_S`` ahead of this clock
(``core.stamps.in_hour``: a time far ahead would hold a budget spent for as long);
tenants the config does not name are not read. At most ``MAX_KEEP`` times per list (a
budget larger than that is as good as none).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Mapping

from swarmgpu.core.stamps import HOUR_S, in_hour
from swarmgpu.core.stamps import MAX_SKEW_S as MAX_SKEW_S
from swarmgpu.manager.rebalance.budget import times_in, times_text

STATE_KEY = "state.preemptions"  # under the prefix, on the swarm object's labels
MAX_KEEP = 1024


def _merge(mine: deque[float], theirs: list[float]) -> None:
    """Each second counted as often as the more of the two counts it."""
    have, want = Counter(mine), Counter(theirs)
    extra = [t for t, n in want.items() for _ in range(n - have.get(t, 0))]
    if extra:
        merged = sorted([*mine, *extra])
        mine.clear()
        mine.extend(merged)


class SpentHour:
    """The victims stopped in the last hour: all of them, and per preemptor's tenant."""

    def __init__(self, prefix: str) -> None:
        self.key = prefix + STATE_KEY
        self.all: deque[float] = deque()
        self.by_tenant: dict[str, deque[float]] = {}
        # (second, tenant) given back since the hour was last stored: the stored hour may
        # count them still, and ``read`` took them back (``stored`` ends it)
        self.given: list[tuple[float, str]] = []

    def tenant(self, name: str) -> deque[float]:
        return self.by_tenant.setdefault(name, deque())

    def spend(self, now: float, tenant: str) -> None:
        """One victim stopped at ``now`` for a preemptor of ``tenant`` ("" for none)."""
        t = float(round(now))  # as stored: whole seconds
        self.all.append(t)
        if tenant:
            self.tenant(tenant).append(t)

    def release(self, now: float, tenant: str, n: int) -> None:
        """``n`` victims spent at ``now`` for ``tenant`` that were not stopped after all
        (a reservation made before their writes: ``Preempter.cycle``)."""
        t = float(round(now))
        for times in (self.all, *([self.tenant(tenant)] if tenant else [])):
            for _ in range(n):
                if t in times:
                    times.remove(t)
        self.given += [(t, tenant)] * n

    def stored(self) -> None:
        """The hour was written to the swarm object: what was given back is out of it."""
        self.given = []

    def read(self, labels: Mapping[str, str], now: float, tenants: Collection[str]) -> None:
        """Count what the swarm object's labels count too (less what was given back since
        they were last written: ``given``), then forget what is older than the hour."""
        def stored(key: str, tenant: str | None = None) -> list[float]:
            got = [t for t in times_in(labels, key, MAX_KEEP) if in_hour(t, now)]
            # (a reservation given back that no write has taken out of the label yet:
            # read again, victims never stopped counted for the rest of the hour)
            for t, of in self.given:
                if (tenant is None or of == tenant) and t in got:
                    got.remove(t)
            return got

        self.given = [(t, of) for t, of in self.given if in_hour(t, now)]
        _merge(self.all, stored(self.key))
        for name in tenants:
            _merge(self.tenant(name), stored(f"{self.key}.{name}", name))
        for times in (self.all, *self.by_tenant.values()):
            while times and now - times[0] >= HOUR_S:
                times.popleft()

    def labels(self, current: Mapping[str, str]) -> Mapping[str, str] | None:
        """``current`` with the hour written in, or None when it says so already."""
        new = dict(current)
        new[self.key] = times_text(list(self.all)[-MAX_KEEP:])
        for name, times in self.by_tenant.items():
            if times or f"{self.key}.{name}" in new:
                new[f"{self.key}.{name}"] = times_text(list(times)[-MAX_KEEP:])
        return None if new == dict(current) else new
