"""A YAML syntax error is said on one line, ``FILE:LINE:COL: not valid YAML: PROBLEM``,
PyYAML's own words kept (what it was in and where that began, the line at fault) and a
fix: PyYAML's message was five lines, two of them ``in "<unicode string>"``, which a log
line or ``systemctl status`` cut after the first, and editors take FILE:LINE:COL."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.core.config import ConfigError, load_config
from swarmgpu.core.yamlfile import parse_yaml

UNCLOSED = "agents:\n  port: [1\nsync: {\n"


def test_a_config_syntax_error_is_one_line_at_file_line_column(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text(UNCLOSED)
    with pytest.raises(ConfigError) as exc:
        load_config(cfg, env={})
    assert str(exc.value) == (
        f"config file {cfg}:3:5: not valid YAML: expected ',' or ']', but got ':' (while "
        "parsing a flow sequence from line 2, column 9); the line: 'sync: {'; close the "
        "[ with ], its items separated by ','")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert res.output == f"{cfg}:3:5: not valid YAML: expected ',' or ']', but got ':' " \
        "(while parsing a flow sequence from line 2, column 9); the line: 'sync: {'; " \
        "close the [ with ], its items separated by ','\n", res.output


@pytest.mark.parametrize(("text", "said"), [
    ("a: b: c\n", "x.yml:1:5: not valid YAML: mapping values are not allowed here; the "
     "line: 'a: b: c'; quote a value that holds ': ' (a: \"b: c\")"),
    ("a:\n\tb: 1\n", "x.yml:2:1: not valid YAML: a tab where YAML wants spaces (as "
     "indentation, or after 'key:', where docker's reader takes one and PyYAML does not); "
     "write spaces"),
    ("a: 1\n---\nb: 2\n", "x.yml:2:1: not valid YAML: a second document (---); swarmgpu "
     "reads one document a file: remove the others"),
    ("a: \x07\n", "x.yml:1:4: not valid YAML: the character #x0007 is not allowed in YAML "
     "text; remove it, or write it escaped in a double-quoted string (\"\\x07\")"),
])
def test_every_syntax_error_has_the_same_shape(text: str, said: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_yaml(text, "x.yml", ValueError)
    assert str(exc.value) == said
