"""`swarmgpu render -c base.yml -c prod.yml` merges the files as `docker stack deploy -c
base.yml -c prod.yml` does (docker/cli cli/compose/loader/merge.go, mergo with
WithOverride and WithAppendSlice): each file substituted on its own, then merged, later
files over earlier ones; where render has no rule for a field it refuses, naming the
field and the files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.render_compose import FACTS, NODES

from swarmgpu.cli import main
from swarmgpu.manager.commands.render import StackError, check_stack, render_stack
from swarmgpu.manager.commands.stackmerge import MergeError, StackFile, merge_stacks

P = "swarmgpu."
NO_DOCKER = "unix:///nonexistent/docker.sock"

BASE = """\
version: "3.8"
services:
  llm:
    image: vllm/vllm-openai:v1
    environment:
      HF_HOME: /models
      LOG: info
    ports: ["8080:80", "9090:90"]
    volumes: ["models:/models", "cache:/cache"]
    cap_add: [NET_ADMIN]
    deploy:
      replicas: 2
      labels:
        team: a
      placement:
        constraints: [node.role==worker]
volumes:
  models: {}
  cache: {}
"""

PROD = """\
version: "3.8"
services:
  llm:
    image: vllm/vllm-openai:v2
    environment:
      LOG: warn
      TOKEN: x
    ports:
      - {target: 81, published: 8080}
    volumes: ["fast:/cache"]
    cap_add: [SYS_PTRACE]
    deploy:
      replicas: 0
      labels:
        swarmgpu.gpus: "1"
      placement:
        constraints: [node.labels.zone==eu]
  web:
    image: nginx
volumes:
  cache: {driver: local}
  fast: {}
"""


def merged(*texts: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    files = [StackFile(f"f{i}.yml", yaml.safe_load(t)) for i, t in enumerate(texts)]
    return merge_stacks(files, environ or {}).substituted


def test_fields_merge_by_dockers_rules() -> None:
    doc = merged(BASE, PROD)
    llm = doc["services"]["llm"]
    assert llm["image"] == "vllm/vllm-openai:v2"  # replaced
    assert llm["environment"] == {"HF_HOME": "/models", "LOG": "warn", "TOKEN": "x"}  # by key
    # ports by published port (the later entry whole), sorted by it as docker writes them
    assert llm["ports"] == [{"target": 81, "published": 8080}, "9090:90"]
    assert llm["volumes"] == ["fast:/cache", "models:/models"]  # by target, sorted by it
    assert llm["cap_add"] == ["NET_ADMIN", "SYS_PTRACE"]  # appended
    d = llm["deploy"]
    assert d["replicas"] == 0  # a *uint64: docker's mergeUint64 takes a 0 too
    assert d["labels"] == {"team": "a", "swarmgpu.gpus": "1"}
    assert d["placement"]["constraints"] == ["node.role==worker", "node.labels.zone==eu"]
    assert doc["services"]["web"] == {"image": "nginx"}  # a new service is added
    # top-level volumes by name, the later one whole
    assert doc["volumes"] == {"models": {}, "cache": {"driver": "local"}, "fast": {}}
    assert doc["version"] == "3.8"


def test_list_and_mapping_forms_merge_by_key() -> None:
    a = (
        "services:\n  s:\n    image: x\n    environment: [A=1, B=2]\n"
        "    deploy: {labels: [k=1, j=2]}\n"
    )
    b = "services:\n  s:\n    environment: {B: 3}\n    deploy: {labels: [k=9]}\n"
    s = merged(a, b)["services"]["s"]
    assert s["environment"] == {"A": "1", "B": 3}  # mixed forms: the mapping
    assert s["deploy"]["labels"] == ["k=9", "j=2"]  # one form: kept, the key replaced


def test_an_empty_override_is_refused_where_docker_keeps_the_earlier_value() -> None:
    """mergo's WithOverride skips an empty source: read_only: false over true keeps true,
    which no reader of the override expects; render says so instead."""
    a = "services:\n  s:\n    image: x\n    read_only: true\n"
    b = "services:\n  s:\n    read_only: false\n"
    with pytest.raises(MergeError) as exc:
        merged(a, b)
    assert "services.s.read_only" in str(exc.value)
    assert "f0.yml" in str(exc.value) and "f1.yml" in str(exc.value)


def test_a_field_with_no_merge_rule_is_refused_naming_field_and_files() -> None:
    a = "services:\n  s:\n    image: x\n    healthcheck: {test: [CMD, a]}\n"
    b = "services:\n  s:\n    healthcheck: {test: [CMD, b]}\n    build: .\n"
    c = "services:\n  s:\n    build: .\n"
    with pytest.raises(MergeError) as exc:
        merged(a, b)
    assert "services.s.healthcheck.test" in str(exc.value)  # docker appends the two tests
    with pytest.raises(MergeError) as exc:
        merged(b, c)
    msg = str(exc.value)
    assert "services.s.build" in msg and "f0.yml" in msg and "f1.yml" in msg
    assert "one file" in msg


def test_logging_options_docker_drops_are_refused() -> None:
    """merge.go's mergeLoggingConfig merges the later options into a copy of the
    earlier map: where the earlier logging has none, docker deploys the driver without
    the later file's options."""
    a = "services:\n  s:\n    image: x\n    logging: {driver: json-file}\n"
    b = "services:\n  s:\n    logging: {driver: json-file, options: {max-size: 10m}}\n"
    with pytest.raises(MergeError) as exc:
        merged(a, b)
    msg = str(exc.value)
    assert "services.s.logging.options" in msg and "f0.yml" in msg and "f1.yml" in msg
    assert "options: {}" in msg
    no_driver = "services:\n  s:\n    logging: {options: {max-size: 10m}}\n"
    with pytest.raises(MergeError):
        merged(a, no_driver)
    # Earlier options (even none written as {}) are merged into; another driver replaces.
    a_opts = "services:\n  s:\n    image: x\n    logging: {driver: json-file, options: {}}\n"
    assert merged(a_opts, b)["services"]["s"]["logging"]["options"] == {"max-size": "10m"}
    other = "services:\n  s:\n    logging: {driver: syslog, options: {tag: t}}\n"
    assert merged(a, other)["services"]["s"]["logging"] == {
        "driver": "syslog",
        "options": {"tag": "t"},
    }


def test_two_entries_docker_would_fold_into_one_are_refused() -> None:
    """Ports are keyed by the published port alone: two unpublished ports of a service in
    both files would become one; docker drops the other without a word."""
    a = "services:\n  s:\n    image: x\n    ports: ['80', '443']\n"
    b = "services:\n  s:\n    image: y\n"
    with pytest.raises(MergeError) as exc:
        merged(a, b)
    assert "services.s.ports" in str(exc.value) and "published" in str(exc.value)


def test_an_empty_earlier_list_still_keys_the_later_one() -> None:
    """``ports: []`` is a list to docker (not none): merge.go's transformer keys and sorts
    the later file's ports as with any earlier one, folding two of one published port."""
    a = "services:\n  s:\n    image: x\n    ports: []\n    volumes: []\n"
    b = "services:\n  s:\n    ports: ['9090:90', '8080:80']\n    volumes: ['b:/b', 'a:/a']\n"
    s = merged(a, b)["services"]["s"]
    assert s["ports"] == ["8080:80", "9090:90"]
    assert s["volumes"] == ["a:/a", "b:/b"]
    twice = "services:\n  s:\n    ports: ['53:53/tcp', '53:53/udp']\n"
    with pytest.raises(MergeError) as exc:
        merged(a, twice)
    assert "services.s.ports" in str(exc.value) and "f1.yml lists two" in str(exc.value)


@pytest.mark.parametrize("tagged", ["ports: !reset []", "image: !override y", "image: !reset"])
def test_composes_reset_and_override_tags_are_refused_as_docker_stack_deploy_ignores_them(
    tagged: str,
) -> None:
    """!reset and !override are docker compose's (compose-spec); docker stack deploy's
    loader (go-yaml into plain values) reads past the tag: ``ports: !reset []`` resets
    nothing, the earlier ports stay. Refused, saying so, not as YAML that is not valid."""
    a = 'version: "3.8"\nservices:\n  s:\n    image: x\n    ports: ["80:80"]\n'
    b = f'version: "3.8"\nservices:\n  s:\n    {tagged}\n'
    with pytest.raises(StackError) as exc:
        render_stack(a, "st", NODES, [], [], FACTS, prefix=P, more=[("b.yml", b)])
    msg = str(exc.value)
    assert msg.startswith("b.yml: ") and "line 4" in msg, msg
    assert tagged.split()[1] in msg and "docker stack deploy" in msg, msg
    assert "not valid YAML" not in msg, msg


def test_files_of_two_versions_are_refused_as_docker_refuses_them() -> None:
    a = "version: '3.8'\nservices:\n  s: {image: x}\n"
    b = "services:\n  s: {image: y}\n"  # no version is 3.13 to docker/cli's schema.Version
    with pytest.raises(MergeError) as exc:
        merged(a, b)
    assert "version" in str(exc.value) and "f1.yml" in str(exc.value)


def test_each_file_is_substituted_before_the_merge() -> None:
    """loader.go Load interpolates each file, then merges: a published port from a
    variable meets the other file's port; a variable render does not place by stays one."""
    a = (
        "services:\n  s:\n    image: x\n    ports: ['8080:80']\n"
        "    environment: {TOKEN: '${TOKEN}'}\n"
    )
    b = "services:\n  s:\n    ports: ['${PORT}:81']\n    deploy: {labels: {swarmgpu.gpus: '1'}}\n"
    env = {"PORT": "8080", "TOKEN": "secret"}
    checked = check_stack(a, where="a.yml", more=[("b.yml", b)], environ=env)
    assert not checked.errors, checked.errors
    assert checked.stack["services"]["s"]["ports"] == ["8080:81"]
    out, _ = render_stack(a, "st", NODES, [], [], FACTS, prefix=P, environ=env, more=[("b.yml", b)])
    assert "${TOKEN}" in out and "secret" not in out
    assert yaml.safe_load(out)["services"]["s"]["deploy"]["labels"][f"{P}gpus"] == "1"


def test_merge_errors_name_the_files_in_check_stack() -> None:
    a = "services:\n  s:\n    image: x\n    build: .\n"
    checked = check_stack(a, where="a.yml", more=[("b.yml", a)], environ={})
    assert any("services.s.build" in e and "a.yml" in e and "b.yml" in e for e in checked.errors), (
        checked.errors
    )
    with pytest.raises(StackError):
        render_stack(a, "st", NODES, [], [], FACTS, prefix=P, more=[("b.yml", a)])


def test_cli_takes_repeated_compose_files(tmp_path: Path) -> None:
    base, prod = tmp_path / "base.yml", tmp_path / "prod.yml"
    base.write_text(BASE)
    prod.write_text(PROD)
    res = CliRunner().invoke(
        main,
        ["render", "--check", "-c", str(base), "--compose-file", str(prod)],
        env={"DOCKER_HOST": NO_DOCKER},
    )
    assert res.exit_code == 0, res.output
    assert "2 service(s), 1 GPU request(s)" in res.stderr
    assert f"{base} + {prod}" in res.stderr


def test_cli_refuses_a_file_argument_beside_compose_files(tmp_path: Path) -> None:
    base = tmp_path / "base.yml"
    base.write_text(BASE)
    res = CliRunner().invoke(
        main, ["render", "--check", str(base), "-c", str(base)], env={"DOCKER_HOST": NO_DOCKER}
    )
    assert res.exit_code == 2 and "-c" in res.stderr


def test_a_file_without_services_merges_its_other_sections() -> None:
    """docker/cli's loader asks no section of each file (loadSections reads a missing
    one as empty; schema 3.x requires none but version): an override may add only
    networks or secrets, and the first file may leave the services to a later one."""
    nets = 'version: "3.8"\nnetworks:\n  fast: {driver: overlay}\nsecrets:\n  tok: {file: t}\n'
    svcs = 'version: "3.8"\nservices:\n  s: {image: x}\n'
    for first, then in ((svcs, nets), (nets, svcs)):
        checked = check_stack(first, where="a.yml", more=[("b.yml", then)], environ={})
        assert not checked.errors, checked.errors
        assert checked.stack["services"] == {"s": {"image": "x"}}
        assert checked.stack["networks"] == {"fast": {"driver": "overlay"}}
        assert checked.stack["secrets"] == {"tok": {"file": "t"}}


def test_files_none_of_which_has_services_are_refused_naming_them() -> None:
    nets = 'version: "3.8"\nnetworks:\n  fast: {}\n'
    checked = check_stack(nets, where="a.yml", more=[("b.yml", nets)], environ={})
    assert any("a.yml + b.yml" in e and "services" in e for e in checked.errors), checked.errors
    # a file that is not a mapping at all: docker's "top-level object must be a mapping"
    checked = check_stack(nets, where="a.yml", more=[("b.yml", "- x\n")], environ={})
    assert any(e.startswith("b.yml") and "mapping" in e for e in checked.errors), checked.errors


def test_each_file_is_checked_against_the_schema_before_the_merge() -> None:
    """docker validates each file, then merges (loader.go Load): what the merge drops or
    masks is refused all the same, the error naming its file."""
    svcs = 'version: "3.8"\nservices:\n  s: {image: x, deploy: {replicas: 1}}\nnetworks: {nw: {}}\n'
    bad = {
        # a section that is no mapping: the merge read it as empty
        "b.yml": 'version: "3.8"\nnetworks: fast\n',
        # no services at all: the merge found no rule for it
        "c.yml": 'version: "3.8"\nservices:\n',
    }
    for name, text in bad.items():
        checked = check_stack(svcs, where="a.yml", more=[(name, text)], environ={})
        assert any(e.startswith(f"{name}: ") and "schema" in e for e in checked.errors), (
            checked.errors
        )
    # a value of the first file the override replaces: docker refused the first file
    first = 'version: "3.8"\nservices:\n  s: {image: x, deploy: {replicas: two}}\n'
    checked = check_stack(first, where="a.yml", more=[("b.yml", svcs)], environ={})
    assert any(e.startswith("a.yml: services.s.deploy.replicas") for e in checked.errors), (
        checked.errors
    )
    # a key the schema does not know, only in the override: named by its file
    typo = 'version: "3.8"\nservices:\n  s: {imagee: x}\n'
    checked = check_stack(svcs, where="a.yml", more=[("b.yml", typo)], environ={})
    assert any(e.startswith("b.yml: services.s") and "imagee" in e for e in checked.errors), (
        checked.errors
    )


def test_what_render_translates_is_not_refused_by_a_files_schema_check() -> None:
    """Compose's GPU keys (gpus, reservations.devices) are render's to translate, and the
    keys docker refuses get render's own words, in each file as in one."""
    base = 'version: "3.8"\nservices:\n  s: {image: x}\n'
    gpus = 'version: "3.8"\nservices:\n  s: {gpus: all}\n'
    checked = check_stack(base, where="a.yml", more=[("b.yml", gpus)], environ={}, node_gpus=8)
    assert not checked.errors, checked.errors
    runtime = 'version: "3.8"\nservices:\n  s: {runtime: nvidia}\n'
    checked = check_stack(base, where="a.yml", more=[("b.yml", runtime)], environ={})
    assert checked.errors and all("schema" not in e for e in checked.errors), checked.errors
    assert any("services.s.runtime" in e and "default-runtime" in e for e in checked.errors)


def test_a_list_item_merged_into_a_mapping_keeps_its_dollars_unsubstituted() -> None:
    """With --skip-interpolation (nothing substituted) a list label merged into the other
    file's mapping is written as it was: docker reads ``a$$b`` as ``a$b`` from the file
    and from render's output alike (it was written ``a$$$$b``: docker deployed ``a$$b``);
    substituted, the value is escaped so that docker reads back what was merged."""
    a = "services:\n  s:\n    image: x\n    deploy: {labels: {team: a}}\n"
    b = "services:\n  s:\n    deploy: {labels: ['note=a$$b', 'home=${H}']}\n"
    files = [StackFile("f0.yml", yaml.safe_load(a)), StackFile("f1.yml", yaml.safe_load(b))]
    assert merge_stacks(files).written["services"]["s"]["deploy"]["labels"] == {
        "team": "a",
        "note": "a$$b",
        "home": "${H}",
    }
    out, _ = render_stack(a, "st", NODES, [], [], FACTS, prefix=P, more=[("b.yml", b)])
    assert yaml.safe_load(out)["services"]["s"]["deploy"]["labels"]["note"] == "a$$b"
    env = {"H": "/h"}
    subbed = [
        StackFile("f0.yml", yaml.safe_load(a)),
        StackFile(
            "f1.yml",
            yaml.safe_load(b),
            {"services": {"s": {"deploy": {"labels": ["note=a$b", "home=/h"]}}}},
        ),
    ]
    got = merge_stacks(subbed, env)
    assert got.written["services"]["s"]["deploy"]["labels"]["note"] == "a$$b"
    assert got.substituted["services"]["s"]["deploy"]["labels"] == {
        "team": "a",
        "note": "a$b",
        "home": "/h",
    }
