"""The readings tests/test_render_as_docker_config.py found render sharing not with
docker's loader (docker stack config 28.2), each pinned without a docker CLI."""

from __future__ import annotations

import pytest

from swarmgpu.core.yamlfile import parse_yaml_lines
from swarmgpu.manager.commands.render import StackError, check_stack
from swarmgpu.manager.commands.swarmspec import (
    env_list,
    max_replicas_of,
    read_labels,
    replicas_of,
)

WEB = "services:\n  web:\n    image: nginx\n"


def test_a_merge_key_list_takes_the_first_listed_mapping_key() -> None:
    # PyYAML 6.0.4 gave the later mapping's image (redis); YAML and go-yaml v2/v3 the
    # first listed (docker stack config: nginx). A mapping's own keys still win.
    text = ("a: &a {image: nginx, p: 1}\nb: &b {image: redis, q: 2}\n"
            "c: {<<: [*a, *b]}\nd: {<<: [*b, *a], q: 3}\ne: &e {<<: *a, image: r2}\n"
            "f: {<<: [*e, *b]}\n")
    got, _ = parse_yaml_lines(text, "t", StackError, docker=True)
    assert got["c"] == {"image": "nginx", "p": 1, "q": 2}
    assert got["d"] == {"image": "redis", "p": 1, "q": 3}
    assert got["f"] == {"image": "r2", "p": 1, "q": 2}


@pytest.mark.parametrize(
    ("version", "says"),
    [("3.8", "is a number"), ("3", "is a number"), ('"3.8 "', "3.0\" to \"3.13\""),
     ('"3.99"', "unsupported Compose file version"), ('"3.08"', "write version: \"3.8\"")],
)
def test_a_version_docker_refuses_is_refused(version: str, says: str) -> None:
    # docker stack config: "version must be a string", "unsupported Compose file
    # version: 3.99"; render read 3.8, 3.99 and 3.08 and wrote "3.8".
    errors = check_stack(f"version: {version}\n" + WEB).errors
    assert len(errors) == 1 and says in errors[0], errors
    more = check_stack('version: "3.8"\n' + WEB, more=[("b.yml", f"version: {version}\n")])
    assert any(e.startswith("b.yml: version ") for e in more.errors), more.errors


def test_an_empty_version_is_3_13_as_docker_reads_it() -> None:
    checked = check_stack('version: ""\n' + WEB)
    assert checked.errors == [] and checked.stack["version"] == "3.8"


def test_numbers_and_bare_names_read_as_docker_gives_them_swarm() -> None:
    # loader: a float label or env value is Go's text (1.0 is "1"); an env name with no
    # value is a bare name (convertEnvironment), not NAME= (empty)
    deploy = {"labels": {"a": 1.0, "b": 1e8, "c": 0.50, "d": 7, "e": None}}
    assert read_labels(deploy, "s") == {"a": "1", "b": "1e+08", "c": "0.5", "d": "7", "e": ""}
    svc = {"environment": {"A": 1.0, "B": None, "C": "", "D": 123456789.0}}
    assert env_list(svc, "s") == ["A=1", "B", "C=", "D=1.23456789e+08"]
    text = WEB + "    deploy:\n      labels: {swarmgpu.gpus: 1.0}\n"
    assert check_stack(text).errors == []


def test_a_whole_number_written_as_a_float_is_read_as_docker_reads_it() -> None:
    # docker stack config: replicas: 2.0 is 2 (2.5 it refuses); render refused 2.0
    text = WEB + "    deploy:\n      replicas: 2.0\n      placement: {max_replicas_per_node: 1.0}\n"
    assert check_stack(text).errors == []
    assert replicas_of({"replicas": 2.0}, "s") == 2
    assert max_replicas_of({"max_replicas_per_node": 1.0}, "s") == 1
    for bad in (2.5, float("inf"), True):
        with pytest.raises(StackError):
            replicas_of({"replicas": bad}, "s")
