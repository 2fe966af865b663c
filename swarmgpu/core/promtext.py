"""One line of Prometheus text (format 0.0.4, or OpenMetrics 1.0), read strictly.

What dcgm-exporter and prometheus_client write, and nothing looser: ``name{l="v",...}
value [timestamp] [# exemplar]``. prometheus_client's own parser is lax (``1 2 3`` read
as 1, ``\\t`` kept as two characters) and slow on hostile text (a label value of escaped
quotes took quadratic time: minutes for one 8 MB page, the whole cycle waiting). Here
every step is a regular expression without nested alternatives, so a line costs time
in proportion to its length, and anything the formats do not allow is a ``LineError``
whose message says what is wrong, never quoting the line. A ``# TYPE`` line gives its name
and type (``parse_type``), a ``# HELP`` line its name (``parse_help``); what a page's
TYPE and HELP lines may say together is metrics_in's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# One label pair; the value is the unrolled form of (plain | escape)*: linear, no backtracking.
# Possessive (*+): a plain repeat kept ~170 bytes of backtracking state per escape (an 8
# MiB line of \\ took 700 MiB), which giving back could never use.
_PAIR = re.compile(
    r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\\n]*+(?:\\.[^"\\\n]*+)*+)"'
    r"[ \t]*"
)
# Longest label value read. dcgm-exporter's are UUIDs, models, PCI ids, host and pod names
# (Kubernetes caps those at 253): the real captures' longest is 40. A longer one is a
# hostile page; unescaping 8 MiB of escapes took ~3 s of the daemon's cycle.
MAX_LABEL_VALUE = 4096
# Labels of one sample: dcgm-exporter writes ~10, with Kubernetes' pod, namespace and
# container a few more; each costs a dict entry the daemon holds while it reads the page.
MAX_LABELS = 64
_BAD_ESCAPE = re.compile(r"\\[^\\\"n]")
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}
# Go's ParseFloat as Prometheus calls it: decimal, Inf/NaN in any case, no hex, no '_';
# a sign before Inf, never before NaN (Go refuses '-NaN').
_VALUE = (
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|"
    r"(?i:inf(?:inity)?))|(?i:nan)"
)
# value, an optional timestamp (0.0.4: integer ms; OpenMetrics: seconds), an optional
# OpenMetrics exemplar (`# {labels} value [ts]`, not read), then the end of the line.
_TAIL = re.compile(
    rf"[ \t]+({_VALUE})(?:[ \t]+(-?[0-9]+(?:\.[0-9]+)?))?"
    r"(?:[ \t]+#[ \t]+\{.*)?[ \t]*"
)

# `# TYPE name type`, `# HELP name text`; '#TYPE' or '# TYPEX' are plain comments, as in
# Prometheus' reader.
_TYPE_LINE = re.compile(r"#[ \t]+TYPE(?:[ \t]+(.*))?")
_HELP_LINE = re.compile(r"#[ \t]+HELP(?:[ \t]+(.*))?")
# HELP text escapes \\ and \n alone (expfmt refuses the page for \" or \t, or a lone '\').
# Possessive, as _PAIR.
_HELP_TEXT = re.compile(r"[^\\]*+(?:\\[\\n][^\\]*+)*+")
# The types of 0.0.4 and of OpenMetrics (whose 'unknown' is 0.0.4's 'untyped').
TYPES = frozenset(
    {
        "counter",
        "gauge",
        "histogram",
        "summary",
        "untyped",
        "unknown",
        "gaugehistogram",
        "info",
        "stateset",
    }
)


class LineError(ValueError):
    """A line that is not Prometheus text; the message names the fault, not the line."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp: str | None  # as written; None: none given


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    if _BAD_ESCAPE.search(raw):
        raise LineError(r"a label value has an escape other than \\, \" or \n")
    return _ESCAPE.sub(lambda m: _UNESCAPE[m.group(1)], raw)


def parse_sample(line: str) -> Sample:
    """One sample line (stripped, not a comment) of Prometheus text or OpenMetrics."""
    m = _NAME.match(line)
    if m is None:
        raise LineError("no metric name at the start of the line")
    name, pos = m.group(0), m.end()
    labels: dict[str, str] = {}
    brace = len(line) - len(line[pos:].lstrip(" \t"))  # blanks may come before '{'
    if line.startswith("{", brace):
        pos = brace + 1
        while True:
            while pos < len(line) and line[pos] in " \t":
                pos += 1
            if line.startswith("}", pos):
                pos += 1
                break
            p = _PAIR.match(line, pos)
            if p is None:
                raise LineError('a label is not name="value": a quote unclosed or missing?')
            key = p.group(1)
            if key == "__name__":  # the metric's name is given before '{', once
                raise LineError("a label is named __name__, which is the metric's name")
            if key in labels:
                raise LineError(f"label {key} is given twice")
            if len(labels) >= MAX_LABELS:
                raise LineError(f"more than {MAX_LABELS} labels, which no exporter writes")
            if p.end(2) - p.start(2) > MAX_LABEL_VALUE:
                raise LineError(f"label {key} has a value longer than {MAX_LABEL_VALUE} "
                                "characters, which no exporter writes")
            labels[key] = _unescape(p.group(2))
            pos = p.end()
            if line.startswith(",", pos):
                pos += 1
            elif not line.startswith("}", pos):
                raise LineError("labels are not separated by ',' or closed by '}'")
    t = _TAIL.fullmatch(line, pos)
    if t is None:
        raise LineError("the value is not one number, with at most a timestamp after it")
    return Sample(name, labels, float(t.group(1)), t.group(2))


# A sample line in its plain form, whole: no escape in a label value, each value at most
# MAX_LABEL_VALUE characters. Possessive throughout: a line costs one pass.
_PLAIN_PAIR = (r'[ \t]*+[a-zA-Z_][a-zA-Z0-9_]*+[ \t]*+=[ \t]*+"[^"\\\n]'
               rf'{{0,{MAX_LABEL_VALUE}}}+"[ \t]*+')
_PLAIN = re.compile(rf"([a-zA-Z_:][a-zA-Z0-9_:]*+)(?:[ \t]*+\{{((?:{_PLAIN_PAIR},)*+"
                    rf"(?:{_PLAIN_PAIR})?+[ \t]*+)\}})?+" + _TAIL.pattern)


def unread_sample(line: str) -> Sample | None:
    """``line`` checked as ``parse_sample`` checks it, its labels and value not read (the
    Sample has none, and 0): for a line no reader uses, whose fault is still said. None:
    not in the plain form (an escape in a label value...) or at fault: ``parse_sample``
    it. A page of lines of no GPU is read in a sixth of the time of their parse."""
    m = _PLAIN.fullmatch(line)
    if m is None:
        return None
    body = m.group(2)
    if body:
        # a value holds no quote here: the text between values is a key and its '='
        keys = [k.strip(" \t,=") for k in body.split('"')[0:-1:2]]
        if len(keys) > MAX_LABELS or len(set(keys)) < len(keys) or "__name__" in keys:
            return None
    return Sample(m.group(1), {}, 0.0, m.group(4))


def _meta(line: str, pattern: re.Pattern[str], keyword: str) -> tuple[str, str] | None:
    m = pattern.fullmatch(line)
    if m is None:
        return None
    rest = m.group(1) or ""
    n = _NAME.match(rest)
    if n is None or rest[n.end() : n.end() + 1] not in ("", " ", "\t"):
        raise LineError(f"no metric name after {keyword}")
    return n.group(0), rest[n.end() :].strip(" \t")


def parse_type(line: str) -> tuple[str, str] | None:
    """(name, type as written) of a ``# TYPE`` line (stripped); None: another comment.
    Whether the type is one of ``TYPES`` is the caller's to judge."""
    return _meta(line, _TYPE_LINE, "TYPE")


def parse_help(line: str) -> tuple[str, bool] | None:
    """(name, whether it gives a text) of a ``# HELP`` line (stripped); None: another
    comment. A HELP with no text gives none, as in expfmt: a later one is the first."""
    got = _meta(line, _HELP_LINE, "HELP")
    if got is None:
        return None
    name, text = got
    if not _HELP_TEXT.fullmatch(text):
        raise LineError(r"the HELP text has an escape other than \\ or \n")
    return name, bool(text)
