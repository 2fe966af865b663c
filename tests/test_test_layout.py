"""The tests follow the product's rules (issue 35, item 6).

- Helpers live in the ``tests/support/`` package: the top of tests/ holds only
  conftest.py and test modules (and data: fixtures/, doctor_roots/, JSON).
- No module imports a test module (tests/, benchmarks/, scripts/): what two modules
  share is a helper.
- No private (``_name``) name is imported, from the product or from a helper.
- One ``daemon`` fixture, in conftest.py: a swarm module says how its daemon runs with
  ``DAEMON = ModuleDaemon(...)`` (tests/support/daemon.py).

Every import counts, also the ones inside functions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"


def _sources() -> list[Path]:
    """Every module of tests/, and the benchmarks and scripts that use its helpers."""
    out = [p for p in TESTS.rglob("*.py")
           if not {"fixtures", "doctor_roots"} & set(p.relative_to(TESTS).parts)]
    for other in ("benchmarks", "scripts"):
        out += (TESTS.parent / other).glob("*.py")
    return sorted(out)


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import of ``path``; names empty for `import m`."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name, []) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.append((n.lineno, n.module, [a.name for a in n.names]))
    return out


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(TESTS.parent)}:{line}"


def test_helpers_live_in_the_support_package() -> None:
    loose = [p.name for p in TESTS.glob("*.py")
             if p.name != "conftest.py" and not p.name.startswith("test_")]
    assert not loose, f"helpers at the top of tests/, move them to tests/support/: {loose}"
    packages = [p.name for p in TESTS.iterdir() if (p / "__init__.py").exists()]
    assert packages == ["support"], f"tests/ has packages besides support/: {packages}"
    assert not list(SUPPORT.rglob("test_*.py")), "a test module in tests/support/"


def test_no_module_imports_a_test_module() -> None:
    test_modules = {p.stem for p in TESTS.glob("test_*.py")}
    found = [f"{_where(p, line)}: {mod}" for p in _sources()
             for line, mod, _ in _imports(p) if mod.split(".")[0] in test_modules]
    assert not found, "imports of a test module (put what they share in tests/support/):\n" \
        + "\n".join(found)


def test_no_private_name_is_imported() -> None:
    found = [f"{_where(p, line)}: from {mod} import {name}" for p in _sources()
             for line, mod, names in _imports(p) for name in names
             if name.startswith("_") and not name.startswith("__")]
    assert not found, "private names imported (test through the public API, or make the " \
        "name public where a test needs it):\n" + "\n".join(found)


def _fixtures(path: Path) -> list[tuple[int, str]]:
    out = []
    for n in ast.parse(path.read_text()).body:
        if isinstance(n, ast.FunctionDef) and any(
                "fixture" in ast.unparse(d) for d in n.decorator_list):
            out.append((n.lineno, n.name))
    return out


def test_one_daemon_fixture_in_conftest() -> None:
    assert "daemon" in {name for _, name in _fixtures(TESTS / "conftest.py")}
    own = [f"{_where(p, line)}" for p in _sources() if p.name != "conftest.py"
           for line, name in _fixtures(p) if name == "daemon"]
    assert not own, "modules with their own `daemon` fixture (set DAEMON = ModuleDaemon(...) " \
        "for the one in conftest.py):\n" + "\n".join(own)
    # every module that uses the shared one says how its daemon runs
    for p in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(p.read_text())
        uses = any(isinstance(n, ast.FunctionDef) and n.name.startswith("test")
                   and "daemon" in {a.arg for a in n.args.args} for n in tree.body)
        declares = any(isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DAEMON" for t in n.targets) for n in tree.body)
        assert declares or not uses, f"{p.name} uses the `daemon` fixture without DAEMON"


def test_the_support_map_names_every_helper() -> None:
    doc = ast.get_docstring(ast.parse((SUPPORT / "__init__.py").read_text())) or ""
    names = {p.stem for p in SUPPORT.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in SUPPORT.iterdir() if (p / "__init__.py").exists()}
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", doc))
    assert not missing, f"tests/support/__init__.py does not say what these hold: {missing}"
