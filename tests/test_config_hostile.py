"""The operator's config read as mistyped input: each mistake is an error naming the key
and the fix at `config check`, never a crash or a stall of the daemon later."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.core.config import load_config_report


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.yml"
    path.write_text(text)
    return load_config_report(path, env={})[1]


@pytest.mark.parametrize(("text", "says"), [
    ("agents:\n  url_template: 'https://{addr}:{prot}'\n",
     "agents.url_template: {prot} is not a placeholder; use {addr}, {hostname}, {port}"),
    ("agents:\n  url_template: 'https://{addr}:{port'\n",
     "agents.url_template: 'https://{addr}:{port' is not a template"),
    ("agents:\n  url_template: 'https://{addr.__class__}:{port}'\n",
     "agents.url_template: {addr.__class__} is not a placeholder"),
    ("rebalance:\n  metrics_url_template: 'http://{addr}:{port}/metrics'\n",
     "rebalance.metrics_url_template: {port} is not a placeholder; use {addr}, {hostname}"),
    ("rebalance:\n  metrics_url_template: 'http://{addr}}/metrics'\n",
     "rebalance.metrics_url_template: 'http://{addr}}/metrics' is not a template"),
])
def test_a_url_template_fills_only_its_placeholders(tmp_path: Path, text: str,
                                                    says: str) -> None:
    errors = _errors(tmp_path, text)
    assert any(says in e for e in errors), errors


def test_a_url_template_with_braces_doubled_is_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, "agents:\n  url_template: 'https://{addr}:{port}/{{x}}'\n") == []
