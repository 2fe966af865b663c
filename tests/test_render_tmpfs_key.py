"""A Compose service's ``tmpfs:`` key is dropped by `docker stack deploy` without a word:
docker/cli's loader reads it (``ServiceConfig.Tmpfs``; the 3.8 schema takes it), but its
convert makes the service's mounts of ``volumes:`` alone (cli/compose/convert/service.go
``Mounts: mounts``, from ``Volumes(service.Volumes, ...)``) and it is no unsupported
property, so nothing is said. So ``tmpfs: /dev/shm:size=1g`` gives NCCL no room: render
says so of the key, and its /dev/shm warning names the line dropped rather than only
Docker's 64 MiB (the owner read that as wrong: the line is there)."""

from __future__ import annotations

from swarmgpu.manager.commands.render import check_stack

MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def stack(extra: str, command: str = f"--model {MODEL} -tp 2") -> str:
    return (
        'version: "3.8"\nservices:\n  llm:\n    image: vllm/vllm-openai:v0.8.5\n'
        f"    command: {command}\n{extra}    deploy:\n      resources:\n"
        "        reservations:\n          devices:\n            - driver: nvidia\n"
        "              count: 2\n              capabilities: [gpu]\n"
    )


def notes(text: str) -> list[str]:
    checked = check_stack(text, stack_name="ai")
    assert checked.errors == [], checked.errors  # (docker stack deploy takes the file)
    return checked.notes


def test_a_tmpfs_key_at_dev_shm_is_named_as_dropped_in_the_warning() -> None:
    said = notes(stack("    tmpfs:\n      - /dev/shm:size=2g\n"))
    (w,) = [n for n in said if "WARNING" in n and "NCCL" in n]
    assert ("docker stack deploy drops its tmpfs: '/dev/shm:size=2g' (a stack mounts a "
            "tmpfs from volumes: alone), so Docker gives the container 64 MiB there") in w
    assert w.endswith("volumes: [{type: tmpfs, target: /dev/shm, tmpfs: {size: 1073741824}}]")


def test_the_tmpfs_key_is_said_to_be_dropped_wherever_it_mounts() -> None:
    for value in ("/run", "[/run, /dev/shm]", "/dev/shm:size=1g"):
        (n,) = [n for n in notes(stack(f"    tmpfs: {value}\n", command=f"--model {MODEL}"))
                if n.startswith("services.llm.tmpfs:")]
        assert n == (
            "services.llm.tmpfs: docker stack deploy drops it without a word (its mounts "
            "come from volumes: alone); mount each there instead: volumes: [{type: tmpfs, "
            "target: PATH, tmpfs: {size: BYTES}}]")


def test_room_from_volumes_beside_a_dropped_tmpfs_key_is_room() -> None:
    room = ("    tmpfs: /dev/shm\n    volumes:\n      - type: tmpfs\n        target: /dev/shm\n"
            "        tmpfs:\n          size: 1073741824\n")
    assert [n for n in notes(stack(room)) if "WARNING" in n and "NCCL" in n] == []
