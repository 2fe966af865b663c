"""A pinned workload file (``placement.workload: FILE``) is the config's: read once, when
the daemon starts, as the config is (docs/systemd.md: no reload). Each new leadership
term's planner read it again: an edit took effect at some term change, unsaid, and a
file broken or removed meanwhile raised in the placement step every cycle of that term,
placing nothing. Pure: the step's planner for a new term, no Swarm."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.nodes.sync import Snapshot


def test_a_new_terms_planner_uses_the_file_as_read_at_start(tmp_path: Path) -> None:
    pinned = tmp_path / "workload.yml"
    pinned.write_text("- {gpus: 1, share: 0.5, cpu: 4, weight: 3}\n- {gpus: 2}\n")
    cfg = Config(placement=PlacementConfig(workload=str(pinned)))
    step = PlacementStep(SimpleNamespace(cfg=cfg, swarm=None))  # type: ignore[arg-type]
    first = step.term_planner(Snapshot([], [], [], {})).model
    pinned.write_text("- {gpus: -1}\n")  # broken while the daemon runs
    again = step.term_planner(Snapshot([], [], [], {})).model
    assert again == first and again.pinned
    pinned.unlink()  # gone
    assert step.term_planner(Snapshot([], [], [], {})).model == first
