"""A plain YAML scalar as docker/cli's reader resolves it: go-yaml v2 (v2.4.0, resolve.go).

docker/cli reads stack files with gopkg.in/yaml.v2, whose rules are not YAML 1.1's
(PyYAML's): its word table adds ``y``/``n`` to the booleans; a number is what Go's
``strconv`` reads, so ``0o17``, ``0X1F`` and ``0b-101`` are integers, ``1e3``, ``.5e3``,
``+.5`` and ``08`` floats (``08`` is no octal integer, so it is read as the float 8); an
integer past 64 bits is a float, or text when it is hexadecimal; a float past the range
of a double (``1e999``) is text; no base-60 numbers; a timestamp is its text (v2 gives
``interface{}`` the string). Everything else is text.
"""

from __future__ import annotations

import math
import re
from typing import Any

STR = "tag:yaml.org,2002:str"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
NULL = "tag:yaml.org,2002:null"

_WORDS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(
        ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), (BOOL, True)
    ),
    **dict.fromkeys(
        ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), (BOOL, False)
    ),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), (NULL, None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), (FLOAT, math.nan)),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), (FLOAT, math.inf)),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), (FLOAT, -math.inf)),
}
# The first characters go-yaml looks further at (its resolveTable); any other is text.
_HINTED = frozenset("+-0123456789yYnNtTfFoO~.")
# strconv.ParseInt(s, 0, 64): a sign, then 0b/0o/0x and digits, a leading 0 (octal) or
# decimal digits.
_GO_INT = re.compile(
    r"([-+]?)(0[bB][01]+|0[oO][0-7]+|0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", re.ASCII
)
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", re.ASCII)
# strconv.ParseFloat of text starting with '.': digits, '_' between digits, an exponent.
_DOT_FLOAT = re.compile(r"\.[0-9](_?[0-9])*([eE][-+]?[0-9](_?[0-9])*)?", re.ASCII)
_INT64 = 2**63


def _fits(n: int, signed: bool) -> int | None:
    """``n`` where ParseInt (or, unsigned, ParseUint) would take it; None past 64 bits."""
    if -_INT64 <= n < _INT64 or (not signed and 0 <= n < 2 * _INT64):
        return n
    return None


def _go_int(plain: str) -> int | None:
    if len(plain) > 70:  # past 64 bits in any base (and int() past 4300 digits raises)
        return None
    m = _GO_INT.fullmatch(plain)
    if m is not None:
        sign, body = m.groups()
        octal = body[0] == "0" and body[1:2].isdigit()  # 017: Go reads octal
        n = int(body, 8 if octal else 0) * (-1 if sign == "-" else 1)
        return _fits(n, bool(sign))
    if plain.startswith("0b") and re.fullmatch(r"[-+]?[01]+", plain[2:], re.ASCII):
        # go-yaml's own binary fallback, after ParseInt: ParseInt("-101", 2).
        return _fits(int(plain[2:], 2), plain[2] in "+-")
    return None


def _float(text: str) -> float | None:
    """ParseFloat's value; None where it errs (past a double's range: ErrRange)."""
    f = float(text)
    return f if math.isfinite(f) else None


def resolve(text: str) -> tuple[str, Any]:
    """The tag and value go-yaml v2 gives the plain scalar ``text`` (STR: the text)."""
    if text in _WORDS:
        return _WORDS[text]
    if text[:1] not in _HINTED:
        return STR, text
    if text[0] == ".":
        f = _float(text) if _DOT_FLOAT.fullmatch(text) else None
        return (STR, text) if f is None else (FLOAT, f)
    if text[0] in "+-0123456789":
        plain = text.replace("_", "")
        n = _go_int(plain)  # the 0b fallback reads text less '_' too
        if n is not None:
            return INT, n
        if _YAML_STYLE_FLOAT.fullmatch(plain):
            f = _float(plain)
            if f is not None:
                return FLOAT, f
    return STR, text
