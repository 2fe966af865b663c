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

import re

PEER_TEXT_LIMIT = 300

# C0, DEL, C1; zero-width and bidi marks, line/paragraph separators, bidi embeddings and
# isolates, invisible operators, BOM, interlinear annotation, tag characters.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
_SPACE = str.maketrans("\t\n\r", "   ")


def peer_text(text: object, limit: int = PEER_TEXT_LIMIT) -> str:
    """``text`` as a string of at most ``limit`` characters with no control characters;
    a cut ends in ``... [N characters]`` (N: the length before the cut)."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit:
        return _CONTROL.sub("", s.translate(_SPACE))
    tail = f"... [{len(s)} characters]"
    if len(tail) > limit:  # too small a limit to say how long it was
        tail = ""
    # Cut before cleaning: the work stays bounded whatever the size of the input.
    return _CONTROL.sub("", s[: max(0, limit - len(tail))].translate(_SPACE)) + tail


# Everything ``escaped`` shows as an escape: the characters above, plus tab and line
# breaks, and lone surrogates (JSON's "\ud800": UTF-8 cannot print them, the command
# stopped with UnicodeEncodeError).
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)


def escaped(text: object) -> str:
    """``text`` with every control or format character written as its Python escape
    (ESC as ``\\x1b``, a newline as ``\\n``, a bidi override as ``\\u202e``), printable
    non-ASCII kept: for others' text that meets a terminal or a text log line whole (a
    stack's or service's names, label keys and values, hostnames, agents' and the
    engine's errors), so that it shows, and does nothing. The commands apply it to each
    line they print, the text log format to each message."""
    s = text if isinstance(text, str) else str(text)
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], s)
