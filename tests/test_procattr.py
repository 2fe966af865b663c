"""GPU process -> container -> Swarm task/service (swarmgpu.agent.procattr), and the agent's
per-process metric. The engine side runs for real in tests/test_overshare_swarm.py."""

from __future__ import annotations

from pathlib import Path

from support.gpu_nodes import RTX4090

from swarmgpu.agent.metrics import PROCESS_MEMORY, render_metrics
from swarmgpu.agent.procattr import SERVICE_LABEL, TASK_LABEL, Attributor, container_of
from swarmgpu.core.samples import GpuProcess, GpuSample

CID = "3f1c0a9e" * 8


def test_container_of_each_cgroup_layout() -> None:
    assert container_of(f"0::/system.slice/docker-{CID}.scope\n") == CID  # v2, systemd
    assert container_of(f"0::/docker/{CID}\n") == CID  # v2, cgroupfs
    assert container_of(f"12:memory:/docker/{CID}\n11:cpu:/docker/{CID}\n") == CID  # v1
    assert container_of(f"0::/sgt42/gpu-node-1/{CID}\n") == CID  # --cgroup-parent
    assert container_of("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert container_of("0::/init.scope\n") is None
    assert container_of("") is None


def test_attributor_names_owners_and_survives_what_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "cgroup").write_text(f"0::/system.slice/docker-{CID}.scope\n")
    (tmp_path / "200").mkdir()
    (tmp_path / "200" / "cgroup").write_text("0::/user.slice\n")
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
