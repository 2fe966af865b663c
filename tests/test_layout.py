"""The package layout is the architecture: imports go down the layers, never up or across.

    cli                      the command line: may import everything
    sim                      the simulator: drives the manager's own planner
    agent | manager          the two processes: never import each other
    allocator | swarm        the GPU-picking algorithms | the engine edge
    core                     model, config, shared contracts

Every import counts, also the ones inside functions and under ``TYPE_CHECKING``: a lazy
import is still a dependency. README.md ("Layout") shows the tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "swarmgpu"

# layer -> the layers it may import (besides itself)
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "allocator": {"core"},
    "swarm": {"core"},
    "agent": {"core", "allocator", "swarm"},
    "manager": {"core", "allocator", "swarm"},
    "sim": {"core", "allocator", "swarm", "manager"},
    "cli": {"core", "allocator", "swarm", "agent", "manager", "sim"},
}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) for every swarmgpu import in a module's source, relative ones
    resolved."""
    pkg = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "swarmgpu":  # from swarmgpu import agent: the names are modules
                out += [(node.lineno, f"swarmgpu.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
    return sorted((ln, m) for ln, m in out if m == "swarmgpu" or m.startswith("swarmgpu."))


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_is_in_a_layer() -> None:
    """Nothing but the package marker lives at the top: each module is in a layer."""
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside every layer package: {loose}"
    dirs = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert dirs == set(MAY_IMPORT), f"layer packages {sorted(dirs)} != {sorted(MAY_IMPORT)}"


def test_imports_go_down_the_layers() -> None:
    wrong: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = _layer(_module(path))
        for line, target in _imports(path.read_text(), _module(path),
                                     path.name == "__init__.py"):
            to = _layer(target)
            if layer is None or to is None or to == layer:
                continue
            if to not in MAY_IMPORT[layer]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {layer} imports "
                             f"{target} ({to})")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_check_sees_every_kind_of_import() -> None:
    """The checker itself: from-the-package, plain, lazy and relative imports all count."""
    src = ("from swarmgpu import agent\nimport swarmgpu.manager.daemon\n"
           "def f():\n    from swarmgpu.cli import main\n"
           "from ..manager import sync\nfrom .. import sim\nimport json\n")
    found = [m for _, m in _imports(src, "swarmgpu.agent.x", is_package=False)]
    assert found == ["swarmgpu.agent", "swarmgpu.manager.daemon", "swarmgpu.cli",
                     "swarmgpu.manager", "swarmgpu.sim"]
