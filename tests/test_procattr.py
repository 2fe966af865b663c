"""GPU process -> container -> Swarm task/service (swarmgpu.agent.procattr), and the agent's
per-process metric. The engine side runs for real in tests/test_overshare_swarm.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fake_proc import fake_pid, set_uptime, stat_line
from support.fifo import make_fifo, read_within
from support.gpu_nodes import RTX4090

from swarmgpu.agent.metrics import PROCESS_MEMORY, render_metrics
from swarmgpu.agent.procattr import (
    FIX,
    SERVICE_LABEL,
    TASK_LABEL,
    Attributor,
    container_of,
    engine_labels,
)
from swarmgpu.agent.server import build_server
from swarmgpu.core.boundedfile import read_head
from swarmgpu.core.samples import GpuProcess, GpuSample

CID = "3f1c0a9e" * 8
OTHER = "7b2d9c4e" * 8  # a container of another service


def test_container_of_each_cgroup_layout() -> None:
    assert container_of(f"0::/system.slice/docker-{CID}.scope\n") == CID  # v2, systemd
    assert container_of(f"0::/docker/{CID}\n") == CID  # v2, cgroupfs
    assert container_of(f"12:memory:/docker/{CID}\n11:cpu:/docker/{CID}\n") == CID  # v1
    assert container_of(f"0::/sgt42/gpu-node-1/{CID}\n") == CID  # --cgroup-parent
    assert container_of("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert container_of("0::/init.scope\n") is None
    assert container_of("") is None


def test_a_cgroup_a_container_made_inside_its_own_names_no_other_container() -> None:
    """A container that may write its cgroup tree (cgroup v2 delegation, systemd
    inside, a writable /sys/fs/cgroup) makes a child cgroup named for another task's
    container id and moves its GPU process there: the innermost id was read, so its
    memory was credited to that task (and under ``placement.overshare: restart`` that
    task restarted). The outermost id is Docker's: the container's own."""
    assert container_of(f"0::/system.slice/docker-{CID}.scope/{OTHER}\n") == CID
    assert container_of(f"0::/docker/{CID}/x/docker-{OTHER}.scope\n") == CID
    assert container_of(f"12:memory:/docker/{CID}/{OTHER}\n11:cpu:/docker/{CID}\n") == CID


def test_attributor_names_owners_and_survives_what_it_cannot_read(tmp_path: Path) -> None:
    fake_pid(tmp_path, 100, f"0::/system.slice/docker-{CID}.scope\n", 50.0)
    fake_pid(tmp_path, 200, "0::/user.slice\n", 60.0)
    asked: list[str] = []

    def labels(cid: str) -> dict[str, str] | None:
        asked.append(cid)
        return {TASK_LABEL: "t1", SERVICE_LABEL: "shop_model"}

    att = Attributor(labels, str(tmp_path))
    s = GpuSample("GPU-x", 0, None, 10, 10, None, None, None,
                  (GpuProcess(100, 6757), GpuProcess(200, 5), GpuProcess(300, 7)))
    (out,) = att([s])
    assert out.processes[0] == GpuProcess(100, 6757, None, CID, "t1", "shop_model")
    assert out.processes[1] == GpuProcess(200, 5)  # a host process: no owner
    assert out.processes[2] == GpuProcess(300, 7)  # ended before it was read
    att([s])
    assert asked == [CID]  # cached per container
    down = Attributor(lambda cid: None, str(tmp_path))  # engine not answering
    assert down([s])[0].processes[0] == GpuProcess(100, 6757, None, CID, "", "")


def test_process_metric() -> None:
    f = RTX4090.facts()
    g = f.gpus[3]
    s = GpuSample(g.uuid, 3, 1.0, 1, 1, 1.0, 1.0, 1.0,
                  (GpuProcess(100, 6757, None, CID, "t1", "shop_model"), GpuProcess(7, None)))
    text = render_metrics(f, [s]).decode()
    lines = [ln for ln in text.splitlines() if ln.startswith(PROCESS_MEMORY + "{")]
    assert lines == [f'{PROCESS_MEMORY}{{UUID="{g.uuid}",container="{CID[:12]}",gpu="3",'
                     f'hostname="gpu-node-2",pid="100",service="shop_model",task="t1"}} 6757.0']


def _labels(cid: str) -> dict[str, str]:
    return {TASK_LABEL: f"task-of-{cid[:4]}", SERVICE_LABEL: f"svc-{cid[:4]}"}


def test_a_pid_reused_after_nvml_listed_it_is_not_credited(tmp_path: Path) -> None:
    """NVML listed PID 100 (a process of CID); before its /proc entry was read it ended
    and the PID went to a process of another container. The one read is younger than the
    listing (its start time after the moment before NVML was asked): it is not the
    process NVML measured, so no owner; an older one is attributed."""
    fake_pid(tmp_path, 100, f"0::/docker/{OTHER}\n", 1000.5)  # started after the listing
    fake_pid(tmp_path, 101, f"0::/docker/{CID}\n", 400.0)
    set_uptime(tmp_path, 1000.0)
    att = Attributor(_labels, str(tmp_path))
    listed_at = att.boot_clock()
    assert listed_at == 1000.0
    s = GpuSample("GPU-x", 0, None, 10, 10, None, None, None,
                  (GpuProcess(100, 30000), GpuProcess(101, 500)))
    (out,) = att([s], listed_at)
    assert out.processes[0] == GpuProcess(100, 30000)  # not OTHER's: unattributed
    assert out.processes[1] == GpuProcess(101, 500, None, CID, "task-of-3f1c", "svc-3f1c")


def test_a_pid_reused_in_the_hundredth_the_clock_was_read_is_not_credited(
        tmp_path: Path) -> None:
    """/proc/uptime and a start time are both whole hundredths of a second, truncated:
    a process that took the PID in the hundredth the clock was read in (after it, as
    likely as before) read as no younger than the listing, and was credited."""
    fake_pid(tmp_path, 100, f"0::/docker/{OTHER}\n", 1000.0)
    set_uptime(tmp_path, 1000.0)
    att = Attributor(_labels, str(tmp_path))
    s = GpuSample("GPU-x", 0, None, 10, 10, None, None, None, (GpuProcess(100, 30000),))
    (out,) = att([s], att.boot_clock())
    assert out.processes == (GpuProcess(100, 30000),)
    (out,) = att([s], 1000.01)  # a hundredth later: the process is older than the listing
    assert out.processes[0].container == OTHER


def test_the_agent_times_its_attribution_from_before_nvml_is_asked(tmp_path: Path) -> None:
    """The server takes the moment before it samples: a PID reused while the sampler ran
    (a sampler of 8 GPUs takes a while) is left unattributed in what /metrics serves."""
    fake_pid(tmp_path, 100, f"0::/docker/{CID}\n", 400.0)
    set_uptime(tmp_path, 1000.0)

    def sampler() -> list[GpuSample]:  # each call (the server primes one) as the first
        now = float((tmp_path / "uptime").read_text().split()[0])
        listed = [GpuSample("GPU-x", 0, None, 10, 10, None, None, None,
                            (GpuProcess(100, 30000),))]
        # the listed process ends, its PID goes to OTHER's new one, the clock moves on
        fake_pid(tmp_path, 100, f"0::/docker/{OTHER}\n", now + 0.7)
        set_uptime(tmp_path, now + 1.0)
        return listed

    srv = build_server(RTX4090.source(), "127.0.0.1:0", sampler=sampler,
                       attribute=Attributor(_labels, str(tmp_path)))
    try:
        samples, err = srv.sampler.sample()
    finally:
        srv.close()
    assert err is None
    assert samples[0].processes == (GpuProcess(100, 30000),)


def test_a_pid_reused_while_its_cgroup_is_read_is_not_credited(tmp_path: Path) -> None:
    """The start time is read before and after the cgroup: a process that ended and whose
    PID was taken between the two (the cgroup read may be the new one's) is dropped."""
    d = fake_pid(tmp_path, 100, f"0::/docker/{OTHER}\n", 400.0)

    def the_kernel(path: Path, limit: int) -> bytes:
        if path.name == "cgroup":  # the PID changes hands while its cgroup is read
            (d / "stat").write_text(stat_line(100, 401 * 100))
        return read_head(path, limit)

    s = GpuSample("GPU-x", 0, None, 10, 10, None, None, None, (GpuProcess(100, 30000),))
    (out,) = Attributor(_labels, str(tmp_path), read=the_kernel)([s])
    assert out.processes == (GpuProcess(100, 30000),)
    (out,) = Attributor(_labels, str(tmp_path))([s])  # read without a change: its owner
    assert out.processes[0].container == OTHER


def test_a_fifo_or_a_huge_file_under_proc_root_is_refused_not_waited_on(
        tmp_path: Path) -> None:
    """A --proc-root that is not a procfs may hold a FIFO where ``uptime`` or a
    ``cgroup`` belongs: the sampler thread blocked on its open for ever (no writer), and
    a huge file was read whole. Each is refused (regular files only, bounded), the first
    logged with its path and the fix, and the process left without an owner."""
    make_fifo(tmp_path / "uptime")
    d = fake_pid(tmp_path, 100, "", 400.0)
    (d / "cgroup").unlink()
    make_fifo(d / "cgroup")
    fake_pid(tmp_path, 101, f"0::/docker/{CID}\n" + "x" * (1 << 20), 400.0)
    fake_pid(tmp_path, 102, f"0::/docker/{CID}\n", 400.0)
    (tmp_path / "102" / "stat").unlink()
    make_fifo(tmp_path / "102" / "stat")
    att = Attributor(_labels, str(tmp_path))
    assert read_within(att.boot_clock, tmp_path / "uptime") is None
    assert att.refused is not None and str(tmp_path / "uptime") in att.refused
    assert "FIFO" in att.refused
    s = GpuSample("GPU-x", 0, None, 10, 10, None, None, None,
                  (GpuProcess(100, 1), GpuProcess(101, 2), GpuProcess(102, 3)))
    (out,) = read_within(lambda: att([s]), d / "cgroup")
    assert out.processes == s.processes  # none attributed, none waited on
    assert "-v /proc:/host/proc:ro --proc-root /host/proc" in FIX
    big = Attributor(_labels, str(tmp_path))
    assert big.process(GpuProcess(101, 2)) == GpuProcess(101, 2)
    assert big.refused is not None and "101/cgroup: larger than 64 KiB" in big.refused


def test_a_pid_without_a_readable_start_is_not_credited(tmp_path: Path) -> None:
    """No stat, or one that is not the kernel's (a comm with ')' and spaces is): no
    owner rather than a guess."""
    d = fake_pid(tmp_path, 100, f"0::/docker/{CID}\n", 400.0)
    (d / "stat").unlink()
    fake_pid(tmp_path, 101, f"0::/docker/{CID}\n", 400.0)
    (tmp_path / "101" / "stat").write_text("101 (x) S 1 2\n")
    fake_pid(tmp_path, 102, f"0::/docker/{CID}\n", 0)
    (tmp_path / "102" / "stat").write_text(stat_line(102, 40000, comm="a) (b c"))
    s = GpuSample("GPU-x", 0, None, 10, 10, None, None, None,
                  (GpuProcess(100, 1), GpuProcess(101, 2), GpuProcess(102, 3)))
    (out,) = Attributor(_labels, str(tmp_path))([s])
    assert out.processes[:2] == (GpuProcess(100, 1), GpuProcess(101, 2))
    assert out.processes[2].container == CID


def _engine_answering(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """docker-py's APIClient, its engine answering every GET with ``text``."""
    import functools

    import docker
    import requests

    def get(_self: object, url: str, **_: object) -> requests.Response:
        resp = requests.Response()
        answer = '{"ApiVersion": "1.43"}' if url.endswith("/version") else text
        resp.status_code, resp._content = 200, answer.encode()
        resp.headers["Content-Type"], resp.encoding, resp.url = "application/json", "utf-8", url
        return resp

    monkeypatch.setattr(docker.APIClient, "_get", get)
    monkeypatch.setattr(docker, "APIClient", functools.partial(docker.APIClient,
                                                               version="1.43"))


@pytest.mark.parametrize("answer", [
    # which service the engine meant cannot be told: the last is no likelier
    f'{{"Config": {{"Labels": {{"{SERVICE_LABEL}": "a", "{SERVICE_LABEL}": "b"}}}}}}',
    "[]",  # no object
    "null",
    '{"Config": "x"}',
    '{"Config": {"Labels": ["a"]}}',
    f'{{"Config": {{"Labels": {{"{SERVICE_LABEL}": 1}}}}}}',
])
def test_a_container_inspect_that_cannot_be_read_leaves_its_owner_unknown(
        monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    _engine_answering(monkeypatch, answer)
    assert engine_labels("tcp://127.0.0.1:9")("c" * 64) is None


def test_a_container_inspect_names_its_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    _engine_answering(monkeypatch, f'{{"Config": {{"Labels": {{"{SERVICE_LABEL}": "a"}}}}}}')
    assert engine_labels("tcp://127.0.0.1:9")("c" * 64) == {SERVICE_LABEL: "a"}
