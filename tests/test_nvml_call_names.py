"""Every NVML function the package calls by name (``Nvml.call``/``attempt``: a
getattr-dispatch, its name and arguments unchecked by mypy) is one pynvml has, taking
the arguments given. ``Nvml`` reads a name pynvml lacks as a function "this driver
lacks" (``MISSING``: the value unknown, no error), so a misspelled name would leave its
value unknown on every node, said nowhere.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pynvml

PACKAGE = Path(__file__).resolve().parents[1] / "swarmgpu"


def _calls() -> list[tuple[str, str, int]]:
    """(where, name, positional arguments after the name) of every literal call."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("call", "attempt") and n.args
                    and isinstance(n.args[0], ast.Constant)
                    and isinstance(n.args[0].value, str)
                    and n.args[0].value.startswith("nvml")):
                assert not n.keywords and not any(
                    isinstance(a, ast.Starred) for a in n.args), (path, n.lineno)
                where = f"{path.relative_to(PACKAGE.parent)}:{n.lineno}"
                out.append((where, n.args[0].value, len(n.args) - 1))
    return out


def test_every_nvml_function_called_by_name_exists_and_takes_its_arguments() -> None:
    calls = _calls()
    assert len(calls) > 50  # (the search finds them)
    wrong = []
    for where, name, nargs in calls:
        fn = getattr(pynvml, name, None)
        if fn is None:
            wrong.append(f"{where}: pynvml has no {name}")
            continue
        try:
            inspect.signature(fn).bind(*[None] * nargs)
        except TypeError as exc:
            wrong.append(f"{where}: {name} with {nargs} arguments: {exc}")
    assert not wrong, "\n".join(wrong)
