"""core.yamlfile at the edges of YAML where its readers part: tags, merge keys, tabs,
encodings. Each row was deployed with both docker CLIs on this machine (20.10, go-yaml
v2; 28.2, v3) against the stand-in engine of tests/support/docker_clis.py: what docker
reads otherwise than PyYAML, or refuses, is refused here with the line and the fix."""

from __future__ import annotations

import pytest

from swarmgpu.core.yamlfile import parse_yaml

STACK = 'version: "3.8"\nservices:\n  a:\n    image: busybox\n    deploy:\n      labels:\n'


@pytest.mark.parametrize("docker", [False, True])
@pytest.mark.parametrize(
    "value", ["! 2", '! "2"', "! true", "!<!> 2", "! [1]", "! {b: 1}"]
)
def test_the_non_specific_tag_is_refused_naming_its_line_and_the_fix(
    value: str, docker: bool
) -> None:
    """``cpus: ! 2``: PyYAML resolves a scalar under ``!`` as if it were plain (the
    number 2, ``! "2"`` too), docker 28 (go-yaml v3) deploys the text "2", docker 20.10
    refuses the file. Refused in every file swarmgpu reads (a stack or not), on a
    collection too, where it means nothing: one rule, the line and the fix."""
    text = f"a: 1\ncpus: {value}\n"
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "f.yml", ValueError, docker=docker)
    msg = str(exc.value)
    assert msg.startswith("f.yml: ") and "line 2" in msg, msg
    assert "non-specific tag" in msg and "remove the !" in msg and "quote" in msg, msg
    assert "not valid YAML" not in msg, msg


def test_the_non_specific_tag_on_a_key_is_refused_too() -> None:
    with pytest.raises(ValueError, match=r"non-specific tag ! at line 2"):
        parse_yaml("a: 1\n! 5: x\n", "f.yml", ValueError, docker=True)


@pytest.mark.parametrize(
    ("value", "read"),
    [("!!str 2", "2"), ("!!int 2", 2), ('"2"', "2"), ("!<tag:yaml.org,2002:str> 2", "2")],
)
def test_an_explicit_tag_keeps_its_meaning(value: str, read: object) -> None:
    assert parse_yaml(f"cpus: {value}\n", "f", ValueError, docker=True) == {"cpus": read}


@pytest.mark.parametrize("docker", [False, True])
def test_a_local_tag_is_refused_naming_it_and_its_line(docker: bool) -> None:
    """``!foo`` is no tag swarmgpu knows: in a stack docker reads past it (refused
    saying so); elsewhere it was PyYAML's "could not determine a constructor", as
    "not valid YAML"."""
    with pytest.raises(ValueError) as exc:
        parse_yaml("a: 1\nb: !foo 2\n", "f.yml", ValueError, docker=docker)
    msg = str(exc.value)
    assert "!foo" in msg and "line 2" in msg and "remove the tag" in msg, msg
    assert "not valid YAML" not in msg, msg


@pytest.mark.parametrize("docker", [False, True])
def test_two_merge_keys_in_one_mapping_are_refused(docker: bool) -> None:
    """``<<: *a`` then ``<<: *b``: docker 28 refuses the file ('mapping key "<<"
    already defined'), docker 20.10 and PyYAML merge both (the later's A). Taken, it was
    a key given twice, which every other key is refused for."""
    text = "x-a: &a {A: 1}\nx-b: &b {A: 2}\nenv:\n  <<: *a\n  <<: *b\n"
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "f.yml", ValueError, docker=docker)
    msg = str(exc.value)
    assert "'<<' given twice in one mapping (lines 4 and 5)" in msg, msg
    assert "<<: [*a, *b]" in msg, msg


@pytest.mark.parametrize("docker", [False, True])
def test_a_merge_of_an_alias_to_a_list_is_refused(docker: bool) -> None:
    """``<<: *l`` where ``l`` is a list of mappings: go-yaml (v2 and v3, docker) refuses
    it ("map merge requires map or sequence of maps as the value": an alias must name
    a mapping), PyYAML merged the list's mappings. Before: taken, the stack rendered
    flat, which docker would read where the file itself is refused."""
    text = "x-l: &l [{A: 1}, {B: 2}]\nenv:\n  <<: *l\n"
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "f.yml", ValueError, docker=docker)
    msg = str(exc.value)
    assert "f.yml:3:" in msg and "an alias after << must name a mapping" in msg, msg
    assert "<<: [*a, *b]" in msg, msg
    # the list written there, of aliases to mappings, is what both take
    ok = "x-a: &a {A: 1}\nx-b: &b {B: 2}\nenv:\n  <<: [*a, *b]\n"
    assert parse_yaml(ok, "f.yml", ValueError, docker=docker)["env"] == {"A": 1, "B": 2}


@pytest.mark.parametrize("docker", [False, True])
@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!set {a, b}", "!!set"),  # PyYAML: a Python set; docker: labels a, b with ""
        ("!!binary aGVsbG8=", "!!binary"),  # PyYAML: bytes; docker: the text hello
        ("!!omap [a: 1]", "!!omap"),  # PyYAML: a list of pairs; docker: a list of maps
        ("!!pairs [a: 1]", "!!pairs"),
    ],
)
def test_a_tag_that_builds_no_plain_value_is_refused(value: str, tag: str, docker: bool) -> None:
    """Render and the config checks met a set, bytes or tuples where YAML's plain kinds
    (mapping, list, text, number, boolean, null) are: 'expected a mapping or a list of
    k=v', or the schema's complaint printing b'hello'."""
    with pytest.raises(ValueError) as exc:
        parse_yaml(f"a: 1\nlabels: {value}\n", "f.yml", ValueError, docker=docker)
    msg = str(exc.value)
    assert f"the tag {tag} at line 2" in msg and "without the tag" in msg, msg


@pytest.mark.parametrize(
    ("text", "line"),
    [("a:\n\tb: 1\n", 2), ("a: 1\nb:\tc\n", 2)],
)
def test_a_tab_where_yaml_wants_spaces_says_so(text: str, line: int) -> None:
    """PyYAML refuses a tab after ``key:`` (docker takes it) and as indentation (docker
    refuses it too): the message said only "found character '\\t' that cannot start any
    token"."""
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "f.yml", ValueError, docker=True)
    msg = str(exc.value)
    assert f"f.yml:{line}:" in msg and "a tab" in msg and "write spaces" in msg, msg


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b"])
def test_a_control_character_is_named_with_its_line(char: str) -> None:
    """PyYAML's reader names only the offset of a character YAML does not allow."""
    with pytest.raises(ValueError) as exc:
        parse_yaml(f"a: 1\nb: 2\nc: x{char}y\n", "f.yml", ValueError, docker=True)
    msg = str(exc.value)
    assert "f.yml:3:5: " in msg and f"#x{ord(char):04x}" in msg, msg


def test_a_second_document_is_refused_saying_docker_ignores_it() -> None:
    """docker stack deploy (both CLIs) deploys the first document and drops the rest
    unread; refused, the message said only PyYAML's "expected a single document"."""
    text = 'version: "3.8"\nservices:\n  a:\n    image: busybox\n---\nfoo: 1\n'
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "f.yml", ValueError, docker=True)
    msg = str(exc.value)
    assert "f.yml:5:1: " in msg and "a second document" in msg and "reads only the first" in msg


@pytest.mark.parametrize("docker", [False, True])
def test_an_anchor_defined_again_names_the_later_node_for_later_aliases(docker: bool) -> None:
    """YAML lets an anchor be defined again (an alias names the nearest definition above
    it), and docker's go-yaml takes it; PyYAML refused "found duplicate anchor"."""
    text = "a: &x 1\nb: *x\nc: &x [2]\nd: *x\ne: {f: &x 3, g: *x}\nh: *x\n"
    assert parse_yaml(text, "f", ValueError, docker=docker) == {
        "a": 1, "b": 1, "c": [2], "d": [2], "e": {"f": 3, "g": 3}, "h": 3}


def test_an_alias_before_any_definition_of_its_anchor_is_still_refused() -> None:
    with pytest.raises(ValueError, match=r"^f:1:4: not valid YAML: found undefined alias 'x'"):
        parse_yaml("a: *x\nb: &x 1\n", "f", ValueError)


@pytest.mark.parametrize("v2", [False, True])
def test_values_past_the_bound_are_refused_before_the_rest_is_read(
        monkeypatch: pytest.MonkeyPatch, v2: bool) -> None:
    """The values were counted once the whole file was composed: a 2 MiB list of a
    million values took 40 s before it was refused. Refused as the bound is passed, the
    rest (here a syntax error) is never read."""
    from swarmgpu.core import yamlfile
    monkeypatch.setattr(yamlfile, "MAX_NODES", 50)
    text = "a: [" + "x, " * 60 + "x]\nb: [\n"
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "f.yml", ValueError, v2=v2)
    assert "more than 50 values" in str(exc.value) and "line 1" in str(exc.value), exc.value


@pytest.mark.parametrize("docker", [False, True])
@pytest.mark.parametrize("value", ['!!python/object:os.system "echo hi"',
                                   "!!python/name:os.system", "!!python/long 5"])
def test_a_python_tag_is_refused_naming_it_and_its_line(docker: bool, value: str) -> None:
    """``!!python/...`` is under YAML's own prefix, so it passed the check of tags and
    reached PyYAML's safe loader, whose "could not determine a constructor" (three lines,
    ``in "<unicode string>"``) was the config's error: refused, but naming no fix."""
    with pytest.raises(ValueError) as exc:
        parse_yaml(f"a: 1\nstate_dir: {value}\n", "f.yml", ValueError, docker=docker)
    msg = str(exc.value)
    assert "!!python/" in msg and "line 2" in msg and "remove the tag" in msg, msg
    assert "constructor" not in msg and "\n" not in msg, msg
