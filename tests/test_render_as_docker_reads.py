"""What `swarmgpu render` writes is read by `docker stack deploy -c -` as render meant it.

docker/cli reads the file with go-yaml, which reads more plain values as numbers and
booleans than PyYAML's YAML 1.1 (``y``, ``08``, ``1e3``, ``0o17``): a text value must
reach it quoted. Everything render does not own keeps its meaning (a label's number, a
list of labels with ``$$``). Variables are substituted as docker substitutes them
(cli/compose/template/template.go), from the environment both run in, and the output
written so docker's own pass gives back what render planned with; with
``--skip-interpolation`` a ``$`` render would plan with is refused instead.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.render_compose import FACTS, NODES

from swarmgpu.cli import main
from swarmgpu.manager.commands.interpolation import interpolate
from swarmgpu.manager.commands.render import check_stack, render_stack
from swarmgpu.manager.placement import env_template, env_template_per_node
from swarmgpu.manager.placement.envs import VOID_LINE

NO_DOCKER = "unix:///nonexistent/docker.sock"
P = "swarmgpu."

GPU = """\
version: "3.8"
services:
  llm:
    image: vllm/vllm-openai
    deploy:
      labels:
        swarmgpu.gpus: "1"
"""

# Text that go-yaml (docker/cli) reads as a number, a boolean or a time when written
# plain, though YAML 1.1 (PyYAML) reads it as text; y and N for docker 27 and older.
GO_NOT_TEXT = (
    "08",
    "09",
    "y",
    "N",
    "1e3",
    "1.5e3",
    "+1e3",
    "0o17",
    "0X1F",
    "0B1",
    "0o-17",
    "0b-101",
    "2001-12-14t21:59:43,5+01:00",
)


@pytest.mark.parametrize("value", GO_NOT_TEXT)
def test_text_docker_would_read_as_a_number_or_boolean_is_written_quoted(value: str) -> None:
    # A quoted "08" in the input was written back plain (08): docker read the number 8
    # into a service's env (TZ=8), and y, a boolean, made it refuse the file.
    text = (
        GPU + f'  web:\n    image: nginx\n    command: ["sleep", "{value}"]\n'
        f'    environment:\n      OFFSET: "{value}"\n    labels:\n      "{value}": x\n'
    )
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)
    web = yaml.safe_load(out)["services"]["web"]
    assert web["environment"]["OFFSET"] == value and web["command"][1] == value
    lines = {ln.strip() for ln in out.splitlines()}
    assert {f"OFFSET: '{value}'", f"- '{value}'", f"'{value}': x"} <= lines, out


def test_labels_of_a_gpu_service_keep_their_values_as_written() -> None:
    # render wrote a GPU service's labels back as its own text: 1.0, which docker gives
    # Swarm as "1", became the text "1.0"; .inf ("+Inf") became "inf".
    text = GPU + "        version: 1.0\n        big: 100000000.0\n        cap: .inf\n"
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)
    labels = yaml.safe_load(out)["services"]["llm"]["deploy"]["labels"]
    assert labels["version"] == 1.0 and isinstance(labels["version"], float)
    assert labels["big"] == 1e8 and labels["cap"] == float("inf")
    assert labels["swarmgpu.gpus"] == "1"
    assert any(k.startswith("swarmgpu.devices.") for k in labels)


@pytest.mark.parametrize("devices", [False, True])
def test_labels_in_list_form_stay_a_list(devices: bool) -> None:
    # A list item is a value, which docker interpolates ("a$$b=1" is the label a$b); as
    # a mapping, which render made of it, the key is not: the label became a$$b.
    ask = (
        (
            "      resources:\n        reservations:\n          devices:\n"
            "            - {driver: nvidia, count: 1, capabilities: [gpu]}\n"
        )
        if devices
        else "        - swarmgpu.gpus=1\n"
    )
    text = GPU.replace(
        '      labels:\n        swarmgpu.gpus: "1"\n',
        "      labels:\n        - a$$b=1\n        - team=ml\n" + ("" if devices else ask),
    ) + (ask if devices else "")
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)
    labels = yaml.safe_load(out)["services"]["llm"]["deploy"]["labels"]
    assert isinstance(labels, list), labels
    assert labels[:2] == ["a$$b=1", "team=ml"]
    assert "swarmgpu.gpus=1" in labels
    assert any(x.startswith("swarmgpu.devices.") for x in labels)


@pytest.mark.parametrize(
    ("yaml_text", "where"),
    [
        (
            '      placement:\n        constraints: ["node.labels.zone == ${ZONE}"]\n',
            "services.llm.deploy.placement.constraints[0]",
        ),
        ('      replicas: "${REPLICAS:-2}"\n', "services.llm.deploy.replicas"),
        (
            '      resources: {reservations: {cpus: "$CPUS"}}\n',
            "services.llm.deploy.resources.reservations.cpus",
        ),
        (
            '      labels:\n        - "${E:-swarmgpu.priority}=1000"\n',
            "services.llm.deploy.labels[0]",
        ),
        (
            '      labels:\n        swarmgpu.gpu-product: "${PRODUCT:-NVIDIA A100*}"\n',
            "services.llm.deploy.labels.swarmgpu.gpu-product",
        ),
    ],
)
def test_skip_interpolation_refuses_a_value_render_places_with_that_docker_substitutes(
    yaml_text: str, where: str
) -> None:
    # No environment (render --skip-interpolation): docker stack deploy substitutes
    # ${VAR}, $VAR and $$ after render read the value: render planned for
    # "node.labels.zone == ${ZONE}" (no node: pending), and `render --check` passed a list
    # label that docker made swarmgpu.priority=1000.
    text = "services:\n  llm:\n    image: vllm/vllm-openai\n    deploy:\n" + yaml_text
    if "labels" not in yaml_text:
        text += '      labels:\n        swarmgpu.gpus: "1"\n'
    errors = check_stack(text, stack_name="ai").errors
    assert any(e.startswith(f"{where}: ") and "substitutes" in e for e in errors), errors


@pytest.mark.parametrize("environ", [None, {"TAG": "1", "HF_TOKEN": "secret", "DOMAIN": "x"}])
def test_what_render_does_not_read_is_left_for_docker_to_substitute(
    environ: dict[str, str] | None,
) -> None:
    # Written as the input wrote it, substituted or not: a token stays ${HF_TOKEN}.
    text = (
        GPU.replace(
            "    image: vllm/vllm-openai\n",
            "    image: vllm/vllm-openai:${TAG:-latest}\n"
            '    environment: ["HF_TOKEN=${HF_TOKEN}", "PRICE=$$5"]\n',
        )
        + '        traefik.rule: "Host(`${DOMAIN}`)"\n'
    )
    assert check_stack(text, stack_name="ai", environ=environ).errors == []
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS, environ=environ)
    svc = yaml.safe_load(out)["services"]["llm"]
    assert svc["image"] == "vllm/vllm-openai:${TAG:-latest}"
    assert svc["environment"][:2] == ["HF_TOKEN=${HF_TOKEN}", "PRICE=$$5"]
    assert svc["deploy"]["labels"]["traefik.rule"] == "Host(`${DOMAIN}`)"


@pytest.mark.parametrize("env", ["[CUDA_DEVICE_ORDER]", "{CUDA_DEVICE_ORDER: null}"])
def test_a_variable_the_service_takes_from_the_deploy_shell_is_kept(env: str) -> None:
    # A name with no value is docker's "take it from my environment". In a mapping render
    # kept it; in a list it added CUDA_DEVICE_ORDER=PCI_BUS_ID after it, which docker
    # reads as the later, winning value.
    text = GPU.replace(
        "    image: vllm/vllm-openai\n", f"    image: vllm/vllm-openai\n    environment: {env}\n"
    )
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)
    got = yaml.safe_load(out)["services"]["llm"]["environment"]
    if isinstance(got, list):
        assert [e for e in got if e.split("=")[0] == "CUDA_DEVICE_ORDER"] == [
            "CUDA_DEVICE_ORDER"
        ], got
        assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in got)
    else:
        assert got["CUDA_DEVICE_ORDER"] is None and "NVIDIA_VISIBLE_DEVICES" in got


@pytest.mark.parametrize(
    "env",
    ["[NVIDIA_VISIBLE_DEVICES=all]", "[NVIDIA_VISIBLE_DEVICES]", "{NVIDIA_VISIBLE_DEVICES: 0}"],
)
def test_a_request_whose_environment_sets_the_device_variable_is_an_error(env: str) -> None:
    # render kept the service's own value and left its template out: the file deployed
    # gated and placed, and the container saw the GPUs of its own value (`all`: every
    # GPU of its node), not the ones placement held for it.
    text = GPU.replace(
        "    image: vllm/vllm-openai\n", f"    image: vllm/vllm-openai\n    environment: {env}\n"
    )
    (err,) = check_stack(text, stack_name="ai").errors
    assert err.startswith("services.llm.environment: NVIDIA_VISIBLE_DEVICES"), err
    assert "remove it" in err
    for mine in (env_template(P), env_template_per_node(P), VOID_LINE):  # swarmgpu's
        text = GPU.replace(
            "    image: vllm/vllm-openai\n",
            f"    image: vllm/vllm-openai\n    environment: [{json.dumps(mine)}]\n",
        )
        assert check_stack(text, stack_name="ai").errors == [], mine


@pytest.mark.parametrize("form", ["list", "mapping"])
def test_a_void_device_line_in_a_requests_environment_becomes_the_template(form: str) -> None:
    # The void line is swarmgpu's (placement.ungranted: void), so render --check passes
    # it, as the daemon replaces it; render kept it and wrote no template beside it: the
    # file deployed gated and placed, its container saw no GPU until the daemon's write
    # restarted it.
    key, value = VOID_LINE.split("=")
    env = f"[{VOID_LINE}]" if form == "list" else f"{{{key}: {value}}}"
    text = GPU.replace(
        "    image: vllm/vllm-openai\n", f"    image: vllm/vllm-openai\n    environment: {env}\n"
    )
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)
    got = yaml.safe_load(out)["services"]["llm"]["environment"]
    lines = got if isinstance(got, list) else [f"{k}={v}" for k, v in got.items()]
    assert [e for e in lines if e.startswith(f"{key}=")] == [env_template(P)], lines


ZONED = [replace(NODES[0], labels={"zone": "eu"}), NODES[1]]
ZONE_TEXT = GPU.replace(
    "    deploy:\n",
    "    deploy:\n      replicas: ${REPLICAS:-2}\n"
    '      placement:\n        constraints: ["node.labels.zone == ${ZONE}"]\n',
)


def _as_docker_reads(out: str, environ: dict[str, str]) -> dict[str, Any]:
    got, errors, _ = interpolate(yaml.safe_load(out), environ)
    assert errors == []
    return got


def test_variables_render_places_by_are_substituted_from_its_environment() -> None:
    # template.go: ${ZONE} is eu, ${REPLICAS:-2} is 2 (REPLICAS unset), cast to an integer
    # (loader/interpolate.go toInt). Render planned for the text "node.labels.zone ==
    # ${ZONE}" (no node matched) or refused it; now it places on the eu node and writes
    # the values, so docker deploys those even where it runs with another ZONE.
    environ = {"ZONE": "eu"}
    out, plan = render_stack(ZONE_TEXT, "ai", ZONED, [], [], FACTS, environ=environ)
    (sp,) = plan.services
    assert sp.status == "placed" and {p.node_id for p in sp.placements} == {"n-dgx"}
    deploy = yaml.safe_load(out)["services"]["llm"]["deploy"]
    assert deploy["replicas"] == 2
    assert "node.labels.zone == eu" in deploy["placement"]["constraints"]
    for other in (environ, {"ZONE": "us", "REPLICAS": "5"}):
        assert _as_docker_reads(out, other)["services"]["llm"]["deploy"] == deploy


def test_a_dollar_docker_keeps_is_written_so_its_pass_keeps_it() -> None:
    # template.go "escaped": $$ is one $, and a variable's value is not substituted
    # again: what render substituted to a $ is written $$, docker's pass makes it $. A
    # label not swarmgpu's is the tenant's, left as written (as in a mapping).
    text = GPU.replace(
        '      labels:\n        swarmgpu.gpus: "1"\n',
        "      labels:\n        - a$$b=1\n        - c=${PRICE}\n        - swarmgpu.gpus=1\n"
        '      placement:\n        constraints: ["node.labels.x != a$$b", '
        '"node.labels.y != ${PRICE}"]\n',
    )
    environ = {"PRICE": "$5"}
    assert check_stack(text, stack_name="ai", environ=environ).errors == []
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS, environ=environ)
    deploy = yaml.safe_load(out)["services"]["llm"]["deploy"]
    assert deploy["labels"][:2] == ["a$$b=1", "c=${PRICE}"]
    assert "node.labels.y != $$5" in deploy["placement"]["constraints"]
    docker = _as_docker_reads(out, environ)["services"]["llm"]["deploy"]
    assert docker["labels"][:2] == ["a$b=1", "c=$5"]
    assert "node.labels.x != a$b" in docker["placement"]["constraints"]
    assert "node.labels.y != $5" in _as_docker_reads(out, {})["services"]["llm"]["deploy"][
        "placement"]["constraints"]


@pytest.mark.parametrize(("e", "is_request"), [(None, True), ("team", False)])
def test_check_reads_a_list_label_key_as_docker_substitutes_it(
    e: str | None, is_request: bool
) -> None:
    # "${E:-swarmgpu.priority}=1000" is the label swarmgpu.priority to docker with E
    # unset (template.go softDefault): --check checks it as the request label it is.
    text = GPU.replace(
        '      labels:\n        swarmgpu.gpus: "1"\n',
        '      labels:\n        - swarmgpu.gpus=1\n        - "${E:-swarmgpu.priority}=high"\n',
    )
    errors = check_stack(text, stack_name="ai", environ={"E": e} if e else {}).errors
    assert any("swarmgpu.priority" in x for x in errors) is is_request, errors


def test_cli_substitutes_warns_of_an_unset_variable_and_says_so_in_check(
    tmp_path: Path,
) -> None:
    src = tmp_path / "ai.yml"
    src.write_text(GPU.replace("vllm/vllm-openai", "vllm/vllm-openai:${TAG}"))
    res = CliRunner().invoke(main, ["render", "--check", str(src)], env={"TAG": None})
    assert res.exit_code == 0, res.output
    assert "services.llm.image (line 4): 'vllm/vllm-openai:${TAG}': TAG is not set" in (res.stderr)
    assert "variables substituted from this environment" in res.stderr


@pytest.mark.parametrize("flag", [[], ["--check"]])
def test_cli_a_required_variable_unset_is_an_error_naming_it(
    tmp_path: Path, flag: list[str]
) -> None:
    # template.go requiredNonEmpty: docker stack deploy refuses the file.
    src = tmp_path / "ai.yml"
    src.write_text(ZONE_TEXT.replace("${ZONE}", "${ZONE:?the zone to run in}"))
    res = CliRunner().invoke(
        main, ["render", *flag, str(src)], env={"ZONE": None, "DOCKER_HOST": NO_DOCKER}
    )
    assert res.exit_code == 1 and res.stdout == ""
    assert "services.llm.deploy.placement.constraints[0] (line 8): " in res.stderr
    assert "ZONE is not set" in res.stderr and "1 error(s); nothing written" in res.stderr


def test_cli_skip_interpolation_refuses_as_before(tmp_path: Path) -> None:
    src = tmp_path / "ai.yml"
    src.write_text(ZONE_TEXT)
    for flag in ("--skip-interpolation", "--no-interpolate"):
        res = CliRunner().invoke(main, ["render", "--check", flag, str(src)], env={"ZONE": "eu"})
        assert res.exit_code == 1
        assert "services.llm.deploy.placement.constraints[0]: " in res.stderr
        assert "services.llm.deploy.replicas: " in res.stderr
