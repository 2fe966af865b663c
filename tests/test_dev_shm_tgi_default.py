"""TGI started without ``--num-shard`` shards over the GPUs it sees (its launcher's
``find_num_shards``: ``(None, None) => num_cuda_devices().unwrap_or(1)``, one shard per
entry of ``CUDA_VISIBLE_DEVICES``, else of ``NVIDIA_VISIBLE_DEVICES``, which under
swarmgpu lists the grant): over two GPUs or more it runs NCCL between them and needs
room in ``/dev/shm``, as with ``--num-shard 2``. Before, render and audit said nothing
of it. ``--sharded false`` (one shard), one GPU, a share, a ``CUDA_VISIBLE_DEVICES`` of
one entry, or a value render cannot read say nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.commands.render import check_stack
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.swarmservice import read_service

TGI = "ghcr.io/huggingface/text-generation-inference:3.3.4"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def stack(command: str = f"--model-id {MODEL}", count: int = 2, extra: str = "",
          labels: str = "") -> str:
    return (
        f'version: "3.8"\nservices:\n  llm:\n    image: {TGI}\n    command: {command}\n'
        f"{extra}    deploy:\n{labels}      resources:\n        reservations:\n"
        "          devices:\n            - driver: nvidia\n"
        f"              count: {count}\n              capabilities: [gpu]\n"
    )


def shm_warnings(text: str) -> list[str]:
    checked = check_stack(text, stack_name="ai")
    assert checked.errors == [], checked.errors
    return [n for n in checked.notes if "WARNING" in n and "/dev/shm" in n]


def test_tgi_without_num_shard_on_two_gpus_is_warned_as_with_it() -> None:
    (w,) = shm_warnings(stack())
    assert w.startswith(
        "services.llm: WARNING: Text Generation Inference spans 2 GPUs (no --num-shard: "
        "one shard per GPU it is given) through NCCL, which keeps its shared memory in "
        "/dev/shm: Docker gives a container 64 MiB there")
    assert w.endswith("volumes: [{type: tmpfs, target: /dev/shm, tmpfs: {size: 1073741824}}]")


def test_its_own_cuda_visible_devices_gives_the_shard_count() -> None:
    env = "    environment:\n      - CUDA_VISIBLE_DEVICES=0,1\n"
    (w,) = shm_warnings(stack(count=4, extra=env))
    assert "spans 2 GPUs (no --num-shard: one shard per entry of CUDA_VISIBLE_DEVICES=0,1)" in w


@pytest.mark.parametrize(("command", "count", "extra"), [
    (f"--model-id {MODEL}", 1, ""),  # one GPU: one shard
    (f"--model-id {MODEL} --sharded false", 2, ""),  # one shard
    (f"--model-id {MODEL}", 2, "    environment:\n      - CUDA_VISIBLE_DEVICES=0\n"),
    (f"--model-id {MODEL}", 2, "    environment:\n      - CUDA_VISIBLE_DEVICES\n"),  # shell's
    (f"--model-id {MODEL}", 2, "    environment:\n      - SHARDED=false\n"),
    (f"--model-id {MODEL}", 2,  # room enough
     "    volumes:\n      - type: tmpfs\n        target: /dev/shm\n        tmpfs:\n"
     "          size: 1073741824\n"),
])
def test_one_shard_or_room_says_nothing(command: str, count: int, extra: str) -> None:
    assert shm_warnings(stack(command, count, extra)) == []


def test_a_share_is_one_gpu_to_tgi() -> None:
    labels = '      labels:\n        swarmgpu.gpu-fraction: "0.5"\n'
    text = stack(count=1, labels=labels)
    assert shm_warnings(text) == []


def service(env: list[str], gpus: str) -> Any:
    return read_service({
        "ID": "s1", "Version": {"Index": 3},
        "Spec": {"Name": "ai_tgi", "Labels": {"swarmgpu.gpus": gpus},
                 "TaskTemplate": {"ContainerSpec": {"Image": TGI, "Env": env,
                                                    "Args": ["--model-id", MODEL]}},
                 "Mode": {"Replicated": {"Replicas": 1}}},
    })


def test_audit_says_it_of_a_running_tgi_service() -> None:
    found = [f.message for f in audit(Snapshot([], [service([], "4")], [], {}))
             if f.kind == "server-shm"]
    assert len(found) == 1
    assert found[0].startswith("Text Generation Inference spans 4 GPUs (no --num-shard: "
                               "one shard per GPU it is given)")
    assert [f for f in audit(Snapshot([], [service([], "1")], [], {}))
            if f.kind == "server-shm"] == []


def test_a_literal_dollar_is_an_entry_as_tgi_counts_it() -> None:
    # `$$` is docker stack deploy's escape of `$`: the container gets `$A,$B` as written
    # (no shell expands an environment value), and TGI's num_cuda_devices counts its
    # comma-separated entries: two shards. Before, any `$` left it unsaid.
    env = "    environment:\n      - CUDA_VISIBLE_DEVICES=$$A,$$B\n"
    checked = check_stack(stack(count=4, extra=env), stack_name="ai", environ={})
    (w,) = [n for n in checked.notes if "/dev/shm" in n]
    assert ("spans 2 GPUs (no --num-shard: one shard per entry of "
            "CUDA_VISIBLE_DEVICES=$A,$B)") in w


def test_audit_counts_a_dollar_in_a_running_services_env() -> None:
    found = [f.message for f in audit(Snapshot(
        [], [service(["CUDA_VISIBLE_DEVICES=$A,$B"], "4")], [], {})) if f.kind == "server-shm"]
    assert len(found) == 1
    assert "spans 2 GPUs (no --num-shard: one shard per entry of CUDA_VISIBLE_DEVICES=$A,$B)" \
        in found[0]


def test_a_dollar_docker_substitutes_is_left_unsaid() -> None:
    # render --skip-interpolation: docker substitutes `$GPUS` from its own shell
    env = "    environment:\n      - CUDA_VISIBLE_DEVICES=$GPUS,1\n"
    assert shm_warnings(stack(count=4, extra=env)) == []


def test_a_dollar_in_an_env_file_is_passed_as_written_and_counted(tmp_path: Path) -> None:
    # (docker reads an env file's values as written, --skip-interpolation or not)
    (tmp_path / "gpu.env").write_text("CUDA_VISIBLE_DEVICES=$A,$B\n")
    text = stack(count=4, extra="    env_file: gpu.env\n")
    checked = check_stack(text, stack_name="ai", env_base=str(tmp_path))
    assert checked.errors == [], checked.errors
    (w,) = [n for n in checked.notes if "/dev/shm" in n]
    assert "spans 2 GPUs (no --num-shard: one shard per entry of CUDA_VISIBLE_DEVICES=$A,$B " \
           "from env_file)" in w
