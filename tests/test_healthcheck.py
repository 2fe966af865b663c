"""swarmgpu.core.healthcheck (the image's HEALTHCHECK) against real agents on 127.0.0.1,
its role finding over /proc-shaped folders, and the Dockerfile and stack that use it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import REPO

from swarmgpu.agent.server import AgentServer, build_server
from swarmgpu.core.healthcheck import Target, find_target, main, probe
from swarmgpu.core.model import Gpu, NodeFacts

FACTS = NodeFacts(hostname="n", gpus=(Gpu(0, "GPU-a", "NVIDIA A100-SXM4-40GB", 40960),))
COMMAND = ["/opt/swarmgpu/bin/python", "-m", "swarmgpu.core.healthcheck"]


class Source:
    spec = "fake:test"

    def __init__(self, hang: bool = False) -> None:
        self.release = threading.Event()
        self.hang = hang

    def read(self) -> NodeFacts:
        if self.hang:
            self.release.wait(30)
        return FACTS


@pytest.fixture
def agent() -> Iterator[Any]:
    started: list[tuple[AgentServer, threading.Thread, Source]] = []

    def start(source: Source, **kw: Any) -> str:
        srv = build_server(source, "127.0.0.1:0", refresh_s=60, **kw)
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True)
        t.start()
        started.append((srv, t, source))
        host, port = srv.server_address[:2]
        deadline = time.monotonic() + 5
        while not source.hang and srv.cache.view().facts is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return f"{host!s}:{port}"

    yield start
    for srv, t, src in started:
        src.release.set()
        srv.shutdown()
        t.join(5)


def test_healthy_agent_is_healthy(agent: Any) -> None:
    listen = agent(Source())
    ok, seen = probe(Target(f"http://{listen}/healthz"))
    assert ok and '"status": "ok"' in seen.replace('":"', '": "'), seen


def test_agent_without_facts_yet_is_unhealthy(agent: Any) -> None:
    listen = agent(Source(hang=True))
    ok, seen = probe(Target(f"http://{listen}/healthz"))
    assert not ok and ": 503" in seen


def test_nothing_listening_is_unhealthy() -> None:
    ok, seen = probe(Target("http://127.0.0.1:1/healthz"), timeout_s=2)
    assert not ok and "127.0.0.1:1" in seen


def test_token_agent_answers_with_its_token_or_401(agent: Any, tmp_path: Path) -> None:
    listen = agent(Source(), token="s3cret-token-0123456789abcdef")
    tok = tmp_path / "tok"
    tok.write_text("s3cret-token-0123456789abcdef\n")
    assert probe(Target(f"http://{listen}/healthz", str(tok)))[0]
    # No token readable: healthy still (/healthz open, or a 401 from a serving agent).
    ok, seen = probe(Target(f"http://{listen}/healthz", str(tmp_path / "missing")))
    assert ok and (": 200" in seen or ": 401" in seen), seen


@pytest.mark.parametrize("kind", ["not utf-8", "two lines", "fifo", "huge"])
def test_a_token_file_the_agent_would_refuse_is_not_sent(
    agent: Any, tmp_path: Path, kind: str
) -> None:
    """The token file read as the agent reads it: one line of ASCII, bounded, a FIFO
    refused. Bytes not UTF-8 raised UnicodeDecodeError (a traceback for a probe), a
    second line went out in the header and came back in http.client's error, the
    token with it, printed into the container's health log; a FIFO was waited on past
    Docker's timeout; /dev/zero read until memory ran out (a megabyte: 431). None is
    sent instead: /healthz is open, and a serving agent's 401 still shows it up."""
    listen = agent(Source(), token="s3cret-token-0123456789abcdef")
    tok = tmp_path / "tok"
    if kind == "not utf-8":
        tok.write_bytes(b"s3cret-\xff\xfe-token\n")
    elif kind == "two lines":
        tok.write_text("s3cret-token-0123456789abcdef\nsecond-line-secret\n")
    elif kind == "fifo":
        os.mkfifo(tok)
    else:
        tok.write_bytes(b"s" * (1 << 20))
    got: list[tuple[bool, str]] = []
    target = Target(f"http://{listen}/healthz", str(tok))
    t = threading.Thread(target=lambda: got.append(probe(target)), daemon=True)
    t.start()
    t.join(8)
    assert got, "the probe waited on the token file"
    ok, seen = got[0]
    assert ok and (": 200" in seen or ": 401" in seen), seen
    assert "secret" not in seen and "s3cret" not in seen


def _proc(root: Path, pid: int, argv: list[str], env: dict[str, str] | None = None) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode()
                                           for k, v in (env or {}).items()))


def test_finds_the_agent_and_its_listen_address(tmp_path: Path) -> None:
    _proc(tmp_path, 1, ["/sbin/docker-init", "--", "swarmgpu", "agent"])
    _proc(tmp_path, 7, ["/opt/swarmgpu/bin/python", "/opt/swarmgpu/bin/swarmgpu", "agent",
                        "--source", "nvml", "--listen", "0.0.0.0:9401",
                        "--token-file", "/run/secrets/t"])
    assert find_target(tmp_path) == Target("https://127.0.0.1:9401/healthz", "/run/secrets/t",
                                           "http://127.0.0.1:9401/healthz")


def test_agent_scheme_follows_its_identity(tmp_path: Path) -> None:
    """HTTPS first (swarm-pki, or auto where the certificate is found), plain HTTP first
    only with --identity none; the other scheme is the fallback."""
    cases = [
        (["swarmgpu", "agent", "--listen=[::]:19401", "--tls-cert", "c"],
         Target("https://[::1]:19401/healthz", None, "http://[::1]:19401/healthz")),
        (["swarmgpu", "agent"],
         Target("https://127.0.0.1:9401/healthz", None, "http://127.0.0.1:9401/healthz")),
        (["python3", "-m", "swarmgpu.cli", "agent", "--listen", ":19401", "--identity",
          "none"],
         Target("http://127.0.0.1:19401/healthz", None, "https://127.0.0.1:19401/healthz")),
    ]
    for n, (argv, want) in enumerate(cases):
        _proc(tmp_path / str(n), 1, argv)
        assert find_target(tmp_path / str(n)) == want, argv


def test_docker_proxy_is_probed_on_its_socket(tmp_path: Path) -> None:
    sock = tmp_path / "docker.sock"
    _proc(tmp_path / "p", 1, ["/opt/swarmgpu/bin/python", "/opt/swarmgpu/bin/swarmgpu",
                              "docker-proxy", "--listen", f"unix://{sock}"])
    target = find_target(tmp_path / "p")
    assert target == Target(f"unix://{sock}")
    assert not probe(target)[0]  # nothing listens yet
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(str(sock))
        srv.listen(1)
        ok, seen = probe(target)
    assert ok, seen
    _proc(tmp_path / "d", 1, ["swarmgpu", "docker-proxy"])
    assert find_target(tmp_path / "d") == Target("unix:///run/swarmgpu/docker.sock")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def test_tls_agent_and_the_scheme_fallback(agent: Any, tmp_path: Path) -> None:
    """An agent serving HTTPS with a Swarm-style node certificate (mutual TLS): the probe
    gets an answer over HTTPS (403 without a manager certificate, or 200), and finds it
    from plain HTTP first too; a plain agent is found from HTTPS first."""
    from swarmgpu.swarm.identity import ReloadingServerContext

    ca, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(ca), "-subj", "/CN=swarm-ca", "-days", "2")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(tmp_path / "n.key"), "-out", str(tmp_path / "n.csr"),
             "-subj", "/O=clusterA/OU=swarm-worker/CN=node1")
    _openssl("x509", "-req", "-in", str(tmp_path / "n.csr"), "-CA", str(ca), "-CAkey",
             str(key), "-CAcreateserial", "-days", "2", "-out", str(tmp_path / "n.crt"))
    tls = ReloadingServerContext(tmp_path / "n.crt", tmp_path / "n.key", ca)
    listen = agent(Source(), tls=tls)
    for first, other in (("https", "http"), ("http", "https")):
        ok, seen = probe(Target(f"{first}://{listen}/healthz", None,
                                f"{other}://{listen}/healthz"))
        assert ok and seen.startswith(f"https://{listen}/healthz: "), seen
    plain = agent(Source())
    ok, seen = probe(Target(f"https://{plain}/healthz", None, f"http://{plain}/healthz"))
    assert ok and seen.startswith(f"http://{plain}/healthz: 200"), seen
    # Refused is final: no second try would help.
    ok, seen = probe(Target("https://127.0.0.1:1/healthz", None, "http://127.0.0.1:1/healthz"))
    assert not ok and ";" not in seen


def test_finds_the_daemon_from_env_config_or_default(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yml"
    cfg.write_text("http:\n  listen: 0.0.0.0:19402\n")
    cases = [
        ({"SWARMGPU_HTTP_LISTEN": "0.0.0.0:9402"}, str(cfg), "http://127.0.0.1:9402/healthz"),
        ({}, str(cfg), "http://127.0.0.1:19402/healthz"),
        ({}, str(tmp_path / "missing.yml"), "http://127.0.0.1:9402/healthz"),
    ]
    for n, (env, path, want) in enumerate(cases):
        root = tmp_path / f"p{n}"
        _proc(root, 1, ["/opt/swarmgpu/bin/python", "/opt/swarmgpu/bin/swarmgpu", "run",
                        "--config", path], env)
        assert find_target(root) == Target(want)


def test_a_config_the_daemon_refuses_for_a_leading_zero_is_not_read_for_its_listen(
        tmp_path: Path) -> None:
    # The daemon refuses the file (``parallel: 010``: 8 or 10 by the reader); the
    # health check read its listen address from it anyway: one file, two verdicts.
    cfg = tmp_path / "config.yml"
    cfg.write_text("http:\n  listen: 0.0.0.0:19402\nagents:\n  parallel: 010\n")
    _proc(tmp_path, 1, ["/opt/swarmgpu/bin/swarmgpu", "run", "--config", str(cfg)])
    assert find_target(tmp_path) == Target("http://127.0.0.1:9402/healthz")


def test_no_swarmgpu_process_is_unhealthy(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _proc(tmp_path, 1, ["sleep", "3600"])
    assert find_target(tmp_path) is None
    assert main(["ftp://x/"]) == 1


def test_module_runs_as_the_image_runs_it(agent: Any) -> None:
    """`python -m swarmgpu.core.healthcheck URL` as a process: exit 0 healthy, 1 not."""
    listen = agent(Source())
    for url, rc in ((f"http://{listen}/healthz", 0), ("http://127.0.0.1:1/healthz", 1)):
        r = subprocess.run([sys.executable, *COMMAND[1:], url], capture_output=True,
                           text=True, timeout=30, check=False)
        assert r.returncode == rc, r


def test_dockerfile_and_stack_use_it() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert 'CMD ["' + '", "'.join(COMMAND) + '"]' in dockerfile
    assert "HEALTHCHECK --interval=" in dockerfile
    # docker stack deploy rejects group_add: no line may advise it.
    assert not any("group_add" in ln and "rejects" not in ln
                   for ln in dockerfile.splitlines())
    stack = yaml.safe_load((REPO / "stacks" / "swarmgpu.yml").read_text())
    for name in ("agent", "daemon"):
        hc = stack["services"][name]["healthcheck"]
        assert hc["test"] == ["CMD", *COMMAND], name
        assert hc["start_period"] and hc["retries"] >= 1
    # Every other service of the image either is probed by it (docker-proxy: its
    # socket) or turns the image's check off.
    for name, svc in stack["services"].items():
        hc = svc.get("healthcheck")
        assert hc is None or hc.get("disable") or hc["test"] == ["CMD", *COMMAND], name
