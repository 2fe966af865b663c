"""README's map of `manager/rebalance/` names exactly the modules the folder holds, as
its map of `manager/placement/` does (tests/test_layout.py): a reader looking for a
module by its line there finds it, and finds every module."""

from __future__ import annotations

import re

from support.paths import REPO

FOLDER = REPO / "swarmgpu" / "manager" / "rebalance"


def test_readme_s_rebalance_map_lists_each_module_once() -> None:
    """Before: it listed `step` (the daemon's step, in manager/cycle/rebalance.py since
    the folder became the pipeline) and none of admission, endedlist, heldgpus,
    swarmkeeps, trial and verdict."""
    readme = (REPO / "README.md").read_text()
    part = readme.split("`manager/rebalance/` moves running GPU shares", 1)[1]
    part = part.split("\n\n", 2)[1]
    listed = [name.rstrip("/") for row in re.findall(r"^    (\w+/?(?:, \w+)*) ", part, re.M)
              for name in row.split(", ")]
    modules = sorted([p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__"]
                     + [p.name for p in FOLDER.iterdir() if (p / "__init__.py").exists()])
    assert sorted(listed) == modules, (
        f"not in the folder: {sorted(set(listed) - set(modules))}; "
        f"not in the map: {sorted(set(modules) - set(listed))}; "
        f"listed twice: {sorted({n for n in listed if listed.count(n) > 1})}")
