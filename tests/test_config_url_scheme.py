"""A URL template is fetched over HTTP(S) only (``manager.nodes.boundedhttp``): any other
scheme is a config error at ``config check``, not a failed fetch of every node later."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.core.config import load_config_report


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.yml"
    path.write_text(text)
    return load_config_report(path, env={})[1]


@pytest.mark.parametrize(("text", "key"), [
    ("agents:\n  identity: none\n  url_template: 'file:///etc/{addr}'\n", "agents.url_template"),
    ("agents:\n  identity: none\n  url_template: '{addr}:{port}'\n", "agents.url_template"),
    ("agents:\n  identity: none\n  url_template: 'ftp://{addr}:{port}'\n",
     "agents.url_template"),
    ("rebalance:\n  metrics_url_template: 'gopher://{addr}:9400/metrics'\n",
     "rebalance.metrics_url_template"),
    ("rebalance:\n  metrics_url_template: '//{addr}:9400/metrics'\n",
     "rebalance.metrics_url_template"),
])
def test_a_url_template_of_another_scheme_is_refused(tmp_path: Path, text: str,
                                                     key: str) -> None:
    # It passed config check; each cycle every node's fetch then failed: "scheme 'file'
    # is not http or https".
    errors = _errors(tmp_path, text)
    assert any(f"{key}: " in e and "no http:// or https:// URL" in e for e in errors), errors


@pytest.mark.parametrize("text", [
    "agents:\n  identity: none\n  url_template: 'HTTP://{addr}:{port}'\n",
    "agents:\n  url_template: 'https://{addr}:{port}/agent'\n",
    "rebalance:\n  metrics_url_template: 'http://{hostname}:9400/metrics'\n",
])
def test_http_and_https_templates_are_fine(tmp_path: Path, text: str) -> None:
    assert _errors(tmp_path, text) == []
