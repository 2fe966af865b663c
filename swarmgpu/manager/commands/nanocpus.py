"""Compose ``cpus`` as `docker stack deploy` reads it: docker/cli's opts.ParseCPUs, which
is Go's ``big.Rat.SetString`` times 1e9, whole or refused ("value is too precise").

So ``"1/2"``, ``"0x1p-1"``, ``".5"`` and ``"5e-1"`` are all half a CPU, ``"1_000"`` a
thousand CPUs, and ``" 1"`` is refused (no space is read). ``go_rat`` is SetString's
grammar (Go 1.13 and later: base prefixes ``0b``/``0o``/``0x``, ``_`` between digits,
``e`` or ``p`` exponents), ``nano_cpus`` the count Swarm is given; both run in time
linear in the text: an exponent Go refuses (a power of 5 above 1e6, of 2 above 1e7) is
refused before any number is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

_DIGITS = {c: i for i, c in enumerate("0123456789abcdefghijklmnopqrstuvwxyz")}
_DIGITS |= {c.upper(): i for c, i in _DIGITS.items() if c.isalpha()}
_INT64 = 1 << 63
MAX_TEXT = 1000  # characters of a cpus value read; a number of CPUs needs a few dozen
_PAST = ("more billionths of a CPU than a 64-bit count holds (docker would send Swarm its "
         "low 64 bits)")


class NotRational(ValueError):
    """Go's SetString refuses the text: docker's "failed to parse X as a rational number"."""


class TooPrecise(ValueError):
    """Not a whole number of nano-CPUs: docker's "value is too precise"."""


class TooLarge(ValueError):
    """More nano-CPUs than an int64 holds (docker would send the low 64 bits)."""


@dataclass(frozen=True)
class _Rat:
    """num * 2**e2 * 5**e5 / den, as Go builds it before normalising."""

    num: int
    e2: int = 0
    e5: int = 0
    den: int = 1


def _scan(s: str, i: int, frac_ok: bool) -> tuple[int, int, int, int]:
    """Go's ``nat.scan(r, 0, fracOk)`` from ``s[i]``: (value, base, count, next index),
    count <= 0 giving the fractional digits after a radix point; NotRational otherwise."""
    n, prev, inval, base, prefix, count = len(s), ".", False, 10, "", 0
    if i < n and s[i] == "0":
        prev, count, i = "0", 1, i + 1
        if i < n:
            c = s[i]
            if c in "bB":
                base, prefix = 2, "b"
            elif c in "oO":
                base, prefix = 8, "o"
            elif c in "xX":
                base, prefix = 16, "x"
            elif not frac_ok:
                base, prefix = 8, "0"  # 017 is octal in a fraction's parts only
            if prefix:
                count = 0  # the prefix is not counted
                i += prefix != "0"
    digits: list[str] = []
    dp = -1
    while i < n:
        c = s[i]
        if c == "." and frac_ok:
            frac_ok, inval, prev, dp = False, inval or prev == "_", ".", count
        elif c == "_":
            inval, prev = inval or prev != "0", "_"
        else:
            d = _DIGITS.get(c)
            if d is None or d >= base:
                break
            prev, count = "0", count + 1
            digits.append(c)
        i += 1
    if inval or prev == "_":
        raise NotRational("an underscore not between digits")
    if count == 0:
        if prefix == "0":  # 0 followed by no octal digit: the decimal 0
            return 0, 10, 1, i
        raise NotRational("no digits")
    value = int("".join(digits), base) if digits else 0
    return value, base, (dp - count if dp >= 0 else count), i


def _exponent(s: str, i: int) -> tuple[int, int, int]:
    """Go's ``scanExponent(r, true, true)``: (exponent, its base 10 or 2, next index)."""
    if i >= len(s) or s[i] not in "eEpP":
        return 0, 10, i
    ebase = 10 if s[i] in "eE" else 2
    i += 1
    sign = ""
    if i < len(s) and s[i] in "+-":
        sign = "-" if s[i] == "-" else ""
        i += 1
    digits, prev, inval = [], ".", False
    while i < len(s) and (s[i] in "0123456789" or s[i] == "_"):
        if s[i] == "_":
            inval, prev = inval or prev != "0", "_"
        else:
            digits.append(s[i])
            prev = "0"
        i += 1
    if not digits:
        raise NotRational("an exponent with no digits")
    text = "".join(digits).lstrip("0") or "0"
    exp = int(sign + text) if len(text) <= 19 else _INT64  # longer: past int64 anyway
    if not -_INT64 <= exp < _INT64:
        raise NotRational("an exponent past int64")
    if inval or prev == "_":
        raise NotRational("an underscore not between digits")
    return exp, ebase, i


def _parts(s: str) -> _Rat:
    """``big.Rat.SetString(s)`` as its parts; NotRational where Go refuses ``s``."""
    if not s:
        raise NotRational("empty")
    if "/" in s:  # a fraction: an Int (signed, 017 octal) over a nat (unsigned)
        top, bottom = s.split("/", 1)
        i, neg = (1, top[:1] == "-") if top[:1] in ("+", "-") else (0, False)
        num, _, _, end = _scan(top, i, False)
        den, _, _, end2 = _scan(bottom, 0, False)
        if end != len(top) or end2 != len(bottom) or den == 0:
            raise NotRational("not a/b")
        return _Rat(-num if neg else num, den=den)
    i, neg = (1, s[0] == "-") if s[0] in "+-" else (0, False)
    mant, base, fcount, i = _scan(s, i, True)
    exp, ebase, i = _exponent(s, i)
    if i != len(s):
        raise NotRational("characters after the number")
    if mant == 0:
        return _Rat(0)
    e2 = e5 = 0
    if fcount < 0:  # the radix point: a division by base**-fcount
        e5 = fcount if base == 10 else 0
        e2 = fcount * {10: 1, 2: 1, 8: 3, 16: 4}[base]
    e2 += exp
    e5 += exp if ebase == 10 else 0
    if abs(e5) > 1_000_000 or not -10_000_000 <= e2 <= 10_000_000:
        raise NotRational("an exponent Go refuses as excessively large")
    return _Rat(-mant if neg else mant, e2, e5)


def go_rat(s: str) -> Fraction | None:
    """What Go's ``new(big.Rat).SetString(s)`` gives, or None where it fails; None too
    for a text longer than ``MAX_TEXT`` (Python reads at most 4,300 decimal digits)."""
    if len(s) > MAX_TEXT:
        return None
    try:
        r = _parts(s)
    except NotRational:
        return None
    return Fraction(r.num, r.den) * Fraction(2) ** r.e2 * Fraction(5) ** r.e5


def _factors(n: int, p: int, need: int) -> int:
    """How many times ``p`` divides ``n`` (n != 0), counted up to ``need``."""
    k = 0
    while k < need and n % p == 0:
        n //= p
        k += 1
    return k


def nano_cpus(text: str) -> int:
    """opts.ParseCPUs(text): the rational ``text`` times 1e9. NotRational, TooPrecise, or
    TooLarge (past int64, where docker would send Swarm the low 64 bits)."""
    if len(text) > MAX_TEXT:
        raise TooLarge(f"longer than {MAX_TEXT} characters, which no number of CPUs needs")
    r = _parts(text)
    if r.num == 0:
        return 0
    if r.den != 1:
        q, rem = divmod(r.num * 10**9, r.den)
        if rem:
            raise TooPrecise("not a whole number of nano-CPUs")
        if not -_INT64 <= q < _INT64:
            raise TooLarge(_PAST)
        return q
    num, e2, e5 = r.num, r.e2 + 9, r.e5 + 9
    # A negative power is cancelled by the mantissa's own factors or the value is not
    # whole; each factor at least doubles |num|, so bit_length bounds the count.
    for p, e in ((2, e2), (5, e5)):
        if e < 0:
            if -e > abs(num).bit_length() or _factors(num, p, -e) < -e:
                raise TooPrecise("not a whole number of nano-CPUs")
            num //= p**-e
    e2, e5 = max(e2, 0), max(e5, 0)
    if abs(num).bit_length() + e2 + 2 * e5 > 64:  # 5**e5 >= 4**e5
        raise TooLarge(_PAST)
    q = int(num * 5**e5) << e2
    if not -_INT64 <= q < _INT64:
        raise TooLarge(_PAST)
    return q
