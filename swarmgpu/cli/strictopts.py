"""Number options read in one form (``core.strictnum``), not by click's INT and FLOAT.

click's types are ``int()`` and ``float()``: ``--drain 1_000`` was 1000, ``--speedup
nan`` a replay of nan arrivals a second, and an option written in Arabic-Indic digits
its number. Refused instead, naming the option (click's ``Invalid value for``), why
and the form to write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from swarmgpu.core.strictnum import NumberText, parse_float, parse_int

if TYPE_CHECKING:
    _IntType = click.ParamType[int, Any]
    _FloatType = click.ParamType[float, Any]
else:  # (pyproject takes click 8.1, whose ParamType is no generic to subscript)
    _IntType = _FloatType = click.ParamType


class StrictInt(_IntType):
    """A whole number, at least ``lo`` and at most ``hi`` where given."""

    name = "integer"

    def __init__(self, lo: int | None = None, hi: int | None = None) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value  # a default, already a number
        else:
            try:
                n = parse_int(str(value))
            except NumberText as e:
                self.fail(f"{str(value)!r}: {e}", param, ctx)
        if (self.lo is not None and n < self.lo) or (self.hi is not None and n > self.hi):
            self.fail(f"{n} is not in the range {self.lo}<=x<={self.hi}", param, ctx)
        return n


class StrictFloat(_FloatType):
    """A finite number."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)  # a default
        try:
            return parse_float(str(value))
        except NumberText as e:
            self.fail(f"{str(value)!r}: {e}", param, ctx)


STRICT_INT = StrictInt()
STRICT_FLOAT = StrictFloat()
