"""Shared pytest fixtures.

Real-swarm fixtures (see tests/support/swarm_harness.py): `swarm` (session: mgr-1 + gpu-node-1,
gpu-node-2 advertising the GPUs of tests/support/gpu_nodes.py), `swarm3` (module: 3 managers +
1 worker, for fail-over), `swarm_factory` (session: start any other shape; all torn
down at the end of the session), `swarm_required` (fail/skip check only).
They FAIL when the machine cannot run a swarm (not root, no dockerd...), unless
SWARMGPU_SKIP_SWARM=1 is set, which turns that into a skip.

Shared by several modules: `agents` (module: an agent per GPU node), `daemon` (module:
the swarm module's real daemon, run as its ``DAEMON = ModuleDaemon(...)`` says), `pki`
(module: a swarm-like CA) and `chromium`. Their code lives in tests/support/; test
modules import from there, never from each other (tests/test_test_layout.py).

In CI (CI=true) every skip is a failure: a missing fixture, tool or package must not
pass unnoticed. The only exceptions are skips whose reason carries a tag
``[ci-allowed: NAME]`` with NAME listed in SWARMGPU_CI_ALLOWED_SKIPS, which .ci/run
sets, naming why each one stays.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest
from support.agent_threads import facts_refreshers, left_running
from support.swarm_harness import (
    SwarmCluster,
    cleanup_stale,
    gpu_resource_args,
    preflight,
)

if TYPE_CHECKING:
    from support.browser import Doc, MapServer

REPO = Path(__file__).resolve().parent.parent
SWARM_ARTIFACTS = REPO / "artifacts" / "swarm"  # dockerd logs per run and node
_KEEP_RUN_LOGS = 10


def _require_swarm() -> None:
    problems = preflight()
    if not problems:
        return
    reason = "the real test swarm cannot start here: " + "; ".join(problems)
    if os.environ.get("SWARMGPU_SKIP_SWARM") == "1":
        pytest.skip(reason + " (skipped: SWARMGPU_SKIP_SWARM=1)")
    pytest.fail(
        reason + ". Run as root with docker.io installed (see .ci/run), "
        "or set SWARMGPU_SKIP_SWARM=1 to skip swarm tests.",
        pytrace=False,
    )


# --- CI: a skip is a failure unless .ci/run allows it by name ------------------------

_ALLOWED_TAG = re.compile(r"\[ci-allowed: ([A-Za-z0-9_-]+)\]")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _skip_reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_if_skip_not_allowed(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (report.skipped and _in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    allowed = {s.strip() for s in os.environ.get("SWARMGPU_CI_ALLOWED_SKIPS", "").split(",")}
    tag = _ALLOWED_TAG.search(reason)
    if tag and tag.group(1) in allowed:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped in CI, which counts as a failure: {reason}\n"
        "(CI=true: install what the test needs - .ci/run and scripts/setup.sh do - or, if "
        "CI can never have it, tag the skip '[ci-allowed: NAME]' and add NAME to "
        "SWARMGPU_CI_ALLOWED_SKIPS in .ci/run with the reason)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _fail_if_skip_not_allowed(outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail_if_skip_not_allowed(outcome.get_result())  # type: ignore[attr-defined]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-docker-config", action="store_true",
        help="record `docker stack config`'s reading of every case of "
        "tests/test_render_as_docker_config.py again, with the newest docker CLI of 28 or "
        "later found (tests/fixtures/SOURCES.md)")


def _prune_old_logs() -> None:
    runs = sorted(SWARM_ARTIFACTS.glob("sgt*"), key=lambda p: p.stat().st_mtime)
    for old in runs[:-_KEEP_RUN_LOGS]:
        shutil.rmtree(old, ignore_errors=True)


SwarmFactory = Callable[..., SwarmCluster]


@pytest.fixture
def swarm_required() -> None:
    """For tests that drive a SwarmCluster themselves: fail/skip like `swarm` does."""
    _require_swarm()


@pytest.fixture(scope="session")
def swarm_factory() -> Iterator[SwarmFactory]:
    """`swarm_factory(managers=.., workers=.., extra_args={...})` -> a started cluster."""
    started: list[SwarmCluster] = []
    prepared = False

    def make(**kwargs: Any) -> SwarmCluster:
        nonlocal prepared
        _require_swarm()
        if not prepared:
            cleanup_stale()  # only runs whose owner process is gone
            SWARM_ARTIFACTS.mkdir(parents=True, exist_ok=True)
            _prune_old_logs()
            prepared = True
        kwargs.setdefault("log_dir", SWARM_ARTIFACTS)
        cluster = SwarmCluster(**kwargs)
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.teardown()


_SHARED: dict[str, SwarmCluster] = {}  # the session swarm, once a module asked for it


@pytest.fixture(scope="session")
def swarm(swarm_factory: SwarmFactory) -> Iterator[SwarmCluster]:
    """mgr-1 + gpu-node-1 + gpu-node-2; each worker advertises, as NVIDIA-GPU generic
    resources, the GPU UUIDs of the machine it stands in for (tests/support/gpu_nodes.py)."""
    from support.gpu_nodes import GPU_NODES  # lazy: imports swarmgpu, only needed with a swarm

    cluster = swarm_factory(
        managers=1,
        workers=2,
        extra_args={host: gpu_resource_args(n.uuids()) for host, n in GPU_NODES.items()},
    )
    _SHARED["swarm"] = cluster
    try:
        yield cluster
    finally:
        _SHARED.pop("swarm", None)
        cluster.teardown()


# What a module's services leave on the shared swarm: their GPU ledger and gates on the
# nodes, and the mover's records on the swarm object.
_MODULE_NODE_KEYS = ("swarmgpu.assign.", "swarmgpu.service.")
_MODULE_SWARM_KEYS = ("swarmgpu.state.moves",)


@pytest.fixture(autouse=True, scope="module")
def _shared_swarm_left_clean() -> Iterator[None]:
    """The session swarm is shared by every swarm module. After each one (its own
    daemon already stopped: an autouse fixture ends last), every service it left and its
    ledger, gates and move records go, so the next module finds every GPU free even when
    this one failed before its own clean-up (one failure used to fail every later
    module that needs a whole node)."""
    yield
    cluster = _SHARED.get("swarm")
    if cluster is None:
        return
    mgr = cluster.manager
    for stack in cluster.cli(mgr, "stack", "ls", "--format", "{{.Name}}",
                             check=False).stdout.split():
        cluster.cli(mgr, "stack", "rm", stack, check=False)
    services = cluster.cli(mgr, "service", "ls", "-q", check=False).stdout.split()
    if services:
        cluster.cli(mgr, "service", "rm", *services, check=False)
    api = cluster.client(mgr).api
    for _ in range(5):  # read-modify-write; "update out of sequence" is retried
        try:
            for n in api.nodes():
                spec = n["Spec"]
                labels = spec.get("Labels") or {}
                keep = {k: v for k, v in labels.items() if not k.startswith(_MODULE_NODE_KEYS)}
                if keep != labels:
                    api.update_node(n["ID"], n["Version"]["Index"], {**spec, "Labels": keep})
            sw = api.inspect_swarm()
            labels = sw["Spec"].get("Labels") or {}
            keep = {k: v for k, v in labels.items() if not k.startswith(_MODULE_SWARM_KEYS)}
            if keep != labels:
                api.update_swarm(version=sw["Version"]["Index"],
                                 swarm_spec={**sw["Spec"], "Labels": keep})
            break
        except docker.errors.APIError:
            continue


@pytest.fixture(autouse=True, scope="module")
def _no_facts_refresh_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each module (its own fixtures already torn down: an autouse fixture ends
    last), no agent facts-refresh thread it started is still running: one left reads its
    source for the rest of the session, and past its end (tests/support/agent_threads)."""
    before = facts_refreshers()
    yield
    left = left_running(before)
    assert not left, (
        f"{request.module.__name__} left {len(left)} agent facts-refresh thread(s) running:"
        " stop every server build_server returns (server.shutdown(), or close() when "
        "serve_forever never ran) in a finally or a fixture's teardown, also when the "
        "setup fails after it")


@pytest.fixture(scope="module")
def swarm3(swarm_factory: SwarmFactory) -> Iterator[SwarmCluster]:
    """mgr-1..mgr-3 (a real raft quorum) + gpu-node-1; fresh per module.

    Raft election tick 3 (swarmkit default 10, 1 s ticks): fail-over tests wait about
    8-11 s for a new leader instead of 11-19 s (both measured here).
    """
    cluster = swarm_factory(
        managers=3, workers=1, swarm_spec={"election_tick": 3, "heartbeat_tick": 1}
    )
    try:
        yield cluster
    finally:
        cluster.teardown()


# --- fixtures shared by several modules (their code: tests/support/) ------------------


@pytest.fixture(scope="module")
def agents(swarm: SwarmCluster) -> Iterator[dict[str, Any]]:
    """An agent per GPU node of the test swarm, serving its real capture on :9401."""
    from support.gpu_nodes import run_agents

    yield from run_agents(swarm)


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest, swarm: SwarmCluster, agents: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The real daemon of a swarm module, with an agent per GPU node, as the module's
    ``DAEMON = ModuleDaemon(log, config)`` says (tests/support/daemon.py)."""
    from support.daemon import run_module_daemon

    setup = getattr(request.module, "DAEMON", None)
    if setup is None:
        pytest.fail(f"{request.module.__name__} asks for `daemon`: say how it runs with "
                    "DAEMON = ModuleDaemon(...) (tests/support/daemon.py)", pytrace=False)
    yield from run_module_daemon(swarm, tmp_path_factory, setup)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A swarm-like PKI: a root CA and node certificates with Swarm's subject layout
    (CN node ID, O cluster ID, OU role), plus the forgeries a reviewer would try."""
    from support.identity import make_pki

    return make_pki(tmp_path_factory)


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's headless Chromium, for the GPU map tests (fails if missing)."""
    from support.browser import find_chromium

    return find_chromium()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[], Doc]], MapServer]]:
    """``serve(cluster_json)``: a MapServer of the GPU map on 127.0.0.1, closed after the
    test (tests/support/browser.py)."""
    from support.browser import map_servers

    yield from map_servers()
