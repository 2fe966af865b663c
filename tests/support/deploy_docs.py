"""The fenced blocks of docs/deploy.md (the Prometheus scrape config).

First written in tests/test_deploy_docs.py."""

from __future__ import annotations

import re

import yaml

from support.paths import REPO

DEPLOY = (REPO / "docs" / "deploy.md").read_text()


def fenced(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DEPLOY, flags=re.S)


def scrape_config() -> dict[str, object]:
    (block,) = [b for b in fenced("yaml") if "scrape_configs:" in b]
    doc = yaml.safe_load(block)
    assert isinstance(doc, dict)
    return doc
