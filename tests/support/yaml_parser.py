"""Which parser reads YAML in a test: libyaml's (CDI's specs go through its C parser) or
PyYAML's, whose messages and columns differ a little (tests/test_doctor_cdi.py,
tests/test_yaml_line_breaks.py)."""

from __future__ import annotations

import pytest

from swarmgpu.core import yamlfile


def yaml_parser(monkeypatch: pytest.MonkeyPatch, libyaml: bool) -> None:
    """YAML parsed by libyaml's parser or, ``libyaml`` False, PyYAML's."""
    monkeypatch.setattr(yamlfile, "_LIBYAML", libyaml)
