"""An upper bound on the GPU allocation any placement of the arrived pods could reach.

The model (``sim.bound_model``) is a relaxation of placement: every placement of the
pods maps onto one of its solutions with the same allocated GPU-milli, so its optimum
bounds every policy. Two bounds are computed:
- the linear one, by column generation over share patterns; HiGHS solves each LP and
  the bound is then checked by weak duality in integers (``certify``), so it holds
  whatever the solver's tolerances;
- the integer one, the same model with every maximal share pattern and integer
  counts (when there are at most ``PATTERN_LIMIT`` patterns), solved by HiGHS's branch
  and bound; its dual bound is the tighter bound.
docs/simulate.md ("The upper bound") gives the derivation and what is relaxed.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from swarmgpu.allocator.fragmentation import MILLI
from swarmgpu.allocator.values import NodeSpec
from swarmgpu.sim.bound_model import (
    Built,
    Model,
    build,
    build_like,
    maximal_patterns,
)
from swarmgpu.sim.trace import TracePod

HIGHS_NEEDS = ("the upper bound needs highspy (the HiGHS solver), which is not installed: "
               "pip install 'swarmgpu[sim]' (or pip install highspy)")
# Duals are scaled by this and rounded to integers for the certificate.
DUAL_SCALE = 1 << 40
CG_ROUNDS = 200
MIP_SECONDS = 300.0


class BoundUnavailable(RuntimeError):
    """The solver is not installed (``HIGHS_NEEDS``)."""


@dataclass(frozen=True)
class Bound:
    """Upper bounds on allocated GPU-milli. ``milli`` is the one reported: the integer
    program's dual bound where it ran, else the certified linear bound."""

    milli: int
    lp_milli: int  # the linear bound, certified by weak duality (floor)
    mip_milli: int | None  # the integer program's dual bound (floor); None: not run
    mip_best_milli: int | None  # the best integer solution it found (a bound's tightness)
    method: str  # "mip" or "lp"
    patterns: int  # share-pattern columns in the last program solved
    seconds: float
    # Forced pods (``upper_bound(forced=...)``) the LP optimum leaves out: 0 when they
    # all fit the relaxation (docs/simulate.md, "The online bound").
    short: float = 0.0
    # Proven that no placement holds every forced pod (then ``milli`` bounds nothing).
    unfit: bool = False


def highs_missing() -> str | None:
    """Why the bound cannot be computed here, or None."""
    try:
        import highspy  # noqa: F401
    except ImportError:
        return HIGHS_NEEDS
    return None


@contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS's constructor prints a banner on fd 1, where ``--json`` goes: held off."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _highs() -> Any:
    try:
        import highspy
    except ImportError as e:
        raise BoundUnavailable(HIGHS_NEEDS) from e
    with _quiet_stdout():
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    return h


def _solve(m: Model, integer: bool, seconds: float = MIP_SECONDS
           ) -> tuple[str, list[float], list[float], float, float]:
    """(status, column values, row duals, objective, dual bound) of ``m`` by HiGHS."""
    import highspy

    h = _highs()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(m.cost), len(m.rhs)
    lp.col_cost_ = [float(c) for c in m.cost]
    lp.col_lower_ = [0.0] * len(m.cost)
    lp.col_upper_ = [float(u) for u in m.upper]
    lp.row_lower_ = [-highspy.kHighsInf] * len(m.rhs)
    lp.row_upper_ = [float(r) for r in m.rhs]
    start, index, value = [0], [], []
    for entries in m.cols:
        for r, a in entries:
            index.append(r)
            value.append(float(a))
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = start, index, value
    lp.sense_ = highspy.ObjSense.kMaximize
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * len(m.cost)
        h.setOptionValue("time_limit", seconds)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.99)  # allocations are whole milli
    h.passModel(lp)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    sol, info = h.getSolution(), h.getInfo()
    obj = float(info.objective_function_value)
    dual = float(info.mip_dual_bound) if integer else obj
    return status, list(sol.col_value), list(sol.row_dual), obj, dual


def _best_pattern(b: Built, t: int, duals: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """The share pattern of most dual value on type ``t`` (bounded knapsack over the
    GPU's 1000 milli, by binary splitting of each size's count): (value, pattern)."""
    items: list[tuple[int, int, int]] = []  # (size index, copies, value)
    for j, s in enumerate(b.sizes):
        row = b.slot_row.get((t, s))
        if row is None or duals[row] <= 0:
            continue
        left, k = b.caps[s], 1
        while left > 0:
            take = min(k, left)
            items.append((j, take, take * duals[row]))
            left -= take
            k *= 2
    best = [0] * (MILLI + 1)
    pick: list[list[bool]] = []
    for j, copies, val in items:
        w = copies * b.sizes[j]
        took = [False] * (MILLI + 1)
        for room in range(MILLI, w - 1, -1):
            if best[room - w] + val > best[room]:
                best[room] = best[room - w] + val
                took[room] = True
        pick.append(took)
    counts = [0] * len(b.sizes)
    room = MILLI
    for (j, copies, _v), took in zip(reversed(items), reversed(pick), strict=True):
        if took[room]:
            counts[j] += copies
            room -= copies * b.sizes[j]
    return best[MILLI], tuple(counts)


def _int_duals(row_dual: Sequence[float]) -> list[int]:
    return [max(0, math.floor(d * DUAL_SCALE)) for d in row_dual]


def certify(b: Built, duals: Sequence[int]) -> int:
    """A bound on the model's optimum, times ``DUAL_SCALE``, from any nonnegative
    integer duals (scaled by ``DUAL_SCALE``), by weak duality in exact integers: for
    every feasible x, cost.x <= duals.rhs + sum_j upper_j max(0, reduced cost_j). Share
    patterns, listed or not, are bounded together: on type t at most count x GPUs hold
    one, so they add at most that many times the best pattern's reduced cost."""
    m = b.model
    total = sum(d * r for d, r in zip(duals, m.rhs, strict=True))
    pattern_cols = set(b.patterns.values())
    for j, entries in enumerate(m.cols):
        if j in pattern_cols:
            continue
        rc = m.cost[j] * DUAL_SCALE - sum(duals[r] * a for r, a in entries)
        if rc > 0:
            total += rc * m.upper[j]
    for t, row in b.free_row.items():
        val, _ = _best_pattern(b, t, duals)
        rc = val - duals[row]
        if rc > 0:
            nt = b.types[t]
            total += rc * nt.count * nt.gpus
    return total


def _seed_patterns(b: Built) -> None:
    for t in b.free_row:
        for j, s in enumerate(b.sizes):
            if (t, s) in b.slot_row:
                b.add_pattern(t, tuple(b.caps[s] if i == j else 0 for i in range(len(b.sizes))))


def linear_bound(b: Built) -> tuple[int, list[int]]:
    """Column generation to the LP optimum over all share patterns (the columns it finds
    stay in ``b``): (the certificate's numerator, ``certify``; the integer duals)."""
    _seed_patterns(b)
    duals: list[int] = []
    for _ in range(CG_ROUNDS):
        _status, x, row_dual, _obj, _d = _solve(b.model, integer=False)
        duals = _int_duals(row_dual)
        b.short = sum(x[j] for j in b.short_cols) if x else 0.0
        added = 0
        for t, row in b.free_row.items():
            val, pattern = _best_pattern(b, t, duals)
            # Worth adding when its reduced cost is clearly positive (a milli-millionth).
            if val - duals[row] > DUAL_SCALE // 1_000_000 and b.add_pattern(t, pattern) is not None:
                added += 1
        if not added:
            break
    return certify(b, duals), duals


def _pattern_value(b: Built, t: int, pattern: tuple[int, ...], duals: Sequence[int]) -> int:
    return sum(k * duals[b.slot_row[(t, s)]] for s, k in zip(b.sizes, pattern, strict=True)
               if k and (t, s) in b.slot_row)


def integer_bound(b: Built, numerator: int, duals: Sequence[int], seconds: float
                  ) -> tuple[int, int | None] | None:
    """The integer program's bound (every maximal share pattern, integer counts), or None
    when there are more than ``PATTERN_LIMIT`` patterns: (bound, best solution found).

    Only the patterns that can be in a solution of at least ``target`` are given to the
    solver: by the certificate, cost.x <= (numerator + sum_q rc_q y_q) / DUAL_SCALE with
    every listed pattern's reduced cost rc_q <= 0 bounded apart, so a solution reaching
    ``target`` uses no pattern with -rc_q > numerator - target x DUAL_SCALE. Every solution
    is then either below ``target`` or one of the restricted program's, so
    max(target - 1, its dual bound) bounds them all; ``target`` is lowered until the
    restricted program reaches it (the bound is then its exact optimum) or time runs out.
    """
    patterns = maximal_patterns(b.caps)
    if patterns is None:
        return None
    lp = numerator // DUAL_SCALE
    deadline = time.perf_counter() + seconds
    step = 100  # milli below the linear bound: most of the openb instances close within it
    while True:
        target = lp - step
        room = numerator - target * DUAL_SCALE
        keep = [(t, q) for t, row in b.free_row.items() for q in patterns
                if _pattern_value(b, t, q, duals) - duals[row] >= -room]
        sub = build_like(b)
        for t, q in [*b.patterns, *keep]:
            sub.add_pattern(t, q)
        left = deadline - time.perf_counter()
        status, x, _rd, best, dual = _solve(sub.model, integer=True, seconds=max(left, 1.0))
        if not math.isfinite(dual) or status not in ("Optimal", "Time limit reached"):
            return lp, None
        got = round(best) if x else None
        bound = min(lp, max(target - 1, math.floor(dual + 1e-6)))
        if (got is not None and got >= target) or status != "Optimal" \
                or time.perf_counter() >= deadline:
            return bound, got
        step *= 4


def upper_bound(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], *, method: str = "lp",
                mip_seconds: float = MIP_SECONDS, forced: Sequence[TracePod] = ()) -> Bound:
    """The bound for placing ``pods`` (any subset, any order) on ``nodes``: ``method``
    "lp" the certified linear bound, "mip" the integer program's as well. ``forced``:
    pods of ``pods`` that must all be placed (the online bound: every pod a policy met
    before its first failure); the bound then holds for placements that hold them.
    Sequences, not iterators: with ``forced`` they are read twice (``forced_unfit``)."""
    t0 = time.perf_counter()
    b = build(nodes, pods, forced)
    if not b.model.cost:  # no GPU pod can go anywhere: 0, exactly
        zero = 0 if method == "mip" else None
        return Bound(0, 0, zero, zero, method, 0, time.perf_counter() - t0)
    numerator, duals = linear_bound(b)
    lp = numerator // DUAL_SCALE
    unfit = lp < 0 or (b.short > 0 and forced_unfit(nodes, pods, forced))
    got = integer_bound(b, numerator, duals, mip_seconds) if method == "mip" else None
    if got is None:
        return Bound(lp, lp, None, None, "lp", len(b.patterns), time.perf_counter() - t0,
                     b.short, unfit)
    mip, best = got
    return Bound(mip, lp, mip, best, "mip", len(b.patterns), time.perf_counter() - t0,
                 b.short, unfit or mip < 0)


def forced_unfit(nodes: Sequence[NodeSpec], pods: Sequence[TracePod],
                 forced: Sequence[TracePod]) -> bool:
    """Whether it is proven that no placement of ``pods`` holds all of ``forced``: the
    model with placed pods worth nothing and each forced one left out costing, whose
    certified LP bound is below 0 (every solution leaves one out; a placement holding
    them all would be a solution worth 0)."""
    b = build(nodes, pods, forced, values=False)
    numerator, _duals = linear_bound(b)
    return numerator < 0
