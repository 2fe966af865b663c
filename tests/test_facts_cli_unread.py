"""`swarmgpu facts` of a source that could not list the GPUs (no NVML: the state a node
without its driver is in): its labels section said `swarmgpu.gpu.count=0`, the label
a node with no GPU gets, while label sync writes nothing for such facts (count=0 would
stop the tasks constrained on the node's GPUs: ``NodeFacts.gpus_unread``). It says
that no label is written, why, and the fix.

It exited 0 while `swarmgpu --help` says 2 when the source cannot be read (node-config
exits 2 for the same facts): a script could not tell them from facts read. It exits 2
now, the facts still printed (text or --json) and a line on stderr saying why."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.core.model import Gpu, NodeFacts

NO_NVML = ("nvml: cannot initialise NVML (NVMLError_LibraryNotFound: NVML Shared Library "
           "Not Found)")


def _facts(tmp_path: Path, *errors: str, gpus: tuple[Gpu, ...] = ()) -> Path:
    """A facts file of ``gpus`` (none by default), with ``errors``."""
    data = NodeFacts(hostname="gpu-a", source="nvml", gpus=gpus, errors=errors).to_dict()
    p = tmp_path / "facts.json"
    p.write_text(json.dumps(data))
    return p


def test_facts_whose_gpus_cannot_be_read_name_no_label_and_say_why(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["facts", "--source", f"file:{_facts(tmp_path, NO_NVML)}"])
    assert res.exit_code == 2, res.output  # what the agent serves: printed, as it is
    assert res.stderr.startswith("swarmgpu facts: the GPUs could not be read"), res.stderr
    labels = res.output.split("labels:", 1)[1]
    assert "gpu.count" not in labels, res.output
    assert "none written: its GPUs cannot be read (the error above)" in labels, res.output
    assert f"error: {NO_NVML}" in res.output, res.output
    assert "swarmgpu doctor" in labels, res.output


def test_facts_of_no_gpu_and_no_error_still_label_count_0(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["facts", "--source", f"file:{_facts(tmp_path)}"])
    assert res.exit_code == 0, res.output
    assert res.output.endswith("labels:\n  swarmgpu.gpu.count=0\n"), res.output


def test_facts_whose_gpus_cannot_be_read_exit_2_with_the_json_printed(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["facts", "--json", "--source",
                                    f"file:{_facts(tmp_path, NO_NVML)}"])
    assert res.exit_code == 2, res.output
    assert json.loads(res.stdout)["errors"] == [NO_NVML], res.stdout


def test_facts_with_a_gpu_error_but_gpus_listed_exit_0(tmp_path: Path) -> None:
    # GPUs listed: the facts were read; an error beside them (one GPU failing) is in them.
    gpu = Gpu(index=0, uuid="GPU-00000000-0000-0000-0000-000000000000", product="A100",
              memory_mib=40960)
    p = _facts(tmp_path, "GPU 1: Unknown Error", gpus=(gpu,))
    res = CliRunner().invoke(main, ["facts", "--source", f"file:{p}"])
    assert res.exit_code == 0, res.output
