"""A YAML directive (%YAML, %TAG, any other %NAME) is refused in every file swarmgpu reads:
PyYAML took them all, and read the file by swarmgpu's rules whatever the directive said.
Docker's go-yaml refuses %YAML other than 1.1 and a directive it does not know; %YAML 1.1
announces YAML 1.1's reading (yes is true, 12:30 is 750), which neither docker 28 nor
swarmgpu applies; %TAG renames a tag handle, which no stack or config needs."""

from __future__ import annotations

import pytest

from swarmgpu.core.yamlfile import parse_first_yaml, parse_yaml


@pytest.mark.parametrize(("text", "why"), [
    ("%YAML 1.1\n---\na: yes\n", "YAML 1.1 reads yes as true"),
    ("%YAML 1.2\n---\na: 1\n", "found incompatible YAML document"),
    ("%YAML 1.3\n---\na: 1\n", "found incompatible YAML document"),
    ("%TAG ! tag:yaml.org,2002:\n---\na: !str 5\n", "renames a tag handle"),
    ("%TAG !e! tag:example.com,2000:\n---\na: 1\n", "renames a tag handle"),
    ("%FOO bar\n---\na: 1\n", "found unknown directive name"),
    ("# a comment first\n%YAML 1.1\n---\na: 1\n", "YAML 1.1 reads yes as true"),
])
@pytest.mark.parametrize("docker", [False, True])
def test_a_directive_is_refused_naming_it_and_its_line(text: str, why: str, docker: bool) -> None:
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "stack.yml", ValueError, docker=docker)
    line = 2 if text.startswith("#") else 1
    directive = text.splitlines()[line - 1]
    said = str(exc.value)
    assert said.startswith(f"stack.yml: the directive {directive!r} at line {line}: "), said
    assert why in said and said.endswith("; remove it"), said


def test_a_file_read_as_go_yaml_v2_reads_it_refuses_the_versions_v2_refuses() -> None:
    """CDI's specs: go-yaml v2 (sigs.k8s.io/yaml) takes %YAML 1.1 (it reads YAML 1.1) and
    %TAG as libyaml does, and refuses any other version, which libyaml's parser took."""
    for text in ("%YAML 1.2\n---\na: 1\n", "%YAML 1.0\n---\na: 1\n"):
        with pytest.raises(ValueError, match="found incompatible YAML document"):
            parse_yaml(text, "spec.yaml", ValueError, v2=True)
        with pytest.raises(ValueError, match="found incompatible YAML document"):
            parse_first_yaml(text, "spec.yaml", ValueError)
    assert parse_yaml("%YAML 1.1\n---\na: yes\n", "spec.yaml", ValueError, v2=True) == \
        {"a": True}
    assert parse_first_yaml("%TAG !e! tag:e.com,2000:\n---\na: 1\n", "spec.yaml",
                            ValueError) == ({"a": 1}, False)


@pytest.mark.parametrize("text", ["a: '%YAML 1.1'\n", "a: |\n  %YAML 1.1\n", "a: 1 # %TAG\n",
                                  "a: 50%\n"])
def test_a_percent_sign_in_a_value_is_no_directive(text: str) -> None:
    assert parse_yaml(text, "f", ValueError, docker=True)["a"] is not None
