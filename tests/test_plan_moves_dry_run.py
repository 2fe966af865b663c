"""`plan`'s moves line names the dry run it means: "moves: none proposed (dry-run)"
stood under a daemon whose own `dry_run` is false (the shipped config: it writes
placements), and read as though the daemon wrote nothing; it is the rebalancer's
(`rebalance.dry_run`, true by default, or the daemon's: moves are proposed, never
made)."""

from __future__ import annotations

from swarmgpu.manager.commands.plan import render_plan


def _moves_line(moves: dict[str, object]) -> str:
    text = render_plan([], ungranted=[], workload={}, moves=moves, listen="x", health=[])
    (line,) = [ln for ln in text.splitlines() if ln.startswith("moves:")]
    return line


MEANT = ("moves: none proposed (rebalance.dry_run, or dry_run: moves are proposed, never "
         "made)")


def test_no_move_under_the_rebalancers_dry_run_names_its_key() -> None:
    line = _moves_line({"proposed": [], "recent": [], "dry_run": True})
    assert line == MEANT


def test_no_move_with_the_rebalancer_acting_says_none_proposed_alone() -> None:
    assert _moves_line({"proposed": [], "recent": [], "dry_run": False}) == \
        "moves: none proposed"
