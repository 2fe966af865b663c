"""promtool's check of a /metrics page.

First written in tests/test_metrics.py."""

from __future__ import annotations

import shutil
import subprocess


def promtool_check(text: bytes) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/setup.sh does)"
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       timeout=30, check=False)
    out = (r.stdout + r.stderr).decode()
    # 3 = lint remarks only; the only remarks allowed are on dcgm-exporter's own names:
    # camelCase labels, counters without _total, PCIE_REPLAY_COUNTER (as it prints them)
    assert r.returncode in (0, 3), out
    for line in out.splitlines():
        assert "camelCase" in line or (line.startswith("DCGM_FI_") and line.endswith((
            'counter metrics should have "_total" suffix',
            "metric name should not include type 'counter'"))), line
