"""promtool's check of a /metrics page, and waiting on a real Prometheus.

First written in tests/test_metrics.py."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any


def promtool_check(text: bytes) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/setup.sh does)"
    r = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=30, check=False
    )
    out = (r.stdout + r.stderr).decode()
    # 3 = lint remarks only; the only remarks allowed are on dcgm-exporter's own names:
    # camelCase labels, counters without _total, PCIE_REPLAY_COUNTER (as it prints them).
    # A swarmgpu_ name gets none (a camelCase remark on one passed).
    assert r.returncode in (0, 3), out
    for line in out.splitlines():
        assert line.startswith("DCGM_FI_") and line.endswith(
            (
                "label names should be written in 'snake_case' not 'camelCase'",
                'counter metrics should have "_total" suffix',
                "metric name should not include type 'counter'",
            )
        ), line


def wait_prometheus(what: str, fn: Any, timeout: float = 90) -> Any:
    """``fn()``'s first truthy value within ``timeout`` seconds, polled every 0.5 s; a
    refused connection or a reply not yet parseable (OSError, ValueError) counts as not
    yet. Past the deadline: AssertionError naming ``what`` and the last answer."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")
