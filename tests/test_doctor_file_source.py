"""`doctor --source file:|gfd:|topo:PATH` whose file cannot be read: the fix names the
file, not the NVIDIA driver (the source asked for was no driver's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main


def _gpu_facts(root: Path, *source: str) -> dict[str, str]:
    res = CliRunner().invoke(main, ["doctor", "--root", str(root), "--json", "--source",
                                    *source])
    assert res.exit_code == 1, res.output
    return next(c for c in json.loads(res.output)["checks"] if c["id"] == "gpu.facts")


@pytest.mark.parametrize("kind", ["file", "gfd", "topo"])
def test_a_source_file_that_cannot_be_read_gets_a_fix_naming_it(
        tmp_path: Path, kind: str) -> None:
    """Before: `doctor --source file:/nope` said "Make `nvidia-smi` work on this node
    first: the driver installed ..." and "Without NVML's view": a newcomer trying the
    doctor on a facts file was sent to install a driver."""
    missing = tmp_path / "none.txt"
    extra = ["--product", "X", "--memory-mib", "10"] if kind == "topo" else []
    check = _gpu_facts(tmp_path, f"{kind}:{missing}", *extra)
    assert check["status"] == "fail" and "none.txt" in check["found"], check
    assert "driver" not in check["fix"] and "NVML" not in check["why"], check
    assert "--source" in check["fix"] and "docs/facts-schema.md" in check["fix"], check


def test_nvml_that_cannot_be_read_still_gets_the_driver_fix(tmp_path: Path) -> None:
    from swarmgpu.agent.doctor.devices import check_gpu_facts
    from swarmgpu.agent.doctor.read import read_view

    view = read_view(str(tmp_path), facts_error="nvml: cannot initialise NVML")
    check = check_gpu_facts(view)
    assert "driver" in check.fix and "NVML" in check.why, check
