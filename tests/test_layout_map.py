"""docs/layout.md maps the package: one section per folder of ``swarmgpu/`` that holds
modules, each naming every module file (and subpackage, as ``name/``) of its folder once,
and nothing the folder does not hold. A reader looking for a module by its line there
finds it, and finds every module (README.md's "Layout" links the page; the placement
section's order is checked against its package's map in tests/test_layout.py)."""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import REPO

PACKAGE = REPO / "swarmgpu"
PAGE = REPO / "docs" / "layout.md"


def _folders() -> dict[str, Path]:
    """Each package folder that holds a module or a subpackage, by its path below the
    repository (``swarmgpu/agent/doctor/``)."""
    out = {}
    for init in PACKAGE.rglob("__init__.py"):
        folder = init.parent
        if _contents(folder):
            out[folder.relative_to(REPO).as_posix() + "/"] = folder
    return out


def _contents(folder: Path) -> list[str]:
    return sorted([p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
                  + [p.name + "/" for p in folder.iterdir() if (p / "__init__.py").exists()])


def layout_sections(text: str) -> dict[str, list[str]]:
    """``## `folder/` ...`` heading -> the names its map lines start with (four spaces,
    the name, then its line; a continuation is indented further)."""
    out: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        head = re.match(r"`([\w/]+/)`", part)
        if head:
            out[head.group(1)] = re.findall(r"^    (\w+/?)(?: |$)", part, re.M)
    return out


def test_docs_layout_maps_every_module_of_every_folder_once() -> None:
    """Before: README.md's map (its "Layout") did not name 94 modules at all (20 of
    core/, 17 of manager/cycle/, 14 of swarm/, ...), and only manager/rebalance/'s and
    manager/placement/'s lists were checked against their folders."""
    sections = layout_sections(PAGE.read_text())
    folders = _folders()
    assert sorted(sections) == sorted(folders), (
        f"folders without a section: {sorted(set(folders) - set(sections))}; "
        f"sections of no folder: {sorted(set(sections) - set(folders))}")
    wrong = []
    for name, folder in sorted(folders.items()):
        listed, modules = sections[name], _contents(folder)
        if sorted(listed) != modules:
            wrong.append(f"{name}: not in the folder: {sorted(set(listed) - set(modules))}; "
                         f"not in the map: {sorted(set(modules) - set(listed))}; "
                         f"listed twice: {sorted({n for n in listed if listed.count(n) > 1})}")
    assert not wrong, "docs/layout.md's maps differ from the folders:\n" + "\n".join(wrong)


def test_the_readme_links_the_map() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert "(docs/layout.md)" in layout


def test_the_check_reads_names_and_continuations_apart() -> None:
    """The parser itself: a name with its line, a folder, a bare name; a continuation
    line (indented further) and prose are no names."""
    text = ("## `swarmgpu/x/` the x\n\nprose line\n\n    a          does a\n"
            "               and more\n    sub/       the sub\n    b\n\n"
            "## Not a folder\n\n    c    no\n")
    assert layout_sections(text) == {"swarmgpu/x/": ["a", "sub/", "b"]}
