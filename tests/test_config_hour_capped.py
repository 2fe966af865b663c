"""A cooldown longer than the hour kept in Swarm: valid, but where the daemon counts it
from the hour's records (an overshare restart's; a victim's under a new leader) it
counts an hour at most. `config check` says so (exit 0): it passed silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main


def _check(tmp_path: Path, text: str) -> tuple[int, str]:
    cfg = tmp_path / "config.yml"
    cfg.write_text(text)
    res = CliRunner().invoke(main, ["config", "check", str(cfg)], env={})
    return res.exit_code, res.output


@pytest.mark.parametrize(("text", "key"), [
    ("rebalance:\n  cooldown_s: 7200\nplacement:\n  overshare: restart\n",
     "rebalance.cooldown_s"),
    ("preemption:\n  victim_cooldown_s: 86400\n", "preemption.victim_cooldown_s"),
])
def test_a_cooldown_over_the_hour_kept_is_said(tmp_path: Path, text: str, key: str) -> None:
    code, out = _check(tmp_path, text)
    assert code == 0, out
    assert f"config.yml:2: warning: {key}: " in out and "an hour at most" in out, out
    assert "1 warning(s)" in out, out


@pytest.mark.parametrize("text", [
    "rebalance:\n  cooldown_s: 3600\nplacement:\n  overshare: restart\n",
    "rebalance:\n  cooldown_s: 7200\n",  # (overshare report: no restart counts it)
    "preemption:\n  victim_cooldown_s: 7200\n  max_per_hour: 0\n",  # (preemption off)
])
def test_one_the_hour_holds_or_no_reader_counts_is_not(tmp_path: Path, text: str) -> None:
    code, out = _check(tmp_path, text)
    assert code == 0 and "warning" not in out, out
