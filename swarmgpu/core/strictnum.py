"""Numbers typed as text by an operator (a ``SWARMGPU_*`` variable, a command's option),
read in one form, the rest refused saying why.

Python's ``int()`` and ``float()`` read far more than an operator means: spaces around
the number, a ``+``, ``1_000``, digits of any script (an Arabic-Indic five is 5), and
``float()`` ``nan`` and ``inf``. Only what a config file's YAML reads as the same number
is taken: ASCII digits, a ``-`` before them at most; a float may have a fraction and an
exponent (``1e3``, as the file reads it). A leading zero (``010``) is refused as the
config file refuses it (``core.leadingzero``: octal to some readers). A whole number
past 64 bits, a float past a double (``1e400``) is out of range, not ``inf``.
"""

from __future__ import annotations

import math
import re

_INT = re.compile(r"-?(?:0|[1-9][0-9]*)", re.ASCII)
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]{1,4})?", re.ASCII)
INT_FORM = "ASCII digits alone, a - before them at most (e.g. 30)"
FLOAT_FORM = "ASCII digits, a - before them at most, a . and a fraction if need be (e.g. 2.5)"
MAX_INT_DIGITS = 18  # below 2**63: no count, port or seed is longer


class NumberText(ValueError):
    """Text that is not a number in the accepted form: ``why`` (empty where it is no
    number at all), and ``fix``, the form to write."""

    def __init__(self, why: str, fix: str) -> None:
        super().__init__(f"{why}; {fix}" if why else fix)
        self.why, self.fix = why, fix


def _why(text: str, whole: bool) -> str:
    """Why ``text`` is not in the form (what int() or float() would have read past)."""
    if text != text.strip():
        return "spaces around it; remove them"
    if not text.isascii():
        return "digits or signs that are not ASCII; write 0-9"
    if "_" in text:
        return "a _ in it; write the digits together"
    if text.startswith("+"):
        return "a +; write the number without it"
    if re.fullmatch(r"-?0[0-9]+(?:\.[0-9]*)?", text, re.ASCII):
        return "a leading 0 (octal to some readers); write it without"
    if not whole and text.lower().lstrip("-") in ("nan", "inf", "infinity"):
        return "not a finite number"
    return ""


def parse_int(text: str) -> int:
    """``text`` as a whole number; NumberText otherwise."""
    if not _INT.fullmatch(text):
        raise NumberText(_why(text, True), f"write {INT_FORM}")
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise NumberText(f"a number out of range (more than {MAX_INT_DIGITS} digits)",
                         "write a smaller one")
    return int(text)


def parse_float(text: str) -> float:
    """``text`` as a finite number; NumberText otherwise."""
    if not _FLOAT.fullmatch(text):
        raise NumberText(_why(text, False), f"write {FLOAT_FORM}")
    value = float(text)
    if not math.isfinite(value):
        raise NumberText("a number out of range (past a double's \u00b11.8e308)",
                         "write a smaller one")
    return value
