"""Service spec writes refused through an engine older than another manager's.

Docker's service update replaces the whole spec with what the engine written to can
decode. An engine decodes the JSON into its own ``swarm.ServiceSpec`` (Go's decoder
drops a field it does not know: moby daemon/server/httputils ``ReadJSON``), converts
that whole to swarmkit's protobuf (daemon/cluster/services.go ``UpdateService``,
``convert.ServiceSpecToGRPC``; only the registry auth is kept from the stored spec),
and its inspect answers only the fields its types know (``convert.ServiceFromGRPC``;
its swarmkit drops unknown protobuf fields too: protoc-gen-gogoswarm turns
``XXX_unrecognized`` off). So a spec a newer manager's engine wrote with a field an
older engine does not know (``ContainerSpec.OomScoreAdj``: API 1.46, Docker 27.0;
``Resources.SwapBytes``: API 1.52), read and written back through the older engine,
loses it: the task spec changed, and Swarm replaces every task of the service
(swarmkit ``orchestrator.IsTaskDirty``), a restart nobody decided, the setting lost.

Docker's API version follows its release (major.minor; a patch release keeps it), so
the guard compares those: each manager's ``Description.Engine.EngineVersion`` from the
node list, against this engine's own ``Version`` (its ``GET /version``, as the client
was made). A version that does not read as numbers (a development build) compares with
nothing. Node and swarm label writes are not refused: their specs' fields are all
older than any engine docker-py speaks to, and no task restarts for them.

The writes that find the verdict stale together (up to ``WRITE_PARALLEL``, eight, at
once) share one node list: the first lists, the others wait for its answer or its
failure, with no lock held across the listing (the cycle's own node list, ``seen``,
and a write within the minute go on meanwhile). Whatever ends the writer that lists (its
failure, an interrupt) ends the listing for them, and the next write lists again.

The engine's own version is asked again as often (its own minute: the daemon lists
the nodes each cycle, so the list alone never ages): the daemon outlives a
docker restart (systemd/swarmgpu.service), so Docker upgraded in place under it runs a
newer release than the client read at its start, whose API version it still speaks (a
write at an older API version loses the newer fields too: Docker trims them). Writes are
refused then, saying so and to restart swarmgpu; compared with the version read at start,
it named its own manager as the newer engine and told the operator to upgrade it. An
answer that comes while another writer lists is said once that listing ends, not left
to the next node list.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence

from loguru import logger

from swarmgpu.core.peertext import peer_text, quoted
from swarmgpu.swarm.errors import SwarmError
from swarmgpu.swarm.swarmnode import SwarmNode

# How long a node list's verdict stands before the next write lists the nodes again (a
# manager upgraded meanwhile): one list a minute, and only while writing.
RECHECK_S = 60.0
_RELEASE = re.compile(r"v?(\d+)\.(\d+)")


class EngineBehind(SwarmError):
    """A service spec write refused: this engine is older than another manager's, and
    writing through it would drop the fields only the newer one knows."""


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a Docker version ("27.5.1", "20.10.24+dfsg1", "17.06.2-ee-16");
    None where it does not start with two numbers."""
    m = _RELEASE.match(version.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def newer_managers(own: str, nodes: Sequence[SwarmNode]) -> list[SwarmNode]:
    """The managers of ``nodes`` whose engine's release is newer than ``own``'s (none
    where ``own`` does not read as one)."""
    mine = release(own)
    if mine is None:
        return []
    out = []
    for n in nodes:
        theirs = release(n.engine_version) if n.role == "manager" else None
        if theirs is not None and theirs > mine:
            out.append(n)
    return out


def running_version(answer: object) -> str:
    """``Version`` of an engine's ``GET /version`` answer ("" where it is not text)."""
    version = answer.get("Version") if isinstance(answer, dict) else None
    return version if isinstance(version, str) else ""


def changed_text(endpoint: str, own: str, now: str) -> str:
    """Why a service spec write is refused because the engine's release is no longer
    ``own``, the one the client read at its start ("" where it is, or ``now`` does not
    read as one)."""
    if release(now) is None or release(now) == release(own):
        return ""
    return (f"service spec writes refused: the engine at {endpoint} now runs Docker "
            f"{quoted(now, 40)}, not {quoted(own, 40)} as when swarmgpu connected to it "
            "(Docker restarted under it), and swarmgpu still speaks the API version it "
            "read then: a spec written at another API version loses the fields only one "
            "of them knows, which restarts every task of the service. Fix: restart "
            "swarmgpu (systemctl restart swarmgpu)")


def behind_text(endpoint: str, own: str, newer: Sequence[SwarmNode]) -> str:
    """Why a service spec write is refused ("" where ``newer`` is empty): the engine, the
    managers newer than it with their versions, and the fix."""
    if not newer:
        return ""
    shown = ", ".join(f"{quoted(n.hostname or n.id, 64)} (Docker "
                      f"{quoted(n.engine_version, 40)})" for n in newer[:5])
    more = f" and {len(newer) - 5} more" if len(newer) > 5 else ""
    return (f"service spec writes refused: the engine at {endpoint} runs Docker "
            f"{quoted(own, 40)}, older than manager {shown}{more}; a spec written through "
            "it loses the fields only the newer engine knows (OomScoreAdj, Ulimits, "
            "CapabilityAdd, ...), which restarts every task of the service. Fix: upgrade "
            "Docker on this manager to the newest managers' release, or point swarmgpu at "
            "a manager that runs it (docker_host)" + _gone_text(newer))


def _gone_text(newer: Sequence[SwarmNode]) -> str:
    """The removal of the Down ones of ``newer``: a manager that left with `docker swarm
    leave --force` stays listed, Down, until removed (a manager demoted first: `docker
    node rm` refuses one); by ID, as a rejoined node lists its hostname twice."""
    down = [n for n in newer if n.state == "down"][:5]
    if not down:
        return ""
    names = ", ".join(quoted(n.hostname or n.id, 64) for n in down)
    ids = " ".join(peer_text(n.id, 64) for n in down)  # (escaped: the engine's text)
    return (f"; manager {names} is Down: if it left the swarm (docker swarm leave "
            f"--force) it stays listed until removed, so remove it on a manager: docker "
            f"node demote {ids} && docker node rm {ids}")


class _Listing:
    """One node list in flight, and what it ended with (None: the verdict taken)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None


class SkewGuard:
    """One client's verdict: ``seen`` takes each node list the client reads, ``check``
    lists the nodes when the last list is older than ``recheck_s``, asks the engine its
    version (``running``) when the last answer is, and raises ``EngineBehind`` while
    this engine is older than another manager's, or no longer the release the client
    read at its start. The verdict is logged once as it changes, not at each refused
    write."""

    def __init__(self, endpoint: str, own: str, *, recheck_s: float = RECHECK_S,
                 clock: Callable[[], float] = time.monotonic,
                 running: Callable[[], str] | None = None) -> None:
        self.endpoint = endpoint
        self.own = own
        self.recheck_s = recheck_s
        self._clock = clock
        self._lock = threading.Lock()  # (writes run in parallel: manager.engine.writes)
        self._at: float | None = None
        self._listing: _Listing | None = None  # (the one node list in flight)
        # The engine's version as last asked, and when (on its own minute: the daemon
        # lists the nodes each cycle, so the list is never a minute old); ``own`` was
        # asked as the client was made
        self._running = running
        self.now, self._now_at = own, clock()
        self._behind = ""  # the last node list's verdict
        self.why = ""

    def seen(self, nodes: Sequence[SwarmNode]) -> None:
        behind = behind_text(self.endpoint, self.own, newer_managers(self.own, nodes))
        with self._lock:
            self._at, self._behind = self._clock(), behind
        self._say()

    def _say(self) -> None:
        with self._lock:
            why = changed_text(self.endpoint, self.own, self.now) or self._behind
            said, self.why = self.why, why
        if why and why != said:
            logger.warning("{}", why)
        elif said and not why:
            logger.info("service spec writes resumed: the engine at {} (Docker {}) is no "
                        "older than any manager now", self.endpoint, quoted(self.own, 40))

    def check(self, list_nodes: Callable[[], Sequence[SwarmNode]]) -> None:
        if release(self.own) is None:
            return  # (nothing to compare with: never refused)
        mine = _Listing()  # (taken below where none is in flight)
        try:
            with self._lock:
                at = self._clock()
                stale = self._at is None or at - self._at >= self.recheck_s
                ask = at - self._now_at >= self.recheck_s
                if ask:
                    self._now_at = at  # (taken: one ask a minute, not one per parallel write)
                if stale and self._listing is None:
                    self._listing = mine
                listing = self._listing if stale else None
            self._ask(ask)
            if listing is mine:
                self.seen(list_nodes())
                self._end(mine, None)
            elif listing is not None:
                # No deadline of its own: the listing's requests end by theirs (a write's
                # own, or its cycle's budget, which the first writer had as soon).
                listing.done.wait()
                if listing.error is not None:
                    raise listing.error  # (the same failure, not one listing each)
            if ask:  # (an answer that came after another writer's listing said its verdict)
                self._say()
        except BaseException as exc:
            # Whatever ends this writer, an interrupt too, ends the listing it took: its
            # waiters must not wait for ever, and the next write lists again.
            if self._listing is mine:
                self._end(mine, exc)
            raise
        if self.why:
            raise EngineBehind(self.why)

    def _ask(self, ask: bool) -> None:
        """The engine's version asked again where its minute is out (``ask``)."""
        if ask and self._running is not None:
            running = self._running()
            with self._lock:
                self.now, self._now_at = running, self._clock()

    def _end(self, listing: _Listing, error: BaseException | None) -> None:
        """End ``listing`` for its waiters, with ``error`` where it failed (a failure is
        theirs too, and the next write after lists again: no verdict taken)."""
        listing.error = error
        try:
            with self._lock:
                if self._listing is listing:
                    self._listing = None
        finally:
            listing.done.set()
