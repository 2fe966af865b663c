"""`swarmgpu render` warns where a GPU service's own ``CUDA_VISIBLE_DEVICES`` (a line kept
from the host the stack came from) lets CUDA use another number of GPUs than swarmgpu
grants: in the container the grant is numbered from 0 and CUDA stops at the first entry
it cannot find. Before, ``CUDA_VISIBLE_DEVICES=2,3`` on a two-GPU request rendered
without a word, and the server found no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.render_compose import FACTS, NODES

from swarmgpu.cli import main
from swarmgpu.manager.commands.render import check_stack, render_stack

VLLM = "vllm/vllm-openai:v0.8.5"


def stack(env: str, count: str = "2", labels: str = "") -> str:
    """A vLLM service as a host's compose file had it: its environment lines, and a
    Compose GPU reservation of ``count`` (or ``labels``: swarmgpu's request instead)."""
    asks = (
        f"      labels:\n{labels}"
        if labels
        else "      resources:\n        reservations:\n          devices:\n"
        f"            - driver: nvidia\n              count: {count}\n"
        "              capabilities: [gpu]\n"
    )
    tp = "1" if labels or count == "1" else count
    return (
        f'version: "3.8"\nservices:\n  llm:\n    image: {VLLM}\n'
        f'    command: ["--model", "m", "-tp", "{tp}"]\n{env}    deploy:\n{asks}'
    )


def warnings(text: str, base: str | None = None) -> list[str]:
    checked = check_stack(text, stack_name="ai", env_base=base)
    assert checked.errors == [], checked.errors  # a warning, never a refusal
    return [n for n in checked.notes if "WARNING: CUDA_VISIBLE_DEVICES" in n]


def test_host_indices_past_the_grant_are_a_warning_that_cuda_finds_no_gpu() -> None:
    (w,) = warnings(stack('    environment:\n      CUDA_VISIBLE_DEVICES: "2,3"\n'))
    assert w == (
        "services.llm: WARNING: CUDA_VISIBLE_DEVICES=2,3: in the container CUDA numbers "
        "the 2 GPUs swarmgpu grants from 0, and stops at '2', which is none of them: it "
        "would find no GPU; remove CUDA_VISIBLE_DEVICES (the grant already limits the "
        "container to its GPUs)"
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ("      - CUDA_VISIBLE_DEVICES=0\n", "it would use 1 and 1 would sit idle"),
        # CUDA ignores what follows the first index it cannot find
        ("      - CUDA_VISIBLE_DEVICES=1,7,0\n", "stops at '7', which is none of them: it "
         "would use 1 and 1 would sit idle"),
        ('      - CUDA_VISIBLE_DEVICES=\n', "it would find no GPU"),
        ("      - CUDA_VISIBLE_DEVICES=-1\n", "stops at '-1'"),
    ],
)
def test_fewer_gpus_than_granted_are_a_warning_naming_the_idle_ones(env: str, says: str) -> None:
    (w,) = warnings(stack(f"    environment:\n{env}"))
    assert says in w, w
    assert "remove CUDA_VISIBLE_DEVICES" in w


def test_a_long_value_is_named_cut() -> None:
    value = ",".join(["0"] + ["9"] * 50_000)
    env = f"    environment:\n      - CUDA_VISIBLE_DEVICES={value}\n"
    (w,) = warnings(stack(env))
    assert "... [100001 characters]" in w and len(w) < 600, w[:600]


def test_a_uuid_of_one_host_gpu_is_a_warning() -> None:
    env = "    environment:\n      CUDA_VISIBLE_DEVICES: GPU-5f2b7c4e-0d3c-4a31-9c1e-8e0f3c2a7b11\n"
    (w,) = warnings(stack(env, count="1"))
    assert "a UUID names one GPU of one node, which swarmgpu may grant to another" in w, w


def test_an_env_file_is_read_under_environment_as_docker_reads_it(tmp_path: Path) -> None:
    (tmp_path / "host.env").write_text("HF_HOME=/data\nCUDA_VISIBLE_DEVICES=0\n")
    (w,) = warnings(stack("    env_file: host.env\n"), str(tmp_path))
    assert "CUDA_VISIBLE_DEVICES=0 from env_file:" in w
    assert 'or ask for 1 (swarmgpu.gpus: "1")' in w
    # environment over the env file: 0,1 is the whole grant
    both = '    env_file: host.env\n    environment:\n      CUDA_VISIBLE_DEVICES: "0,1"\n'
    assert warnings(stack(both), str(tmp_path)) == []


@pytest.mark.parametrize(
    ("env", "count", "labels"),
    [
        ('      CUDA_VISIBLE_DEVICES: "0,1"\n', "2", ""),
        ('      CUDA_VISIBLE_DEVICES: "1,0"\n', "2", ""),  # another order, the same GPUs
        ("      CUDA_VISIBLE_DEVICES: 0\n", "1", ""),
        ('      CUDA_VISIBLE_DEVICES: "0,0"\n', "2", ""),  # what CUDA does is not said here
        ('      CUDA_VISIBLE_DEVICES: "0 1"\n', "2", ""),  # nor here
        ("      CUDA_VISIBLE_DEVICES:\n", "2", ""),  # the deploying shell's value
        ('      CUDA_VISIBLE_DEVICES: "0"\n', "", '        swarmgpu.gpu-fraction: "0.5"\n'),
        ('      CUDA_VISIBLE_DEVICES: "0"\n', "", '        swarmgpu.gpus: "0"\n'),
    ],
)
def test_what_matches_the_grant_or_cannot_be_read_says_nothing(
    env: str, count: str, labels: str
) -> None:
    assert warnings(stack(f"    environment:\n{env}", count=count, labels=labels)) == []


def test_render_writes_the_warning_in_the_header_and_keeps_the_line(tmp_path: Path) -> None:
    text = stack('    environment:\n      CUDA_VISIBLE_DEVICES: "2,3"\n')
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)
    header, _, body = out.partition("version:")
    assert "CUDA_VISIBLE_DEVICES=2,3: in the container CUDA numbers" in header
    assert "CUDA_VISIBLE_DEVICES: 2,3" in body  # the user's line: not render's to change
    f = tmp_path / "ai.yml"
    f.write_text(text)
    r = CliRunner().invoke(main, ["render", "--check", str(f)])
    assert r.exit_code == 0, r.output
    assert "swarmgpu render: services.llm: WARNING: CUDA_VISIBLE_DEVICES=2,3" in r.output


@pytest.mark.parametrize(
    ("env", "says"),
    [
        # docker passes "$GPUS" as it is ($$ is a $): no shell expands an environment
        # value, and CUDA reads it as it reads -1
        ("      CUDA_VISIBLE_DEVICES: $$GPUS\n", "stops at '$GPUS', which is none of them: "
         "it would find no GPU"),
        # NVIDIA_VISIBLE_DEVICES' word: to CUDA no GPU's identifier
        ("      CUDA_VISIBLE_DEVICES: all\n", "stops at 'all', which is none of them: it "
         "would find no GPU"),
        ('      CUDA_VISIBLE_DEVICES: "0,none"\n', "stops at 'none', which is none of them: "
         "it would use 1 and 1 would sit idle"),
    ],
)
def test_an_entry_neither_index_nor_uuid_is_where_cuda_stops(env: str, says: str) -> None:
    """CUDA takes integer indices and GPU or MIG UUIDs; at any other entry it stops, as
    at an index it cannot find (CUDA Programming Guide, "CUDA_VISIBLE_DEVICES"). Before,
    such a value was taken for one render cannot read, and left unsaid."""
    checked = check_stack(stack(f"    environment:\n{env}"), stack_name="ai", environ={})
    (w,) = [n for n in checked.notes if "WARNING: CUDA_VISIBLE_DEVICES" in n]
    assert says in w, w
    # unsubstituted (--skip-interpolation), a $ is docker's to substitute: not said
    if "$" in env:
        assert warnings(stack(f"    environment:\n{env}")) == []
