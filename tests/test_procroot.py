"""An agent whose --proc-root is its own container's /proc (not the host's) is told so:
a warning at start and the doctor's agent.proc-root; the host's /proc raises nothing.

The kernel cases run in a real new PID namespace (``unshare --pid --fork``, as Docker
starts a container without ``--pid host``): with ``--mount-proc`` its /proc is its own,
without it /proc stays the host's. The tree cases are procfs links laid out in a tmp
dir (support.fake_proc).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.fake_proc import self_links
from support.gpu_nodes import RTX4090, swarmgpu_env

from swarmgpu.agent.doctor import Status, check_proc_root, read_view, run_doctor
from swarmgpu.agent.procroot import INIT_PID_NS, ProcRootKind, proc_root_view

ROOTS = Path(__file__).parent / "doctor_roots"


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_pidns = pytest.mark.skipif(not _unshare_works(),
                                 reason="no new PID namespace here (unshare needs root)")


def test_a_container_s_own_proc_is_told_from_the_host_s(tmp_path: Path) -> None:
    child_ns = 4026532175
    own = self_links(tmp_path / "own", 7, child_ns)
    assert proc_root_view(str(own), pid=7).kind is ProcRootKind.OWN
    host_seen = self_links(tmp_path / "mounted", 31337, child_ns)  # -v /proc:/host/proc
    assert proc_root_view(str(host_seen), pid=7).kind is ProcRootKind.HOST
    on_host = self_links(tmp_path / "host", 4242, INIT_PID_NS)  # the agent on the host
    assert proc_root_view(str(on_host), pid=4242).kind is ProcRootKind.HOST
    not_proc = proc_root_view(str(tmp_path))
    assert not_proc.kind is ProcRootKind.NOT_PROC and not_proc.blind
    odd = self_links(tmp_path / "odd", 9, 1)
    (odd / "9" / "ns" / "pid").unlink()
    (odd / "9" / "ns" / "pid").symlink_to("net:[1]")
    assert proc_root_view(str(odd), pid=9).kind is ProcRootKind.UNKNOWN  # nothing claimed


def test_an_intermediate_namespace_s_proc_is_not_called_the_host_s(tmp_path: Path) -> None:
    """Nested containers: a --proc-root mounted from the outer container (an ancestor PID
    namespace, not the host's) numbers the agent as not its own, and was reported as
    "the host's /proc", while NVML's host PIDs name other processes there or none. Its
    PID 1's namespace says whose procfs it is, where the agent may read it."""
    child_ns, outer_ns = 4026532175, 4026532301

    def mounted(name: str, init_ns: int | None) -> Path:
        root = self_links(tmp_path / name, 31337, child_ns)
        if init_ns is not None:
            (root / "1" / "ns").mkdir(parents=True)
            (root / "1" / "ns" / "pid").symlink_to(f"pid:[{init_ns}]")
        return root

    nested = proc_root_view(str(mounted("nested", outer_ns)), pid=7)
    assert nested.kind is ProcRootKind.NESTED and nested.blind, nested
    assert "not the host's" in nested.found and f"pid:[{outer_ns}]" in nested.found
    host = proc_root_view(str(mounted("host", INIT_PID_NS)), pid=7)
    assert host.kind is ProcRootKind.HOST and "the host's /proc" in host.found, host
    hidden = proc_root_view(str(mounted("hidden", None)), pid=7)  # no ptrace right
    assert hidden.kind is ProcRootKind.HOST and not hidden.blind
    assert "unless" in hidden.found and "nested" in hidden.found, hidden
    check = check_proc_root(replace(read_view(str(ROOTS / "healthy")), proc_root=nested))
    assert check.status is Status.WARN and "--proc-root /host/proc" in check.fix


def test_an_outer_proc_numbering_the_agent_as_its_own_does_is_not_called_its_own(
        tmp_path: Path) -> None:
    """The own-namespace check compared PID numbers: an outer /proc (the host's) where the
    agent happens to have the PID it has in its container was called its own, a false
    alarm. ``self/status``'s NSpid line (the PID in each namespace, the procfs's first)
    decides it; without it PID 1's namespace link; with neither the finding says it
    guessed. A PID 1 link that names no namespace leaves the doubt said, not "the
    host's /proc"."""
    child_ns = 4026532175

    def tree(name: str, nspid: str | None, init_link: str | None) -> str:
        root = self_links(tmp_path / name, 7, child_ns)
        if nspid is not None:
            (root / "7" / "status").write_text(f"Name:\tswarmgpu\nNSpid:\t{nspid}\n")
        if init_link is not None:
            (root / "1" / "ns").mkdir(parents=True)
            (root / "1" / "ns" / "pid").symlink_to(init_link)
        return str(root)

    outer = proc_root_view(tree("outer", "7\t7", f"pid:[{INIT_PID_NS}]"), pid=7)
    assert outer.kind is ProcRootKind.HOST and "the host's /proc" in outer.found, outer
    own = proc_root_view(tree("own", "7", None), pid=7)
    assert own.kind is ProcRootKind.OWN and "PID numbers" not in own.found, own
    by_init = proc_root_view(tree("by-init", None, f"pid:[{child_ns}]"), pid=7)
    assert by_init.kind is ProcRootKind.OWN and "PID numbers" not in by_init.found
    outer_by_init = proc_root_view(tree("outer-by-init", None, f"pid:[{INIT_PID_NS}]"), pid=7)
    assert outer_by_init.kind is ProcRootKind.HOST, outer_by_init
    guessed = proc_root_view(tree("guessed", None, None), pid=7)
    assert guessed.kind is ProcRootKind.OWN and "PID numbers alone" in guessed.found
    odd = proc_root_view(tree("odd", "7\t7", "net:[4026531840]"), pid=7)
    assert odd.kind is ProcRootKind.HOST and not odd.blind, odd
    assert "unless containers are nested" in odd.found and "names no PID namespace" in odd.found


def test_this_host_s_proc_raises_no_alarm() -> None:
    view = proc_root_view("/proc")
    assert view.kind is ProcRootKind.HOST, view
    text, _ = run_doctor(str(ROOTS / "healthy"), proc_root=view)
    assert "OK    agent.proc-root:" in text


def test_the_doctor_warns_of_a_container_s_own_proc(tmp_path: Path) -> None:
    view = proc_root_view(str(self_links(tmp_path / "proc", 1, 4026532175)), pid=1)
    check = check_proc_root(replace(read_view(str(ROOTS / "healthy")), proc_root=view))
    assert check.status is Status.WARN and "own /proc" in check.found
    assert "--proc-root /host/proc" in check.fix and "--pid host" in check.fix
    text, code = run_doctor(str(ROOTS / "healthy"), proc_root=view)
    assert "WARN  agent.proc-root:" in text and code == 0  # advice, not a failure


@needs_pidns
def test_in_a_real_pid_namespace_own_proc_warns_and_the_host_s_does_not() -> None:
    doctor = [sys.executable, "-m", "swarmgpu.cli", "doctor", "--root",
              str(ROOTS / "healthy"), "--proc-root", "/proc"]
    own = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", *doctor],
                         capture_output=True, text=True, env=swarmgpu_env(), timeout=120,
                         check=False)
    assert "WARN  agent.proc-root: /proc is this container's own /proc" in own.stdout, (
        own.stdout + own.stderr)
    host = subprocess.run(["unshare", "--pid", "--fork", *doctor], capture_output=True,
                          text=True, env=swarmgpu_env(), timeout=120, check=False)
    # the host's, or (no right to read its PID 1's namespace) an outer one's, said so
    assert re.search(r"OK    agent.proc-root: /proc is (the host's /proc|an outer PID "
                     r"namespace's /proc .*: the host's unless containers are nested)",
                     host.stdout), host.stdout + host.stderr


def _agent_log(*wrap: str) -> str:
    """What an agent started in ``wrap`` logs until it serves (then it is stopped)."""
    argv = RTX4090.agent_argv("127.0.0.1", 0, "--proc-root", "/proc")
    proc = subprocess.Popen([*wrap, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=swarmgpu_env(), start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "agent serving" in line:
                break
    finally:
        # SIGKILL: PID 1 of a namespace ignores a SIGTERM that comes before its handler
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return "".join(lines)


@needs_pidns
def test_the_agent_warns_at_start_when_its_proc_root_is_its_own_container_s() -> None:
    own = _agent_log("unshare", "--pid", "--fork", "--mount-proc")
    assert "agent serving" in own, own
    assert "--proc-root /proc: /proc is this container's own /proc" in own, own
    assert "-v /proc:/host/proc:ro --proc-root /host/proc" in own
    host = _agent_log("unshare", "--pid", "--fork")
    assert "agent serving" in host and "own /proc" not in host, host
