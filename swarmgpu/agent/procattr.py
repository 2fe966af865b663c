"""Which Swarm task a GPU process belongs to, on the node (the agent's side).

NVML names processes by host PID only. A PID's cgroup names its container (Docker puts
each container in a cgroup ending in its 64-hex id: ``/docker/<id>``,
``/system.slice/docker-<id>.scope``, or under a ``--cgroup-parent``); the engine's
container labels name the Swarm task and service (``com.docker.swarm.task.id``,
``com.docker.swarm.service.name``, set by Swarm on every task container). A process
outside any container, or in a container Swarm did not start, keeps an empty owner.

NVML lists PIDs first and ``/proc`` is read after: a process that ended in between may
have left its PID to a new one of another container, which would be credited with the
old one's GPU memory (and be restarted for it under ``placement.overshare: restart``).
So a PID is attributed only when its start time (``/proc/<pid>/stat``) reads the same
before and after its cgroup is read, and is earlier than the moment before NVML was
asked (``/proc/uptime``, taken by the agent before it samples; both read in hundredths,
so one started in that very hundredth counts as younger): a process younger than the
listing is not the one NVML measured, and is left without an owner this scrape.

Never raises and never blocks long: an unreadable ``/proc`` entry (the process ended)
or an engine that does not answer leaves that process unattributed; owners are cached
per container (labels of a container never change), the cache is bounded. Each file is
read bounded and only if it is a regular file (procfs's are): a FIFO or a huge file
under a wrong ``--proc-root`` would hang or bloat the sampler; it is refused, logged
once with its path and the fix, and its process left unattributed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from loguru import logger

from swarmgpu.core.boundedfile import FileRefused, TooLarge, read_head
from swarmgpu.core.samples import GpuProcess, GpuSample
from swarmgpu.swarm.answerjson import strict_api

_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
TASK_LABEL = "com.docker.swarm.task.id"
SERVICE_LABEL = "com.docker.swarm.service.name"
_CACHE_MAX = 4096
# /proc/<pid>/stat: "pid (comm) state ..."; starttime is field 22, the 20th after comm
# (which may hold spaces and ')': the fields start after the last ')')
_START_FIELD = 19
_MAX_STAT = 4096  # a stat line is a few hundred bytes
_MAX_UPTIME = 256  # two decimal numbers
_MAX_CGROUP = 64 << 10  # a line per cgroup v1 hierarchy (one on v2), each a path
FIX = ("point --proc-root at the host's /proc, a procfs "
       "(-v /proc:/host/proc:ro --proc-root /host/proc)")

Labels = Callable[[str], Mapping[str, str] | None]  # container id -> its labels (None: unknown)
Reader = Callable[[Path, int], bytes]  # up to limit + 1 bytes of a regular file (read_head)


def container_of(cgroup_text: str) -> str | None:
    """The container id in ``/proc/<pid>/cgroup`` (v1 or v2), or None: not a container.
    The outermost id: below its own cgroup a container may name child cgroups as it
    likes (another container's id among them), above it only the engine writes."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            m = _ID.search(part)
            if m:
                return m.group(1)
    return None


def engine_labels(base_url: str, timeout_s: float = 1.5) -> Labels:
    """Container labels from the node's Docker engine (docker SDK, low-level API)."""
    import docker

    client: Any = None

    def lookup(cid: str) -> Mapping[str, str] | None:
        nonlocal client
        try:
            if client is None:
                # (a label twice: which owner is meant is unknown; each answer bounded)
                client = strict_api(partial(docker.APIClient, base_url=base_url,
                                            timeout=timeout_s))
            info = client.inspect_container(cid)
        except docker.errors.NotFound:
            return {}  # gone: no owner, and nothing to ask again
        except Exception as exc:  # the engine is down or slow: unknown this time
            logger.bind(component="agent").debug("container {} not inspected: {}", cid[:12],
                                                 exc)
            return None
        return _labels(info, cid)

    return lookup


def _labels(info: Any, cid: str) -> Mapping[str, str] | None:
    """``Config.Labels`` of the engine's inspect ``info`` of container ``cid``; None (its
    owner unknown this time) where that is not what Docker sends: raised, it failed the
    scrape."""
    config = info.get("Config") if isinstance(info, Mapping) else ()  # ((): refused below)
    labels = (config or {}).get("Labels") if isinstance(config, Mapping | None) else ()
    if isinstance(labels, Mapping | None) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in (labels or {}).items()):
        return dict(labels or {})
    logger.bind(component="agent").debug("container {}: its inspect has no Config.Labels "
                                         "of texts (check any proxy)", cid[:12])
    return None


class Attributor:
    """Adds container, task and service to every process of a sample list."""

    def __init__(self, labels: Labels | None, proc_root: str = "/proc",
                 read: Reader = read_head) -> None:
        self.labels = labels
        self.proc_root = Path(proc_root)
        self.read = read
        self.refused: str | None = None  # the first file refused, in words (logged once)
        self._owners: dict[str, tuple[str, str]] = {}  # container -> (task, service)
        self._hz = os.sysconf("SC_CLK_TCK")  # the unit of stat's starttime

    def _read(self, path: Path, limit: int) -> str | None:
        """The text of ``path`` (at most ``limit`` bytes), or None: gone, unreadable, or
        refused (not a regular file, too large: logged the first time)."""
        try:
            data = self.read(path, limit)
            if len(data) > limit:
                raise TooLarge(limit)
        except FileRefused as exc:
            if self.refused is None:
                self.refused = f"{path}: {exc.why}"
                logger.bind(component="agent").warning(
                    "GPU processes not attributed: {}; {}", self.refused, FIX)
            return None
        except OSError:
            return None
        return data.decode("ascii", "replace")

    def boot_clock(self) -> float | None:
        """Seconds since boot (``<proc_root>/uptime``), the clock of a process's start
        time; None when unreadable (then only the before/after check is made)."""
        text = self._read(self.proc_root / "uptime", _MAX_UPTIME)
        try:
            value = float((text or "").split()[0])
        except (ValueError, IndexError):
            return None
        return value if value >= 0 and value != float("inf") else None

    def _start_ticks(self, pid: int) -> int | None:
        """The process's start, in clock ticks after boot; None: gone or unreadable."""
        text = self._read(self.proc_root / str(pid) / "stat", _MAX_STAT)
        if text is None:
            return None
        fields = text.rpartition(")")[2].split()
        if len(fields) <= _START_FIELD or not fields[_START_FIELD].isascii() \
                or not fields[_START_FIELD].isdigit():
            return None
        return int(fields[_START_FIELD])

    def _container(self, pid: int) -> str | None:
        text = self._read(self.proc_root / str(pid) / "cgroup", _MAX_CGROUP)
        return None if text is None else container_of(text)

    def _same_process(self, pid: int, listed_at: float | None) -> str | None:
        """The container of ``pid`` when it is still the process NVML listed (module
        docstring), else None."""
        before = self._start_ticks(pid)
        if before is None:
            return None
        cid = self._container(pid)
        if cid is None or self._start_ticks(pid) != before:
            return None  # not in a container, or the PID changed hands during the read
        # Both clocks are whole hundredths (truncated): a start in the very hundredth
        # the clock was read in may be after it, so it is taken for one (unowned for
        # this scrape; a process that old is attributed the next).
        if listed_at is not None and before / self._hz >= listed_at:
            return None  # started after NVML was asked: a PID reused since
        return cid

    def _owner(self, cid: str) -> tuple[str, str]:
        if cid in self._owners:
            return self._owners[cid]
        got = self.labels(cid) if self.labels is not None else None
        if got is None:
            return "", ""  # unknown now: asked again next time
        owner = (str(got.get(TASK_LABEL, "")), str(got.get(SERVICE_LABEL, "")))
        if len(self._owners) >= _CACHE_MAX:
            self._owners.clear()
        self._owners[cid] = owner
        return owner

    def process(self, p: GpuProcess, listed_at: float | None = None) -> GpuProcess:
        cid = self._same_process(p.pid, listed_at)
        if cid is None:
            return p
        task, service = self._owner(cid)
        return replace(p, container=cid, task=task, service=service)

    def __call__(self, samples: Sequence[GpuSample],
                 listed_at: float | None = None) -> list[GpuSample]:
        """``samples`` with their processes' owners; ``listed_at``: ``boot_clock()``
        taken before NVML was asked for them."""
        return [replace(s, processes=tuple(self.process(p, listed_at) for p in s.processes))
                if s.processes else s for s in samples]
