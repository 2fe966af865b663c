"""A relative path in a stack reaches Swarm as the same file once rendered.

docker/cli reads a relative path (``env_file``, a bind mount's source, a config's or
secret's ``file``) against the folder of the stack file, but against the folder it runs
in when the file comes on stdin (``-c -``: cli/command/stack/loader getConfigDetails),
which is how render's output is deployed. The oracle is each docker CLI on this machine
(``support.docker_clis``) deploying the original file by its path and render's output
on stdin from another folder, to a stand-in engine that records what Swarm is given.
An env file's variables keep their values: docker reads ``environment`` over them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.docker_clis import Engine, deployed, docker_clis, engine
from support.render_compose import FACTS, NODES

from swarmgpu.cli import main
from swarmgpu.manager.commands.render import StackError, render_stack

CLIS: list[tuple[str, str] | None] = [*docker_clis()]

STACK = """\
version: "3.8"
services:
  s:
    image: busybox
    env_file: [./web.env, conf/more.env]
    volumes: ["./data:/data:ro", {type: bind, source: conf, target: /conf}, "named:/n"]
    configs: [c1]
    secrets: [s1]
    deploy:
      labels:
        swarmgpu.gpus: "1"
configs:
  c1: {file: ./conf/c1.conf}
secrets:
  s1: {file: s1.txt}
volumes:
  named: {}
"""


@pytest.fixture(scope="module", params=CLIS or [None], ids=lambda c: c and f"{c[0]}-{c[1]}")
def cli(request: pytest.FixtureRequest) -> Iterator[tuple[str, Engine]]:
    """Each docker CLI found, with a stand-in engine to deploy to."""
    if request.param is None:
        pytest.fail("no docker CLI in /usr/bin, /usr/local/bin or on PATH: it is the oracle")
    with engine() as server:
        yield request.param[0], server


def _stack_folder(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "stacks"
    (folder / "conf").mkdir(parents=True)
    (folder / "s.yml").write_text(text)
    (folder / "web.env").write_text("E=1\n")
    (folder / "conf" / "more.env").write_text("F=2\n")
    (folder / "conf" / "c1.conf").write_text("config")
    (folder / "s1.txt").write_text("secret")
    return folder


def _what_swarm_gets(spec: dict[str, Any], server: Engine) -> dict[str, Any]:
    """What the stack's own keys gave Swarm: render's additions left out."""
    cs = spec["TaskTemplate"]["ContainerSpec"]
    return {
        "env": sorted(e for e in cs["Env"] if e[0] in "EF"),
        "mounts": cs["Mounts"],
        "objects": sorted((kind, o["Name"], o["Data"]) for kind, o in server.objects),
    }


def test_relative_paths_reach_the_same_files_from_stdin(
    cli: tuple[str, Engine], tmp_path: Path
) -> None:
    # Rendered, ./web.env was read from the folder docker ran in: "no such file" there,
    # or another file of that name; the bind mount's source another folder.
    path, server = cli
    folder = _stack_folder(tmp_path, STACK)
    theirs, err = deployed(path, server, STACK, folder)
    assert theirs is not None, err
    want = _what_swarm_gets(theirs, server)
    out, _ = render_stack(STACK, "t", NODES, [], [], FACTS, environ={}, base=str(folder))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ours, err = deployed(path, server, out, tmp_path, stdin_in=elsewhere)
    assert ours is not None, err
    assert _what_swarm_gets(ours, server) == want


@pytest.mark.parametrize("environ", [None, {"X": "a"}])
def test_a_path_docker_substitutes_is_joined_as_docker_reads_it(
    environ: dict[str, str] | None, tmp_path: Path
) -> None:
    # The folder's $ is one to docker ($$); a variable in the path stays one, or is the
    # value render substituted, as docker would.
    text = STACK.replace("./web.env", '"./${X}.env"')
    folder = _stack_folder(tmp_path / "a$b", text)
    (folder / "a.env").write_text("E=1\n")
    out, _ = render_stack(text, "t", NODES, [], [], FACTS, environ=environ, base=str(folder))
    svc = yaml.safe_load(out)["services"]["s"]
    at = str(folder).replace("$", "$$")
    joined = f"{at}/./${{X}}.env" if environ is None else f"{at}/a.env"
    assert svc["env_file"] == [joined, f"{at}/conf/more.env"]
    assert svc["volumes"][:2] == [
        f"{at}/data:/data:ro",
        {"type": "bind", "source": f"{at}/conf", "target": "/conf"},
    ]
    assert "named:/n" in svc["volumes"]
    assert yaml.safe_load(out)["configs"]["c1"]["file"] == f"{at}/conf/c1.conf"


def test_skip_interpolation_refuses_a_path_that_starts_with_a_variable(tmp_path: Path) -> None:
    # ${DIR} may be absolute once docker substitutes it: joined to the folder, it was
    # another file.
    text = STACK.replace("./web.env", '"${DIR}/web.env"')
    folder = _stack_folder(tmp_path, text)
    with pytest.raises(StackError) as exc:
        render_stack(text, "t", NODES, [], [], FACTS, base=str(folder))
    assert str(exc.value).startswith("services.s.env_file[0]: '${DIR}/web.env': ")
    environ = {"DIR": str(folder)}
    out, _ = render_stack(text, "t", NODES, [], [], FACTS, environ=environ, base=str(folder))
    # substituted, absolute: left for docker to substitute alike
    assert yaml.safe_load(out)["services"]["s"]["env_file"][0] == "${DIR}/web.env"


@pytest.mark.parametrize("bare", [False, True])
def test_a_variable_the_env_file_sets_keeps_its_value(
    bare: bool, cli: tuple[str, Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docker reads env_file under the service's environment: render's own
    # CUDA_DEVICE_ORDER=PCI_BUS_ID there replaced the env file's FASTEST_FIRST. A bare
    # name is set from docker's environment, render's too in the pipeline.
    path, server = cli
    folder = _stack_folder(tmp_path, STACK)
    line = "CUDA_DEVICE_ORDER" if bare else "CUDA_DEVICE_ORDER=FASTEST_FIRST"
    (folder / "web.env").write_text(f"\ufeff # a comment\n\n  {line}\r\nE=1\n")
    if bare:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    theirs, err = deployed(path, server, STACK, folder)
    assert theirs is not None, err
    environ = {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"} if bare else {}
    out, _ = render_stack(STACK, "t", NODES, [], [], FACTS, environ=environ, base=str(folder))
    ours, err = deployed(path, server, out, tmp_path, stdin_in=tmp_path)
    assert ours is not None, err

    def order(spec: dict[str, Any]) -> list[str]:
        env = spec["TaskTemplate"]["ContainerSpec"]["Env"]
        return [e for e in env if e.startswith("CUDA_DEVICE_ORDER")]

    assert order(ours) == order(theirs) == ["CUDA_DEVICE_ORDER=FASTEST_FIRST"]
    env = ours["TaskTemplate"]["ContainerSpec"]["Env"]
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES={{") for e in env)


def test_driver_capabilities_the_env_file_sets_keep_its_value(tmp_path: Path) -> None:
    # A Compose GPU reservation's capabilities become NVIDIA_DRIVER_CAPABILITIES in
    # environment, which docker reads over the env file: its `all` became
    # compute,utility. Where the file does not set it, render still writes it.
    text = STACK.replace(
        '    deploy:\n      labels:\n        swarmgpu.gpus: "1"\n',
        "    deploy:\n      resources:\n        reservations:\n          devices:\n"
        "            - {capabilities: [gpu, compute, utility], count: 1}\n",
    )
    folder = _stack_folder(tmp_path, text)
    (folder / "web.env").write_text("NVIDIA_DRIVER_CAPABILITIES=all\n")
    out, _ = render_stack(text, "t", NODES, [], [], FACTS, environ={}, base=str(folder))
    env = yaml.safe_load(out)["services"]["s"]["environment"]
    assert not any(str(e).startswith("NVIDIA_DRIVER_CAPABILITIES") for e in env), env
    (folder / "web.env").write_text("E=1\n")
    out, _ = render_stack(text, "t", NODES, [], [], FACTS, environ={}, base=str(folder))
    env = yaml.safe_load(out)["services"]["s"]["environment"]
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility", env


def test_a_request_whose_env_file_sets_the_device_variable_is_an_error(tmp_path: Path) -> None:
    # render left its template out where the env file sets the name, so the file's
    # NVIDIA_VISIBLE_DEVICES=all reached a gated, placed service: every GPU of its node.
    folder = _stack_folder(tmp_path, STACK)
    (folder / "web.env").write_text("NVIDIA_VISIBLE_DEVICES=all\n")
    with pytest.raises(StackError) as exc:
        render_stack(STACK, "t", NODES, [], [], FACTS, environ={}, base=str(folder))
    assert str(exc.value).startswith("services.s.env_file: sets NVIDIA_VISIBLE_DEVICES"), exc.value


@pytest.mark.parametrize(
    ("text", "why"),
    [(None, "No such file or directory"), ("A B=1\n", "'A B' is no variable name")],
)
def test_an_env_file_docker_refuses_is_an_error_naming_it(
    text: str | None, why: str, tmp_path: Path
) -> None:
    # docker stack deploy refuses the stack ("open ...: no such file or directory",
    # "variable 'A B' contains whitespaces"); render wrote it.
    folder = _stack_folder(tmp_path, STACK)
    if text is None:
        (folder / "web.env").unlink()
    else:
        (folder / "web.env").write_text(text)
    with pytest.raises(StackError) as exc:
        render_stack(STACK, "t", NODES, [], [], FACTS, environ={}, base=str(folder))
    assert str(exc.value).startswith("services.s.env_file[0]: "), exc.value
    assert why in str(exc.value)


def test_render_check_reads_the_env_files_render_reads(tmp_path: Path) -> None:
    # render --check, the CI gate before a deploy, said valid (exit 0) where render
    # refused the stack for its env files, and only after asking Docker: every such
    # error, of every service, is render --check's, with no Docker.
    two = STACK.replace(
        "configs:\n",
        "  t:\n    image: busybox\n    env_file: gone.env\n"
        "    deploy: {labels: {swarmgpu.gpus: '1'}}\nconfigs:\n",
        1,
    )
    folder = _stack_folder(tmp_path, two)
    (folder / "web.env").write_text("NVIDIA_VISIBLE_DEVICES=all\n")
    res = CliRunner().invoke(
        main,
        ["render", "--check", str(folder / "s.yml")],
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert res.exit_code == 1, res.output
    err = res.stderr
    assert "services.s.env_file: sets NVIDIA_VISIBLE_DEVICES" in err, err
    assert "services.t.env_file: 'gone.env': cannot read it (No such file" in err, err
    assert "2 error(s)" in err and "Docker" not in err, err


def test_an_error_in_a_later_env_file_names_that_file_alone(tmp_path: Path) -> None:
    # The first file's location was carried into the next: "services.s.env_file[0]:
    # 'web.env'.env_file[1]: 'gone.env': cannot read it", naming two files and no key.
    text = STACK.replace("env_file: [./web.env, conf/more.env]",
                         "env_file: [./web.env, conf/more.env, gone.env]")
    assert text != STACK
    folder = _stack_folder(tmp_path, text)
    with pytest.raises(StackError) as exc:
        render_stack(text, "t", NODES, [], [], FACTS, environ={}, base=str(folder))
    assert str(exc.value).startswith("services.s.env_file[2]: 'gone.env': cannot read it"), \
        exc.value
