"""Log lines in text format read as text: bound context as key=value, never a dict."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from loguru import logger

from swarmgpu.cli.logs import context_text, setup_logging


@pytest.fixture(autouse=True)
def _restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # (set_logging's)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    yield None
    logger.remove()
    logger.add(sys.stderr)


def test_text_lines_have_no_raw_dict(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "text")
    logger.bind(component="agent").info("agent serving {} on {}", "nvml", "http://x:9401")
    logger.bind(service="my llm", task="t.1").warning("pending: needs {} GPU", 1)
    logger.info("no context <b>{}</b>", "{not a field}")
    err = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO    component=agent agent serving nvml on "
                        r"http://x:9401", err[0]), err[0]
    assert err[1].endswith("WARNING service='my llm' task=t.1 pending: needs 1 GPU"), err[1]
    assert err[2].endswith("INFO    no context <b>{not a field}</b>"), err[2]
    assert not any("{'" in ln or "{}" in ln for ln in err), err


def test_braces_and_tags_in_context_are_literal(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "text")
    logger.bind(service="a{b}<red>c").info("x")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("INFO    service=a{b}<red>c x"), line


def test_exceptions_still_print(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "text")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.bind(component="agent").exception("request failed")
    err = capsys.readouterr().err
    assert "component=agent request failed" in err and "RuntimeError: boom" in err


def test_json_format_keeps_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "json")
    logger.bind(component="agent").info("hello")
    rec = json.loads(capsys.readouterr().err)
    assert rec["record"]["extra"] == {"component": "agent"}


def test_context_text() -> None:
    assert context_text({}) == ""
    assert context_text({"a": 1, "b": "x y", "c": ""}) == "a=1 b='x y' c=''"


HOSTILE = "web\x1b[2J\r12:00:00 INFO    all GPUs OK\nforged\u202e"


def test_control_characters_in_a_message_or_its_context_show_escaped(
        capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "text")
    logger.bind(service=HOSTILE, task="t\x1b[8m\u202e1").warning("service {} pending", HOSTILE)
    err = capsys.readouterr().err
    (line,) = err.splitlines()  # one record, one line: nothing forged after it
    assert not any(c in err for c in "\x1b\r\u202e"), err
    shown = r"web\x1b[2J\r12:00:00 INFO    all GPUs OK\nforged\u202e"
    assert line.endswith(f"WARNING service='{shown}' task=t\\x1b[8m\\u202e1 service {shown} "
                         "pending"), line


def test_backslashes_before_a_tag_in_a_message_or_context_stay_literal(
        capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "text")
    logger.bind(service="a\\<red>b\\\\</level>").info("m \\<b>x\\\\</level> {}", "\\\\<red>")
    (line,) = capsys.readouterr().err.splitlines()  # not "Logging error in Loguru Handler"
    assert line.endswith("INFO    service=a\\<red>b\\\\</level> m \\<b>x\\\\</level> "
                         "\\\\<red>"), line


def test_an_exceptions_text_shows_escaped_and_no_variables(
        capsys: pytest.CaptureFixture[str]) -> None:
    # loguru printed a traceback raw (an exception's message carrying a tenant's label
    # rewrote the terminal) and, with its default diagnose, each frame's variables: a
    # token in a local reached the log.
    setup_logging("INFO", "text")
    token = "s3cret-token-value"
    try:
        raise ValueError(f"label {HOSTILE} for {len(token)}")
    except ValueError:
        logger.exception("cycle failed")
    err = capsys.readouterr().err
    assert not any(c in err for c in "\x1b\r\u202e"), err
    assert "Traceback (most recent call last):" in err and "cycle failed" in err
    assert "ValueError: label web\\x1b[2J\\r12:00:00 INFO    all GPUs OK\\nforged\\u202e" in err
    assert token not in err  # no frame's variables
    assert not re.search(r"^forged", err, re.M)  # the newline inside it forged no line


def test_json_lines_carry_no_raw_c1_control_or_bidi_mark(
        capsys: pytest.CaptureFixture[str]) -> None:
    # loguru's serialize writes json.dumps(..., ensure_ascii=False): C0 controls come out
    # escaped, but a C1 CSI (U+009B: "ESC [" in one character), DEL, a bidi override and
    # a line separator came out raw, to journalctl and `docker service logs` on a terminal.
    setup_logging("INFO", "json")
    hostile = "web\x9b2J\x7f\u202e\u2028\u200b\U000e0041\ud800"
    logger.bind(service=hostile).warning("service {} pending", hostile)
    err = capsys.readouterr().err
    assert err.endswith("}\n") and err[:-1].isprintable(), err  # one line, nothing hidden
    rec = json.loads(err)  # still the same values, decoded
    assert rec["record"]["message"] == f"service {hostile} pending"
    assert rec["record"]["extra"] == {"service": hostile}
    assert "\\u009b2J" in err and "\\u202e" in err


def test_json_lines_keep_printable_non_ascii_as_it_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "json")
    logger.info("node {} GPU {}", "nœud-é", "H100 — 80GB")
    err = capsys.readouterr().err
    assert "nœud-é" in err and "H100 — 80GB" in err
    assert json.loads(err)["record"]["message"] == "node nœud-é GPU H100 — 80GB"


def test_a_thread_that_dies_is_said_in_the_log(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread ended by an exception (stop 82's follow-up timers: a ``TypeError`` each)
    printed its traceback to stderr alone: raw text beside the JSON lines, in no log
    line a collector reads. Said as the service's own error now."""
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # (a process's)
    setup_logging("INFO", "json")

    def run() -> None:
        raise TypeError("trigger() missing 1 required positional argument: 'why'")

    t = threading.Thread(target=run, name="follow-up")
    t.start()
    t.join()
    rec = json.loads(capsys.readouterr().err)  # one JSON line: nothing raw beside it
    assert rec["record"]["level"]["name"] == "ERROR"
    assert rec["record"]["message"].startswith("thread follow-up ended by an unexpected error")
    assert rec["record"]["exception"]["type"] == "TypeError"


def test_another_hook_on_threads_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hook set before (a test runner's) still hears each thread's end."""
    heard: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: heard.append(str(a.exc_value)))
    setup_logging("INFO", "text")
    setup_logging("INFO", "text")  # (twice: chained once)
    t = threading.Thread(target=lambda: 1 / 0)
    t.start()
    t.join()
    assert heard == ["division by zero"]


def test_a_done_callback_that_raised_is_said_in_the_log(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``concurrent.futures`` says a done callback that raised through the standard
    library's log, which had no handler: Python's last resort printed it raw to stderr
    (under pytest, its own capture took it). Said as the service's own error now."""
    setup_logging("INFO", "json")

    def keep(_f: Future[int]) -> None:
        raise TypeError("keep() takes 2 positional arguments but 1 was given")

    fut: Future[int] = Future()
    fut.add_done_callback(keep)
    fut.set_result(1)
    rec = json.loads(capsys.readouterr().err)  # one JSON line: nothing raw beside it
    assert rec["record"]["level"]["name"] == "ERROR"
    assert rec["record"]["message"].startswith("exception calling callback for")
    assert rec["record"]["extra"] == {"source": "concurrent.futures"}
    assert rec["record"]["exception"]["type"] == "TypeError"
