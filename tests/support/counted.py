"""A method's calls counted while a test lasts: ``calls`` wraps it on its class, each
call still made.

First written in tests/test_audit_plans_once.py, tests/test_consolidation_plans.py and
tests/test_victim_search.py."""

from __future__ import annotations

from typing import Any

import pytest


def calls(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[Any]:
    """The instance of each call of ``owner.name`` from now on, in order."""
    made: list[Any] = []
    real = getattr(owner, name)

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        made.append(self)
        return real(self, *a, **kw)

    monkeypatch.setattr(owner, name, counted)
    return made
