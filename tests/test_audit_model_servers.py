"""`swarmgpu audit` (and so the daemon's map, which takes audit's findings) says of a
running GPU service what `render --check` says of its stack: a model server whose own
flags use another number of GPUs than it asks for, a ``CUDA_VISIBLE_DEVICES`` past its
grant, a multi-GPU server without room in ``/dev/shm``. A stack deployed without render
is adopted as it stands, and before none of these was said of it. Read from the spec as
Swarm returns it (``Command``/``Args``/``Env``/``Mounts``), advisory, bounded in text."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from swarmgpu.manager.commands import cudavisible, model_servers
from swarmgpu.manager.commands.audit import audit, exit_code, render_table
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.swarmservice import read_service

VLLM = "vllm/vllm-openai:v0.8.5@sha256:" + "a" * 64
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
GIB = 1 << 30


def service(args: list[str], env: list[str] | None = None, gpus: str | None = "2",
            mounts: list[dict[str, Any]] | None = None, image: str = VLLM,
            command: list[str] | None = None, name: str = "ai_llm") -> Any:
    """A service as the engine lists one `docker stack deploy` made (no render)."""
    container: dict[str, Any] = {"Image": image, "Args": args, "Env": env or []}
    if command is not None:
        container["Command"] = command
    if mounts is not None:
        container["Mounts"] = mounts
    labels = {"swarmgpu.gpus": gpus} if gpus is not None else {}
    return read_service({
        "ID": "s1", "Version": {"Index": 3},
        "Spec": {"Name": name, "Labels": labels,
                 "TaskTemplate": {"ContainerSpec": container},
                 "Mode": {"Replicated": {"Replicas": 1}}},
    })


def found(svc: Any, kind: str) -> list[str]:
    findings = audit(Snapshot([], [svc], [], {}))
    assert exit_code(findings) == 0  # advisory: a reading of the server's flags
    return [f.message for f in findings if f.kind == kind]


def test_a_vllm_tensor_parallel_beyond_the_request_is_named_with_its_fix() -> None:
    (m,) = found(service(["--model", MODEL, "--tensor-parallel-size", "4"]),
                 "server-gpu-count")
    assert m == (
        "vLLM will use 4 GPUs (--tensor-parallel-size 4), but the service asks swarmgpu "
        'for 2 (swarmgpu.gpus: "2"): it would not start, seeing 2; ask for 4 '
        '(swarmgpu.gpus: "4", or a Compose count of 4), or change --tensor-parallel-size')


def test_a_server_in_the_entrypoint_and_its_count_from_env_are_read() -> None:
    svc = service(["--model-id", MODEL], env=["NUM_SHARD=4"], gpus="2",
                  command=["text-generation-launcher"],
                  image="ghcr.io/huggingface/text-generation-inference:3.3.4")
    (m,) = found(svc, "server-gpu-count")
    assert m.startswith("Text Generation Inference will use 4 GPUs (NUM_SHARD=4)")


def test_a_cuda_visible_devices_past_the_grant_is_named() -> None:
    svc = service(["--model", MODEL, "-tp", "2"], env=["CUDA_VISIBLE_DEVICES=2,3"],
                  mounts=[{"Type": "tmpfs", "Target": "/dev/shm"}])
    (m,) = found(svc, "cuda-visible-devices")
    assert m.startswith("CUDA_VISIBLE_DEVICES=2,3: in the container CUDA numbers the 2 GPUs")
    assert "it would find no GPU; remove CUDA_VISIBLE_DEVICES" in m


def test_a_hostile_env_value_is_cut_in_the_finding() -> None:
    env = ["CUDA_VISIBLE_DEVICES=GPU-" + "\x1b[2J" * 100_000]
    (m,) = found(service(["--model", MODEL, "-tp", "2"], env=env,
                         mounts=[{"Type": "tmpfs", "Target": "/dev/shm"}]),
                 "cuda-visible-devices")
    assert len(m) < 800


def test_a_service_that_asks_for_no_gpu_or_agrees_is_not_named() -> None:
    assert found(service(["--model", MODEL, "-tp", "4"], gpus=None), "server-gpu-count") == []
    svc = service(["--model", MODEL, "-tp", "2"], env=["CUDA_VISIBLE_DEVICES=0,1"],
                  mounts=[{"Type": "tmpfs", "Target": "/dev/shm",
                           "TmpfsOptions": {"SizeBytes": 2 * GIB}}])
    assert audit(Snapshot([], [svc], [], {})) == []


def test_a_multi_gpu_server_without_room_in_dev_shm_is_named_with_the_mount() -> None:
    (m,) = found(service(["--model", MODEL, "-tp", "2"]), "server-shm")
    assert m.startswith("vLLM spans 2 GPUs (-tp 2) through NCCL, which keeps its shared "
                        "memory in /dev/shm: Docker gives a container 64 MiB there")
    assert "volumes: [{type: tmpfs, target: /dev/shm, tmpfs: {size: 1073741824}}]" in m
    assert m.endswith("docker service update --mount-add type=tmpfs,destination=/dev/shm,"
                      "tmpfs-size=1073741824 ai_llm")
    small = [{"Type": "tmpfs", "Target": "/dev/shm", "TmpfsOptions": {"SizeBytes": 64 << 20}}]
    (m,) = found(service(["--model", MODEL, "-tp", "2"], mounts=small), "server-shm")
    assert "its tmpfs there holds 64 MiB" in m
    one = service(["--model", MODEL, "-tp", "1"], gpus="1")  # one GPU: no NCCL
    assert found(one, "server-shm") == []


def test_the_table_lists_them_as_advisories() -> None:
    snap = Snapshot([], [service(["--model", MODEL, "--tensor-parallel-size", "4"])], [], {})
    text = render_table(audit(snap), snap, "swarmgpu.")
    assert "advisory (exit 0 unless --strict):" in text
    assert "  [server-gpu-count] ai_llm: vLLM will use 4 GPUs" in text
    assert "  [server-shm] ai_llm: vLLM spans 4 GPUs" in text


def _splits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the audit hands to shlex from now on (each split is a scan)."""
    made: list[str] = []
    real = model_servers.shlex.shlex

    def counted(text: str, *args: Any, **kwargs: Any) -> Any:
        made.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(model_servers.shlex, "shlex", counted)
    return made


def test_a_long_shell_script_in_a_spec_is_left_unsaid_not_split_each_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon audits each GPU service's spec every cycle: a 2 MiB script split a
    # character at a time took 8 s, a cycle's worth, each cycle (the time:
    # benchmarks/bench_audit_specs.py).
    made = _splits(monkeypatch)
    script = "vllm serve m -tp 4 " + "x " * (1 << 20)
    svc = service([], command=["sh", "-c", script])
    assert found(svc, "server-gpu-count") == []
    assert made == []


def test_server_words_repeated_in_a_spec_are_read_without_a_finding() -> None:
    # Within the bound on text read; each one's launcher check read all before it
    # (quadratic in the words: benchmarks/bench_audit_specs.py times it).
    assert found(service([], command=["vllm", "serve"] * 1400), "server-gpu-count") == []


def test_shell_words_repeated_in_a_spec_are_read_without_a_finding() -> None:
    # Each shell word scanned all the options after it (the time: bench_audit_specs.py).
    assert found(service([], command=["-/sh"] * 3000), "server-gpu-count") == []


def test_a_script_two_shell_words_name_is_read_once() -> None:
    svc = service([], command=["sh", "-/sh", "-c", f"vllm serve {MODEL} -tp 4"])
    (m,) = found(svc, "server-gpu-count")
    assert m.startswith("vLLM will use 4 GPUs (-tp 4)")


def test_a_tmpfs_at_dev_shm_spelled_with_two_leading_slashes_is_room() -> None:
    # Docker cleans //dev/shm to /dev/shm (Go's filepath.Clean); normpath keeps //.
    mounts = [{"Type": "tmpfs", "Target": "//dev/shm/",
               "TmpfsOptions": {"SizeBytes": 2 * GIB}}]
    assert found(service(["--model", MODEL, "-tp", "2"], mounts=mounts), "server-shm") == []


def test_a_script_is_split_once_not_each_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon audits each GPU service's spec every cycle, each time a new object of
    # the same text: split a character at a time, a 16 KiB script cost 50 ms a cycle.
    made = _splits(monkeypatch)
    script = f"vllm serve {MODEL} -tp 4 --served-model-name once-{time.time_ns()}"
    for _ in range(3):
        svc = service([], command=["sh", "-c", "".join(list(script))])
        (m,) = found(svc, "server-gpu-count")
        assert m.startswith("vLLM will use 4 GPUs (-tp 4)")
    assert len(made) == 1


def test_a_long_command_string_is_left_unsaid_not_split(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Docker sends Command and Args as lists; a string (a proxy's, or a stack's
    # entrypoint in render) was split a character at a time before the bound was read.
    made = _splits(monkeypatch)
    svc = service([], command="vllm serve m -tp 4 " + "x " * (1 << 20))  # type: ignore[arg-type]
    assert found(svc, "server-gpu-count") == []
    assert made == []


def test_a_long_cuda_visible_devices_is_read_to_where_cuda_stops_not_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 8 MiB of entries were split and stripped whole every cycle (1 s here); CUDA stops
    # within the grant's count + 1 of them, and so does the reading now.
    read: list[str] = []
    real = cudavisible._entries

    def counted(value: str) -> Iterator[str]:
        for e in real(value):
            read.append(e)
            yield e

    monkeypatch.setattr(cudavisible, "_entries", counted)
    value = "0,5," + "1," * (4 << 20)
    svc = service(["--model", MODEL, "-tp", "2"], env=["CUDA_VISIBLE_DEVICES=" + value],
                  mounts=[{"Type": "tmpfs", "Target": "/dev/shm"}])
    (m,) = found(svc, "cuda-visible-devices")
    assert "stops at '5', which is none of them: it would use 1 and 1 would sit idle" in m
    assert read == ["0", "5"]


def test_a_server_labelled_with_a_configured_priority_class_is_read_too() -> None:
    """A ``swarmgpu.priority`` naming a class of the config's ``preemption.
    priority_classes`` is a request as placement reads it: read with the built-in
    classes only it was none, and the server's warnings were never said."""
    svc = service(["--model", MODEL, "--tensor-parallel-size", "4"])
    svc = replace(svc, labels={**svc.labels, "swarmgpu.priority": "gold"})
    findings = audit(Snapshot([], [svc], [], {}), classes={"gold": 500})
    assert [f.kind for f in findings if f.kind == "server-gpu-count"] == ["server-gpu-count"]
