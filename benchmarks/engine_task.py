"""One task as the engine's task list gives it, for the benchmarks that decode task lists
(bench_task_decode.py, bench_snapshot_history.py): a GPU service's, of usual size."""

from __future__ import annotations

from typing import Any

TEMPLATE = ('NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "swarmgpu.devices." '
            '.Node.ID "." .Task.Slot)) (index .Service.Labels (print "swarmgpu.devices." '
            '.Node.ID)) "void"}}')


def raw_task(i: int, desired: str = "running", state: str = "running", sid: str = "",
             run: int | None = None, label: str = "", ended: str = "finished"
             ) -> dict[str, Any]:
    """Task ``i`` of service ``sid`` (one of 500 by ``i`` if empty); ``run``: a job's task,
    of that run; ``label``: the service name in its placement constraint (``sid`` if
    empty); ``ended``: its status message when not running."""
    sid, nid = sid or f"svc{i % 500:022d}", f"node{i % 1000:021d}"
    out: dict[str, Any] = {
        "ID": f"task{i:021d}", "Version": {"Index": 1000 + i},
        "CreatedAt": "2026-12-06T10:00:00.000000000Z",
        "UpdatedAt": "2026-12-06T10:05:00.000000000Z", "Labels": {},
        "Spec": {"ContainerSpec": {
            "Image": "vllm/vllm-openai:v0.6.3@sha256:" + "0" * 64,
            "Env": [TEMPLATE, "CUDA_DEVICE_ORDER=PCI_BUS_ID", "HF_HOME=/models",
                    "MODEL=meta-llama/Llama-3.1-8B-Instruct"],
            "Args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"],
            "Isolation": "default"},
            "Resources": {"Limits": {}, "Reservations": {"NanoCPUs": 4 * 10**9,
                                                         "MemoryBytes": 16 * 2**30}},
            "RestartPolicy": {"Condition": "any", "MaxAttempts": 0},
            "Placement": {"Constraints": [
                f"node.labels.swarmgpu.service.{label or sid}==true"],
                          "Platforms": [{"Architecture": "amd64", "OS": "linux"}]},
            "Networks": [{"Target": "net000000000000000000000", "Aliases": ["llm"]}],
            "ForceUpdate": 1},
        "ServiceID": sid, "Slot": 1 + i % 3, "NodeID": nid,
        "Status": {"Timestamp": "2026-12-06T10:05:00.000000000Z", "State": state,
                   "Message": "started" if state == "running" else ended,
                   "ContainerStatus": {"ContainerID": f"{i:064x}", "PID": 4242,
                                       "ExitCode": 0},
                   "PortStatus": {}},
        "DesiredState": desired,
        "NetworksAttachments": [{"Network": {"ID": "net000000000000000000000",
                                             "Spec": {"Name": "ai_default"},
                                             "DriverState": {"Name": "overlay"}},
                                 "Addresses": [f"10.0.{i // 250 % 250}.{i % 250}/24"]}],
    }
    if run is not None:
        out["JobIteration"] = {"Index": run}
    return out
