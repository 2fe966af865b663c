"""plan_moves: run the enabled policies over one snapshot and the windows. Pure.

The policies are plugins (``policies``), run in ``core.rebalanceconfig.POLICY_ORDER``:
the health policy first (it reads no window, and the daemon acts on its moves even in
dry-run: ``step.py``); among the others order matters only for who gets a target
first: hot spots (relief) before defragmentation (unblocks pending work) before
consolidation and spreading, and fragmentation moves (speculative: they only make
later placements likelier) last.

Each policy runs isolated: one that raises (a bug, or input no one foresaw) has what it
added to the pass taken back (``Context.roll_back``) and the others still run, so a
fault in one never costs the health policy's moves; the plan's notes name it and the
error, ``policy_errors`` carries the traceback for the daemon's log.
"""

from __future__ import annotations

import traceback

from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import HealthInputs, Proposal
from swarmgpu.manager.rebalance.policies import enabled
from swarmgpu.swarm.swarmnode import node_names


def plan_moves(inp: Inputs, health_in: HealthInputs | None = None) -> Proposal:
    """Every move the enabled policies propose now, each with its reason. ``health_in``:
    the health policy's switch and budget (None: no health moves, a report only)."""
    ctx = Context.build(inp, health_in)
    errors: dict[str, str] = {}
    for policy in enabled(inp.cfg):
        mark = ctx.mark()
        try:
            policy.propose(ctx)
        except Exception as exc:  # one policy's fault is its own loss, not the pass's
            ctx.roll_back(mark)
            ctx.notes.append(failed_note(policy.name, exc))
            errors[policy.name] = traceback.format_exc()
    # By name, `host (ID)` where two nodes share a hostname: each is listed and counted.
    names = node_names(inp.nodes)
    unknown = {names.get(s.node_id, s.hostname): s.why_unknown or "unknown"
               for s in inp.node_signals.values() if not s.known}
    prop = Proposal(moves=list(ctx.moves), notes=list(ctx.notes), unknown_nodes=unknown,
                    at=inp.now, policy_errors=errors)
    got = ctx.health_found
    if got is not None:
        prop.releases = got.releases
        prop.failed_holders = frozenset(got.held)
        prop.failing_nodes = {names.get(n, n): why for n, why in got.failing.items()}
        prop.agent_lost_nodes = {names.get(n, n): got.failing[n] for n in got.agent_lost
                                 if n in got.failing}
    return prop


ERROR_CHARS = 300  # of the error's text in the note: the log has all of it


def failed_note(name: str, exc: Exception) -> str:
    """The plan's note for a policy that raised: one line, no traceback (the daemon logs
    that), what was lost and the fix."""
    text = " ".join(str(exc).split())
    if len(text) > ERROR_CHARS:
        text = text[:ERROR_CHARS] + "..."
    lost = ("no health move or re-placement was planned this cycle, holders of failed "
            "GPUs stay where they are" if name == "health" else
            "what it proposed is taken back, the other policies ran")
    return (f"rebalance policy {name} failed this cycle: {type(exc).__name__}: {text} "
            f"({lost}); the daemon's log has the traceback: report it as a swarmgpu bug, "
            f"or leave {name} out of rebalance.policies until it is fixed")
