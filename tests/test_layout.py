"""The package layout is the architecture: imports go down the layers, never up or across.

    cli                      the command line: may import everything
    sim                      the simulator: drives the manager's own planner
    agent | manager          the two processes: never import each other
    allocator | swarm        the GPU-picking algorithms | the engine edge
    core                     model, config, shared contracts

Every import counts, also the ones inside functions and under ``TYPE_CHECKING``: a lazy
import is still a dependency. Within a layer, modules import each other without a cycle
(two modules that need each other are one responsibility, or one needs a smaller thing
below both), and no part of the manager imports the daemon: the daemon wires the parts
together (``swarmgpu.manager.cycle.host.CycleHost`` is what they see of it). README.md
("Layout") shows the tree, docs/layout.md every module.
"""

from __future__ import annotations

import ast
import re
from itertools import pairwise
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


def _targets(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module or module.name) for every import: ``from a.b import c`` gives
    ``a.b.c``, which is ``a.b``'s submodule ``c`` when there is one."""
    pkg = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}, over the given modules only
    (``sources``: module -> (source, is_package)). An import names the deepest module
    it reaches (``from a import b`` is ``a.b`` when that is a module, else ``a``), and
    each package above it that is not the importer's own: Python runs ``a/__init__.py``
    before ``a.b``, so ``import a.b`` imports whatever ``a`` imports (a cycle closed
    through a package's ``__init__`` crashed `swarmgpu config check` on every valid
    file; the importer's own packages are being imported already)."""
    graph: dict[str, dict[str, int]] = {m: {} for m in sources}
    for module, (source, is_package) in sources.items():
        for line, target in _targets(source, module, is_package):
            while target and target not in sources:
                target = target.rpartition(".")[0]
            while target and target != module and not module.startswith(target + "."):
                graph[module].setdefault(target, line)
                target = target.rpartition(".")[0]
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a -> b -> ... -> a) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package is far shallower than the limit
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, g) for g in groups]


def _cycle_in(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """The shortest way from the group's first module back to it, inside the group."""
    start = min(group)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in group and w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {sorted(group)}")  # a group always has one


def _package_graph() -> dict[str, dict[str, int]]:
    return import_graph({_module(p): (p.read_text(), p.name == "__init__.py")
                         for p in PACKAGE.rglob("*.py")})


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


def test_no_import_cycles() -> None:
    graph = _package_graph()

    def where(a: str, b: str) -> str:
        return f"{a} (line {graph[a][b]})"

    cycles = [" -> ".join([*(where(a, b) for a, b in pairwise(c)), c[-1]])
              for c in import_cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_part_imports_the_daemon() -> None:
    """Only the command line (which starts it) imports the daemon."""
    graph = _package_graph()
    importers = sorted(m for m, targets in graph.items()
                       if "swarmgpu.manager.daemon" in targets and _layer(m) != "cli")
    assert not importers, f"modules importing the daemon: {importers}"


def test_the_cycle_check_finds_lazy_and_type_only_cycles() -> None:
    """The checker itself: a cycle closed by a lazy or TYPE_CHECKING import is found and
    named; ``from pkg import mod`` is an import of ``mod``; a chain is no cycle."""
    sources = {
        "p": ("", True),
        "p.a": ("from p import b\n", False),
        "p.b": ("def f():\n    from .c import X\n", False),
        "p.c": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    import p.a\n", False),
        "p.d": ("import p.a\nfrom p.c import Y\n", False),
    }
    graph = import_graph(sources)
    assert graph["p.a"] == {"p.b": 1} and graph["p.b"] == {"p.c": 2}
    assert import_cycles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
    sources["p.c"] = ("import json\n", False)
    assert import_cycles(import_graph(sources)) == []


def test_the_cycle_check_finds_a_cycle_through_a_packages_init() -> None:
    """The checker itself: ``from q.keys import X`` runs ``q/__init__.py`` first, so a
    module ``q``'s ``__init__`` imports (here through ``q.planner``) that imports
    ``q.keys`` closes a cycle (``manager.services.coolmark`` importing
    ``manager.placement.keys``); a module's import of its own package's sibling does not."""
    sources = {
        "q": ("from q.planner import plan\n", True),
        "q.planner": ("from r.t import T\nfrom q.keys import K\n", False),
        "q.keys": ("", False),
        "r": ("", True),
        "r.t": ("from q.keys import K\n", False),
    }
    graph = import_graph(sources)
    assert graph["r.t"] == {"q.keys": 1, "q": 1}
    assert graph["q.planner"] == {"r.t": 1, "r": 1, "q.keys": 2}
    assert import_cycles(graph) == [["q", "q.planner", "r.t", "q"]]
    sources["r.t"] = ("import json\n", False)
    assert import_cycles(import_graph(sources)) == []


def _assigned(cls: ast.ClassDef) -> set[str]:
    """Names a class assigns: in its body, or as ``self.<name> = ...`` in a method."""
    out: set[str] = set()
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Name):
                out.add(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                    and t.value.id == "self":
                out.add(t.attr)
    return out


def test_the_daemons_steps_declare_what_they_require_and_provide() -> None:
    """Every step of the cycle (a class built on ``cycle.pipeline.Step``) names itself
    and declares its ``requires`` and ``provides``: the pipeline checks the order from
    them, and the session holds each step to them."""
    steps: list[str] = []
    missing: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                     for b in node.bases}
            if "Step" not in bases or "Protocol" in bases:
                continue
            steps.append(node.name)
            lacks = {"name", "requires", "provides"} - _assigned(node)
            if lacks:
                missing.append(f"{path.relative_to(PACKAGE.parent)}: {node.name} does not "
                               f"declare {', '.join(sorted(lacks))}")
    assert len(steps) >= 8, steps  # label sync ... overshare: they are found
    assert not missing, "\n".join(missing)


def test_each_package_docstring_maps_its_modules() -> None:
    """A package's docstring is its map: it names every module and subpackage in it
    (``name`` or a map line starting with the name), so a new module is placed on it."""
    missing: list[str] = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        pkg = init.parent
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        parts = [p.stem for p in pkg.glob("*.py") if not p.name.startswith("__")]
        parts += [p.name for p in pkg.iterdir() if (p / "__init__.py").exists()]
        for name in sorted(set(parts)):
            if not (re.search(rf"``{name}(``|/|\.)", doc)
                    or re.search(rf"^\s*{name}\b", doc, re.MULTILINE)):
                missing.append(f"{init.relative_to(PACKAGE.parent)}: no {name}")
    assert not missing, "package docstrings that leave modules off their map:\n" + \
        "\n".join(missing)


def _functions(path: Path) -> list[tuple[int, str]]:
    return [(n.end_lineno - n.lineno + 1, f"{path.relative_to(PACKAGE.parent)}:{n.name}")
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno]


MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def test_no_module_over_700_lines() -> None:
    """The package's modules and the benchmarks' (bench_scale.py grew to 713 unseen
    while the rule looked at the package alone)."""
    mods = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "benchmarks").glob("*.py")]
    big = sorted(f"{p.relative_to(PACKAGE.parent)}: {n} lines" for p in mods
                 if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES)
    assert not big, "modules over 700 lines (split them by job):\n" + "\n".join(big)


def test_no_function_in_the_manager_over_80_lines() -> None:
    long = sorted(f"{name}: {n} lines" for p in (PACKAGE / "manager").rglob("*.py")
                  for n, name in _functions(p) if n > MAX_FUNCTION_LINES)
    assert not long, "functions in manager/ over 80 lines (split them into named " \
        "steps):\n" + "\n".join(long)


def test_no_private_name_is_imported_from_another_module() -> None:
    """``from m import _x`` reaches into another module's internals. Scoped to the
    package: the tests' own private imports are being removed separately (issue 35,
    item 6), and this test will take ``tests/`` in then."""
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: "
                          f"from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


# manager/'s top: the daemon and the packages that show the pipeline (issue 35, item 7)
MANAGER_TOP = {"daemon.py", "cycle", "nodes", "placement", "rebalance", "services",
               "engine", "web", "commands"}


def test_managers_top_is_the_daemon_and_its_pipeline() -> None:
    """No module lies loose beside the daemon: a new one goes into the package of its
    role (the cycle's steps, the nodes, the services, the engine edge, the web side, the
    commands), whose map names it."""
    top = {p.name for p in (PACKAGE / "manager").iterdir()
           if p.name not in {"__init__.py", "__pycache__"}
           and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert top == MANAGER_TOP, f"manager/ holds {sorted(top - MANAGER_TOP)} loose; " \
        f"missing {sorted(MANAGER_TOP - top)}"


PLACEMENT = PACKAGE / "manager" / "placement"


def _placement_map() -> list[str]:
    """The modules ``placement/__init__.py``'s map names, in its order (the paragraph
    that starts "The package, by responsibility")."""
    doc = ast.get_docstring(ast.parse((PLACEMENT / "__init__.py").read_text())) or ""
    _, found, rest = doc.partition("The package, by responsibility")
    assert found, "placement/__init__.py has no module map"
    names = re.findall(r"``(\w+)``", rest.split("\n\n")[0])
    return [n for n in names if (PLACEMENT / f"{n}.py").exists()]


def test_the_placement_map_lists_every_module_in_import_order() -> None:
    """The map in ``placement/__init__.py`` names every module of the package once, and
    each module imports only modules the map lists before it (as it says)."""
    listed = _placement_map()
    modules = sorted(p.stem for p in PLACEMENT.glob("*.py") if p.stem != "__init__")
    assert sorted(listed) == modules, (
        f"missing from the map: {sorted(set(modules) - set(listed))}; "
        f"listed twice: {sorted({n for n in listed if listed.count(n) > 1})}")
    graph = _package_graph()
    base = "swarmgpu.manager.placement."
    wrong = [f"{m} imports {t[len(base):]}, listed after it"
             for i, m in enumerate(listed)
             for t in graph[base + m] if t.startswith(base)
             and t[len(base):] not in listed[:i]]
    assert not wrong, "placement/__init__.py's order is not the import order:\n" + \
        "\n".join(wrong)
    page = (PACKAGE.parent / "docs" / "layout.md").read_text()
    part = page.split("## `swarmgpu/manager/placement/`", 1)[1].split("\n## ", 1)[0]
    in_page = re.findall(r"^    (\w+) ", part, re.MULTILINE)
    assert in_page == listed, f"docs/layout.md's placement list is not the map: {in_page}"
