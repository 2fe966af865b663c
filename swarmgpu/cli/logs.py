"""Logging setup: loguru, readable on a terminal, JSON lines for journald/collectors."""

from __future__ import annotations

import logging
import re
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from loguru import logger

from swarmgpu.core.peertext import escaped, json_escaped

_TEXT = "<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> "


# loguru's colour tag with the backslashes before it: an odd count makes the tag literal,
# and each pair prints one backslash (loguru/_colorizer.py). It reads tags between
# braces only, so none holds one.
_TAG = re.compile(r"(\\*)(</?(?:[fb]g\s)?[^<>\s{}]*>)")
_TRAILING = re.compile(r"\\+\Z")


def _escape(text: str) -> str:
    """Literal text inside a loguru format, before a closing tag of ours: no field braces,
    no colour tags. Backslashes before a tag, and at the end (before ours), are doubled:
    else ``\\<red>`` opens the tag it seems to escape, and ``a\\`` escapes our tag."""
    text = _TAG.sub(lambda m: m.group(1) * 2 + "\\" + m.group(2), text)
    text = _TRAILING.sub(lambda m: m.group() * 2, text)
    return text.replace("{", "{{").replace("}", "}}")


def context_text(extra: dict[str, Any]) -> str:
    """A record's bound context as text: ``component=agent service=llm`` (a value with
    spaces quoted), or nothing when there is none. Control characters show escaped
    (``repr`` escapes them in a quoted value)."""
    parts = []
    for key, value in extra.items():
        v = str(value)
        parts.append(f"{key}={v!r}" if (not v or any(c.isspace() for c in v))
                     else f"{key}={escaped(v)}")
    return " ".join(parts)


def exception_text(exc: BaseException) -> str:
    """A traceback as text, each exception's message escaped onto its line (it may carry
    a tenant's label or an agent's error), the frames' lines each escaped; no frame's
    variables (loguru's ``diagnose`` printed them: a token in a local reached the log)."""
    te = traceback.TracebackException.from_exception(exc)
    messages: set[str] = set()
    todo: list[traceback.TracebackException | None] = [te]
    while todo:  # every exception of the chain: its own lines are its message
        t = todo.pop()
        if t is not None:
            messages.update(t.format_exception_only())
            todo += [t.__cause__, t.__context__]
    out = []
    for chunk in te.format():
        if chunk in messages:
            out.append(escaped(chunk.rstrip("\n")))
        else:
            out += [escaped(line) for line in chunk.rstrip("\n").split("\n")]
    return "\n".join(out) + "\n"


def _text_format(record: Any) -> str:
    # Messages carry service names, labels and agents' errors: a newline would forge a
    # log line, an escape sequence rewrite the terminal. They show escaped, one line;
    # so does each exception's message in a traceback.
    ctx = context_text(record["extra"])
    exc = record["exception"]
    trace = exception_text(exc.value) if exc is not None and exc.value is not None else ""
    return _TEXT + (f"<cyan>{_escape(ctx)}</cyan> " if ctx else "") + \
        f"<level>{_escape(escaped(record['message']))}</level>\n{_escape(trace)}"


def _json_sink(stream: TextIO) -> Callable[[str], None]:
    """Writes loguru's JSON lines to ``stream`` with no raw control or format character:
    its json.dumps has ensure_ascii=False, which escapes C0 controls only (a C1 CSI, a
    bidi override or a line separator from a label reached journalctl and the terminal
    as itself; a lone surrogate from an agent's JSON lost the record)."""

    def write(message: str) -> None:
        stream.write(json_escaped(message.rstrip("\n")) + "\n")
        stream.flush()

    return write


class _ThreadDeaths:
    """``threading.excepthook``: a thread ended by an exception, said as the service's
    error. The default hook printed it to stderr alone, raw text beside the JSON lines
    (stop 82's follow-up timers died so, a ``TypeError`` each, unseen). A hook set
    before (a test runner's) is still called: each install carries its own."""

    def __init__(self, chained: Callable[[threading.ExceptHookArgs], object] | None) -> None:
        self.chained = chained

    def __call__(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread is not None else "?"
            logger.opt(exception=(args.exc_type, args.exc_value, args.exc_traceback)).error(
                "thread {} ended by an unexpected error, a fault of swarmgpu (please report "
                "it with the traceback): what it ran stops until a restart", name)
        if self.chained is not None:
            self.chained(args)


def _hook_threads() -> None:
    prev = threading.excepthook
    if not isinstance(prev, _ThreadDeaths):
        threading.excepthook = _ThreadDeaths(None if prev is threading.__excepthook__
                                             else prev)


class _FromLogging(logging.Handler):
    """The standard library's log through loguru, at WARNING and above: APScheduler's
    job errors, ``concurrent.futures``' "exception calling callback" (a done callback
    that raised), urllib3's warnings. Python's last-resort handler printed them to
    stderr, raw text beside the JSON lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(exception=record.exc_info).bind(source=record.name).log(
            level, "{}", record.getMessage())


def _hook_stdlib() -> None:
    root = logging.getLogger()
    if not any(isinstance(h, _FromLogging) for h in root.handlers):
        root.addHandler(_FromLogging(logging.WARNING))
    root.setLevel(min(root.level or logging.WARNING, logging.WARNING))


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    # An event-triggered cycle that meets a running one is coalesced on purpose; the
    # scheduler's "skipped: maximum number of running instances" is not news.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    logger.remove()
    if fmt == "json":
        logger.add(_json_sink(sys.stderr), level=level.upper(), serialize=True, diagnose=False)
    else:
        # No diagnose: the traceback is exception_text's (escaped, no variables).
        logger.add(sys.stderr, level=level.upper(), format=_text_format, diagnose=False)
    _hook_threads()
    _hook_stdlib()
