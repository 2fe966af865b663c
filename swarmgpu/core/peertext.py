"""Text a peer wrote (an agent's answer, an exporter's page), made safe to repeat.

What an agent or exporter sends may be megabytes long and may carry control characters:
a newline forges a log line, an escape sequence rewrites the operator's terminal, a bidi
override reorders what the map shows. Every error or note the daemon builds from peer
input goes through ``peer_text`` before it reaches a log, ``agents.json``,
``/api/v1/cluster``, an audit finding or a metrics label: control and format characters
removed (line breaks and tabs become spaces), at most ``limit`` characters, and a cut
says so with the original length.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

PEER_TEXT_LIMIT = 300

# What a terminal or a page does not show as itself, by Unicode category rather than a
# list of code points (a list missed U+0600-0605, U+06DD, U+110BD, U+1D173-1D17A): controls
# (Cc: C0, DEL, C1), format characters (Cf: zero-width and bidi marks, embeddings and
# isolates, invisible operators, BOM, interlinear annotation, tag characters), lone
# surrogates (Cs: UTF-8 cannot print them), line and paragraph separators (Zl, Zp), and
# unassigned code points (Cn: a later Unicode may make them any of these).
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"})


def _hidden(c: str) -> bool:
    return unicodedata.category(c) in _HIDDEN


_SPACE = str.maketrans("\t\n\r", "   ")


def peer_text(text: object, limit: int = PEER_TEXT_LIMIT) -> str:
    """``text`` as a string of at most ``limit`` characters with no control characters;
    a cut ends in ``... [N characters]`` (N: the length before the cut)."""
    s = text if isinstance(text, str) else str(text)
    tail = ""
    if len(s) > limit:
        tail = f"... [{len(s)} characters]"
        if len(tail) > limit:  # too small a limit to say how long it was
            tail = ""
        # Cut before cleaning: the work stays bounded whatever the size of the input.
        s = s[: max(0, limit - len(tail))]
    s = s.translate(_SPACE)
    if not s.isprintable():  # str.isprintable is False for every hidden category
        s = "".join(c for c in s if not _hidden(c))
    return s + tail


def tenant_text(text: object, limit: int = PEER_TEXT_LIMIT) -> str:
    """``text`` cut as ``peer_text`` cuts it, its hidden characters written as escapes
    (``escaped``) rather than dropped: a tenant's label key or value in a reason. Dropped,
    a value with a zero-width joiner (an emoji family: ``\\u200d`` between its people) or
    a bidi mark read as one without it; the whole sequence is not kept either, as the
    joiner is invisible and the value differs from the one without. At most ``limit``
    characters, escapes included (one takes up to ten: ``\\U000e0041``)."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit and len(shown := escaped(s)) <= limit:
        return shown
    tail = f"... [{len(s)} characters]"
    if len(tail) > limit:  # too small a limit to say how long it was (as peer_text)
        tail = ""
    room, kept = limit - len(tail), []
    for c in s[:room]:  # whole escapes alone, as many as fit: cut before escaping
        room -= len(e := escaped(c))
        if room < 0:
            break
        kept.append(e)
    return "".join(kept) + tail


def escaped(text: object) -> str:
    """``text`` with every control or format character written as its Python escape
    (ESC as ``\\x1b``, a newline as ``\\n``, a bidi override as ``\\u202e``), printable
    non-ASCII kept: for others' text that meets a terminal or a text log line whole (a
    stack's or service's names, label keys and values, hostnames, agents' and the
    engine's errors), so that it shows, and does nothing. The commands apply it to each
    line they print, the text log format to each message."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case, in C: nothing hidden (tab and newline are Cc)
        return s
    return "".join(ascii(c)[1:-1] if _hidden(c) else c for c in s)


def json_escaped(text: str) -> str:
    """A one-line JSON text with every control or format character written as JSON's
    ``\\u`` escape (surrogate pairs beyond U+FFFF): what ``json.dumps(ensure_ascii=False)``
    leaves raw (C1 controls, DEL, bidi marks, line separators, lone surrogates) no longer
    reaches a terminal, and the text decodes to the same values. Outside its strings a
    one-line JSON text has only spaces, so every escape lands inside a string."""
    if text.isprintable():
        return text
    return "".join(json.dumps(c)[1:-1] if _hidden(c) else c for c in text)


SHOWN_LIMIT = 60


def quoted(value: object, limit: int = SHOWN_LIMIT) -> str:
    """``value`` as ``repr`` shows it, for an error naming bad input (a stack's, a
    config's or a label's value, which may be megabytes): whole up to ``limit``
    characters, else its start quoted and ``... [N characters]``, N its length."""
    if isinstance(value, str):
        if len(value) <= limit and len(shown := repr(value)) <= limit:
            return shown
        return f"{value[:max(1, limit - 20)]!r}... [{len(value)} characters]"
    shown = repr(value)  # not text: its repr, cut the same way
    return shown if len(shown) <= limit else \
        f"{shown[:max(1, limit - 20)]}... [{len(shown)} characters]"


CELL_WIDTH = 40  # a table's column of others' text (a hostname, a label's value)
# A node's ID beside its name: whole (Swarm's are 25 characters), as `docker node ls`
# shows it and `docker node inspect` takes it; an engine's longer text is cut.
ID_WIDTH = 30
CUT = "..."


def text_width(text: str) -> int:
    """The columns a terminal gives ``text``: two for a wide or fullwidth character
    (East Asian width W or F: CJK) and for a character VS16 (U+FE0F) asks be shown as
    an emoji, none for a combining mark (it sits on the character before it), one for
    any other; ``len`` counted a CJK name half as wide as it shows."""
    if text.isascii():
        return len(text)
    return sum(_widths(text))


VS16 = "\ufe0f"  # emoji presentation: the character before it shows as a wide emoji


def _widths(text: str) -> Iterable[int]:
    """Each character's columns (``text_width``); VS16 takes the one more column its
    narrow character then takes (a wide one takes two already), as terminals and wcwidth
    count an emoji presentation sequence (``\u2764\ufe0f``: two columns, not one)."""
    before = 0
    for c in text:
        w = 1 if c == VS16 and before == 1 else _char_width(c)
        # (a hidden character shows as its escape, which ends in an ASCII character)
        before = 0 if c == VS16 else 1 if _hidden(c) else w
        yield w


def _char_width(c: str) -> int:
    if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def padded(text: str, width: int) -> str:
    """``text`` and spaces to ``width`` columns (``text_width``), for a table's column:
    ``str.ljust`` counts characters, so a CJK name pushed the columns after it."""
    return text + " " * max(0, width - text_width(text))


def cell(text: object, width: int = CELL_WIDTH) -> str:
    """``text`` escaped (``escaped``) for a table's column or a text line's name: whole
    when it fits in ``width`` columns (``text_width``), else its start and ``...``, at
    most ``width`` columns in all: a 200-character hostname pushed every column after it
    off the screen. An escape is never cut in two, a character never parted from its
    combining marks or its VS16 (``❤`` bare showed the text heart), nor a flag's two
    regional indicators (one alone shows as a boxed letter); JSON keeps the whole."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= width and s.isascii() and s.isprintable():  # the common case
        return s
    kept = _kept(s, width)
    return escaped(s) if kept is None else escaped(s[:kept]) + CUT


def shortened(text: object, width: int = CELL_WIDTH) -> str:
    """``text`` cut as ``cell`` cuts it, not escaped: a name inside a longer text that is
    cut and escaped after (``cell`` of that text). Written in escaped, the name's
    escapes were text to that cut, which could part one (``\\x1`` and ``...``)."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= width and s.isascii() and s.isprintable():
        return s
    kept = _kept(s, width)
    return s if kept is None else s[:kept] + CUT


LINE_WIDTH = 600  # columns of a command's text line: the longest a cluster writes fit whole

# An escape's start left at the end of a cut (``\x1`` of ``\x1b``): a name in the line
# was escaped (``cell``) before the line was cut.
_PARTED = re.compile(r"\\(?:x[0-9a-f]?|u[0-9a-f]{0,3}|U[0-9a-f]{0,7})?\Z")


def text_line(text: object, width: int = LINE_WIDTH) -> str:
    """A command's text line cut as ``cell`` cuts a name, at ``width`` columns: a
    10,000-character service name or reason flooded the terminal. An escape a name in it
    already shows (``cell``) is never parted by the cut; ``--json`` keeps the whole."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= width and s.isascii() and s.isprintable():  # the common case
        return s
    kept = _kept(s, width)
    return escaped(s) if kept is None else escaped(_PARTED.sub("", s[:kept])) + CUT


def _kept(s: str, width: int) -> int | None:
    """How many characters of ``s`` ``cell`` keeps before its ``...``; None: all, no cut."""
    room, used, fits = max(0, width - len(CUT)), 0, 0
    # The work bounded, whatever the text's size: past 4 characters a column (combining
    # marks take none) the text is cut where it reached ``room``.
    head, base, flag = s[:4 * width + 4], 0, 0
    for k, (c, w) in enumerate(zip(head, _widths(head), strict=True)):
        # a flag's second regional indicator goes with its first, as a mark with its letter
        flag = (flag + 1) % 2 if _regional(c) else 0
        joined = _mark(c) or (_regional(c) and flag == 0)
        base = base if joined else k  # where the letter this mark sits on starts
        used += len(ascii(c)) - 2 if _hidden(c) else w  # (an escape's)
        if used > width:
            return min(fits, base)
        if used <= room:
            fits = k + 1
        elif w and joined:  # (VS16's column, a flag's half: not shown bare)
            fits = min(fits, base)
    if len(s) > 4 * width + 4:
        # cut where a letter starts: the bound may fall among a letter's marks, and the
        # letter showed with some of them; or between a flag's indicators
        while fits and (_mark(s[fits]) or _flag_half(s, fits)):
            fits -= 1
        return fits
    return None


def _regional(c: str) -> bool:
    """A regional indicator (U+1F1E6-1F1FF): two in a row, from a run's start, are a flag."""
    return "\U0001F1E6" <= c <= "\U0001F1FF"


def _flag_half(s: str, k: int) -> bool:
    """``s[k]`` is the second regional indicator of a flag (an odd count of them runs
    before it)."""
    run = 0
    while run < k and _regional(s[k - run - 1]):
        run += 1
    return _regional(s[k]) and run % 2 == 1


def _mark(c: str) -> bool:
    """A combining mark that ``cell`` shows (no escape): it takes no column."""
    return not _hidden(c) and _char_width(c) == 0


def cut_alike(names: Iterable[object]) -> set[str]:
    """The cuts (``cell``) that more than one of ``names`` reads as: a table names the
    node beside each (else a node joined under another's long name passed as it)."""
    return {c for c, k in Counter(cell(n) for n in names).items() if k > 1}
