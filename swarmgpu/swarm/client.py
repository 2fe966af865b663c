"""The only module that talks to the Docker Engine (docker SDK).

It turns the engine's JSON into swarmgpu's own snapshot types and offers the few
writes swarmgpu makes, each as a read-modify-write of the whole spec with its
``Version.Index`` (the engine replaces specs wholesale and answers a stale version
with a plain HTTP 500 "update out of sequence", which becomes ``VersionConflict``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions

from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.answerjson import (
    AnswerTooLarge,
    BudgetSpent,
    Repeated,
    RepeatedAnswer,
    outside_budget,
    read_entries,
    strict_api,
)
from swarmgpu.swarm.engineaddr import engine_endpoint as engine_endpoint  # (tests import it)
from swarmgpu.swarm.engineaddr import engine_fix
from swarmgpu.swarm.engineskew import SkewGuard, running_version
from swarmgpu.swarm.errors import BudgetCut as BudgetCut  # (errors: named here too)
from swarmgpu.swarm.errors import NotLeader as NotLeader
from swarmgpu.swarm.errors import SwarmError as SwarmError
from swarmgpu.swarm.errors import SwarmNotFound as SwarmNotFound
from swarmgpu.swarm.errors import SwarmUnavailable as SwarmUnavailable
from swarmgpu.swarm.errors import SwarmUnkeyed as SwarmUnkeyed
from swarmgpu.swarm.errors import SwarmWrongObject as SwarmWrongObject
from swarmgpu.swarm.errors import UnreadWrite as UnreadWrite
from swarmgpu.swarm.errors import VersionConflict as VersionConflict
from swarmgpu.swarm.eventstream import Cut, NotAnEvent, read_events
from swarmgpu.swarm.imageref import image_filter as image_filter  # (tests import it here)
from swarmgpu.swarm.localstate import running
from swarmgpu.swarm.specread import UnreadSpec, reservations, spec_count, spec_object
from swarmgpu.swarm.swarmnode import SwarmNode as SwarmNode  # with the snapshot types
from swarmgpu.swarm.swarmnode import node_from_api
from swarmgpu.swarm.swarmservice import SwarmService as SwarmService  # (as SwarmNode)
from swarmgpu.swarm.swarmservice import read_service
from swarmgpu.swarm.taskports import task_host_ports, task_network_drivers
from swarmgpu.swarm.taskspec import task_rules
from swarmgpu.swarm.taskstop import DEFAULT_GRACE_S, rejected_until, stop_grace_s, updated_at
from swarmgpu.swarm.unkeyed import WRONG_FIX, Unkeyed, by_id_alone, inspected, keyed, wrong_object

if TYPE_CHECKING:
    from swarmgpu.core.config import Config


# A task's desired states while Swarm means it to run: running, or ready (swarmkit's
# restart supervisor and updater make a replacement so until it may start: the restart
# delay, the old task's stop; it is scheduled, or waits for a node, meanwhile). Here, the
# layer every reader of tasks imports (``manager.placement.keys`` names it too).
MEANT_STATES = frozenset(("running", "ready"))


def meant_filter() -> list[str]:
    """The task list's ``desired-state`` filter for ``MEANT_STATES``: Moby ORs the
    states of one filter (``newListTasksFilters``), and docker-py sends a list as is (a
    tuple it would nest)."""
    return sorted(MEANT_STATES)


@dataclass(frozen=True)
class SwarmTask:
    id: str
    service_id: str
    node_id: str
    slot: int | None
    state: str  # observed state ("running", "pending", ...)
    desired_state: str
    env: tuple[str, ...]
    error: str = ""
    force_update: int = 0  # the service's ForceUpdate when this task was created
    cpu_milli: int = 0  # Resources.Reservations: what Swarm counts against its node
    memory_mib: int = 0
    message: str = ""  # Status.Message ("pending task scheduling", ...)
    container_id: str = ""  # Status.ContainerStatus.ContainerID, once the task has one
    job_iteration: int | None = None  # a job's task: the job run it belongs to
    created_at: str = field(default="", compare=False)  # CreatedAt (RFC 3339)
    # Spec.Placement.Constraints: what Swarm's constraint enforcer stops this task by (an
    # old task keeps its service's old ones while an update rolls out); None: not read
    constraints: tuple[str, ...] | None = field(default=None, compare=False)
    # NetworksAttachments[].Network.DriverState.Name: the drivers of the networks Swarm's
    # allocator attached it to, which its PluginFilter reads (swarm.plugins)
    network_drivers: tuple[str, ...] = field(default=(), compare=False)
    # Status.PortStatus: the host-mode ports it binds (a removed service's too: taskports)
    host_ports: tuple[str, ...] = field(default=(), compare=False)
    # rejected by the constraint enforcer: epoch s its container may run until (taskstop)
    rejected_until: float | None = field(default=None, compare=False)
    stop_grace_s: float = field(default=DEFAULT_GRACE_S, compare=False)  # taskstop.stop_grace_s
    # UpdatedAt (epoch s, the Swarm leader's clock; None: unknown): its desired state was
    # set then or before (``keys.stop_began``)
    updated_at: float | None = field(default=None, compare=False)


def _is_out_of_sequence(exc: docker.errors.APIError) -> bool:
    text = str(exc).lower()
    return "out of sequence" in text or "update out of sequence" in text


def service_from_api(raw: Any) -> SwarmService:
    """``read_service``; a service it cannot name (no object, no ID) refused as the
    engine's error, as a task is (a part it cannot read leaves that service ``unread``)."""
    try:
        return read_service(raw)
    except UnreadSpec as exc:
        raise SwarmError(str(exc)) from None


def _node(raw: Any) -> SwarmNode:
    """``node_from_api``; a node it cannot name (no ID) refused as the engine's error
    (a part it cannot read leaves that node alone ``unread``)."""
    try:
        return node_from_api(raw)
    except UnreadSpec as exc:
        raise SwarmError(str(exc)) from None


def _labels_readable(raw: Any, node_id: str) -> Any:
    """``raw``, node ``node_id`` read to write its labels, unless some part of it cannot
    be read (``SwarmNode.unread``): then no write, its labels kept as they are
    (SwarmError). One naming its own ID twice, or none (a proxy that drops it), is so
    too, named by the ID asked for (``node_from_api`` refuses it as a node listed
    without one, naming neither); and another node's (``wrong_object``)."""
    if isinstance(raw, Repeated) and raw.id_twice:
        return _readable(raw, f"node {node_id}: {raw.why}", "label", SwarmError)
    try:
        unread = wrong_object(raw, "node", node_id) or node_from_api(raw).unread
    except UnreadSpec as exc:  # (no object, no ID)
        unread = f"node {node_id}: {exc}"
    return _readable(raw, unread, "label", SwarmError)


def _spec_readable(raw: Any, service_id: str) -> Any:
    """``raw``, a service read to write its spec, unless some part of it cannot be read
    (``SwarmService.unread``): then no write, its spec kept as it is (UnreadWrite). One
    naming its own ID twice, or none (a proxy that drops it: ``swarm.unkeyed``), is so
    too (read_service refuses it, as the engine's error, which fails every writer that
    skips one service it cannot read); and another service's (``wrong_object``)."""
    if isinstance(raw, Repeated) and raw.id_twice:
        return _readable(raw, raw.why, "service", UnreadWrite)
    try:
        unread = wrong_object(raw, "service", service_id) or read_service(raw).unread
    except UnreadSpec as exc:  # (no object, no ID: this service's write alone)
        unread = str(exc)
    return _readable(raw, unread, "service", UnreadWrite)


def _readable(raw: Any, unread: str, what: str, refused: type[SwarmError]) -> Any:
    """``raw`` where ``unread`` is empty, else ``refused``: "<what> write refused: why"."""
    if unread:
        raise refused(f"{what} write refused: {unread}")
    return raw


ENGINE_FIX = "check any proxy in front of the engine"
_T = TypeVar("_T")


def _whole(what: str, read: Callable[[], _T]) -> _T:
    """``read()`` of the engine's ``what``, an answer read whole; a part of it that is
    not what Docker sends (``UnreadSpec``) the engine's error: raised bare, it passed
    every reader that fails one step alone (an AttributeError, as was)."""
    try:
        return read()
    except UnreadSpec as exc:
        raise SwarmError(f"the engine's {what}: {exc}") from None


def _text(value: Any, where: str) -> str:
    """``value`` as a text (absent or null: ""), else ``UnreadSpec``."""
    if not isinstance(value, str | None):
        raise UnreadSpec(f"{where} is {quoted(value)}, not a text (Docker sends one; "
                         f"{ENGINE_FIX})")
    return value or ""


def _swarm_object(raw: Any) -> Mapping[str, Any]:
    """The engine's swarm object (inspect_swarm): an object, its Spec one, the Labels
    there texts by texts (SwarmError naming the part otherwise)."""
    def read() -> Mapping[str, Any]:
        obj = spec_object(raw, "the answer", ENGINE_FIX, required=True)
        _swarm_labels(obj)
        return obj

    return _whole("swarm", read)


def _swarm_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = spec_object(spec_object(obj.get("Spec"), "Spec", ENGINE_FIX).get("Labels"),
                         "Spec.Labels", ENGINE_FIX)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise SwarmError(f"the engine's swarm: Spec.Labels is {quoted(labels)}, not texts by "
                         f"texts (Docker sends them so; {ENGINE_FIX})")
    return dict(labels)


def _swarm_versioned(raw: Any) -> Mapping[str, Any]:
    """``_swarm_object``, read to write it: its ``Version.Index`` a whole number."""
    obj = _swarm_object(raw)
    index = _whole("swarm", lambda: spec_object(obj.get("Version"), "Version", ENGINE_FIX,
                                                required=True).get("Index"))
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise SwarmError(f"the engine's swarm: Version.Index is {quoted(index)}, not a whole "
                         f"number (Docker sends one; {ENGINE_FIX}): no write")
    return obj


def task_from_api(raw: Mapping[str, Any]) -> SwarmTask:
    if not isinstance(raw, Mapping):  # (a proxy's null or string in the list)
        raise SwarmError(f"a task listed as {type(raw).__name__} (Docker sends objects; "
                         "check any proxy)")
    if isinstance(raw, Repeated):  # (a key twice in it: its last is no likelier Docker's)
        raise SwarmError(raw.why)
    tid = raw.get("ID")
    if not isinstance(tid, str) or not tid:  # every id the daemon keys on is Swarm's
        raise SwarmError(f"a task of service {str(raw.get('ServiceID'))[:80]!r} listed "
                         "without an ID (Docker sends one with every task; check any proxy)")
    spec, status = raw.get("Spec", {}), raw.get("Status", {})
    if not (isinstance(status, Mapping) and isinstance(spec, Mapping)):  # (a proxy's null)
        raise SwarmError(f"task {str(raw.get('ID'))[:80]!r}: Status {type(status).__name__}, "
                         f"Spec {type(spec).__name__} (Docker sends objects; check any proxy)")
    try:  # (a proxy's string where an object or a number goes: refused, never read as 0)
        container = spec_object(spec.get("ContainerSpec"), "Spec.ContainerSpec")
        iteration = (spec_object(raw.get("JobIteration"), "JobIteration")
                     if "JobIteration" in raw else None)
        cpu_milli, memory_mib = reservations(spec)
        force = spec_count(spec.get("ForceUpdate"), "Spec.ForceUpdate")
        run = (spec_count(iteration.get("Index"), "JobIteration.Index")
               if iteration is not None else None)
        changed = updated_at(raw.get("UpdatedAt"))
        # (keys of sets and maps, looked up in sets: a proxy's list there was unhashable)
        service_id = _text(raw.get("ServiceID"), "ServiceID")
        node_id = _text(raw.get("NodeID"), "NodeID")
        state = _text(status.get("State"), "Status.State")
        desired = _text(raw.get("DesiredState"), "DesiredState")
    except UnreadSpec as exc:
        raise SwarmError(f"task {tid[:80]!r}: {exc}") from None
    return SwarmTask(
        id=tid,
        service_id=service_id,
        node_id=node_id,
        slot=raw.get("Slot"),
        state=state,
        desired_state=desired,
        env=tuple(container.get("Env") or ()),
        error=status.get("Err", "") or "",
        force_update=force,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        message=str(status.get("Message", "") or ""),
        container_id=str((status.get("ContainerStatus") or {}).get("ContainerID") or ""),
        job_iteration=run,
        created_at=str(raw.get("CreatedAt") or ""),
        constraints=task_rules(spec),
        network_drivers=task_network_drivers(raw),
        host_ports=task_host_ports(status),
        rejected_until=rejected_until(status, spec), stop_grace_s=stop_grace_s(spec),
        updated_at=changed,
    )


def manager_client(cfg: Config) -> SwarmClient:
    """The manager's client of its engine, as ``cfg`` names it (docker_host) and bounds
    its answers (engine.max_answer_mib)."""
    return SwarmClient(cfg.docker_host, max_answer_bytes=cfg.engine.max_answer_bytes)


# An event stream with nothing for this long is reopened (``events``): the cache's
# timer lists everything this often anyway (swarm.cache.RELIST_S).
EVENT_IDLE_S = 600.0


def _swarm_info(info: Mapping[str, Any]) -> tuple[str, object]:
    """(``Swarm.NodeID``, ``Swarm.ControlAvailable`` as sent) of an engine's info."""
    def read() -> tuple[str, object]:
        swarm = spec_object(info.get("Swarm"), "Swarm", ENGINE_FIX)
        return _text(swarm.get("NodeID"), "Swarm.NodeID"), swarm.get("ControlAvailable")

    return _whole("info", read)


class SwarmClient:
    """Thin typed wrapper over the docker SDK's low-level API."""

    def __init__(self, base_url: str | None = None, *, timeout_s: float = 30.0,
                 max_answer_bytes: int | None = None) -> None:
        self.endpoint = engine_endpoint(base_url)
        try:
            # (a key twice in an answer, one past the bound, ``max_answer_bytes``, or its
            # deadline: refused, swarm.answerjson)
            if base_url:
                self._api = strict_api(partial(docker.APIClient, base_url=base_url,
                                               timeout=int(timeout_s)), max_answer_bytes)
            else:
                self._api = strict_api(lambda **kw: docker.from_env(
                    timeout=int(timeout_s), **kw).api, max_answer_bytes)
        except docker.errors.DockerException as exc:
            raise SwarmUnavailable(
                f"cannot reach the Docker Engine at {self.endpoint}: {exc}"
                f"{engine_fix(str(exc))}") from exc
        self.writes = 0  # every write call made, for metrics and tests
        # Told (kind "node" or "service", id) after a write landed or failed midway: a
        # cache of what the engine holds reads the object again (swarm.cache).
        self.on_write: Callable[[str, str], None] | None = None
        # Told after on_write when the write landed: its event is due (swarm.cache
        # tells a deaf engine by that event's absence).
        self.on_landed: Callable[[str, str], None] | None = None
        # Asked right before each write goes out (the daemon's leader term,
        # manager.cycle.term): False refuses it with NotLeader. None: every write goes.
        self.may_write: Callable[[], bool] | None = None
        # Not called here: the write gate (manager.engine.actuator.Writes) calls it
        # before each write, before its read; the daemon's stop request raises there.
        self.before_write: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._skew = SkewGuard(self.endpoint, getattr(self._api, "engine_version", ""),
                               running=lambda: running_version(self._call(
                                   self._api.version, api_version=False)))

    # --- reads ---------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except docker.errors.APIError as exc:
            if _is_out_of_sequence(exc):
                raise VersionConflict(str(exc)) from exc
            if exc.status_code == 404:
                raise SwarmNotFound(str(exc)) from exc
            if exc.status_code == 503:
                raise SwarmUnavailable(f"not a Swarm manager or no quorum: {exc}") from exc
            raise SwarmError(str(exc)) from exc
        except BudgetSpent as exc:  # (the cycle's budget, not the engine: not unreachable)
            raise BudgetCut(str(exc)) from exc
        except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
            raise SwarmUnavailable(f"Docker Engine unreachable at {self.endpoint}: {exc}") from exc
        except RepeatedAnswer as exc:  # (the reads of entries took theirs: read_entries)
            raise SwarmError(f"{getattr(fn, '__name__', 'a read')}: {exc}") from None
        except AnswerTooLarge as exc:  # (the engine's, as a key twice: not unreachable)
            raise SwarmError(str(exc)) from None
        except RecursionError:  # (bare, it passed every reader that fails one object)
            raise SwarmError(f"{getattr(fn, '__name__', 'a read')}: the engine's answer is "
                             "nested too deep to decode (Docker's nest some ten deep): it "
                             "is not read; check the proxy in front of the engine") from None

    def info(self) -> Mapping[str, Any]:
        raw = self._call(self._api.info)
        return dict(_whole("info", lambda: spec_object(raw, "the answer", ENGINE_FIX,
                                                        required=True)))

    def trust_root(self) -> str:
        """The swarm root CA certificate (PEM), as ``docker swarm ca`` prints it."""
        raw = _swarm_object(self._call(self._api.inspect_swarm))
        return _whole("swarm", lambda: _text(spec_object(
            raw.get("TLSInfo"), "TLSInfo", ENGINE_FIX).get("TrustRoot"), "TLSInfo.TrustRoot"))

    def self_node_id(self) -> str:
        return _swarm_info(self.info())[0]

    def is_leader(self) -> bool:
        """True when the engine we talk to is the current Swarm leader. A worker's engine
        (``Swarm.ControlAvailable`` false: a manager demoted) leads nothing: False, its
        node not asked (a worker refuses that 503; a manager without quorum, or locked:
        ``localstate.running``, raises: who leads is unknown)."""
        node_id, control = _swarm_info(running(self.info()))
        if not node_id or control is False:
            return False
        raw = self._call(self._api.inspect_node, node_id)  # (another's leads: not this one)
        return _node(inspected(raw, "node", node_id, SwarmUnkeyed, SwarmWrongObject)).leader

    # The entries the last full lists left out, each list's own (two threads list: no
    # read-modify-write); class defaults: a client built bare, as tests do, has none
    _unkeyed_nodes: tuple[str, ...] = ()
    _unkeyed_services: tuple[str, ...] = ()
    _skew: SkewGuard | None = None  # (service spec writes: swarm.engineskew)

    def unkeyed(self) -> Unkeyed:
        """The entries the last full node and service lists left out (``swarm.unkeyed``)."""
        return Unkeyed(self._unkeyed_nodes, self._unkeyed_services)

    def _listed(self, kind: str, fn: Callable[..., Any], **kwargs: Any) -> list[Any]:
        """The engine's list of ``kind``; one that is no list fails whole (SwarmError)."""
        raw = self._call(read_entries, kind, fn, **kwargs)
        if not isinstance(raw, list):
            raise SwarmError(f"the engine's {kind} list is {type(raw).__name__} "
                             f"{quoted(raw, 80)}, not a list (check any proxy)")
        return raw

    def nodes(self) -> list[SwarmNode]:
        got, self._unkeyed_nodes = keyed(self._listed("node", self._api.nodes), "node")
        nodes = [_node(n) for n in got]
        if self._skew is not None:
            self._skew.seen(nodes)
        return nodes

    def nodes_with_label(self, key: str) -> list[SwarmNode]:
        """The nodes whose own labels carry ``key`` (any value): the engine filters
        (``node.label``, API 1.39, Docker 18.09), so one service's ledger is read without
        listing every node."""
        if "=" in key:  # the filter would read ``k=v``: a key and a value to match
            raise SwarmError(f"node label key {key[:80]!r} has '=': the engine's filter "
                             "cannot ask for it (a label prefix or service name with '=')")
        listed = self._listed("node", self._api.nodes, filters={"node.label": [key]})
        got, said = keyed(listed, "node")
        if said:  # (its readers take it for every such node: a holding unseen is none)
            raise SwarmError(said[0])
        return [_node(n) for n in got]

    def node(self, node_id: str) -> SwarmNode:
        raw = self._call(read_entries, "node", self._api.inspect_node, node_id)
        raw = by_id_alone(raw, node_id, lambda: self._listed(  # (a hostname matched)
            "node", self._api.nodes, filters={"id": [node_id]}))
        return _node(inspected(raw, "node", node_id, SwarmUnkeyed, SwarmWrongObject))

    def services(self) -> list[SwarmService]:
        got, self._unkeyed_services = keyed(self._listed("service", self._api.services),
                                            "service")
        return [service_from_api(s) for s in got]

    def service(self, service_id: str) -> SwarmService:
        raw = self._call(read_entries, "service", self._api.inspect_service, service_id)
        return service_from_api(inspected(raw, "service", service_id, SwarmUnkeyed,
                                          SwarmWrongObject))

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None,
              read: Callable[[Any], bool] | None = None) -> list[SwarmTask]:
        """``states``: only the tasks whose actual state (``Status.State``) is one of them,
        the others unparsed (the engine filters by desired state only: that list holds every
        ended task Swarm keeps); ``read``: only the objects it is True of (job_raw_read)."""
        raw = self._listed("task", self._api.tasks, filters=dict(filters or {}))
        return [task_from_api(t) for t in raw  # (not a mapping, Repeated: refused there)
                if isinstance(t, Repeated) or ((read is None or read(t)) and (
                states is None or not isinstance(t, Mapping)
                or not isinstance(t.get("Status"), Mapping)
                or str(t["Status"].get("State") or "") in states))]

    def image_env(self, ref: str) -> tuple[str, ...] | None:
        """``Config.Env`` of the image ``ref`` names, as this engine has it; None when it
        has no such image (or two match). Found with the image list's reference filter,
        then read by its ID: two plain paths (a reference in a path would carry ``@``,
        which the socket proxy refuses encoded)."""
        listed = self._call(self._api.images, filters={"reference": image_filter(ref)})
        ids = {str(i.get("Id") or "") for i in listed or [] if isinstance(i, Mapping)}
        if len(ids) != 1 or not next(iter(ids)):
            return None
        asked = ids.pop().removeprefix("sha256:")
        raw = self._call(self._api.inspect_image, asked)
        # Another's env would stand in for it; Docker sends every image's Id, so one
        # without (or null: read as no env at all) is refused too: it cannot be told
        # from another's. (Not an object: refused below, naming its type.)
        got = raw.get("Id") if isinstance(raw, Mapping) else None
        if raw is None or (isinstance(raw, Mapping) and (
                not isinstance(got, str) or got.removeprefix("sha256:") != asked)):
            raise SwarmWrongObject(
                f"image {quoted(ref, 80)}: image {quoted(asked, 80)} was asked for, the "
                "engine answered " + (f"image {quoted(got, 80)}" if isinstance(got, str)
                                      and got else "no image ID") + f": not read; {WRONG_FIX}")
        # The engine's answer is read, not trusted: a wrong shape is an error naming the
        # image (its env unknown this cycle), never an AttributeError out of the caller.
        config = raw.get("Config") if isinstance(raw, Mapping) else raw
        if not isinstance(config, Mapping | None):
            raise SwarmError(f"image {ref!r}: the engine's inspect has a "
                             f"{type(config).__name__} for Config, not a mapping of its Env")
        env = (config or {}).get("Env")
        if not isinstance(env, list | None) or not all(isinstance(x, str) for x in env or ()):
            raise SwarmError(f"image {ref!r}: the engine's inspect has no list of texts for "
                             f"Config.Env ({type(env).__name__})")
        return tuple(env or ())

    def swarm_labels(self) -> Mapping[str, str]:
        """Labels of the swarm object itself (``docker swarm update`` has no flag for
        them; the API does): cluster-wide state that survives leader changes."""
        return _swarm_labels(_swarm_object(self._call(self._api.inspect_swarm)))

    def update_swarm_labels(
        self, compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
        *, attempts: int = 5,
    ) -> bool:
        """Read-modify-write the swarm object's labels (same contract as node labels);
        the rest of the swarm spec is posted back unchanged."""
        return self._update_labels(
            lambda: _swarm_versioned(self._call(self._api.inspect_swarm)),
            lambda version, spec: self._call(self._post_swarm_update, version, spec),
            compute, attempts, "swarm labels")

    def _post_swarm_update(self, version: int, spec: Mapping[str, Any]) -> None:
        # The SDK's update_swarm rebuilds the spec from keyword parts; posting the whole
        # spec read just before keeps every setting swarmgpu does not own.
        url = self._api._url("/swarm/update")
        resp = self._api._post_json(url, data=dict(spec), params={
            "version": version, "rotateWorkerToken": "false",
            "rotateManagerToken": "false", "rotateManagerUnlockKey": "false"})
        self._api._raise_for_status(resp)

    def events(self, *, types: tuple[str, ...] = ("node", "service"),
               on_open: Callable[[], None] | None = None,
               idle_s: float | None = EVENT_IDLE_S,
               on_cut: Callable[[Callable[[], None]], None] | None = None,
               ) -> Iterator[dict[str, Any]]:
        """Blocking iterator over engine events; raises SwarmUnavailable when cut, and
        SwarmError on an answer that is not events (``swarm.eventstream``: bounded).
        ``on_open`` is called once the engine has subscribed the stream (its answer's
        headers came back), before the first event: from then on nothing is missed.
        Nothing read for ``idle_s`` cuts it: the engine sends no heartbeat, so a dead
        connection (half-open, a hung engine or proxy) looks like a quiet swarm.
        ``on_cut``, before ``on_open``, is handed a function that ends this stream from
        another thread (the cache's stall verdict: reopened then, not at ``idle_s``);
        not where the transport hides the socket (``Cut.can_cut``: it would do nothing).
        ``Connection: close``: the stream's socket never goes back to the pool, so a
        late cut cannot reach a request that reuses it (``Cut`` checks as well)."""
        try:
            resp = self._api._get(self._api._url("/events"), stream=True, timeout=idle_s,
                                  params={"filters": json.dumps({"type": list(types)})},
                                  headers={"Connection": "close"})
        except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
            raise SwarmUnavailable(f"event stream ended: {exc}") from exc
        cut = Cut(resp)
        try:
            if resp.status_code != 200:
                head = next(resp.iter_content(512), b"")  # the reason, not a whole body
                raise SwarmUnavailable(f"event stream: the engine at {self.endpoint} "
                                       f"answered HTTP {resp.status_code}: {head!r}")
            if on_cut is not None and cut.can_cut:
                on_cut(cut)
            if on_open is not None:
                on_open()
            yield from read_events(resp.iter_content(65536), self.endpoint)
        except NotAnEvent as exc:
            raise SwarmError(str(exc)) from None
        except requests.exceptions.ConnectionError as exc:
            if cut.asked:
                raise self._cut_stalled() from exc
            if exc.args and isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError):
                raise SwarmUnavailable(
                    f"event stream from {self.endpoint}: no event for {idle_s} s (a dead "
                    "connection is not told from a quiet swarm): reopening") from exc
            raise SwarmUnavailable(f"event stream ended: {exc}") from exc
        except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
            if cut.asked:
                raise self._cut_stalled() from exc
            raise SwarmUnavailable(f"event stream ended: {exc}") from exc
        finally:
            cut.end()
            resp.close()
        if cut.asked:  # the shut-down socket read as the answer's end
            raise self._cut_stalled()

    def _cut_stalled(self) -> SwarmUnavailable:
        return SwarmUnavailable(f"event stream from {self.endpoint}: cut, taken for stalled "
                                "(a change had no event): reopening")

    # --- writes --------------------------------------------------------
    def update_node_labels(
        self,
        node_id: str,
        compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
        *,
        attempts: int = 5,
    ) -> bool:
        """Read the node, let ``compute`` derive its new label set, write it.

        ``compute`` gets the labels as they are now and returns the full new set, or
        None for "nothing to do". On a version conflict the node is re-read and
        ``compute`` asked again, so a concurrent writer's edits are never lost.
        Returns True when a write landed.
        """
        return self._told("node", node_id, lambda: self._update_labels(
            lambda: _labels_readable(self._call(read_entries, "node", self._api.inspect_node,
                                                node_id), node_id),
            lambda version, spec: self._call(self._api.update_node, node_id, version, spec),
            compute, attempts, f"node {node_id}: labels"))

    def _told(self, kind: str, obj_id: str, write: Callable[[], bool]) -> bool:
        """``write()``, then ``on_write`` if it landed or failed with the outcome unknown."""
        try:
            landed = write()
        except SwarmError:
            if self.on_write is not None:
                self.on_write(kind, obj_id)
            raise
        if landed and self.on_write is not None:
            self.on_write(kind, obj_id)
        if landed and self.on_landed is not None:
            self.on_landed(kind, obj_id)
        return landed

    def _update_labels(
        self, read: Callable[[], Any], write: Callable[[int, Mapping[str, Any]], Any],
        compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
        attempts: int, what: str,
    ) -> bool:
        """The labels of a node or of the swarm object (read-modify-write)."""

        def change(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
            spec = dict(raw.get("Spec") or {})
            current = dict(spec.get("Labels") or {})
            new = compute(current)
            if new is None or dict(new) == current:
                return None
            spec["Labels"] = dict(new)
            return spec

        return self._read_modify_write(
            read, change, lambda raw, spec: write(int(raw["Version"]["Index"]), spec),
            attempts, f"{what} kept changing under us for {attempts} attempts")

    def _read_modify_write(
        self, read: Callable[[], Any],
        change: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
        write: Callable[[Mapping[str, Any], Mapping[str, Any]], Any],
        attempts: int, gave_up: str,
    ) -> bool:
        """Read, ``change`` (None: nothing to write), write; on a version conflict re-read
        and change again, so a concurrent writer's edits are never lost. True when a
        write landed. Its reads are not refused at the cycle's budget: the write gate let
        it through, and a write in flight is never cut midway (one cut between an
        operation's two writes left it half made: preemption's hour stored, its
        victim's move not); each of its requests ends within what is left of the budget
        and its slack (``answerjson.outside_budget``)."""
        with outside_budget():
            for _ in range(attempts):
                raw = read()
                new = change(raw)
                if new is None:
                    return False
                if self.may_write is not None and not self.may_write():
                    raise NotLeader(f"{self.endpoint} no longer leads the swarm: the write "
                                    "was not made (the leader's daemon decides)")
                try:
                    with self._lock:
                        self.writes += 1
                    write(raw, new)
                    return True
                except VersionConflict:
                    continue
        raise VersionConflict(gave_up)

    def _post_service_update(
        self, service_id: str, raw: Mapping[str, Any], new: Mapping[str, Any]
    ) -> None:
        # The SDK's update_service rebuilds the spec from keyword parts and drops what
        # it does not know; posting the whole spec keeps everything we did not touch.
        url = self._api._url("/services/{0}/update", service_id)
        resp = self._api._post_json(
            url, data=dict(new), params={"version": int(raw["Version"]["Index"])}
        )
        self._api._raise_for_status(resp)

    def update_service_spec(
        self,
        service_id: str,
        compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
        *,
        attempts: int = 5,
    ) -> bool:
        """Read-modify-write a whole service spec (same contract as node labels)."""

        def change(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
            spec = raw.get("Spec", {})
            new = compute(spec)
            return None if new is None or new == spec else new

        if self._skew is not None:  # (an older engine drops fields: engineskew)
            with outside_budget():  # (the gate let the write through: as its reads)
                self._skew.check(self.nodes)
        return self._told("service", service_id, lambda: self._read_modify_write(
            lambda: _spec_readable(self._call(read_entries, "service", self._api.inspect_service,
                                               service_id), service_id), change,
            lambda raw, new: self._call(self._post_service_update, service_id, raw, new),
            attempts, f"service {service_id}: kept changing for {attempts} attempts"))
