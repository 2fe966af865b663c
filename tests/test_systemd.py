"""systemd units and the example config: valid for systemd, hardened, consistent with the code."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from loguru import logger

from swarmgpu.core import sdnotify
from swarmgpu.core.config import Config, describe_defaults, load_config
from swarmgpu.manager import daemon

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "systemd"
BINARY = "/usr/local/bin/swarmgpu"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None,
    reason="systemd-analyze is not installed (apt-get install systemd); .ci/run installs it",
)


def settings(unit: str) -> dict[str, list[str]]:
    """key -> every value it is given (systemd keys may repeat)."""
    out: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|min|ms)?", value)
    assert m, f"unsupported time span {value!r}"
    return float(m.group(1)) * {"s": 1, None: 1, "min": 60, "ms": 0.001}[m.group(2)]


def test_daemon_unit_notify_watchdog_and_restart() -> None:
    s = settings("swarmgpu.service")
    assert s["Type"] == ["notify"]
    assert s["ExecStart"] == [f"{BINARY} run --config /etc/swarmgpu/config.yml"]
    assert s["EnvironmentFile"] == ["-/etc/swarmgpu/env"]
    assert s["Restart"] == ["on-failure"]
    # The watchdog is pinged once per cycle: it must outlast an interval plus a slow cycle.
    assert seconds(s["WatchdogSec"][0]) >= 2 * Config().sync.interval_s + 30
    assert s["StateDirectory"] == ["swarmgpu"]
    assert f"/var/lib/{s['StateDirectory'][0]}" == Config().state_dir


def test_a_config_error_stops_the_daemon_unit_instead_of_restarting_it(
        tmp_path: Path) -> None:
    # A config error is not transient: Restart=on-failure restarted the daemon every
    # 5 s into the same error, and `systemctl status` showed a restart count, not it.
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.cli.exitcodes import CONFIG_ERROR

    s = settings("swarmgpu.service")
    assert s["RestartPreventExitStatus"] == [str(CONFIG_ERROR)]
    assert CONFIG_ERROR not in (0, 1, 2)  # (2: no engine at start, which a restart cures)
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  parallel: 010\n")
    res = CliRunner().invoke(main, ["run", "--config", str(cfg)])
    assert res.exit_code == CONFIG_ERROR, res.output
    assert f"exits {CONFIG_ERROR}" in (REPO / "docs" / "systemd.md").read_text()


def test_agent_unit_notify_watchdog_and_restart() -> None:
    s = settings("swarmgpu-agent.service")
    agent_src = (REPO / "swarmgpu" / "agent" / "server.py").read_text()
    assert 'sd_notify("READY=1")' in agent_src and 'sd_notify("WATCHDOG=1")' in agent_src
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    # WATCHDOG=1 follows every facts read (--refresh-s, 30 s by default).
    assert seconds(s["WatchdogSec"][0]) >= 2 * 30 + 30
    assert s["ExecStart"][0].startswith(f"{BINARY} agent --source ")
    assert s["EnvironmentFile"] == ["-/etc/swarmgpu/env"]
    assert s["Restart"] == ["on-failure"]
    assert s["DevicePolicy"] == ["closed"]
    assert s["DeviceAllow"] == ["char-nvidia* rw"]


@pytest.mark.parametrize("args", [["--refresh-s", "0"], ["--listen", "nohost"],
                                  ["--allowed-hosts", "a b"],
                                  ["--trusted-proxies", "bogus"]])
def test_an_agent_option_error_stops_its_unit_instead_of_restarting_it(
        args: list[str]) -> None:
    # Before: the agent exited 2 on its own option errors, which Restart=on-failure
    # restarted every 5 s into the same error; a restart mends none of them.
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.cli.exitcodes import CONFIG_ERROR

    s = settings("swarmgpu-agent.service")
    assert s["RestartPreventExitStatus"] == [str(CONFIG_ERROR)]
    res = CliRunner().invoke(main, ["agent", "--source", "file:/none", *args])
    assert res.exit_code == CONFIG_ERROR, res.output


def test_the_real_agent_speaks_the_notify_protocol(tmp_path: Path) -> None:
    """`swarmgpu agent` as systemd starts it (NOTIFY_SOCKET, WATCHDOG_USEC): READY=1
    once listening with facts read, WATCHDOG=1 after each read, STOPPING=1 on SIGTERM."""
    import sys

    addr = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(addr)
    sock.settimeout(30)
    topo = REPO / "tests" / "fixtures" / "topology" / "topo_pcie_8x_rtx4090_pix_sys.txt"
    env = {**os.environ, "NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "90000000"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swarmgpu.cli",
            "agent",
            "--source",
            f"topo:{topo}",
            "--product",
            "NVIDIA GeForce RTX 4090",
            "--memory-mib",
            "24564",
            "--listen",
            "127.0.0.1:0",
            "--refresh-s",
            "1",  # the least the agent takes
            "--identity",
            "none",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        got = [sock.recv(64).decode() for _ in range(4)]
        assert got[0] == "READY=1", got
        assert got[1:] == ["WATCHDOG=1"] * 3, got
        proc.terminate()
        pings = 0  # (a read in flight may still ping: 20 reads' worth is a hang guard)
        while (msg := sock.recv(64).decode()) == "WATCHDOG=1":
            pings += 1
            assert pings < 20, "still reading after SIGTERM"
        assert msg == "STOPPING=1"
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


@pytest.mark.parametrize("unit", ["swarmgpu.service", "swarmgpu-agent.service"])
def test_units_are_hardened(unit: str) -> None:
    s = settings(unit)
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "DynamicUser": "yes",
        "CapabilityBoundingSet": "",
    }.items():
        assert s.get(key) == [value], f"{unit}: {key}={value} expected, got {s.get(key)}"


def _verifiable_copies(tmp_path: Path) -> list[Path]:
    # verify refuses an ExecStart binary that does not exist: point it at one that does.
    true = shutil.which("true")
    assert true
    out = []
    for unit in ("swarmgpu.service", "swarmgpu-agent.service"):
        copy = tmp_path / unit
        copy.write_text((UNITS / unit).read_text().replace(BINARY, true))
        out.append(copy)
    return out


@needs_analyze
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    units = _verifiable_copies(tmp_path)
    assert SYSTEMD_ANALYZE
    r = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", *map(str, units)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "swarmgpu" not in r.stderr, r.stderr  # no warnings about our units


def _docs_token_drop_in() -> str:
    doc = (REPO / "docs" / "systemd.md").read_text()
    m = re.search(
        r"```ini\n(# /etc/systemd/system/swarmgpu\.service\.d/http-token\.conf\n"
        r".*?)```",
        doc,
        re.DOTALL,
    )
    assert m, "docs/systemd.md: the http-token drop-in"
    return m.group(1)


def test_the_docs_token_drop_in_gives_the_daemon_its_credential() -> None:
    """docs/systemd.md, "Token files": the variable the drop-in sets is the one the
    config reads for http.token_file, and it names the credential the drop-in loads."""
    lines = dict(
        line.split("=", 1)
        for line in _docs_token_drop_in().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cred, _, source = lines["LoadCredential"].partition(":")
    var, _, path = lines["Environment"].partition("=")
    assert source.startswith("/etc/swarmgpu/") and path == f"%d/{cred}", lines
    creds = "/run/credentials/swarmgpu.service"  # what %d is for this system unit
    cfg = load_config(None, env={var: path.replace("%d", creds)})
    assert cfg.http.token_file == f"{creds}/{cred}"


@needs_analyze
def test_the_docs_token_drop_in_verifies_with_the_unit(tmp_path: Path) -> None:
    assert SYSTEMD_ANALYZE
    unit = _verifiable_copies(tmp_path)[0]
    unit.write_text(unit.read_text() + "\n" + _docs_token_drop_in())
    r = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "swarmgpu" not in r.stderr, r.stderr  # e.g. "Failed to resolve specifiers"


@needs_analyze
def test_systemd_analyze_security_exposure(tmp_path: Path) -> None:
    assert SYSTEMD_ANALYZE
    for unit in _verifiable_copies(tmp_path):
        r = subprocess.run(
            [SYSTEMD_ANALYZE, "security", "--offline=yes", str(unit)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        if "--offline" in r.stderr and r.returncode != 0:
            pytest.skip(f"this systemd-analyze has no --offline: {r.stderr.strip()}")
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
        assert m, r.stdout + r.stderr
        # docs/systemd.md gives 1.3 (daemon) and 1.7 (agent) with systemd 252.
        assert float(m.group(1)) <= 2.0, r.stdout


def test_example_config_is_every_default() -> None:
    path = UNITS / "config.yml"
    assert load_config(str(path)) == Config()

    def keys(data: object, prefix: str = "") -> set[str]:
        if not isinstance(data, dict):
            return {prefix}
        return {k2 for k, v in data.items() for k2 in keys(v, f"{prefix}{k}.")}

    assert keys(yaml.safe_load(path.read_text())) == keys(yaml.safe_load(describe_defaults()))


def test_sd_notify_reaches_the_notify_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What Type=notify and WatchdogSec= rely on: the datagrams the daemon sends.
    addr = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(addr)
        s.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", addr)
        assert daemon.sd_notify("READY=1")
        assert daemon.sd_notify("WATCHDOG=1")
        assert [s.recv(64), s.recv(64)] == [b"READY=1", b"WATCHDOG=1"]
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not daemon.sd_notify("READY=1")


def test_sd_notify_refuses_a_relative_notify_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd's sd_notify takes only an absolute path or an '@' abstract name (anything
    else is EINVAL): a relative NOTIFY_SOCKET was connected to from the working
    directory, READY=1 and WATCHDOG=1 sent to whatever socket had that name there."""
    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind("notify")
        s.setblocking(False)
        for addr in ("notify", "./notify", "@"):
            monkeypatch.setenv("NOTIFY_SOCKET", addr)
            assert not daemon.sd_notify("READY=1"), addr
        with pytest.raises(BlockingIOError):
            s.recv(64)


def test_sd_notify_that_cannot_send_says_why_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """READY=1 that cannot be sent (the socket gone, not reachable from here) was silent:
    every caller ignores the False, so systemd timed the start out and the log never said
    why. It is said once, naming NOTIFY_SOCKET and the OS error, not at each WATCHDOG=1;
    a NOTIFY_SOCKET systemd would refuse is said once the same way."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        gone = str(tmp_path / "gone")
        monkeypatch.setenv("NOTIFY_SOCKET", gone)
        assert not sdnotify.sd_notify("READY=1")
        for _ in range(3):
            assert not sdnotify.sd_notify("WATCHDOG=1")
        assert len(lines) == 1, lines
        assert gone in lines[0] and "NOTIFY_SOCKET" in lines[0]
        assert "ENOENT" in lines[0] and "READY=1" in lines[0]
        monkeypatch.setenv("NOTIFY_SOCKET", "notify")
        for _ in range(3):
            assert not sdnotify.sd_notify("WATCHDOG=1")
        assert len(lines) == 2 and "'notify'" in lines[1] and "absolute path" in lines[1]
    finally:
        logger.remove(sink)


def test_watchdog_is_ours_only_as_libsystemd_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """As sd_watchdog_enabled: WATCHDOG_USEC=0 is no watchdog (it was 0 s, warned as too
    short), and a WATCHDOG_PID that is not our PID (or no PID) means the watchdog is
    another process's (its WatchdogSec= was checked as ours)."""
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "90000000")
    assert sdnotify.watchdog_s() == 90.0
    for usec in ("0", str(2**64 - 1), "-5", "9x", ""):
        monkeypatch.setenv("WATCHDOG_USEC", usec)
        assert sdnotify.watchdog_s() is None, usec
    monkeypatch.setenv("WATCHDOG_USEC", "90000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sdnotify.watchdog_s() == 90.0
    for pid in (str(os.getpid() + 1), "0", "me", ""):
        monkeypatch.setenv("WATCHDOG_PID", pid)
        assert sdnotify.watchdog_s() is None, pid
