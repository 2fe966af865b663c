"""Comma-separated lists in settings and options (``rebalance.policies``, ``simulate
--policy``, ...): one parser, so each reads the same way."""

from __future__ import annotations

from swarmgpu.core.peertext import quoted

# ASCII blanks only, as a label's value is trimmed (requests._BLANKS): str.strip() also
# takes \x1c-\x1f, NBSP and U+3000, which no one sees around a name.
ASCII_BLANKS = " \t\n\r\f\v"


def comma_list(text: str) -> list[str]:
    """The items of ``a, b,,c``: each trimmed of ASCII blanks, empty ones left out, in
    order (an NBSP is kept, for its reader to refuse)."""
    return [p for p in (x.strip(ASCII_BLANKS) for x in text.split(",")) if p]


def unseen_items(text: str) -> str:
    """Each item of comma list ``text`` with characters that are not printable ASCII,
    quoted, with them (``unseen``); "" for none."""
    return "; ".join(f"{quoted(p)} has characters that are not printable ASCII ({odd})"
                     for p in comma_list(text) if (odd := unseen(p)))


def unseen(text: str) -> str:
    """Each character of ``text`` that is not printable ASCII, as its code point and
    place (``U+00A0 at 1``); "" for none."""
    return ", ".join(f"U+{ord(c):04X} at {i + 1}" for i, c in enumerate(text)
                     if not (c.isascii() and c.isprintable()))


def invisible(text: str) -> str:
    """Each character of ``text`` that prints as nothing (U+200B, a BOM, a tab), as
    ``unseen`` names them; "" for none."""
    return ", ".join(f"U+{ord(c):04X} at {i + 1}" for i, c in enumerate(text)
                     if not c.isprintable())


def non_ascii(text: str) -> str:
    """Each non-ASCII character of ``text`` (a lookalike: U+0430, Cyrillic a), as
    ``unseen`` names them; "" for none."""
    return ", ".join(f"U+{ord(c):04X} at {i + 1}" for i, c in enumerate(text)
                     if not c.isascii())
