"""The rebalance policies, as plugins (after the descheduler's): each module holds one
``Policy``, named as in ``rebalance.policies``, built from its own config section
(``rebalance.<name>``: a dataclass in ``core.rebalanceconfig`` with its defaults and
checks), whose ``propose(ctx)`` is pure: it only calls ``ctx.accept`` with moves and
adds ``ctx.notes`` (health also records what it found: ``ctx.health_found``).

    health         holders of failed GPUs to healthy ones (first; even in dry-run)
    hotspot        a shared GPU hot for its window gives up its smallest holder
    defrag         room for a pending request by moving a few holders
    consolidation  fractional holders packed off an idle GPU of a fragmented node
    spread         a squeezed node gives a holding to a nearly empty one
    fragmentation  the single moves that lower FGD's fragmentation most
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from swarmgpu.core.rebalanceconfig import POLICY_ORDER, RebalanceConfig
from swarmgpu.manager.rebalance.context import Context
from swarmgpu.manager.rebalance.policies.consolidation import Consolidation
from swarmgpu.manager.rebalance.policies.defrag import Defrag
from swarmgpu.manager.rebalance.policies.fragmentation import Fragmentation
from swarmgpu.manager.rebalance.policies.health import Health
from swarmgpu.manager.rebalance.policies.hotspot import Hotspot
from swarmgpu.manager.rebalance.policies.spread import Spread


class Policy(Protocol):
    """One rebalance policy."""

    name: str  # in rebalance.policies, and its section rebalance.<name>

    def propose(self, ctx: Context) -> None:
        """Propose this pass's moves (``ctx.accept``) and say why others are not."""


# name -> the policy built from the rebalance section (its own part of it)
PLUGINS: dict[str, Callable[[RebalanceConfig], Policy]] = {
    "health": lambda rb: Health(rb.health),
    "hotspot": lambda rb: Hotspot(rb.hotspot),
    "defrag": lambda rb: Defrag(rb.defrag),
    "consolidation": lambda rb: Consolidation(rb.consolidation),
    "spread": lambda rb: Spread(rb.spread),
    "fragmentation": lambda rb: Fragmentation(rb.fragmentation),
}


def enabled(rb: RebalanceConfig) -> list[Policy]:
    """The policies ``rb.policies`` lists, in the order they run (``POLICY_ORDER``)."""
    wanted = set(rb.enabled_policies)
    return [PLUGINS[name](rb) for name in POLICY_ORDER if name in wanted]
