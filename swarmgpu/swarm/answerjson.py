"""The daemon's own reads of the engine decoded strictly: no key twice in one object.

docker-py decodes every JSON answer with ``Response.json()`` (``APIClient._result``),
the standard library's, which keeps the last of two repeated keys silently: a task
``{"NodeID": "a", "NodeID": "b"}`` from a proxy in front of the engine (or a forged
answer) was read as on node b, where another reader of the same text may see a.
``strict_results`` makes a client's ``_result`` refuse such an answer
(``RepeatedAnswer``: the key, and the text to find the object by). A node, service or
task list, and an inspect of a node or service, is read entry by entry
(``read_entries``): the entry with the repeated key is marked (``Repeated``) and its
reader fails it (a node or service alone, unread; a task list whole, as for a task it
cannot read); every other answer is refused whole. Each answer not streamed is read to
``MAX_ANSWER_BYTES`` at most (``AnswerTooLarge``): docker-py read it whole, unbounded;
and within ``ANSWER_DEADLINE_TIMEOUTS`` times its client's timeout (``AnswerTooSlow``):
docker-py's timeout bounds each read of the socket, not the answer, so one sent a byte
at a time, each within it, held its reader (the daemon's cycle) without end. The same
deadline bounds the whole request, from its connection taken to its body read (a
request streamed, to its headers): a timer shuts its socket down past it
(``_Clock``), so a read blocked on headers sent a byte at a time returns, as
``AnswerTooSlow``; http.client bounds their size only. Within a ``CycleBudget``
(``within_budget``: the daemon's cycle) each read's deadline is cut to what is left of
it too, and none is sent past it (``BudgetSpent``); a write's own requests, never
refused, to what is left of it and its slack (``WriteCut``).
A client is made by ``strict_api``, so the API version it asks as it is made is too.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import heapq
import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from requests.exceptions import ReadTimeout

from swarmgpu.core.jsonkeys import RepeatedKey, unique_keys
from swarmgpu.core.peertext import quoted

REPEATED_FIX = "check the proxy in front of the engine (Docker names each key once)"
# The most of one answer read (docker-py holds it whole to decode it): a 5,000-task list
# is some 8 MiB, its decode several times that: past this no engine answer is usable.
# The manager's config sets its own (engine.max_answer_mib; core.engineconfig).
MAX_ANSWER_BYTES = 512 * 1024 * 1024
# The longest one request takes, headers and body, in its client's timeouts: the
# daemon's (30 s) then refuses a slow one within 60 s (its socket shut down then), inside
# the cycle's 90 s that systemd's watchdog allows (docs/systemd.md). A whole 5,000-task list
# takes well under a second from an engine that answers at all.
ANSWER_DEADLINE_TIMEOUTS = 2.0
# The least a write's own request gets past its cycle's budget (``CycleBudget.
# write_left``): a sound engine's round trip is some 25 ms, and a write past the budget
# (the over-share restart's reopened gate) still goes out.
WRITE_FLOOR_S = 5.0
NO_TIMEOUT_DEADLINE_S = 120.0  # (a client made without a timeout: docker-py sets 60 s)
_CHUNK = 64 * 1024  # (read in pieces: 1 MiB ones measured no faster, benchmarks/)
_SPACE = re.compile(r"[ \t\n\r]*")
_STRICT = json.JSONDecoder(object_pairs_hook=unique_keys)


class RepeatedAnswer(ValueError):
    """An engine answer that names ``key`` twice in one object; ``text``: the answer."""

    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"the engine's answer names {quoted(key, 80)} twice in one object "
                         f"(which one is meant cannot be told): it is not read; {REPEATED_FIX}")
        self.key, self.text = key, text


class AnswerTooLarge(ValueError):
    """An engine answer past ``limit`` bytes, refused before it is read whole.
    ``configured``: the limit is the manager's config's (engine.max_answer_mib), so the
    fix names it; doctor's and the agent's is not, and raising it changes nothing there."""

    def __init__(self, what: str, limit: int, configured: bool = False) -> None:
        setting = " or raise the manager's engine.max_answer_mib in its config" \
            if configured else ""
        super().__init__(
            f"the engine's answer to {what} is over {limit // (1024 * 1024)} MiB, the most "
            "swarmgpu reads of one answer: it is not read; check the proxy in front of the "
            "engine (one that answers without end), or, where the swarm keeps this much, "
            f"lower its task history (docker swarm update --task-history-limit 2){setting}")
        self.limit = limit


class AnswerTooSlow(ReadTimeout):
    """An engine answer not read whole within ``deadline_s`` (its bytes came slowly, each
    within the socket's timeout), refused with its rest unread. A timeout, as requests'
    own: its reader takes the engine as unreachable this time."""

    def __init__(self, what: str, deadline_s: float, got: int | None) -> None:
        came = (f"{got} bytes came" if got is not None else
                "its headers did not come whole")  # (None: the request cut before its body)
        super().__init__(
            f"the engine's answer to {what} was not read whole within {deadline_s:g} s "
            f"({came}, each within the client's timeout): it is not read; check "
            "the proxy in front of the engine (one that sends slowly), or the link to it")
        self.deadline_s = deadline_s


class CycleBudget:
    """The time one daemon cycle may take, ``budget_s`` from its start, so that systemd's
    watchdog ping after it comes in time (manager.cycle.budget): within it
    (``within_budget``) each read of the engine gets the less of its own deadline and
    what is left, and none is sent once it has passed. A write's own requests (its
    reads and its post, never refused midway) get the less of their own deadline and
    ``write_left``: what is left of it and ``slack_s``. ``cut``: the first read refused
    so (its method and path), else None; ``write_cut``: the first write's request its
    slack cut (``cut_write``), else None."""

    def __init__(self, budget_s: float, slack_s: float = 0.0) -> None:
        self.budget_s, self.start = budget_s, time.monotonic()
        self.slack_s = slack_s
        self.cut: str | None = None
        self.write_cut: str | None = None

    def left(self) -> float:
        return self.start + self.budget_s - time.monotonic()

    def write_left(self) -> float:
        """What a write's own request may take: what is left of the budget and its
        slack, ``WRITE_FLOOR_S`` at least (one past the budget still gets a round trip),
        but never past the budget, its slack and one floor from the start (the
        watchdog's line, manager.cycle.budget.engine_budget_s; 0 or less there: not
        sent). Each request given the floor anew, a write's ten (its read and post, five
        tries on a conflict) could each run it past the line."""
        left = self.left() + self.slack_s
        return min(max(left, WRITE_FLOOR_S), left + WRITE_FLOOR_S)

    def took_s(self) -> float:
        return time.monotonic() - self.start

    def passed(self) -> bool:
        return self.cut is not None or self.left() <= 0

    def spent(self, what: str) -> BudgetSpent:
        """The refusal of the read ``what``, the first one noted as ``cut``."""
        if self.cut is None:
            self.cut = what
        return BudgetSpent(what, self)

    def cut_write(self, what: str, deadline_s: float) -> WriteCut:
        """The ``WriteCut`` of the write's request ``what``, the first one noted as
        ``write_cut``: noted here, not where it is caught, so that the cycle ends at its
        budget even when the step that made the write caught its failure and went on."""
        if self.write_cut is None:
            self.write_cut = what
        return WriteCut(what, self, deadline_s)


class WriteCut(AnswerTooSlow):
    """A write's own request (its read or its post) not answered within what was left of
    its cycle's budget and slack (``CycleBudget.write_left``): a timeout, as
    ``AnswerTooSlow``, the write's outcome unknown (the next cycle reads it afresh).
    ``deadline_s`` 0: not sent, nothing left to the watchdog's line (``write_left``)."""

    def __init__(self, what: str, budget: CycleBudget, deadline_s: float) -> None:
        done = ("the write may or may not have been made" if deadline_s > 0 else
                "that request was not sent")
        ReadTimeout.__init__(
            self, f"the engine's answer to {what}, a write's, was not read within "
            f"{deadline_s:.1f} s, what was left of the cycle's engine budget of "
            f"{budget.budget_s:g} s and the {budget.slack_s:g} s kept past it for the "
            f"writes in flight ({budget.took_s():.1f} s taken; {WRITE_FLOOR_S:g} s at "
            f"least, none past the three), so that the watchdog's ping comes in time: "
            f"{done} (the next cycle reads it afresh); check the engine (is "
            "`docker info` slow?) and the proxy in front of it")
        self.what, self.deadline_s = what, deadline_s


class BudgetSpent(AnswerTooSlow):
    """A read of the engine cut at its cycle's budget, or not sent past it: a timeout, as
    ``AnswerTooSlow``, that swarmgpu's client raises as ``BudgetCut`` (no object's fault,
    not an unreachable engine); the daemon ends the cycle there."""

    def __init__(self, what: str, budget: CycleBudget) -> None:
        ReadTimeout.__init__(
            self, f"the engine's answer to {what} was not read: the cycle's engine budget "
            f"of {budget.budget_s:g} s has passed ({budget.took_s():.1f} s taken); check "
            "the engine (is `docker info` slow?) and the proxy in front of it")
        self.deadline_s = budget.budget_s


def budget_cut(exc: BaseException) -> bool:
    """Whether ``exc``, or what it was raised from, is a read refused at its cycle's
    budget (``BudgetSpent``): it says nothing of what was asked, so no reader keeps it
    past the cycle (as an image's env is kept: manager.cycle.grants)."""
    at: BaseException | None = exc
    while at is not None:
        if isinstance(at, BudgetSpent):
            return True
        at = at.__cause__
    return False


def write_cut(exc: BaseException | None) -> WriteCut | None:
    """``exc``, or what it was raised from, where it is a write's request cut at its
    cycle's slack (``WriteCut``): the budget ended the cycle in that write (the client
    raises it as unreachable, which the daemon would take for the engine's fault)."""
    at = exc
    while at is not None:
        if isinstance(at, WriteCut):
            return at
        at = at.__cause__
    return None


# The budget of the cycle this thread runs (a write's thread takes its cycle's along:
# manager.engine.writes); None outside one, as for plan, status and audit.
_BUDGET: contextvars.ContextVar[CycleBudget | None] = contextvars.ContextVar(
    "swarmgpu_cycle_budget", default=None)
# The budget of the cycle whose write this thread makes (``outside_budget``): it bounds
# the write's own requests by what is left of it and its slack (``write_left``).
_WRITING: contextvars.ContextVar[CycleBudget | None] = contextvars.ContextVar(
    "swarmgpu_write_budget", default=None)


@contextlib.contextmanager
def within_budget(budget: CycleBudget) -> Iterator[CycleBudget]:
    """Within: every request this thread (or one run in its context) sends is bounded by
    ``budget`` too (``deadline_requests``)."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def read_deadline(own_s: float) -> float:
    """A node's read's deadline (an agent's facts, a metrics page: no engine request):
    ``own_s``, or what is left of this thread's cycle's budget where that is less (0
    once it has passed), so that reads in parallel end by it too."""
    budget = _BUDGET.get()
    return own_s if budget is None else max(min(own_s, budget.left()), 0.0)


def node_read_cut(what: str, deadline_s: float, own_s: float) -> BudgetSpent | None:
    """After a node's read of ``deadline_s`` (``read_deadline``) timed out: its refusal,
    noted as the budget's ``cut``, where that deadline was the budget's, less than
    ``own_s``, and the budget has passed (no node's fault); else None (its own)."""
    budget = _BUDGET.get()
    if budget is None or deadline_s >= own_s or not budget.passed():
        return None
    return budget.spent(what)


def node_reads_passed(what: str) -> BudgetSpent | None:
    """Before a node's read: its refusal (noted as ``cut``) once this thread's cycle's
    budget has passed, else None."""
    budget = _BUDGET.get()
    return budget.spent(what) if budget is not None and budget.passed() else None


def budgeted() -> bool:
    """Whether this thread runs within a cycle's budget (``within_budget``), not outside
    one (``outside_budget``, or no cycle's thread)."""
    return _BUDGET.get() is not None


@contextlib.contextmanager
def outside_budget() -> Iterator[None]:
    """Within: a write's own requests (read-modify-write), once the write gate let it
    through: none refused at the budget, so a write in flight is never cut midway
    (manager.cycle.budget), but each bounded by what is left of it and its slack
    (``CycleBudget.write_left``: past it, ``WriteCut``), so that a slow engine holds the
    cycle no longer than the watchdog allows."""
    budget = _BUDGET.get()
    token = _BUDGET.set(None)
    writing = _WRITING.set(budget if budget is not None else _WRITING.get())
    try:
        yield
    finally:
        _WRITING.reset(writing)
        _BUDGET.reset(token)


class Repeated(dict[str, Any]):
    """A list's entry that names a key twice in one object, decoded as ``json`` would (the
    last one kept): ``why`` says which key and the fix. Its reader fails it alone."""

    why: str = ""
    id_twice = False  # its own ID named twice: it has none (``unkeyed`` says so)


def strict_results(api: Any, max_bytes: int | None = None) -> None:
    """Make ``api`` (docker-py's ``APIClient``) decode its JSON answers refusing an object
    that names a key twice (``RepeatedAnswer``), and read each answer not streamed to at
    most ``max_bytes`` (None: ``MAX_ANSWER_BYTES``; ``AnswerTooLarge``) within its
    deadline (``AnswerTooSlow``), each request, headers included, within that deadline
    too (``deadline_requests``); its other answers as they were."""
    deadline_requests(api)
    api.hooks["response"].append(functools.partial(_bounded, limit=max_bytes))
    plain = api._result

    def result(response: Any, json: bool = False, binary: bool = False) -> Any:
        if not json:
            return plain(response, json=json, binary=binary)
        api._raise_for_status(response)
        try:
            return response.json(object_pairs_hook=unique_keys)
        except RepeatedKey as exc:
            raise RepeatedAnswer(exc.key, response.text) from None

    api._result = result


def strict_api(make: Callable[..., Any], max_bytes: int | None = None) -> Any:
    """docker-py's ``APIClient`` ``make(version=...)`` builds, with ``strict_results``
    (``max_bytes`` the most of one answer),
    its API version then asked of the engine as docker-py asks it (``version="auto"``).
    docker-py asks it in the client's constructor, before any hook: that answer was read
    whole, unbounded, and decoded loosely. Why it cannot be read is docker-py's
    ``DockerException`` as before (its cause the ``AnswerTooLarge`` or ``RepeatedAnswer``)."""
    from docker.constants import MINIMUM_DOCKER_API_VERSION
    from docker.errors import DockerException
    from docker.utils import version_lt

    api = make(version=MINIMUM_DOCKER_API_VERSION)  # (a fixed one: nothing asked yet)
    strict_results(api, max_bytes)
    try:
        answer = api.version(api_version=False)
        version = answer["ApiVersion"]
        old = version_lt(version, MINIMUM_DOCKER_API_VERSION)  # (raises: no "1.43" text)
    except Exception as exc:  # (as docker-py's _retrieve_server_version says it)
        raise DockerException(f"Error while fetching server API version: {exc}") from exc
    if old:
        raise DockerException(f"the engine's API version {quoted(version, 40)} is not one "
                              f"docker-py reads (at least {MINIMUM_DOCKER_API_VERSION}): "
                              "upgrade Docker on that node")
    api._version = version
    # (its release, for swarm.engineskew: "" where not text)
    api.engine_version = v if isinstance(v := answer.get("Version"), str) else ""
    return api


def _bounded(response: Any, stream: bool | None = None, timeout: Any = None, *,
             limit: int | None = None, **_: Any) -> None:
    """requests' response hook: the body of ``response`` read as requests would read it
    (``Response.content``, after the hooks) unless streamed, but only up to ``limit``
    bytes (None: ``MAX_ANSWER_BYTES``, read now; ``AnswerTooLarge``) and within
    ``deadline_s(timeout)`` of its request's start (``AnswerTooSlow``); past either the
    connection is closed (its rest unread) and the error raised. The request's timer
    cuts a read blocked past the deadline (``_Clock``); between chunks it is checked here
    too. A streamed answer (events, logs) its reader bounds: its timer stops at its
    headers."""
    clock: _Clock | None = getattr(_NOW, "clock", None)
    if stream and clock is not None:
        clock.cancel()  # (its send refuses it if cut before: ``deadline_requests``)
    if stream or response._content is not False:  # (read already: a test's stand-in)
        return
    configured = limit is not None  # (the manager's config's: its fix names it)
    limit = MAX_ANSWER_BYTES if limit is None else limit
    got, size = [], 0
    deadline_s = clock.deadline_s if clock is not None else answer_deadline_s(timeout)
    end = clock.end if clock is not None else time.monotonic() + deadline_s
    what = f"{response.request.method} {_path(response.url)}"
    if clock is not None and clock.fired:  # (its headers cut short: taken for whole)
        response.close()
        raise AnswerTooSlow(what, deadline_s, None)
    try:
        for chunk in response.iter_content(_CHUNK):
            got.append(chunk)
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(what, limit, configured)
            if time.monotonic() > end:
                raise AnswerTooSlow(what, deadline_s, size)
    except Exception as exc:
        response.close()
        if clock is not None and clock.fired and not isinstance(exc, AnswerTooSlow):
            raise AnswerTooSlow(what, deadline_s, size) from exc
        raise
    if clock is not None and clock.fired:  # (cut, its end then taken for the body's)
        response.close()
        raise AnswerTooSlow(what, deadline_s, size)
    response._content = b"".join(got)


# A request's timer, shared with its response hook and its pool's connection taken.
_NOW = threading.local()
_RETRY_S = 0.05  # (a timer past its deadline before the socket is made: it waits so)


class _Timers:
    """One thread that fires every request's ``_Clock`` at its time: a
    ``threading.Timer`` per request (a thread started each) cost some 1 ms a request
    (benchmarks/bench_request_deadline.py). A cancelled clock stays queued till its time,
    then does nothing."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, _Clock]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, at: float, clock: _Clock) -> None:
        with self._cond:
            heapq.heappush(self._queue, (at, next(self._order), clock))
            if self._thread is None or not self._thread.is_alive():  # (none yet, or forked)
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="swarmgpu-answer-deadline")
                self._thread.start()
            elif self._queue[0][2] is clock:  # (sooner than the one it waits for)
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue or self._queue[0][0] > time.monotonic():
                    self._cond.wait(self._queue[0][0] - time.monotonic()
                                    if self._queue else None)
                clock = heapq.heappop(self._queue)[2]
            clock.fire()


class _Clock:
    """One request's deadline, ``deadline_s`` from now (``end``): past it the socket of
    the connection it took (``conn``, set as the pool hands it over) is shut down, so a
    read blocked on it returns at once, and ``fired`` is set. ``cancel`` stops it.
    ``budget``: the cycle's, where what was left of it set the deadline (``write``: of
    a write's request, its slack included)."""

    def __init__(self, deadline_s: float, budget: CycleBudget | None = None,
                 write: bool = False) -> None:
        self.deadline_s, self.end = deadline_s, time.monotonic() + deadline_s
        self.budget, self.write = budget, write
        self.conn: Any = None
        self.fired = False
        self._lock = threading.Lock()
        self._live = True
        _TIMERS.add(self.end, self)

    def fire(self) -> None:
        with self._lock:
            if not self._live:  # (cancelled: its request returned)
                return
            sock = getattr(self.conn, "sock", None)
            if sock is None:  # (still connecting: that one step its timeout bounds)
                _TIMERS.add(time.monotonic() + _RETRY_S, self)
                return
            self.fired = True
            _shut(sock)

    def cancel(self) -> None:
        with self._lock:
            self._live = False
            if not self.fired:  # (queued till its time: hold no socket; a cut one's
                self.conn = None  # its send closes)

    def released(self, conn: Any) -> None:
        """``conn`` goes back to its pool, its answer read (or failed): stop, so a late
        fire never shuts the socket of another request that takes it next (one cut
        already is closed, not handed out open)."""
        with self._lock:
            if conn is None or conn is not self.conn:
                return
            if self.fired:
                conn.close()
            self._live, self.conn = False, None


_TIMERS = _Timers()


def _shut(sock: Any) -> None:
    """Shut ``sock`` down both ways: a read blocked on it in another thread returns (a
    close would not wake it). docker-py's ssh socket run through the ssh command is no
    connected socket: closed instead, which ends that command and so its reads."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        with contextlib.suppress(OSError):
            sock.close()


def deadline_requests(api: Any) -> None:
    """Bound each request ``api`` (docker-py's ``APIClient``, a requests ``Session``)
    sends by ``answer_deadline_s`` of its timeout: from its connection taken to its body
    read by ``_bounded`` (a streamed one, to its headers). Past it the connection's
    socket is shut down (``_Clock``) and the request fails as ``AnswerTooSlow``; that
    connection is closed, not used again. For every adapter docker-py mounts (tcp, tls,
    unix socket, ssh): each pool it hands out records the connection taken."""
    for adapter in api.adapters.values():
        _record_connections(adapter)
    plain = api.send

    def send(request: Any, **kwargs: Any) -> Any:
        clock = _Clock(*_deadline(request, kwargs))
        outer, _NOW.clock = getattr(_NOW, "clock", None), clock
        try:
            response = plain(request, **kwargs)
        except Exception as exc:
            slow = isinstance(exc, AnswerTooSlow)  # (its body's: the budget's if it set it)
            if (slow and clock.budget is None) or (not slow and not clock.fired):
                raise
            _cut(clock, request, exc)
        finally:
            clock.cancel()
            _NOW.clock = outer
        if clock.fired:  # (http.client takes headers cut short for whole: none missed)
            response.close()
            _cut(clock, request, None)
        return response

    api.send = send


def _deadline(request: Any,
              kwargs: dict[str, Any]) -> tuple[float, CycleBudget | None, bool]:
    """The deadline of ``request`` (sent with requests' ``kwargs``), the budget when what
    is left of it is the shorter, and whether it is a write's. A read within one gets
    what is left (``BudgetSpent`` where it has passed: not sent); a write's request (a
    post, or a read ``outside_budget``) is never refused, the daemon's write gate stops
    writes between two, but gets what is left with the slack (``write_left``). A stream
    its reader bounds."""
    deadline_s = answer_deadline_s(kwargs.get("timeout"))
    budget = _BUDGET.get()
    if kwargs.get("stream"):
        return deadline_s, None, False
    if budget is not None and request.method == "GET":
        if budget.passed():
            raise budget.spent(f"{request.method} {_path(request.url)}")
        left = budget.left()
        return (left, budget, False) if left < deadline_s else (deadline_s, None, False)
    writing = budget if budget is not None else _WRITING.get()
    if writing is None:
        return deadline_s, None, False
    left = writing.write_left()
    if left <= 0:  # (past the floor's line: the watchdog's ping is due)
        raise writing.cut_write(f"{request.method} {_path(request.url)}", 0.0)
    return (left, writing, True) if left < deadline_s else (deadline_s, None, False)


def _cut(clock: _Clock, request: Any, exc: Exception | None) -> NoReturn:
    """Raise ``AnswerTooSlow`` for ``request``, its headers cut past ``clock``'s deadline
    (``exc``: how its read ended), its connection closed; ``BudgetSpent`` where its
    cycle's budget set that deadline, ``WriteCut`` where a write's slack did."""
    if clock.conn is not None:
        clock.conn.close()  # (urllib3 closes it on an error too: never used again)
    if clock.budget is not None and clock.write:
        raise clock.budget.cut_write(f"{request.method} {_path(request.url)}",
                                     clock.deadline_s) from exc
    if clock.budget is not None:
        raise clock.budget.spent(f"{request.method} {_path(request.url)}") from exc
    raise AnswerTooSlow(f"{request.method} {_path(request.url)}", clock.deadline_s,
                        None) from exc


def _record_connections(adapter: Any) -> None:
    """Have each pool ``adapter`` (requests' ``HTTPAdapter`` or docker-py's) hands out
    record on the request's ``_Clock`` the connection it takes (urllib3 takes it,
    connects it and reads the answer in the request's own thread)."""
    plain = adapter.get_connection_with_tls_context

    def get(request: Any, verify: Any, proxies: Any = None, cert: Any = None) -> Any:
        pool = plain(request, verify, proxies=proxies, cert=cert)
        if not getattr(pool, "_swarmgpu_records", False):
            _record_taken(pool)
        return pool

    adapter.get_connection_with_tls_context = get


def _record_taken(pool: Any) -> None:
    """Wrap urllib3 ``pool``'s ``_get_conn`` to record the connection on the clock, and
    its ``_put_conn`` to stop that clock as the connection goes back."""
    take, put = pool._get_conn, pool._put_conn

    def taken(*args: Any, **kwargs: Any) -> Any:
        conn = take(*args, **kwargs)
        clock: _Clock | None = getattr(_NOW, "clock", None)
        if clock is not None:
            clock.conn = conn
        return conn

    def back(conn: Any) -> None:
        clock: _Clock | None = getattr(_NOW, "clock", None)
        if clock is not None:
            clock.released(conn)
        put(conn)

    pool._get_conn = taken
    pool._put_conn = back
    pool._swarmgpu_records = True


def answer_deadline_s(timeout: Any) -> float:
    """How long one answer's body may take to read, for a request made with requests'
    ``timeout`` (seconds, a (connect, read) pair, or None)."""
    read = timeout[1] if isinstance(timeout, tuple) else timeout
    if not isinstance(read, int | float):  # (None, or urllib3's Timeout: none of ours)
        return NO_TIMEOUT_DEADLINE_S
    return ANSWER_DEADLINE_TIMEOUTS * float(read)


def _path(url: str) -> str:
    """The path of ``url``, its API version left out (/v1.43/tasks: /tasks)."""
    path = url.split("://", 1)[-1].partition("/")[2].partition("?")[0]
    return "/" + re.sub(r"^v[0-9.]+/", "", path)


def read_entries(kind: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a read of the engine's ``kind`` ("node", "service",
    "task"): a list, or one object (an inspect). An answer that names a key twice is read
    entry by entry (``entries``), so only the entry that does is a ``Repeated``."""
    try:
        return fn(*args, **kwargs)
    except RepeatedAnswer as exc:
        return entries(exc, kind)


def entries(exc: RepeatedAnswer, kind: str) -> Any:
    """The engine's answer ``exc.text`` of ``kind``: a list's entries each decoded apart,
    the one that names a key twice a ``Repeated``; one object (an inspect) a
    ``Repeated``. An answer that is neither, or is no JSON past that key (cut short, a
    comma missing, more after its end), is refused (``exc``): read entry by entry, a cut
    list was a shorter one, its missing entries taken for gone."""
    text = exc.text
    at = _skip(text, 0)
    try:
        if text[at:at + 1] == "{":
            out, end = _repeated(text, at, exc.key, f"{kind} {{}}")
        elif text[at:at + 1] == "[":
            out, end = _list(text, at, exc, kind)
        else:
            raise exc
    except (ValueError, RecursionError):  # (RecursionError: nested too deep)
        raise exc from None
    if _skip(text, end) != len(text):
        raise exc
    return out


def _list(text: str, at: int, exc: RepeatedAnswer, kind: str) -> tuple[list[Any], int]:
    """The list opening at ``at`` of ``text``, each entry decoded apart (``entries``),
    and where it ends; ``exc`` where it is no JSON list."""
    out: list[Any] = []
    at = _skip(text, at + 1)
    if text[at:at + 1] == "]":
        return out, at + 1
    while True:
        try:
            value, end = _STRICT.raw_decode(text, at)
        except RepeatedKey as one:
            value, end = _repeated(text, at, one.key, f"{kind} {len(out) + 1} {{}} of the list")
        out.append(value)
        at = _skip(text, end)
        if text[at:at + 1] == "]":
            return out, at + 1
        if text[at:at + 1] != ",":
            raise exc
        at = _skip(text, at + 1)


def _skip(text: str, at: int) -> int:
    """Where the JSON whitespace from ``at`` ends."""
    return _SPACE.match(text, at).end()  # type: ignore[union-attr]  # (matches "" at worst)


def _repeated(text: str, at: int, key: str, where: str) -> tuple[Any, int]:
    """The value at ``at`` of ``text``, which names ``key`` twice, as a ``Repeated``, and
    where it ends; ``where``: which entry, ``{}`` for its ID. One that names its own
    ``ID`` twice has none (it cannot be keyed: ``unkeyed`` leaves it out); one that is
    no object is as it is (its reader refuses it so)."""
    pairs: list[list[tuple[str, Any]]] = []

    def keep(got: list[tuple[str, Any]]) -> dict[str, Any]:
        pairs.append(got)  # (the last one kept is the entry's own: inner objects come first)
        return dict(got)

    value, end = json.JSONDecoder(object_pairs_hook=keep).raw_decode(text, at)
    if not isinstance(value, dict):
        return value, end
    out = Repeated(value)
    named = where.format(f"(ID {quoted(value.get('ID'), 80)})")
    out.why = (f"the engine's {named} names {quoted(key, 80)} twice in one object, so which "
               f"one is meant cannot be told: it is not read; {REPEATED_FIX}")
    if [k for k, _ in pairs[-1]].count("ID") > 1:
        out.id_twice = True
        del out["ID"]
    return out, end
