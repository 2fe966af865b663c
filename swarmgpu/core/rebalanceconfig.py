"""The ``rebalance:`` section: the rebalancer's own keys and one section per policy.

Each policy (``manager.rebalance.policies``) has its own config dataclass here, with
its defaults and its checks (``problems``), after the descheduler's plugin arguments:
``rebalance.hotspot.util_pct``, ``rebalance.spread.low_pct``, ... The rebalancer's own
keys (which policies run, the scrape, the signals' windows, the mover's budgets) stay
at the top of the section.

Releases before this one had every key flat in ``rebalance:`` (``hot_util_pct``,
``spread_low_pct``, ``health_drain_node``, ...). Those keys keep working:
``move_flat_keys`` moves each into its policy's section before the file is read, and
says so (``config check`` prints the note, the daemon logs it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.core.commalist import comma_list
from swarmgpu.core.configvalues import at_most

# The policies in the order they run: health first (it waits for no window), then who
# gets a target first: relief, room for pending work, packing, spreading, and the
# speculative fragmentation moves last.
POLICY_ORDER = ("health", "hotspot", "defrag", "consolidation", "spread", "fragmentation")
DEFAULT_POLICIES = "health,hotspot,consolidation,defrag,fragmentation,spread"


def policy_names(text: str) -> tuple[str, ...]:
    """``rebalance.policies`` parsed: the names listed, each once, in the order given."""
    return tuple(dict.fromkeys(comma_list(text)))


def _pct(where: str, v: float, add: Callable[[str], None]) -> None:
    if not 0 <= v <= 100:
        add(f"{where}: {v} is not a percentage 0-100")


def _seconds(where: str, v: float, add: Callable[[str], None]) -> None:
    if v <= 0:
        add(f"{where}: must be > 0 seconds")


@dataclass(frozen=True)
class HealthPolicyConfig:
    """The health policy: every holder of a failed GPU goes to a healthy one, first and
    even in rebalance.dry_run (docs/health.md; its budgets are health.evacuations_*)."""

    drain_node: bool = False
    """A failing node (two or more failed GPUs, or its agent lost beyond
    health.node_lost_grace_s) is reported; true also moves every GPU service off a node
    whose GPUs fail (within health.evacuations_per_*). An agent's loss alone moves
    nothing, and a node Swarm reports down, or drained, is left to Swarm."""

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        return None


@dataclass(frozen=True)
class HotspotConfig:
    """Hot spots: a shared GPU above ``util_pct`` for ``window_s`` gives up a holder.
    Every policy takes a GPU as a target only while it stays below ``clear_pct``."""

    util_pct: float = 85.0
    """High threshold: a shared GPU above this for window_s is a hot spot."""
    clear_pct: float = 75.0
    """A hot spot ends only once utilisation stays below this for a whole window."""
    window_s: float = 300.0
    """How long a hot spot must last before a task is moved off it."""

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        _pct(f"{where}.util_pct", self.util_pct, add)
        _pct(f"{where}.clear_pct", self.clear_pct, add)
        _seconds(f"{where}.window_s", self.window_s, add)
        if self.clear_pct > self.util_pct:
            add(f"{where}.clear_pct: must be <= util_pct (the dead band lies below the "
                "high threshold), e.g. 75 with 85")


@dataclass(frozen=True)
class ConsolidationConfig:
    """Consolidation: fractional services packed off a GPU that stayed under-used on a
    node whose free share is fragmented, so the GPU is whole again."""

    idle_util_pct: float = 15.0
    """Low threshold: a shared GPU below this for idle_window_s is under-used."""
    idle_clear_pct: float = 25.0
    """Under-use ends only once utilisation stays above this for a whole window."""
    idle_window_s: float = 300.0
    """How long under-use must last before fractional services are packed."""
    frag_pct: float = 40.0
    """A node whose free GPU share lies more than this % on partly used GPUs is
    fragmented (consolidation acts only on fragmented nodes)."""
    frag_window_s: float = 300.0
    """How long fragmentation must last before consolidation acts."""

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        for key in ("idle_util_pct", "idle_clear_pct", "frag_pct"):
            _pct(f"{where}.{key}", getattr(self, key), add)
        _seconds(f"{where}.idle_window_s", self.idle_window_s, add)
        _seconds(f"{where}.frag_window_s", self.frag_window_s, add)
        if self.idle_clear_pct < self.idle_util_pct:
            add(f"{where}.idle_clear_pct: must be >= idle_util_pct (the dead band lies "
                "above the low threshold), e.g. 25 with 15")


@dataclass(frozen=True)
class DefragConfig:
    """Defragmentation: room for a pending request by moving a few running shares."""

    max_moves: int = 2
    """The most moves one plan may need to make room (0 turns it off)."""

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        if self.max_moves < 0:
            add(f"{where}.max_moves: must be >= 0 (0 turns those moves off)")
        at_most(f"{where}.max_moves", self.max_moves, 100, "moves in one plan", add)


@dataclass(frozen=True)
class SpreadConfig:
    """Spread: a node above ``high_pct`` of its GPU share allocated gives a holding to a
    node below ``low_pct`` (descheduler-style thresholds with a dead band)."""

    high_pct: float = 90.0
    """A node with more than this % of its GPU share allocated is squeezed..."""
    low_pct: float = 10.0
    """...and a node with less than this % is free to take work back."""

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        _pct(f"{where}.high_pct", self.high_pct, add)
        _pct(f"{where}.low_pct", self.low_pct, add)
        if self.low_pct >= self.high_pct:
            add(f"{where}.low_pct: must be below high_pct")


@dataclass(frozen=True)
class FragmentationConfig:
    """Fragmentation: the single moves of running shares that lower FGD's fragmentation
    of the cluster most, with nothing pending and nothing hot."""

    moves_per_hour: int = 4
    """Moves started per rolling hour at most (0 turns them off)."""
    moves_per_100_placements: float = 2.0
    """Moves per 100 GPU replicas placed, counted since the daemon leads (as `simulate
    --rebalance-moves N` counts per 100 arrived pods; 0 turns them off)."""

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        if self.moves_per_hour < 0:
            add(f"{where}.moves_per_hour: must be >= 0 (default 4; 0 turns fragmentation "
                "moves off)")
        at_most(f"{where}.moves_per_hour", self.moves_per_hour, 10_000, "moves", add)
        if not 0 <= self.moves_per_100_placements <= 100:
            add(f"{where}.moves_per_100_placements: {self.moves_per_100_placements:g} is "
                "out of range; use 0-100 moves per 100 placements (default 2; 0 turns "
                "them off)")


@dataclass(frozen=True)
class RebalanceConfig:
    enabled: bool = True
    """Run the rebalancer in the daemon's cycle (it plans; it moves only when dry_run is
    false here and at the top level)."""
    dry_run: bool = True
    """Propose and log moves, never make them. Moves restart containers: opt in."""
    policies: str = DEFAULT_POLICIES
    """Policies to run, comma-separated: health, hotspot, consolidation, defrag,
    fragmentation, spread (each has its section below). health runs first and even in
    dry_run (docs/health.md)."""
    metrics_url_template: str = ""
    """Where each node's GPU metrics are scraped: the swarmgpu agent or an existing
    dcgm-exporter (http://{addr}:9400/metrics); {addr}, {hostname} are filled in.
    Empty: the agents' own /metrics (agents.url_template, https with swarm-pki)."""
    trust_unauthenticated_metrics: bool = False
    """Metrics scraped without a checked identity (plain HTTP: dcgm-exporter, or
    agents.identity none) show on the map and in plan, but trigger no move and no
    over-share restart unless this is true."""
    scrape_timeout_s: float = 3.0
    """Per-node scrape deadline; a slow or dead exporter makes the node UNKNOWN."""
    max_gap_s: float = 90.0
    """A series whose last sample is older than this, or that has a gap this long,
    is UNKNOWN (never idle). Keep it above the scrape interval (sync.interval_s)."""
    min_samples: int = 3
    """Samples a window needs before it can say anything."""
    max_moves_per_cycle: int = 1
    """Moves started per cycle (moves still in flight count against it)."""
    max_moves_per_node: int = 1
    """Moves per cycle that touch one node (as source or target)."""
    cooldown_s: float = 600.0
    """Seconds a service is left alone after one of its moves (recorded in Swarm)."""
    make_before_break: bool = True
    """Start the new task before the old one stops (replicas + 1 during the move)."""
    move_timeout_s: float = 120.0
    """A move whose new task is not running by then is rolled back."""
    health: HealthPolicyConfig = field(default_factory=HealthPolicyConfig)
    hotspot: HotspotConfig = field(default_factory=HotspotConfig)
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    defrag: DefragConfig = field(default_factory=DefragConfig)
    fragmentation: FragmentationConfig = field(default_factory=FragmentationConfig)
    spread: SpreadConfig = field(default_factory=SpreadConfig)

    @property
    def enabled_policies(self) -> tuple[str, ...]:
        """The policies listed in ``policies`` (known or not: ``check`` names the rest)."""
        return policy_names(self.policies)

    @property
    def health_policy(self) -> bool:
        """The health policy runs (docs/health.md): placement leaves it the holders of
        failed GPUs."""
        return self.enabled and "health" in self.enabled_policies


def check_rebalance(r: RebalanceConfig, add: Callable[[str], None]) -> None:
    """Every problem of the section: its own keys, then each policy's (``problems``)."""
    bad = [p for p in r.enabled_policies if p not in POLICY_ORDER]
    if bad:
        near = [c for b in bad for c in difflib.get_close_matches(b, POLICY_ORDER, n=1)]
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        add(f"rebalance.policies: unknown {bad}{hint} (use a comma list of "
            f"{', '.join(policy_names(DEFAULT_POLICIES))})")
    t = r.metrics_url_template
    if "{addr}" not in t and "{hostname}" not in t:
        add("rebalance.metrics_url_template: must contain {addr} or {hostname}, "
            "e.g. 'http://{addr}:9400/metrics' for dcgm-exporter")
    for key in ("scrape_timeout_s", "max_gap_s", "move_timeout_s"):
        _seconds(f"rebalance.{key}", getattr(r, key), add)
    if r.min_samples < 1:
        add("rebalance.min_samples: must be >= 1")
    at_most("rebalance.min_samples", r.min_samples, 10_000, "samples", add)
    for key in ("max_moves_per_cycle", "max_moves_per_node"):
        if getattr(r, key) < 0:
            add(f"rebalance.{key}: must be >= 0 (0 turns those moves off)")
        at_most(f"rebalance.{key}", getattr(r, key), 1000, "moves", add)
    if r.cooldown_s < 0:
        add("rebalance.cooldown_s: must be >= 0 seconds (default 600)")
    for name in POLICY_ORDER:
        getattr(r, name).problems(f"rebalance.{name}", add)
    if r.consolidation.idle_clear_pct >= r.hotspot.clear_pct:
        add("rebalance: consolidation.idle_clear_pct must be below hotspot.clear_pct, so "
            "a GPU is never under-used and hot at once (low/high dead band)")


# Releases before the per-policy sections had these keys flat in ``rebalance:``.
FLAT_KEYS: Mapping[str, tuple[str, str]] = {
    "hot_util_pct": ("hotspot", "util_pct"),
    "hot_clear_pct": ("hotspot", "clear_pct"),
    "hot_window_s": ("hotspot", "window_s"),
    "idle_util_pct": ("consolidation", "idle_util_pct"),
    "idle_clear_pct": ("consolidation", "idle_clear_pct"),
    "idle_window_s": ("consolidation", "idle_window_s"),
    "frag_pct": ("consolidation", "frag_pct"),
    "frag_window_s": ("consolidation", "frag_window_s"),
    "spread_high_pct": ("spread", "high_pct"),
    "spread_low_pct": ("spread", "low_pct"),
    "defrag_max_moves": ("defrag", "max_moves"),
    "fragmentation_moves_per_hour": ("fragmentation", "moves_per_hour"),
    "fragmentation_moves_per_100_placements": ("fragmentation", "moves_per_100_placements"),
    "health_drain_node": ("health", "drain_node"),
}


def move_flat_keys(section: MutableMapping[str, Any], add: Callable[[str], None]
                   ) -> list[str]:
    """Move each old flat key of a ``rebalance:`` mapping into its policy's section, in
    place; return a deprecation note per key moved. A key given both ways, or a policy
    section that is no mapping, is a problem (``add``): the old key is dropped."""
    notes: list[str] = []
    for old in [k for k in section if k in FLAT_KEYS]:
        policy, key = FLAT_KEYS[old]
        value = section.pop(old)
        sub = section.setdefault(policy, {})
        if sub is None:
            sub = section[policy] = {}
        if not isinstance(sub, MutableMapping):
            add(f"rebalance.{old}: cannot go into rebalance.{policy}, which is not a "
                f"mapping; write it as rebalance.{policy}.{key}")
            continue
        if key in sub:
            add(f"rebalance.{old}: given twice, also as rebalance.{policy}.{key}; keep "
                f"only rebalance.{policy}.{key}")
            continue
        sub[key] = value
        notes.append(f"rebalance.{old}: deprecated, read as rebalance.{policy}.{key} (each "
                     f"policy has its section now: docs/rebalancing.md); move it there")
    return notes
