"""The daemon's /healthz document and the last cycle's outcome in one word, which the
cluster document (`/api/v1/cluster`, the GPU map) says too.

Pure over what the daemon keeps of its last cycle (``manager.daemon.Daemon``): why it did
not complete (``cut_short``: its line, else None), whether its engine budget ended it
(``budget_ended``) and when it ended.
"""

from __future__ import annotations

from typing import Any, Literal

# How a cycle that did not complete ended, passed with its line (``Daemon.cut_kind``):
# "over_budget" (its engine budget ended it), "stopped" (a stop left steps or reads of
# it not run), "aborted" (any other cut: the engine, an exception, its term lost). Not
# read from the line: a reworded one would change the word.
CutKind = Literal["over_budget", "stopped", "aborted"]
# How a cycle a stop cut short starts its line (the word is ``CutKind``'s "stopped").
STOPPING = "stopping: "


def cycle_word(ended_at: float | None, cut_kind: CutKind | None) -> str | None:
    """The last cycle's outcome: its ``cut_kind`` when it did not complete, "ok" when it
    did (a follower's too); None before the first (``ended_at`` None)."""
    if ended_at is None:
        return None
    return "ok" if cut_kind is None else cut_kind


def health_doc(*, leader: bool, engine_error: str | None, cut_short: str | None,
               cut_kind: CutKind | None, budget_ended: str | None, errors: list[str],
               age: float | None, stale: bool, ended_at: float | None,
               detail: bool, engine_state: str = "unreachable") -> dict[str, Any]:
    """/healthz. Without ``detail`` (a caller that may read nothing else: /healthz is
    open) the errors are only counted: their texts name nodes, agent addresses and node
    IDs, which /api/v1/cluster tells only with proof. While the engine cannot be asked,
    ``leader`` is null (unknown: no write goes out), the status degraded and ``engine``
    ``engine_state``: "unreachable", or its swarm node's state where it answers with
    that stalled ("locked", "error", "inactive": a word, not the reason's text, which
    names paths). After a cycle that did not complete (an engine error, a stop, an
    exception, its engine budget, leadership lost mid-cycle), ``aborted`` is true, the
    status degraded and the errors the line that said why (``age``, of the last whole
    cycle, stays), until a cycle completes; ``over_budget`` is true when that cycle
    ended at its engine budget.
    ``last_cycle`` is the last cycle's outcome in one word (``cycle_word`` of
    ``cut_kind``, which comes with ``cut_short``),
    ``last_cycle_at`` when it ended (Unix time)."""
    if cut_short is not None:
        errors = [cut_short]
    ok = engine_error is None and cut_short is None and (not leader or not stale)
    out: dict[str, Any] = {
        "status": "ok" if ok else "degraded",
        "leader": leader if engine_error is None else None,
        "engine": "reachable" if engine_error is None else engine_state,
        "aborted": cut_short is not None,
        "over_budget": budget_ended is not None,
        "last_cycle_age_s": age,
        "last_cycle": cycle_word(ended_at, cut_kind),
        "last_cycle_at": ended_at,
    }
    if detail:
        out["errors"] = errors
        if engine_error is not None:
            out["engine_error"] = engine_error
    out["error_count"] = len(errors)
    return out
