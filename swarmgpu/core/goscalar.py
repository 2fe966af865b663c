"""A plain YAML scalar as docker/cli's reader resolves it: go-yaml v3 (v3.0.1, resolve.go).

Docker 28 and later read stack files with yaml v3 (docker/cli 58bf0f1846), decoding into
``map[string]any``; its rules are not YAML 1.1's (PyYAML's): the booleans are only
``true``/``false`` (``True``, ``TRUE``...): ``y``, ``n``, ``yes``, ``no``, ``on`` and ``off``
are text; a number is what Go's ``strconv`` reads once every ``_`` is dropped, so
``0o17``, ``0X1F`` and ``0b-101`` are integers, ``1e3``, ``.5e3``, ``+.5`` and ``08``
floats (``08`` is no octal integer, so it is read as the float 8); an integer past 64
bits is a float, or text when it is hexadecimal; a float past the range of a double
(``1e999``) is text; no base-60 numbers. A timestamp (``2001-12-14``) is a time, which
docker gives the service as Go's text of it in the zone docker runs in (TIMESTAMP: the
reader decides). Everything else is text.

Docker 27 and older read with yaml v2 (v2.4.0), which differs here only in ``y``, ``n``,
``yes``, ``no``, ``on`` and ``off`` (booleans, with their capitals), in timestamps (their
text) and in ``0o`` then a sign (``0o-17``, ``0o+1_7``: text); ``v2_reads_otherwise``
names the first and last. ``YAML11_BOOLS`` are those words, which v3 still takes where
the field is a boolean.
"""

from __future__ import annotations

import datetime
import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

STR = "tag:yaml.org,2002:str"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
TIMESTAMP = "tag:yaml.org,2002:timestamp"
NULL = "tag:yaml.org,2002:null"

# yaml v3 decoding into a bool field (decode.go) also takes these texts, quoted or not.
YAML11_BOOLS: dict[str, bool] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "off", "Off", "OFF"), False),
}
_WORDS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(("true", "True", "TRUE"), (BOOL, True)),
    **dict.fromkeys(("false", "False", "FALSE"), (BOOL, False)),
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
# parseTimestamp: Go's time.Parse of 2006-1-2T15:4:5.999999999Z07:00 (or t), of
# 2006-1-2 15:4:5.999999999 and of 2006-1-2; a fraction may follow a ',' too.
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})(?:"
    r"[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,]\d+)?(?:Z|[-+]\d{2}:\d{2})"
    r"| (\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,]\d+)?)?",
    re.ASCII,
)


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
    for prefix, digits, base in (("0b", "[01]", 2), ("0o", "[0-7]", 8)):
        if plain.startswith(prefix) and re.fullmatch(f"[-+]?{digits}+", plain[2:], re.ASCII):
            # go-yaml's own fallbacks, after ParseInt and its float: ParseInt("-17", 8).
            return _fits(int(plain[2:], base), plain[2] in "+-")
    return None


def _is_timestamp(text: str) -> bool:
    """Whether Go's time.Parse takes ``text`` in a form go-yaml tries: a real date, hours
    to 23, minutes and seconds to 59."""
    m = _TIMESTAMP.fullmatch(text)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups()[:3])
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    hms = [int(g) for g in m.groups()[3:] if g is not None]
    return not hms or (hms[0] <= 23 and hms[1] <= 59 and hms[2] <= 59)


def _float(text: str) -> float | None:
    """ParseFloat's value; None where it errs (past a double's range: ErrRange)."""
    f = float(text)
    return f if math.isfinite(f) else None


def resolve(text: str) -> tuple[str, Any]:
    """The tag and value go-yaml v3 gives the plain scalar ``text`` (STR and TIMESTAMP:
    the text)."""
    if text in _WORDS:
        return _WORDS[text]
    if text[:1] not in _HINTED:
        return STR, text
    if text[0] == ".":
        f = _float(text) if _DOT_FLOAT.fullmatch(text) else None
        return (STR, text) if f is None else (FLOAT, f)
    if text[0] in "+-0123456789":
        if _is_timestamp(text):
            return TIMESTAMP, text
        plain = text.replace("_", "")
        n = _go_int(plain)  # the 0b fallback reads text less '_' too
        if n is not None:
            return INT, n
        if _YAML_STYLE_FLOAT.fullmatch(plain):
            f = _float(plain)
            if f is not None:
                return FLOAT, f
    return STR, text


def out_of_range(text: str) -> str | None:
    """What range the plain scalar ``text`` is a number past, where go-yaml reads it as
    text only for that (``1e999``: a double's; ``0x1FFFFFFFFFFFFFFFFF``: 64 bits); None
    for text that is no number (``inf``, ``10m``) or a number read as one."""
    if not text or resolve(text)[0] != STR:
        return None
    plain = text.replace("_", "")
    if _GO_INT.fullmatch(plain) and not _YAML_STYLE_FLOAT.fullmatch(plain):
        return "past 64 bits, \u00b19.2e18"  # hexadecimal, octal, binary
    if (_DOT_FLOAT if text[0] == "." else _YAML_STYLE_FLOAT).fullmatch(
            text if text[0] == "." else plain):
        return "past a double's \u00b11.8e308"
    return None


def v2_reads_otherwise(text: str) -> tuple[str, str] | None:
    """How go-yaml v3 and v2 read the plain scalar ``text`` (as words for a message),
    where they differ but for a timestamp; None where both read it alike. v2 has the
    YAML 1.1 words as booleans and no 0o fallback after ParseInt (v3's, for ``0o-17``)."""
    if text in YAML11_BOOLS:
        return "text", str(YAML11_BOOLS[text]).lower()
    tag, value = resolve(text)
    if tag == INT and text.replace("_", "")[:3] in ("0o-", "0o+"):
        return f"the number {value}", "text"
    return None


def _float32(f: float) -> float:
    """``f`` rounded to a float32 as Go's float32(f) rounds it: past its range, infinite."""
    try:
        return float(struct.unpack("f", struct.pack("f", f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)


def float32_text(f: float) -> str:
    """Go's ``strconv.FormatFloat(f, 'g', -1, 32)``: the fewest digits that read back as
    the same float32, in %e form when the exponent is below -4 or 6 and above
    (sigs.k8s.io/yaml gives a float bound for a string field this text)."""
    return _g_text(_float32(f), _float32, 9)


def float64_text(f: float) -> str:
    """Go's ``fmt.Sprint`` of a float64 (``strconv.FormatFloat(f, 'g', -1, 64)``): how
    docker/cli's loader turns a number in a label or an environment value into text
    (1.0 is "1", 1e8 "1e+08", 0.50 "0.5")."""
    return _g_text(f, float, 17)


def _g_text(f: float, rounded: Callable[[float], float], most: int) -> str:
    """``f`` in Go's shortest 'g' form, read back through ``rounded`` (float32 or 64),
    ``most`` being the significant digits that always read back."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, f) < 0 else ""
    if f == 0:
        return sign + "0"
    shown = _shortest(abs(f), rounded, most)
    digits = "".join(map(str, shown.as_tuple().digits)).rstrip("0") or "0"
    exp = shown.adjusted()
    if exp < -4 or exp >= 6:
        frac = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1  # (digits before the point)
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _shortest(a: float, rounded: Callable[[float], float], most: int) -> Decimal:
    """The fewest digits that read back as ``a`` (> 0), the nearest of those, as Go's
    Ryu does. Below a power of two the floats are twice as close as above it: the
    nearest decimal of N digits may fall on that narrow side, outside what reads back,
    while its neighbour on the wide side reads back (2**-1017: 16 digits, not 17)."""
    for places in range(most):
        near = Decimal(f"{a:.{places}e}")
        step = Decimal(1).scaleb(near.adjusted() - places)
        for d in (near, near + step, near - step):
            if d > 0 and rounded(float(d)) == a:
                return d
    return Decimal(f"{a:.{most - 1}e}")  # ``most`` digits always read back


def go_text(value: object) -> object:
    """A number as docker/cli's loader gives it a label or an environment variable
    (Go's ``fmt.Sprint``); any other value as it is."""
    if isinstance(value, float):
        return float64_text(value)
    return value
