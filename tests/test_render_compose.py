"""`swarmgpu render` takes Compose's GPU syntax as written, and fits CI (issue 23, points
1 and 2): the whole stack is checked before Docker is asked anything, every error is
printed with its service and key, nothing is written on an error, and `--check` runs
with no Docker at all."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from support.gpu_nodes import run_cli, swarmgpu_env
from support.render_compose import FACTS, NODES

from swarmgpu.cli import main
from swarmgpu.manager.commands.audit import audit, exit_code
from swarmgpu.manager.commands.compose_gpu import read_gpu_reservations
from swarmgpu.manager.commands.render import StackError, check_stack, render_stack
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmService

P = "swarmgpu."
NO_DOCKER = "unix:///nonexistent/docker.sock"


VLLM = """\
services:
  llm:
    image: vllm/vllm-openai
    environment:
      HF_HOME: /models
    deploy:
      resources:
        reservations:
          memory: 1G
          devices:
            - driver: nvidia
              count: 1
              capabilities: [gpu]
"""


def reservations(devices: object) -> dict[str, object]:
    return {"devices": devices}


# --- point 1: the Compose GPU syntax, as written ------------------------------------------


def test_devices_count_becomes_gpus_and_is_removed_with_a_comment() -> None:
    out, plan = render_stack(VLLM, "ai", NODES, [], [], FACTS, prefix=P)
    doc = yaml.safe_load(out)
    d = doc["services"]["llm"]["deploy"]
    assert d["labels"][f"{P}gpus"] == "1"
    assert d["resources"] == {"reservations": {"memory": "1G"}}  # devices gone, rest kept
    assert any(k.startswith(f"{P}devices.") for k in d["labels"])
    assert doc["services"]["llm"]["environment"]["HF_HOME"] == "/models"
    assert "NVIDIA_VISIBLE_DEVICES" in doc["services"]["llm"]["environment"]
    comment = [ln for ln in out.splitlines() if ln.startswith("#")]
    assert any(
        'devices became swarmgpu.gpus: "1" and was removed' in ln
        and "refuses devices under reservations" in ln
        for ln in comment
    ), comment
    (sp,) = plan.services
    assert sp.status == "placed" and sum(len(p.uuids) for p in sp.placements) == 1


def test_only_devices_entry_leaves_no_empty_resources() -> None:
    text = VLLM.replace("          memory: 1G\n", "")
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS, prefix=P)
    assert "resources" not in yaml.safe_load(out)["services"]["llm"]["deploy"]


def test_capabilities_only_and_counts_summed() -> None:
    g = read_gpu_reservations(
        reservations([{"capabilities": ["gpu"], "count": 2}, {"driver": "nvidia", "count": "1"}]),
        {},
        "services.x",
    )
    assert g.errors == [] and g.labels == {f"{P}gpus": "3"} and g.drop_devices


def test_driver_capabilities_become_nvidia_driver_capabilities() -> None:
    text = VLLM.replace("[gpu]", "[gpu, compute, utility, video]")
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS, prefix=P)
    env = yaml.safe_load(out)["services"]["llm"]["environment"]
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility,video"


def test_options_are_dropped_with_a_note() -> None:
    g = read_gpu_reservations(
        reservations([{"driver": "nvidia", "count": 1, "options": {"virtualization": "false"}}]),
        {},
        "services.x",
    )
    assert g.errors == [] and any("options" in n and "dropped" in n for n in g.notes)


def test_count_all_is_the_most_gpus_one_node_has() -> None:
    """`count: all` (also: no count and no device_ids) = the whole of the largest GPU
    node: 8 here; only the RTX 4090 box has 8 whole GPUs free (the DGX has one in MIG
    mode), so all eight of its GPUs."""
    for entry in ("count: all", "capabilities: [gpu]"):
        text = (
            VLLM.replace("count: 1", entry)
            if entry == "count: all"
            else VLLM.replace("              count: 1\n", "")
        )
        out, plan = render_stack(text, "ai", NODES, [], [], FACTS, prefix=P)
        assert yaml.safe_load(out)["services"]["llm"]["deploy"]["labels"][f"{P}gpus"] == "8"
        (sp,) = plan.services
        assert sp.status == "placed", sp.reason
        assert [p.hostname for p in sp.placements] == ["gpu-node-2"]
        assert len(sp.placements[0].uuids) == 8
    checked = check_stack(VLLM.replace("count: 1", "count: all"))  # offline: checked only
    assert checked.errors == [] and any("count all: checked only" in n for n in checked.notes)
    with pytest.raises(StackError, match="no node of the swarm reports GPUs"):
        render_stack(VLLM.replace("count: 1", "count: all"), "ai", NODES, [], [], {}, prefix=P)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        (
            {"driver": "nvidia", "device_ids": ["0", "3"]},
            r"device_ids: \['0', '3'\] cannot be "
            r"expressed: swarmgpu chooses each replica's GPUs",
        ),
        ({"driver": "amd", "count": 1}, r"devices\[0\]: driver 'amd'.*NVIDIA GPUs only"),
        ({"capabilities": ["tpu"], "count": 1}, r"NVIDIA GPUs only"),
        ({"driver": "nvidia", "count": 0}, r"count: 0 is not a whole number >= 1 or 'all'"),
        ({"driver": "nvidia", "count": "two"}, r"count: 'two'"),
        (
            {"driver": "nvidia", "capabilities": ["gpu", "fast"]},
            r"capabilities: \['fast'\] unknown",
        ),
    ],
)
def test_what_cannot_be_expressed_is_an_error_naming_service_and_key(
    entry: dict[str, object], error: str
) -> None:
    g = read_gpu_reservations(reservations([entry]), {}, "services.x")
    assert g.labels == {} and g.drop_devices
    (e,) = g.errors
    assert e.startswith("services.x.deploy.resources.reservations.devices")
    assert re.search(error, e), e


def test_counts_that_disagree_are_an_error() -> None:
    g = read_gpu_reservations(
        reservations([{"driver": "nvidia", "count": 2}]), {f"{P}gpus": "1"}, "services.x"
    )
    assert g.errors and "the GPU counts differ" in g.errors[0] and f"{P}gpus" in g.errors[0]
    same = read_gpu_reservations(
        reservations([{"driver": "nvidia", "count": 2}]), {f"{P}gpus": "2"}, "services.x"
    )
    assert same.errors == [] and same.labels == {}  # the user's label stays as written
    both = read_gpu_reservations(
        reservations([{"driver": "nvidia", "count": "all"}]), {f"{P}gpus": "2"}, "services.x"
    )
    assert both.errors and "count all and another count" in both.errors[0]


def test_generic_gpu_reservation_is_the_request_and_is_removed() -> None:
    # Kept, Swarm appended DOCKER_RESOURCE_NVIDIA-GPU=<its own pick> to each task, which the
    # toolkit reads instead of placement's NVIDIA_VISIBLE_DEVICES where swarm-resource
    # names it (as node-config sets): the container got Swarm's GPUs, not its grant.
    text = """\
services:
  t:
    image: x
    deploy:
      labels: {swarmgpu.gpu-memory: 20GiB}
      resources:
        reservations:
          generic_resources:
            - discrete_resource_spec: {kind: NVIDIA-GPU, value: 2}
            - discrete_resource_spec: {kind: fpga, value: 1}
  u:
    image: x
    deploy:
      resources:
        reservations:
          generic_resources:
            - discrete_resource_spec: {kind: NVIDIA-GPU, value: 1}
"""
    out, _ = render_stack(text, "s", NODES, [], [], FACTS, prefix=P)
    svcs = yaml.safe_load(out)["services"]
    d = svcs["t"]["deploy"]
    assert d["labels"][f"{P}gpus"] == "2" and d["labels"][f"{P}gpu-memory"] == "20GiB"
    assert d["resources"]["reservations"]["generic_resources"] == [
        {"discrete_resource_spec": {"kind": "fpga", "value": 1}}
    ]  # not a GPU: the stack's
    assert "resources" not in svcs["u"]["deploy"]  # nothing else was in it
    assert svcs["u"]["deploy"]["labels"][f"{P}gpus"] == "1"
    assert "DOCKER_RESOURCE_NVIDIA-GPU" in out.split("services:")[0]  # the comment says why
    # a configured kind of another name is a GPU kind too
    g = read_gpu_reservations(
        {"generic_resources": [{"discrete_resource_spec": {"kind": "acme-gpu", "value": 1}}]},
        {},
        "services.t",
        kind="acme-gpu",
    )
    assert g.labels == {f"{P}gpus": "1"} and not g.drop_devices and g.drop_generic
    assert (
        read_gpu_reservations(
            {"generic_resources": [{"discrete_resource_spec": {"kind": "fpga", "value": 1}}]},
            {},
            "services.t",
        ).labels
        == {}
    )


def test_audit_names_a_service_that_reserves_gpus_through_swarm_only() -> None:
    spec = {
        "TaskTemplate": {
            "Resources": {
                "Reservations": {
                    "GenericResources": [
                        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}}
                    ]
                }
            }
        }
    }

    def service(name: str, labels: dict[str, str]) -> SwarmService:
        return SwarmService(
            id=name,
            name=name,
            labels=labels,
            constraints=(),
            env=(),
            mode="replicated",
            replicas=1,
            max_replicas_per_node=None,
            version=1,
            spec=spec,
        )

    snap = Snapshot(
        nodes=[],
        services=[service("plain", {}), service("mine", {f"{P}gpus": "2"})],
        tasks=[],
        facts={},
    )
    (f,) = audit(snap)
    assert f.kind == "swarm-gpu-reservation" and f.subject == "plain" and not f.advisory
    assert "swarmgpu.gpus" in f.message and exit_code([f]) == 1


# --- point 2: render for CI ----------------------------------------------------------------

BAD = """\
services:
  a:
    image: x
    deploy:
      labels: {swarmgpu.gpus: two, swarmgpu.gpu-memroy: 4G}
  b:
    image: x
    deploy:
      resources:
        reservations:
          cpus: lots
          devices: [{driver: nvidia, device_ids: ["GPU-1"]}]
  c:
    image: x
    deploy:
      mode: daemonset
      labels: {swarmgpu.gpus: "1"}
  ok:
    image: x
    deploy: {labels: {swarmgpu.gpus: "1"}}
"""


def test_check_stack_collects_every_error_with_service_and_key() -> None:
    errors = check_stack(BAD).errors
    assert len(errors) == 5, errors
    for want in (
        "services.a.deploy.labels: swarmgpu.gpus='two'",
        "services.a.deploy.labels: swarmgpu.gpu-memroy='4G'",
        "services.b.deploy.resources.reservations.cpus: 'lots'",
        "services.b.deploy.resources.reservations.devices[0].device_ids",
        "services.c.deploy.mode: 'daemonset' is not one of",
    ):
        assert any(e.startswith(want) for e in errors), (want, errors)


def test_render_refuses_an_invalid_request_it_used_to_render() -> None:
    with pytest.raises(StackError) as exc:
        render_stack(BAD, "s", NODES, [], [], FACTS, prefix=P)
    assert len(exc.value.errors) == 5


def test_cli_invalid_request_exits_1_and_writes_no_stack(tmp_path: Path) -> None:
    """Before Docker is asked anything: DOCKER_HOST points nowhere, and the answer is
    still the stack's errors, not 'cannot reach the Docker Engine'."""
    src, dst = tmp_path / "s.yml", tmp_path / "out.yml"
    src.write_text(BAD)
    res = CliRunner().invoke(
        main, ["render", str(src), "-o", str(dst)], env={"DOCKER_HOST": NO_DOCKER}
    )
    assert res.exit_code == 1, res.output
    assert not dst.exists()
    out = res.stderr
    assert "services.a.deploy.labels: swarmgpu.gpus='two'" in out
    assert "services.b.deploy.resources.reservations.cpus" in out
    assert "5 error(s); nothing written" in out and "Docker" not in out
    piped = CliRunner().invoke(main, ["render", str(src)], env={"DOCKER_HOST": NO_DOCKER})
    assert piped.exit_code == 1 and piped.stdout == ""  # nothing for `docker stack deploy`


def test_cli_malformed_yaml_is_a_stack_error_not_an_engine_error(tmp_path: Path) -> None:
    src = tmp_path / "s.yml"
    src.write_text("services: [\n")
    res = CliRunner().invoke(main, ["render", str(src)], env={"DOCKER_HOST": NO_DOCKER})
    assert res.exit_code == 1 and f"{src}:2:1: not valid YAML: " in res.stderr
    assert "Docker" not in res.stderr and res.stdout == ""


def test_render_check_runs_with_no_docker(tmp_path: Path) -> None:
    """The real CLI in a subprocess, DOCKER_HOST at a socket that does not exist."""
    src = tmp_path / "ai.yml"
    src.write_text(VLLM)
    env = {**swarmgpu_env(), "DOCKER_HOST": NO_DOCKER}
    assert not os.path.exists(NO_DOCKER.removeprefix("unix://"))
    good = run_cli("render", "--check", str(src), env=env)
    assert good.returncode == 0, good.stderr
    assert good.stdout == ""
    assert "valid (1 service(s), 1 GPU request(s))" in good.stderr
    assert "devices became swarmgpu.gpus" in good.stderr
    src.write_text(BAD)
    bad = run_cli("render", "--check", str(src), env=env)
    assert bad.returncode == 1 and bad.stderr.count("swarmgpu render: services.") == 5
    # A valid stack without --check does need the swarm: that is exit 2, naming it.
    src.write_text(VLLM)
    down = run_cli("render", str(src), env=env)
    assert down.returncode == 2 and "cannot read the swarm" in down.stderr


@pytest.mark.parametrize("out", [".", "missing/out.yml"])
def test_cli_output_it_cannot_write_is_said_before_the_swarm_is_read(
    tmp_path: Path, out: str
) -> None:
    """Before: -o a folder or into a missing folder was checked by nothing; with a swarm
    it was an IsADirectoryError (FileNotFoundError) traceback after the plan."""
    src = tmp_path / "ai.yml"
    src.write_text(VLLM)
    dst = tmp_path / out
    res = CliRunner().invoke(
        main, ["render", str(src), "-o", str(dst)], env={"DOCKER_HOST": NO_DOCKER}
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"swarmgpu render: -o {dst}: "), res.stderr
    assert "cannot read the swarm" not in res.stderr and len(res.stderr.splitlines()) == 1


def test_cli_an_empty_output_path_is_refused_as_empty(tmp_path: Path) -> None:
    # -o '' is Path('') = '.', refused as "-o : a folder": no folder was named.
    src = tmp_path / "ai.yml"
    src.write_text(VLLM)
    res = CliRunner().invoke(main, ["render", str(src), "-o", ""], env={"DOCKER_HOST": NO_DOCKER})
    assert res.exit_code == 2, res.output
    assert res.stderr == ("swarmgpu render: -o '': an empty path; give the file to write, "
                          "or - for stdout\n"), res.stderr


@pytest.mark.parametrize(
    "labels", ['{swarmgpu.gpus: "2"}', '["swarmgpu.gpus=2"]', '{SwarmGPU.gpus: "2"}']
)
def test_a_request_in_the_container_labels_is_an_error_naming_deploy_labels(
    labels: str,
) -> None:
    # The service-level labels: are the container's (ContainerSpec.Labels), which
    # swarmgpu never reads: the service was checked valid and deployed with no GPU.
    stack = f"services:\n  a:\n    image: x\n    labels: {labels}\n"
    errors = check_stack(stack).errors
    assert len(errors) == 1, errors
    assert errors[0].startswith("services.a.labels: ")
    assert "container label" in errors[0] and "move it under deploy.labels" in errors[0]
    if "SwarmGPU" not in labels:  # that one is an error in deploy.labels too
        moved = stack.replace("    labels:", "    deploy:\n      labels:")
        assert check_stack(moved).errors == []


def _render_check(tmp_path: Path, name: str | None, file: str = "ai.yml") -> tuple[Path, Result]:
    """``swarmgpu render --check`` of the vLLM stack written to ``tmp_path/file``, with
    ``-n name`` unless ``name`` is None: the file and the run."""
    src = tmp_path / file
    src.write_text(VLLM)
    args = ["render", "--check", str(src)] + ([] if name is None else ["-n", name])
    return src, CliRunner().invoke(main, args, env={"DOCKER_HOST": NO_DOCKER})


@pytest.mark.parametrize(("name", "file"), [("", "ai.yml"), (" '\" ", "ai.yml"), (None, ".ai.yml")])
def test_cli_a_stack_name_docker_refuses_is_refused(
    tmp_path: Path, name: str | None, file: str
) -> None:
    """docker stack deploy refuses a stack name that is empty or only spaces and quotes
    (docker/cli validateStackName: "invalid stack name"). Before: -n '' fell back to the
    file's name silently (a tenant's stacks were checked against a name never
    deployed), and a file named .ai.yml gave the empty name."""
    src, res = _render_check(tmp_path, name, file)
    assert res.exit_code == 2, res.output
    assert len(res.stderr.splitlines()) == 1, res.stderr
    said = f"-n {name!r}" if name is not None else f"{src} (no -n): its name gives ''"
    assert res.stderr.startswith(f"swarmgpu render: {said}: invalid stack name"), res.stderr
    assert res.stderr.rstrip().endswith("give the name you deploy it with: -n NAME")


@pytest.mark.parametrize("out", ["out.yml", "-"])
def test_cli_check_with_an_output_is_refused_in_one_line(tmp_path: Path, out: str) -> None:
    """--check writes no stack: -o was ignored without a word (no file where one was
    asked for, exit 0)."""
    src = tmp_path / "ai.yml"
    src.write_text(VLLM)
    res = CliRunner().invoke(
        main, ["render", "--check", str(src), "-o", out], env={"DOCKER_HOST": NO_DOCKER}
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [
        f"swarmgpu render: --check writes no stack, so -o {out} would write nothing; "
        "leave out -o, or --check to render"
    ]
    assert not (tmp_path / "out.yml").exists()


@pytest.mark.parametrize(("name", "file"), [
    ("bad name", "ai.yml"), ("a.b", "ai.yml"), ("-ai", "ai.yml"), ("\u00e9t\u00e9", "ai.yml"),
    ("x" * 62, "ai.yml"), (None, "my stack.yml")])
def test_cli_a_stack_name_swarm_refuses_its_services_for_is_refused(
    tmp_path: Path, name: str | None, file: str
) -> None:
    """docker stack deploy names each service and network STACK_NAME, and Swarm refuses a
    name that is not a DNS name component (swarmkit's validateAnnotations: ASCII letters
    and digits, '-' or '_' between them, at most 63). Before: -n 'bad name' passed
    --check, and the deploy failed at its first service."""
    src, res = _render_check(tmp_path, name, file)
    assert res.exit_code == 2, res.output
    assert len(res.stderr.splitlines()) == 1, res.stderr
    said = f"-n {name!r}" if name is not None else f"{src} (no -n): its name gives 'my stack'"
    assert res.stderr.startswith(f"swarmgpu render: {said}: invalid stack name"), res.stderr
    assert "valid as a DNS name component" in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["ai", "ai-", "a_b", "AI2", "x" * 61])
def test_cli_a_stack_name_swarm_takes_passes(tmp_path: Path, name: str) -> None:
    _, res = _render_check(tmp_path, name)
    assert "invalid stack name" not in res.stderr, res.stderr


@pytest.mark.parametrize(("name", "svc", "said"), [
    ("x" * 59, "vllm", "[64 characters] is no Swarm service name"),
    ("ai", "a.b", "'ai_a.b' is no Swarm service name")])
def test_a_service_whose_swarm_name_swarm_refuses_is_an_error(
        name: str, svc: str, said: str) -> None:
    """Each service is created as STACK_SERVICE: one past 63 characters, or with a dot
    (docker/cli's schema takes a.b), was refused by Swarm at deploy, not by --check."""
    errors = check_stack(f"services:\n  {svc}:\n    image: nginx\n", stack_name=name).errors
    assert [e for e in errors if said in e and e.startswith(f"services.{svc}: ")], errors
    assert check_stack(f"services:\n  {svc}:\n    image: nginx\n").errors == []
