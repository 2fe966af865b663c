"""A YAML error's line and column where the text breaks its lines otherwise than with
``\\n``: the parser (PyYAML's and libyaml's alike) breaks at ``\\r\\n``, ``\\r``,
``\\n``, NEL, LS and PS, and so must what reads its marks back. Before, the tab hint
split the text at ``\\n`` alone: a file of ``\\r`` breaks (classic Mac) got no tab hint,
and an unprintable character's line was counted wrong."""

from __future__ import annotations

import pytest
from support.yaml_parser import yaml_parser

from swarmgpu.core.yamlfile import parse_yaml

BREAKS = ["\r", "\x85", "\u2028", "\u2029", "\r\n"]


class Bad(Exception):
    pass


def _said(text: str) -> str:
    with pytest.raises(Bad) as e:
        parse_yaml(text, "spec.yaml", Bad, v2=True)
    return str(e.value)


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize("nl", BREAKS)
def test_a_tab_in_a_file_of_other_line_breaks_is_named_at_its_line(
        monkeypatch: pytest.MonkeyPatch, libyaml: bool, nl: str) -> None:
    yaml_parser(monkeypatch, libyaml)
    said = _said(f"kind: a{nl}devices:{nl}\t- name: x{nl}")
    assert ("at line 3, column 1: a tab where YAML wants spaces (as indentation); "
            "write spaces") in said, said


@pytest.mark.parametrize("nl", BREAKS)
def test_an_unprintable_characters_line_and_column_count_every_line_break(
        nl: str) -> None:
    said = _said(f"kind: a{nl}b: c{nl}d: \x07")
    assert "at line 3, column 4: the character #x0007 is not allowed" in said, said


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize("nl", BREAKS)
def test_the_line_shown_is_the_line_at_fault_whatever_breaks_it(
        monkeypatch: pytest.MonkeyPatch, libyaml: bool, nl: str) -> None:
    # The snippet counted "\n" alone: past a \r, NEL, LS or PS it showed another line
    # than the one the message named (or none).
    yaml_parser(monkeypatch, libyaml)
    said = _said(f"kind: a{nl}devices: {{a: b: c}}{nl}other: line{nl}last: one{nl}")
    assert "at line 2, column " in said, said
    assert said.endswith("; the line: 'devices: {a: b: c}'"), said


@pytest.mark.parametrize("nl", BREAKS)
def test_an_unprintable_characters_line_is_the_one_shown(nl: str) -> None:
    said = _said(f"kind: a{nl}b: \x07{nl}other: line{nl}last: one{nl}")
    assert "at line 2, column 4: the character #x0007" in said, said
    assert said.endswith("; the line: 'b: \\x07'"), said
