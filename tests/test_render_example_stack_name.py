"""An example stack rendered under another name than the one its gate was written for:
the error says which stack name the gate is this service's own under, so the reader
renders with that name (or removes the gate), not wonders who "owns" the line they
copied."""

from __future__ import annotations

from click.testing import CliRunner
from support.paths import REPO

from swarmgpu.cli import main

EXAMPLE = REPO / "stacks" / "examples" / "mig-slice.yml"


def test_a_gate_written_for_another_stack_name_names_that_name() -> None:
    """Before: `render --check -n lab stacks/examples/mig-slice.yml` said only "the
    placement gate of 'mig-slice_notebook', owned by the swarmgpu daemon; remove it"."""
    res = CliRunner().invoke(main, ["render", "--check", "-n", "lab", str(EXAMPLE)])
    assert res.exit_code == 1, res.output
    assert "under stack name 'mig-slice' (-n mig-slice)" in res.output, res.output
    assert "not 'lab'" in res.output, res.output


def test_the_example_renders_under_the_name_it_was_written_for() -> None:
    res = CliRunner().invoke(main, ["render", "--check", "-n", "mig-slice", str(EXAMPLE)])
    assert res.exit_code == 0, res.output


def test_another_service_s_gate_gets_no_stack_name_hint() -> None:
    stack = REPO / "stacks" / "examples" / "llm-nvlink.yml"
    text = stack.read_text().replace("llm-nvlink_vllm==true", "other_web==true")
    res = CliRunner().invoke(main, ["render", "--check", "-n", "llm-nvlink", "-"], input=text)
    assert res.exit_code == 1 and "gate of 'other_web'" in res.output, res.output
    assert "under stack name" not in res.output, res.output
