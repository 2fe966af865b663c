"""Callables handed over to be called later, where mypy checks neither the arguments
nor the name: ``threading.Thread(target=f, args=...)`` and ``threading.Timer(t, f,
args)`` take ``Callable[..., object]`` and any arguments (stop 82's
``Timer(1.0, host.trigger)`` died in its thread once ``trigger`` took a reason), and
a hook read by ``getattr`` is ``Any``, its name a string. The package hands each over as
a lambda (its call checked) or through a typed helper (``triggers.follow_up``), and
each hook name read so is one ``SwarmClient`` has.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from swarmgpu.swarm.client import SwarmClient

PACKAGE = Path(__file__).resolve().parents[1] / "swarmgpu"


def _calls() -> list[tuple[str, ast.Call]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.Call):
                out.append((f"{path.relative_to(PACKAGE.parent)}:{n.lineno}", n))
    return out


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def test_no_thread_or_timer_is_handed_arguments_mypy_does_not_check() -> None:
    untyped = []
    for where, call in _calls():
        name = _name(call)
        if name == "Thread" and any(k.arg in ("args", "kwargs") for k in call.keywords):
            untyped.append(where)
        if name == "Timer" and "manager/cycle/triggers.py" not in where:
            untyped.append(where)
    assert untyped == [], ("hand a lambda (its call checked), or use "
                           f"triggers.follow_up: {untyped}")


def test_each_hook_read_by_getattr_from_the_swarm_client_is_one_it_has() -> None:
    """``Writes`` reads ``before_write`` (the daemon's stop gate) and ``on_write`` by
    ``getattr`` (a stand-in client may lack them): a renamed one would be None there,
    the stop gate skipped, with nothing said."""
    init = inspect.getsource(SwarmClient.__init__)
    read = {(where, call.args[1].value) for where, call in _calls()
            if _name(call) == "getattr" and len(call.args) == 3
            and isinstance(call.args[0], ast.Attribute) and call.args[0].attr == "swarm"
            and isinstance(call.args[1], ast.Constant)}
    assert {name for _, name in read} >= {"before_write", "on_write"}, read
    missing = [f"{where}: {name}" for where, name in sorted(read)
               if not hasattr(SwarmClient, name) and f"self.{name}:" not in init]
    assert missing == [], missing
