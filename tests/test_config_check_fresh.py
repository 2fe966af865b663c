"""``swarmgpu config check`` in a process of its own, as an operator runs it: the tests
that call it in-process have the placement package imported already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.paths import REPO


def test_config_check_runs_in_a_fresh_process(tmp_path: Path) -> None:
    # cli.config imported manager.services.tenants first, which imported
    # placement.keys, whose package imports the planner, whose reads import tenants
    # again, half made: every config check ended in an ImportError traceback.
    cfg = tmp_path / "c.yml"
    cfg.write_text("sync:\n  interval_s: 5\n")
    got = subprocess.run(
        [sys.executable, "-c", "import sys; from swarmgpu.cli import main; "
         "sys.argv = ['swarmgpu', 'config', 'check', sys.argv[1]]; sys.exit(main())",
         str(cfg)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "ImportError" not in got.stderr and got.stdout.strip().endswith(": ok"), got
