"""`swarmgpu render` warns where llama.cpp's server is told to use one GPU (``-sm none``,
``--split-mode none``, ``LLAMA_ARG_SPLIT_MODE=none``: "use one GPU only") on a service
that asks for more: the others sit idle. Its default (``layer``) and ``row`` split over
every GPU given, which is the request: nothing to say. Before, llama.cpp's server was
not read at all."""

from __future__ import annotations

import pytest

from swarmgpu.manager.commands.render import check_stack

LLAMA = "ghcr.io/ggml-org/llama.cpp:server-cuda"


def stack(image: str, service: str, count: str) -> str:
    """A llama.cpp service as people write one, asking for ``count`` GPUs in Compose's
    syntax."""
    return (
        f'version: "3.8"\nservices:\n  llm:\n    image: {image}\n{service}'
        "    deploy:\n      resources:\n        reservations:\n          devices:\n"
        f"            - driver: nvidia\n              count: {count}\n"
        "              capabilities: [gpu]\n"
    )


def warnings(text: str) -> list[str]:
    checked = check_stack(text, stack_name="ai")
    assert checked.errors == [], checked.errors  # a warning, never a refusal
    return [n for n in checked.notes if "WARNING" in n]


@pytest.mark.parametrize(
    ("service", "said"),
    [
        ('    entrypoint: ["/app/llama-server"]\n    command: -m /m.gguf -ngl 99 -sm none\n',
         "-sm none"),
        # llama.cpp's parser reads --a_b as --a-b (common/arg.cpp)
        ('    command: ["llama-server", "-m", "/m.gguf", "--split_mode", "none"]\n',
         "--split_mode none"),
        # its variable, under the flag that would override it
        ('    command: ["llama-server", "-m", "/m.gguf"]\n'
         "    environment: [LLAMA_ARG_SPLIT_MODE=none]\n", "LLAMA_ARG_SPLIT_MODE=none"),
    ],
)
def test_split_mode_none_on_two_gpus_is_a_warning_that_one_sits_idle(
    service: str, said: str
) -> None:
    (w,) = warnings(stack(LLAMA, service, count="2"))
    assert w == (
        f"services.llm: WARNING: llama.cpp server will use 1 GPU ({said}), but the service "
        'asks swarmgpu for 2 (swarmgpu.gpus: "2"): 1 of them would sit idle; ask for 1 '
        f'(swarmgpu.gpus: "1", or a Compose count of 1), or change {said.split("=")[0].split()[0]}'
    )


@pytest.mark.parametrize(
    ("service", "count"),
    [
        ('    command: ["llama-server", "-m", "/m.gguf", "-ngl", "99"]\n', "2"),  # layer
        ('    command: ["llama-server", "-m", "/m.gguf", "-sm", "row"]\n', "4"),
        ('    command: ["llama-server", "-m", "/m.gguf", "-sm", "none"]\n', "1"),
        # the flag wins over its variable, as llama.cpp reads them
        ('    command: ["llama-server", "-m", "/m.gguf", "-sm", "layer"]\n'
         "    environment: [LLAMA_ARG_SPLIT_MODE=none]\n", "2"),
        # which GPUs --device names is not render's to read
        ('    command: ["llama-server", "-sm", "none", "-dev", "CUDA0"]\n', "2"),
        ('    command: ["-m", "/m.gguf", "-sm", "none"]\n', "2"),  # the image's entrypoint
    ],
)
def test_a_split_over_every_gpu_or_what_cannot_be_read_says_nothing(
    service: str, count: str
) -> None:
    assert warnings(stack(LLAMA, service, count=count)) == []


def test_split_mode_joined_by_an_equals_sign_is_not_read_as_llama_cpp_refuses_it() -> None:
    """llama.cpp's parser takes no ``--flag=value`` (common/arg.cpp looks the whole word
    up: "error: invalid argument: --split-mode=none"): the server does not start, so it
    uses no one GPU. Its variable, read as the flag, still counts."""
    for word in ("--split-mode=none", "--split_mode=none"):
        service = f'    command: ["llama-server", "-m", "/m.gguf", "{word}"]\n'
        assert warnings(stack(LLAMA, service, count="2")) == [], word
    env = ('    command: ["llama-server", "-m", "/m.gguf"]\n'
           "    environment: [LLAMA_ARG_SPLIT_MODE=none]\n")
    assert len(warnings(stack(LLAMA, env, count="2"))) == 1
