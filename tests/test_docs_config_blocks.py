"""The config the docs show is the config the daemon reads: every daemon-config block of
README.md and docs/*.md passes `swarmgpu config check`, and the defaults
docs/rebalancing.md prints as `show-defaults`' are what `show-defaults` prints."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner
from support.paths import REPO

from swarmgpu.cli import main

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _defaults() -> dict[str, object]:
    res = CliRunner().invoke(main, ["config", "show-defaults"])
    assert res.exit_code == 0, res.output
    data = yaml.safe_load(res.output)
    assert isinstance(data, dict)
    return data


def _blocks() -> list[tuple[str, str]]:
    """(where, text) of each indented block that starts with a top-level config key."""
    top = set(_defaults())
    out = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^ {4}([a-z_]+):", line)
            if not m or m.group(1) not in top or (i and lines[i - 1].strip()):
                continue
            block = []
            for ln in lines[i:]:
                if ln.strip() and not ln.startswith("    "):
                    break
                block.append(ln[4:])
            out.append((f"{page.name}:{i + 1}", "\n".join(block).rstrip() + "\n"))
    return out


def test_every_config_block_of_the_docs_passes_config_check(tmp_path: Path) -> None:
    blocks = _blocks()
    assert len(blocks) >= 3, blocks
    for n, (where, text) in enumerate(blocks):
        path = tmp_path / f"{n}.yml"
        path.write_text(text)
        res = CliRunner().invoke(main, ["config", "check", str(path)])
        assert res.exit_code == 0, f"{where}: {res.output}"


def test_rebalancing_md_shows_the_rebalance_defaults_show_defaults_prints() -> None:
    text = (REPO / "docs" / "rebalancing.md").read_text()
    shown = next(t for where, t in _blocks()
                 if where.startswith("rebalancing.md") and t.startswith("rebalance:"))
    assert "show-defaults` prints the section with every default" in text
    assert yaml.safe_load(shown) == {"rebalance": _defaults()["rebalance"]}


def _keys(tree: object, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return set()
    return {k for key, sub in tree.items()
            for k in {prefix + key} | _keys(sub, f"{prefix}{key}.")}


# Names that read like config keys but are the package's modules (placement.quiet) or
# the flat keys of earlier releases the pages name as such (config check notes them).
NOT_KEYS = re.compile(r"^(placement|rebalance)\.[a-z_]+\.[a-z_]+$|^placement\.(existing|isolate|"
                      r"memo|nominated|one_shot_planner|quiet|recreated)$|^agents\.(answers|json)$"
                      r"|^engine\.labels\.gpu$|^rebalance\.(hot_util_pct|health_drain_node)$")


def test_every_config_key_the_docs_name_is_one_the_daemon_reads() -> None:
    """Before: docs/simulate.md said `rebalance.moves_per_100_placements: 2` (the key is
    `rebalance.fragmentation.moves_per_100_placements`; config check refuses the other)."""
    defaults = _defaults()
    known = _keys(defaults)
    unknown = []
    for page in PAGES:
        # docs/rebalancing.md names each policy's keys under `rebalance.`, as it says.
        within = "rebalance." if page.name == "rebalancing.md" else ""
        for m in re.finditer(r"`([a-z_]+(?:\.[a-z_0-9]+)+)(?:[:=][^`]*)?`", page.read_text()):
            key = m.group(1)
            if (key.split(".")[0] in defaults and key not in known and not NOT_KEYS.match(key)
                    and within + key not in known
                    and not any(k.startswith(f"{key}.") for k in known)):
                unknown.append(f"{page.name}: {key}")
    assert not unknown, unknown
