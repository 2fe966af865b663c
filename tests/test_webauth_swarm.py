"""The daemon's HTTP asks who you are (issue 32, item 3), on the real test swarm, with the
shipped stack's settings: the daemon service's environment of stacks/swarmgpu.yml
(listen 0.0.0.0:9402, the token file of the swarmgpu-http-token secret) and its config
stacks/swarmgpu-config.yml, in the manager's namespace; only the engine (the stack's
docker-proxy socket) and the token file's place (the secret's mount) differ.

Clients come from another address: the GPU nodes' namespaces. The flood of complete
requests whose answers are never read comes from one worker, /healthz is asked from the
other worker and by the image's healthcheck on the manager itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support import slowflood
from support.gpu_nodes import LOGS, kwargs_for_logs, stop, swarmgpu_env
from support.paths import REPO
from support.swarm_harness import NodeHandle, SwarmCluster
from support.webauth_swarm import stack_daemon_env

from swarmgpu.core.httpguard import WRITE_DEADLINE_S
from swarmgpu.swarm.identity import default_cert_paths

pytestmark = pytest.mark.swarm

PORT = 9402
TOKEN = "swarm-http-token-0123456789abcdef"
PROBE = str(REPO / "tests/support/httpprobe.py")


def probe(swarm: SwarmCluster, node: NodeHandle, *reqs: dict[str, Any]) -> list[dict[str, Any]]:
    """GET from ``node``'s namespace (its own address), as JSON results."""
    proc = swarm.exec_in_netns(node, [sys.executable, PROBE, json.dumps(list(reqs))],
                               env=swarmgpu_env(), stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    got: list[dict[str, Any]] = json.loads(out)
    return got


@pytest.fixture(scope="module")
def stack_daemon(swarm: SwarmCluster, agents: dict[str, Any],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("webauth")
    env = stack_daemon_env()
    assert env["SWARMGPU_HTTP_LISTEN"] == f"0.0.0.0:{PORT}"
    assert env["SWARMGPU_HTTP_TOKEN_FILE"] == "/run/secrets/swarmgpu-http-token"
    (tmp / "token").write_text(TOKEN + "\n")
    env.update(SWARMGPU_DOCKER_HOST=swarm.manager.docker_host,  # not the proxy's socket
               SWARMGPU_HTTP_TOKEN_FILE=str(tmp / "token"),  # the secret's mount
               SWARMGPU_STATE_DIR=str(tmp / "state"), SWARMGPU_LOG_FORMAT="text")
    LOGS.mkdir(parents=True, exist_ok=True)
    proc = swarm.exec_in_netns(
        swarm.manager, [sys.executable, "-m", "swarmgpu.cli", "run", "--config",
                        str(REPO / "stacks" / "swarmgpu-config.yml")],
        env=swarmgpu_env(**env), **kwargs_for_logs(LOGS / "webauth-daemon.log"))
    mgr = swarm.manager
    crt, key, ca = default_cert_paths(str(mgr.data_root))
    worker, other = swarm.workers[0], swarm.workers[1]
    base = f"{mgr.addr}:{PORT}"
    manager_tls = {"cert": str(crt), "key": str(key), "ca": str(ca)}
    try:
        # HTTPS for manager certificates comes with the first cycle (the engine's data
        # root and root CA): wait for a manager's request to get through.
        deadline = time.monotonic() + 90
        while True:
            (r,) = probe(swarm, worker, {"url": f"https://{base}/api/v1/cluster",
                                         **manager_tls})
            if r["status"] == 200 or time.monotonic() > deadline:
                break
            time.sleep(1)
        yield {"proc": proc, "base": base, "worker": worker, "other": other,
               "manager_tls": manager_tls, "tmp": tmp}
    finally:
        stop(proc)


def test_another_address_needs_a_token_or_a_manager_certificate(
        swarm: SwarmCluster, stack_daemon: dict[str, Any]) -> None:
    base, worker = stack_daemon["base"], stack_daemon["worker"]
    wcrt, wkey, wca = default_cert_paths(str(worker.data_root))
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    got = probe(
        swarm, worker,
        {"url": f"http://{base}/api/v1/cluster"},
        {"url": f"http://{base}/metrics"},
        {"url": f"http://{base}/"},
        {"url": f"http://{base}/api/v1/cluster", "headers": {"Authorization": "Bearer no"}},
        {"url": f"http://{base}/api/v1/cluster", "headers": bearer},
        {"url": f"http://{base}/metrics", "headers": bearer},
        {"url": f"https://{base}/api/v1/cluster", **stack_daemon["manager_tls"]},
        # A worker's own Swarm certificate: verified, but not a manager's.
        {"url": f"https://{base}/api/v1/cluster", "cert": str(wcrt), "key": str(wkey),
         "ca": str(wca)},
        {"url": f"http://{base}/healthz"},
        {"url": f"http://{base}/login", "method": "POST", "body": f"token={TOKEN}",
         "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
    )
    codes = [r["status"] for r in got]
    assert codes == [401, 401, 401, 401, 200, 200, 200, 401, 200, 303], got
    assert '"schema":"swarmgpu.cluster/v1"' in got[4]["body"]
    assert '"schema":"swarmgpu.cluster/v1"' in got[6]["body"]
    assert "swarmgpu_" in got[5]["body"]
    assert '"nodes"' not in got[0]["body"] and "sign in once at /login" in got[0]["body"]


def test_healthz_answered_while_400_clients_hold_unread_answers(
        swarm: SwarmCluster, stack_daemon: dict[str, Any]) -> None:
    """400 connections from a worker's address, each a complete request (the cluster
    document with the token, or without it) whose answer is never read; /healthz from
    the other worker, a token client and the image's healthcheck on the manager are
    answered while they hold it. Judged by outcome, not timed: each client's deadline,
    half the write deadline, fails one that waited for a stuck answer to end; how fast
    is benchmarks/bench_unread.py (the figures printed here are the real swarm's)."""
    mgr, worker, other = swarm.manager, stack_daemon["worker"], stack_daemon["other"]

    def launch(argv: list[str], **kw: Any) -> subprocess.Popen[str]:
        return swarm.exec_in_netns(worker, argv, env=swarmgpu_env(), **kw)

    floods = [slowflood.start(PORT, worker.addr, 200, for_s=60, target=mgr.addr,
                              complete=path, headers=headers, rcvbuf=4096, renew_s=5.0,
                              launch=launch)
              for path, headers in (("/api/v1/cluster", (f"Authorization: Bearer {TOKEN}",)),
                                    ("/api/v1/cluster", ()))]
    try:
        time.sleep(2)
        got = probe(swarm, other, *[{"url": f"http://{stack_daemon['base']}/healthz",
                                     "timeout": WRITE_DEADLINE_S / 2}] * 10)
        worst = max(r["seconds"] for r in got)
        assert [r["status"] for r in got] == [200] * 10, got
        # The image's HEALTHCHECK, as Docker runs it in the daemon's container.
        t0 = time.monotonic()
        hc = swarm.exec_in_netns(mgr, [sys.executable, "-m", "swarmgpu.core.healthcheck",
                                       f"http://127.0.0.1:{PORT}/healthz"],
                                 env=swarmgpu_env(), stdout=subprocess.PIPE, text=True)
        hc_out, _ = hc.communicate(timeout=30)
        hc_s = time.monotonic() - t0
        assert hc.returncode == 0, hc_out
        (authed,) = probe(swarm, other, {"url": f"http://{stack_daemon['base']}/api/v1/cluster",
                                         "headers": {"Authorization": f"Bearer {TOKEN}"},
                                         "timeout": WRITE_DEADLINE_S / 2})
        print(f"\n/healthz under 400 unread answers: worst {worst:.3f}s of 10; image "
              f"healthcheck {hc_s:.2f}s (a new Python included); token client "
              f"{authed['seconds']:.3f}s", file=sys.stderr)
        assert authed["status"] == 200, authed
    finally:
        for f in floods:
            slowflood.stop(f)
    assert stack_daemon["proc"].poll() is None, "the daemon died under the flood"

