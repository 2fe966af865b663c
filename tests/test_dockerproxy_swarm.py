"""`swarmgpu docker-proxy` in front of the real manager engine (issues 25 and 32).

The proxy listens on a unix socket in front of the manager's dockerd; the real daemon
(shipped defaults: identity swarm-pki, agents serving their node certificates) is
pointed at it and nothing else. Shown here, with the engine itself as the witness
(read directly, never through the proxy):

- the daemon's full cycles work through it: label sync, placement of a GPU service
  (its device list and gate), a hot-spot move (make-before-break: replicas, the move
  record on the swarm object, labels), the workload model stored with
  ``POST /swarm/update``; no call the daemon makes is refused;
- smuggling framings (the bare-LF request of issue 32, CL.TE, TE.CL, duplicate
  Content-Length, obsolete folding, chunk-extension tricks, a pipelined request,
  HTTP/1.0 keep-alive, an absolute-form target, ``%2f``, ``..``) create no container;
- the allowed writes are checked for what they do: an update of the GPU service the
  daemon placed that adds a bind mount, changes the image, adds a capability, a network,
  a published port or a foreign env line, or asks for a rollback is refused, and a
  service that is not swarmgpu's is not written at all; so are a node role or
  availability change and a swarm update that rotates a token or changes the CA
  settings; ``GET /swarm`` carries no join token.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from support.gpu_nodes import (
    GPU_NODES,
    LOGS,
    cfg_file,
    kwargs_for_logs,
    labels_of,
    start_agent,
    start_daemon,
    stop,
    swarmgpu_env,
)
from support.swarm_harness import IMAGE, SwarmCluster
from support.swarm_rebalance import IDLE, holder_gpu, hot, where
from support.swarm_services import deploy, stack_yaml, tasks_running, wait_running

from swarmgpu.allocator.workload import STATE_KEY

pytestmark = pytest.mark.swarm
P = "swarmgpu."
STACK = "dproxy"
PROXY_LOG = LOGS / "docker-proxy.log"
DAEMON_LOG = LOGS / "docker-proxy-daemon.log"
EVIL = "dproxy-evil"


def _swarm_labels(swarm: SwarmCluster) -> dict[str, str]:
    spec = swarm.client(swarm.manager).api.inspect_swarm()["Spec"]
    return dict(spec.get("Labels") or {})


def _drop_workload(swarm: SwarmCluster) -> None:
    """Start without a stored model, so the daemon must write one through the proxy."""
    api = swarm.client(swarm.manager).api
    raw = api.inspect_swarm()
    labels = dict(raw["Spec"].get("Labels") or {})
    if labels.pop(P + STATE_KEY, None) is not None:
        api.update_swarm(version=raw["Version"]["Index"], swarm_spec={**raw["Spec"],
                                                                      "Labels": labels})


@pytest.fixture(scope="module")
def proxied(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("dproxy")
    LOGS.mkdir(parents=True, exist_ok=True)
    PROXY_LOG.write_text("")
    DAEMON_LOG.write_text("")
    profiles = {h: tmp / f"{h}.yml" for h in GPU_NODES}
    for p in profiles.values():
        p.write_text(json.dumps(IDLE))
    agents = {h: start_agent(swarm, h, "--metrics-profile", str(profiles[h]))
              for h in GPU_NODES}
    sock = tmp / "docker.sock"
    proxy = swarm.exec_in_netns(swarm.manager, [
        sys.executable, "-m", "swarmgpu.cli", "docker-proxy", "--listen", f"unix://{sock}",
        "--upstream", swarm.manager.docker_host], env=swarmgpu_env(),
        **kwargs_for_logs(PROXY_LOG))
    swarm.wait_for(lambda: sock.exists(), 20, "the proxy's socket")
    _drop_workload(swarm)
    cfg = cfg_file(tmp, swarm, docker_host=f"unix://{sock}", sync={"interval_s": 1},
                   rebalance={"dry_run": False, "policies": "hotspot", "hotspot": {"window_s": 4},
                              "max_gap_s": 3, "min_samples": 3, "cooldown_s": 600,
                              "move_timeout_s": 60})
    daemon = start_daemon(swarm, cfg, DAEMON_LOG)
    try:
        yield {"sock": sock, "tmp": tmp, "daemon": daemon, "profiles": profiles}
    finally:
        swarm.cli(swarm.manager, "service", "rm", EVIL, check=False)
        swarm.cli(swarm.manager, "stack", "rm", STACK, check=False)
        swarm.wait_for(lambda: not any(k.startswith(f"{P}assign.") for h in GPU_NODES
                                       for k in labels_of(swarm, h)),
                       60, "the module's GPUs released")
        stop(daemon)
        stop(proxy)
        for a in agents.values():
            stop(a)


def _through(proxied: dict[str, Any]) -> docker.APIClient:
    return docker.APIClient(base_url=f"unix://{proxied['sock']}", timeout=10)


@pytest.fixture(scope="module")
def deployed(swarm: SwarmCluster, proxied: dict[str, Any]) -> dict[str, Any]:
    """The module's GPU services, placed by the daemon through the proxy: one whole
    4090 (``one``) and two halves (``a``, ``b``) that share a GPU."""
    swarm.wait_for(lambda: labels_of(swarm, "gpu-node-2").get(P + "gpu.product")
                   == "NVIDIA-GeForce-RTX-4090", 60, "labels synced through the proxy")
    frac = {"labels": {P + "gpu-fraction": "0.5"}}
    deploy(swarm, proxied["tmp"], STACK, {"one": {"labels": {P + "gpus": "1",
                                                             P + "gpu-product": "*4090*"}},
                                          "a": frac, "b": frac}, stack_yaml)
    (task,) = wait_running(swarm, f"{STACK}_one", 1, 90)
    return {"one": task}


def test_full_daemon_cycles_through_the_proxy(swarm: SwarmCluster, proxied: dict[str, Any],
                                              deployed: dict[str, Any]) -> None:
    task = deployed["one"]
    assert swarm.node(task["NodeID"]).hostname == "gpu-node-2"
    assert any(k.startswith(P + "assign.") for k in labels_of(swarm, "gpu-node-2"))
    swarm.wait_for(lambda: P + STATE_KEY in _swarm_labels(swarm), 60,
                   "the workload model stored on the swarm object (POST /swarm/update)")
    # A move: the halves share a GPU; it runs hot; one of them moves (make-before-break:
    # replicas and MaxReplicas, the move record on the swarm object, the labels).
    for s in ("a", "b"):
        wait_running(swarm, f"{STACK}_{s}", 1, 90)
    host, uuid = holder_gpu(swarm, f"{STACK}_a")
    assert holder_gpu(swarm, f"{STACK}_b") == (host, uuid)
    hot(proxied["profiles"][host], uuid)
    api = swarm.client(swarm.manager).api

    def moved() -> str | None:
        for s in ("a", "b"):
            if f"{P}state.moved-at" in (api.inspect_service(f"{STACK}_{s}")["Spec"]
                                        .get("Labels") or {}):
                return s
        return None

    mover = swarm.wait_for(moved, 90, "a hot-spot move through the proxy")
    hot(proxied["profiles"][host], None)
    new_host, new_uuid = holder_gpu(swarm, f"{STACK}_{mover}")
    assert (new_host, new_uuid) != (host, uuid)
    swarm.wait_for(lambda: where(swarm, f"{STACK}_{mover}") == {new_host: new_uuid}, 60,
                   "the moved task on its new GPU")
    assert len(tasks_running(swarm, f"{STACK}_{mover}")) == 1
    spec = api.inspect_service(f"{STACK}_{mover}")["Spec"]
    assert spec["Mode"]["Replicated"]["Replicas"] == 1
    assert proxied["daemon"].poll() is None, f"daemon died; see {DAEMON_LOG}"
    log = PROXY_LOG.read_text()
    assert "refused" not in log, f"the daemon made a call outside the list:\n{log[-3000:]}"
    assert "docker-proxy" not in DAEMON_LOG.read_text()  # no refusal quoted in an error


def _create(name: str) -> bytes:
    """What an attacker wants the engine to run: a privileged container with / mounted."""
    return json.dumps({"Image": IMAGE, "Cmd": ["true"], "Labels": {"dproxy": "smuggled"},
                       "HostConfig": {"Privileged": True,
                                      "Binds": ["/:/host"]}}).encode()


def _post_create(name: str, *, version: str = "HTTP/1.1") -> bytes:
    body = _create(name)
    return (f"POST /v1.41/containers/create?name={name} {version}\r\nHost: docker\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


def _smuggles(node_id: str) -> dict[str, bytes]:
    """Framings that two HTTP parsers can read differently, each hiding a container
    create behind (or inside) a call the proxy allows."""
    inner = _post_create("smuggled")
    upd = f"POST /v1.41/nodes/{node_id}/update?version=1 HTTP/1.1\r\nHost: docker\r\n"
    chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
    return {
        # issue 32: the Host line ends in a bare LF, which Go ends the head at
        "bare-lf": b"GET /v1.41/nodes HTTP/1.1\r\nHost: docker\n\n" + inner,
        "bare-cr": b"GET /v1.41/nodes HTTP/1.1\r\nHost: docker\r\rX: y\r\n\r\n" + inner,
        "cl-te": (upd + "Content-Type: application/json\r\nContent-Length: 5\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n").encode() + b"0\r\n\r\n" + inner,
        "te-cl": (upd + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                  f"Content-Length: {len(chunk)}\r\n\r\n").encode() + chunk,
        "te-obfuscated": (upd + "Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n\r\n"
                          ).encode() + b"0\r\n\r\n" + inner,
        "te-list": (upd + "Transfer-Encoding: gzip, chunked\r\n\r\n").encode() + chunk,
        "duplicate-cl": (upd + f"Content-Length: 0\r\nContent-Length: {len(inner)}\r\n\r\n"
                         ).encode() + inner,
        "cl-list": (upd + f"Content-Length: {len(inner)}, {len(inner)}\r\n\r\n"
                    ).encode() + inner,
        "cl-space-before-colon": (upd + f"Content-Length : {len(inner)}\r\n\r\n"
                                  ).encode() + inner,
        "obs-fold": (upd + "X-Pad: a\r\n Transfer-Encoding: chunked\r\n"
                     "Content-Length: 5\r\n\r\n").encode() + b"0\r\n\r\n" + inner,
        "chunk-ext-bare-lf": (upd + "Transfer-Encoding: chunked\r\n\r\n").encode()
        + b"2;x\n\r\n{}\r\n0\r\n\r\n" + inner,
        "chunk-ext-quoted-crlf": (upd + "Transfer-Encoding: chunked\r\n\r\n").encode()
        + b'2;x="\r\n0\r\n\r\n' + inner + b'"\r\n{}\r\n0\r\n\r\n',
        "chunk-size-prefix": (upd + "Transfer-Encoding: chunked\r\n\r\n").encode()
        + b"0x0\r\n\r\n" + inner,
        "chunk-trailer": (upd + "Transfer-Encoding: chunked\r\n\r\n").encode()
        + b"2\r\n{}\r\n0\r\nContent-Length: 0\r\n\r\n" + inner,
        "pipelined": b"GET /v1.41/nodes HTTP/1.1\r\nHost: docker\r\n\r\n" + inner,
        "pipelined-keep-alive": b"GET /v1.41/nodes HTTP/1.1\r\nHost: docker\r\n"
                                b"Connection: keep-alive\r\n\r\n" + inner,
        "http10-keep-alive": b"GET /v1.41/nodes HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                             + _post_create("smuggled", version="HTTP/1.0"),
        "absolute-form": b"POST http://docker/v1.41/containers/create?name=smuggled "
                         + inner.split(b" ", 2)[2],
        "absolute-form-allowed-path": b"GET http://docker/v1.41/nodes HTTP/1.1\r\n"
                                      b"Host: docker\r\n\r\n" + inner,
        "encoded-slash": inner.replace(b"/v1.41/containers/create",
                                       b"/v1.41/nodes/x%2f..%2f..%2fcontainers%2fcreate", 1),
        "dot-segments": inner.replace(b"/v1.41/containers/create",
                                      b"/v1.41/nodes/../containers/create", 1),
        "doubled-slash": inner.replace(b"/v1.41/containers/create",
                                       b"/v1.41//containers/create", 1),
        "upgrade": b"GET /v1.41/nodes HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\n"
                   b"Upgrade: tcp\r\n\r\n" + inner,
        "direct": inner,
    }


def _send(sock: Path, raw: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(15)
        s.connect(str(sock))
        s.sendall(raw)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:
            pass
        return out


def test_smuggled_requests_create_nothing(swarm: SwarmCluster,
                                          proxied: dict[str, Any]) -> None:
    engine = swarm.client(swarm.manager).api  # the witness: the engine itself
    before = {c["Id"] for c in engine.containers(all=True)}
    answers = {}
    for name, raw in _smuggles(swarm.manager.node_id).items():
        answers[name] = _send(proxied["sock"], raw)
    time.sleep(1)
    after = engine.containers(all=True)
    created = [c for c in after if c["Id"] not in before]
    assert not created, f"the engine holds new containers: {created}"
    assert not engine.containers(all=True, filters={"label": "dproxy=smuggled"})
    for name, got in answers.items():
        assert re.match(rb"HTTP/1\.1 4(00|03|11) ", got), (name, got[:300])
        assert got.count(b"HTTP/1.1 ") == 1, (name, got[:500])
    log = PROXY_LOG.read_text()
    assert log.count("refused") >= len(answers), log[-3000:]


def _spec(api: docker.APIClient, service: str) -> tuple[int, dict[str, Any]]:
    raw = api.inspect_service(service)
    return int(raw["Version"]["Index"]), raw["Spec"]


def _post(api: docker.APIClient, path: str, body: Any, **params: Any) -> Any:
    resp = api._post_json(api._url(path), data=body, params=params)
    return resp


@pytest.fixture(scope="module")
def plain(swarm: SwarmCluster, proxied: dict[str, Any]) -> str:
    """A service without GPU labels (not swarmgpu's), made on the engine."""
    api = swarm.client(swarm.manager).api
    api.create_service({"ContainerSpec": {"Image": IMAGE, "Command": ["sleep", "3600"],
                                          "Env": ["A=1"]}}, name=EVIL,
                       labels={"team": "x"})
    return EVIL


def _update(api: docker.APIClient, service: str,
            edit: Callable[[dict[str, Any]], dict[str, Any]], **params: Any) -> Any:
    """POST the edited current spec at its version; again when the daemon wrote the
    service in between (the proxy's "update out of sequence", as the engine's)."""
    for _ in range(10):
        version, spec = _spec(api, service)
        resp = _post(api, f"/services/{service}/update", edit(spec), version=version,
                     **params)
        if resp.status_code != 500:
            return resp
        time.sleep(0.3)
    return resp


def _cs(**edits: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def edit(spec: dict[str, Any]) -> dict[str, Any]:
        new = json.loads(json.dumps(spec))
        new["TaskTemplate"]["ContainerSpec"].update(edits)
        return new
    return edit


def test_service_updates_change_only_what_the_daemon_writes(
        swarm: SwarmCluster, proxied: dict[str, Any], deployed: dict[str, Any],
        plain: str) -> None:
    api, engine = _through(proxied), swarm.client(swarm.manager).api
    svc = f"{STACK}_one"  # a GPU service the daemon placed: swarmgpu's to write
    _, before = _spec(engine, svc)
    env = before["TaskTemplate"]["ContainerSpec"]["Env"]
    hostile: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "bind mount of /": _cs(Mounts=[{"Type": "bind", "Source": "/", "Target": "/host"}]),
        "image": _cs(Image="local/other:latest"),
        "capability": _cs(CapabilityAdd=["CAP_SYS_ADMIN"]),
        "foreign env": _cs(Env=[*env, "LD_PRELOAD=/host/evil.so"]),
        "all GPUs by env": _cs(Env=[*env, "NVIDIA_VISIBLE_DEVICES=all"]),
        "label outside the prefix": lambda s: {**s, "Labels": {**s["Labels"], "team": "y"}},
        "networks": lambda s: {**s, "TaskTemplate": {**s["TaskTemplate"],
                                                     "Networks": [{"Target": "host"}]}},
        "published port": lambda s: {**s, "EndpointSpec": {"Ports": [
            {"TargetPort": 22, "PublishedPort": 2222}]}},
    }
    for what, edit in hostile.items():
        resp = _update(api, svc, edit)
        assert resp.status_code == 403, (what, resp.status_code, resp.text)
        assert "swarmgpu docker-proxy" in resp.json()["message"]
    resp = _update(api, svc, lambda s: s, rollback="previous")
    assert resp.status_code == 403, resp.text
    # docker-py's own update_service with a bind mount: refused too
    with pytest.raises(docker.errors.APIError) as exc:
        api.update_service(svc, _spec(api, svc)[0], task_template=docker.types.TaskTemplate(
            docker.types.ContainerSpec(IMAGE, mounts=[docker.types.Mount(
                "/host", "/", type="bind")])))
    assert exc.value.status_code == 403
    # a stale version is the engine's "out of sequence", so the daemon reads again
    version, spec = _spec(api, svc)
    resp = _post(api, f"/services/{svc}/update", spec, version=version - 1)
    assert resp.status_code == 500 and "out of sequence" in resp.text
    _, after = _spec(engine, svc)
    cs = after["TaskTemplate"]["ContainerSpec"]
    assert "Mounts" not in cs and cs["Image"] == before["TaskTemplate"]["ContainerSpec"][
        "Image"] and "CapabilityAdd" not in cs and "LD_PRELOAD" not in json.dumps(after)
    # a service that is not swarmgpu's is not written at all, not even ForceUpdate
    def force(s: dict[str, Any]) -> dict[str, Any]:
        return {**s, "TaskTemplate": {**s["TaskTemplate"], "ForceUpdate": 1}}

    resp = _update(api, plain, force)
    assert resp.status_code == 403 and "does not write it" in resp.json()["message"]
    assert engine.inspect_service(plain)["Spec"]["TaskTemplate"].get("ForceUpdate", 0) == 0


def test_node_updates_change_only_labels_under_the_prefix(
        swarm: SwarmCluster, proxied: dict[str, Any]) -> None:
    api, engine = _through(proxied), swarm.client(swarm.manager).api
    nid = swarm.node("gpu-node-1").node_id
    raw = api.inspect_node(nid)
    version, spec = int(raw["Version"]["Index"]), raw["Spec"]
    for what, body in {"availability": {**spec, "Availability": "drain"},
                       "role": {**spec, "Role": "manager"},
                       "label outside the prefix": {**spec, "Labels": {
                           **(spec.get("Labels") or {}), "evil": "1"}},
                       # no node carries it: a service's renewal would exclude the node
                       "the renewal's label": {**spec, "Labels": {
                           **(spec.get("Labels") or {}), P + "state.renew": "1"}}
                       }.items():
        with pytest.raises(docker.errors.APIError) as exc:
            api.update_node(nid, version, body)
        assert exc.value.status_code == 403, what
    now = engine.inspect_node(nid)
    assert now["Version"]["Index"] == version
    assert now["Spec"]["Availability"] == "active" and now["Spec"]["Role"] == "worker"
    assert P + "state.renew" not in (now["Spec"].get("Labels") or {})


def test_swarm_updates_rotate_nothing_and_get_swarm_has_no_join_token(
        swarm: SwarmCluster, proxied: dict[str, Any]) -> None:
    api, engine = _through(proxied), swarm.client(swarm.manager).api
    seen = api.inspect_swarm()
    assert "JoinTokens" not in seen and "JoinTokens" not in json.dumps(seen)
    direct = engine.inspect_swarm()
    assert direct["JoinTokens"]["Worker"]  # the engine has them; the proxy holds them back
    version, spec = int(seen["Version"]["Index"]), seen["Spec"]
    for params in ({"rotateWorkerToken": "true"}, {"rotateManagerToken": "1"},
                   {"rotateManagerUnlockKey": "true"}, {"rotateWorkerToken": "false",
                                                        "rotateworkertoken": "true"}):
        resp = _post(api, "/swarm/update", spec, version=version, **params)
        assert resp.status_code == 403, (params, resp.text)
    with pytest.raises(docker.errors.APIError) as exc:
        api.update_swarm(version=version, rotate_worker_token=True)
    assert exc.value.status_code == 403
    ca = json.loads(json.dumps(spec))
    ca.setdefault("CAConfig", {})["NodeCertExpiry"] = 3600 * 10**9
    for body in (ca, {**spec, "Labels": {**(spec.get("Labels") or {}), "evil": "1"}}):
        resp = _post(api, "/swarm/update", body, version=version)
        assert resp.status_code == 403, resp.text
    for path in ("/swarm/unlockkey", "/swarm/join", "/swarm/leave"):
        assert api._get(api._url(path)).status_code == 403
    after = engine.inspect_swarm()
    assert after["JoinTokens"] == direct["JoinTokens"]
    assert after["Spec"].get("CAConfig") == direct["Spec"].get("CAConfig")
