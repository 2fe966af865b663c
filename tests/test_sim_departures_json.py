"""``simulate --departures --json`` carries the means its table prints (key ``means``,
beside each policy's per-seed records, which stay as they were)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from swarmgpu.sim.bound_timed import TimedBound
from swarmgpu.sim.cli_entry import run_simulate
from swarmgpu.sim.report import timed_json, timed_text
from swarmgpu.sim.runs import TimelineResult

RUNS = {
    "fgd": [
        TimelineResult("fgd", 1, 10, 8, {"share": 1, "2gpu": 1}, 1500, 9000, 41.23456, 50.1,
                       88.889, 0, 100),
        TimelineResult("fgd", 2, 10, 9, {"share": 2}, 700, 9000, 40.0, 50.0, 90.005, 0, 100),
    ],
    "fgd+moves": [
        TimelineResult("fgd", 1, 10, 10, {}, 0, 9000, 45.5555, 50.1, 91.0, 3, 100),
    ],
}
COLUMNS = ["mean alloc%", "mean demand%", "peak alloc%", "failed GPU%", "moves", "seeds"]
KEYS = ["mean_alloc_pct", "mean_demand_pct", "peak_alloc_pct", "failed_gpu_pct", "moves",
        "seeds"]


def _table(text: str) -> dict[str, dict[str, str]]:
    """Each policy row of the departures table, by column name."""
    lines = text.split("\n\n", 1)[0].split("\nbound:", 1)[0].splitlines()
    head = re.split(r"\s{2,}", lines[0].strip())
    return {cells[0]: dict(zip(head, cells, strict=True))
            for cells in (re.split(r"\s{2,}", line.strip()) for line in lines[1:])}


def _failed(cell: str) -> dict[str, float]:
    return {} if cell == "0" else {k: float(v) for k, v in
                                   (part.rsplit(" ", 1) for part in cell.split(", "))}


def _same_as_table(text: str, doc: dict[str, object], bound: bool) -> None:
    rows = _table(text)
    means = doc["means"]
    assert isinstance(means, dict)
    policies = [k for k in rows if not k.startswith("bound")]
    assert sorted(means) == sorted(policies)
    for name in policies:
        row, got = rows[name], means[name]
        for col, key in zip(COLUMNS, KEYS, strict=True):
            assert float(row[col]) == got[key], (name, col, row[col], got[key])
        assert _failed(row["failed pods"]) == got["failed_pods"], name
        if bound:
            assert float(row["gap"]) == got["gap"], name
        else:
            assert "gap" not in got


@pytest.mark.parametrize("bound", [None, "the solver is not installed",
                                   TimedBound(50.0, 95.0, 100, [3], 1.0)])
def test_the_jsons_means_are_the_tables(bound: TimedBound | str | None) -> None:
    text = timed_text(RUNS, bound)
    doc = json.loads(timed_json(RUNS, bound))
    _same_as_table(text, doc, isinstance(bound, TimedBound))
    # the per-seed records are where they were
    assert [r["seed"] for r in doc["fgd"]] == [1, 2]
    assert doc["fgd+moves"][0]["moves"] == 3


def test_simulate_departures_json_means_equal_its_table(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,8000,2,T4\nn2,8000,8000,1,T4\n")
    pods = tmp_path / "p.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
        + "".join(f"p{i},100,100,1,{300 + 100 * (i % 5)},{i},{i + 7}\n" for i in range(30))
        + "big,100,100,2,1000,3,40\ncpu,100,100,0,0,4,9\n"
    )
    args = (str(nodes), str(pods), ["fgd", "bestfit"], [1, 2])
    text, rc = run_simulate(*args, False, None, True, bound="off")
    assert rc == 0, text
    out, rc = run_simulate(*args, True, None, True, bound="off")
    assert rc == 0, out
    _same_as_table(text, json.loads(out), bound=False)
