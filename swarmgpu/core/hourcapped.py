"""Cooldowns the hour kept in Swarm caps: said by ``config check``, not refused.

A cooldown longer than an hour is valid, and the daemon honours it whole where it
keeps the time itself (a move's ``moved-at`` label; a victim in this daemon's memory).
Where it reads the time back from the records of the hour kept on the swarm object,
it counts an hour at most: an overshare restart's cool-down (the restart list), and a
victim's cooldown under a new leader (the preemption hour). Before, such a value
passed the check silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmgpu.core.stamps import HOUR_S

if TYPE_CHECKING:
    from swarmgpu.core.config import Config


def hour_capped(cfg: Config) -> list[str]:
    """``key: why`` for each cooldown of ``cfg`` that some reader counts an hour at most."""
    out = []
    r, p = cfg.rebalance, cfg.preemption
    if r.cooldown_s > HOUR_S and cfg.placement.overshare == "restart":
        out.append(f"rebalance.cooldown_s: {r.cooldown_s:g} s is more than an hour: a move's "
                   "cooldown is kept whole, but an overshare restart's counts an hour at most "
                   "(the restarts on record in Swarm are the last hour's)")
    if p.victim_cooldown_s > HOUR_S and p.max_per_hour > 0:
        out.append(f"preemption.victim_cooldown_s: {p.victim_cooldown_s:g} s is more than an "
                   "hour: this daemon keeps it whole, but a new leader (a failover, a "
                   "restart) counts it an hour at most (the preemptions on record in Swarm "
                   "are the last hour's)")
    return out
