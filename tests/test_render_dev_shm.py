"""`swarmgpu render --check` warns where a model server spans GPUs through NCCL (vLLM
``-tp 2``, TGI ``--num-shard 2``...) and the stack mounts no tmpfs of 1 GiB or more at
``/dev/shm``: Docker gives a container 64 MiB there, Swarm takes no ``shm_size`` or
``ipc``, and NCCL fails to initialize with too little (NCCL's troubleshooting guide).
A warning naming the service, the flag and the fix as a Compose snippet, never an
error; nothing for one GPU, llama.cpp (no NCCL) or a mount render cannot judge."""

from __future__ import annotations

import pytest

from swarmgpu.manager.commands.render import check_stack

MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def stack(command: str, volumes: str = "", count: int = 2,
          image: str = "vllm/vllm-openai:v0.8.5") -> str:
    return (
        f'version: "3.8"\nservices:\n  llm:\n    image: {image}\n    command: {command}\n'
        f"{volumes}    deploy:\n      resources:\n        reservations:\n          devices:\n"
        f"            - driver: nvidia\n              count: {count}\n"
        "              capabilities: [gpu]\n"
    )


def shm_warnings(text: str) -> list[str]:
    checked = check_stack(text, stack_name="ai")
    assert checked.errors == [], checked.errors  # a warning, never a refusal
    return [n for n in checked.notes if "WARNING" in n and "/dev/shm" in n]


def tmpfs(size: str | None) -> str:
    sized = f"\n        tmpfs:\n          size: {size}" if size is not None else ""
    return f"    volumes:\n      - type: tmpfs\n        target: /dev/shm{sized}\n"


def test_a_tensor_parallel_server_without_a_dev_shm_mount_is_warned_with_the_fix() -> None:
    (w,) = shm_warnings(stack(f"--model {MODEL} --tensor-parallel-size 2"))
    assert w == (
        "services.llm: WARNING: vLLM spans 2 GPUs (--tensor-parallel-size 2) through NCCL, "
        "which keeps its shared memory in /dev/shm: Docker gives a container 64 MiB there, "
        "and Swarm takes no shm_size or ipc; with too little NCCL fails to initialize "
        '("failed to extend /dev/shm/nccl-..."); mount a tmpfs of 1 GiB or more there: '
        "volumes: [{type: tmpfs, target: /dev/shm, tmpfs: {size: 1073741824}}]"
    )


def test_a_small_tmpfs_at_dev_shm_is_named_with_its_size() -> None:
    (w,) = shm_warnings(stack(f"--model-id {MODEL} --num-shard 2", tmpfs("67108864"),
                              image="ghcr.io/huggingface/text-generation-inference:3.3.4"))
    assert "Text Generation Inference spans 2 GPUs (--num-shard 2)" in w
    assert "its tmpfs there holds 64 MiB" in w


@pytest.mark.parametrize(
    ("command", "volumes", "count"),
    [
        (f"--model {MODEL} -tp 2", tmpfs("1073741824"), 2),
        (f"--model {MODEL} -tp 2", tmpfs(None), 2),  # no size: no limit
        (f"--model {MODEL} -tp 2", "    volumes:\n      - /dev/shm:/dev/shm\n", 2),  # the host's
        (f"--model {MODEL}", "", 1),  # one GPU: no NCCL between GPUs
        ("llama-server -m /m.gguf", "", 2),  # llama.cpp splits over CUDA, not NCCL
        ("/start.sh", "", 2),  # a wrapper: not render's to read
    ],
)
def test_enough_room_one_gpu_or_no_nccl_says_nothing(command: str, volumes: str,
                                                     count: int) -> None:
    assert shm_warnings(stack(command, volumes, count)) == []


@pytest.mark.parametrize(("size", "said"), [("1048576", "1 MiB"), ("65536", "65536 bytes")])
def test_a_tmpfs_below_a_reservations_floor_is_named_not_left_unread(size: str,
                                                                     said: str) -> None:
    # Swarm's 4 MiB floor is a memory reservation's; a 1 MiB tmpfs was no size read.
    (w,) = shm_warnings(stack(f"--model {MODEL} -tp 2", tmpfs(size)))
    assert f"its tmpfs there holds {said}" in w
