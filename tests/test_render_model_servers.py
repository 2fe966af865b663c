"""`swarmgpu render` warns where a model server's own flags say it will use another number
of GPUs than the service asks swarmgpu for (vLLM ``--tensor-parallel-size``, SGLang
``--tp``, TGI ``--num-shard`` / ``NUM_SHARD``, TensorRT-LLM ``--tp_size``): a warning
naming the service, the flag, both numbers and the fix, never an error; nothing where
render cannot read the count (a wrapper, a config file, another spelling, ``$TP``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.render_compose import FACTS, NODES
from support.render_engines import STACKS

from swarmgpu.cli import main
from swarmgpu.manager.commands.render import check_stack, render_stack


def stack(image: str, service: str, count: str = "2", request: str = "") -> str:
    """A stack as people write one: the image, the service's lines (command, entrypoint,
    environment), and a Compose GPU reservation of ``count`` (or ``request``: the
    swarmgpu labels instead)."""
    asks = (
        f"      labels:\n{request}"
        if request
        else "      resources:\n        reservations:\n          devices:\n"
        f"            - driver: nvidia\n              count: {count}\n"
        "              capabilities: [gpu]\n"
    )
    return (
        f'version: "3.8"\nservices:\n  llm:\n    image: {image}\n{service}'
        f'    ports:\n      - "8000:8000"\n    deploy:\n{asks}'
    )


def warnings(text: str) -> list[str]:
    """The GPU-count warnings (/dev/shm's: tests/test_render_dev_shm.py)."""
    checked = check_stack(text, stack_name="ai")
    assert checked.errors == [], checked.errors  # a warning, never a refusal
    return [n for n in checked.notes if "WARNING" in n and "/dev/shm" not in n]


VLLM = "vllm/vllm-openai:v0.8.5"
SGLANG = "lmsysorg/sglang:v0.4.6.post5-cu124"
TGI = "ghcr.io/huggingface/text-generation-inference:3.3.4"
TRTLLM = "nvcr.io/nvidia/tensorrt-llm/release:0.20.0"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def test_vllm_tensor_parallel_beyond_the_request_is_a_warning_naming_the_fix() -> None:
    cmd = f'    command: ["--model", "{MODEL}", "--tensor-parallel-size", "4"]\n'
    (w,) = warnings(stack(VLLM, cmd, count="2"))
    assert w == (
        "services.llm: WARNING: vLLM will use 4 GPUs (--tensor-parallel-size 4), but the "
        'service asks swarmgpu for 2 (swarmgpu.gpus: "2"): it would not start, seeing 2; '
        'ask for 4 (swarmgpu.gpus: "4", or a Compose count of 4), or change '
        "--tensor-parallel-size"
    )


@pytest.mark.parametrize(
    ("service", "uses"),
    [
        (f'    command: ["--model", "{MODEL}", "-tp", "2"]\n', 2),
        (f"    command: --model {MODEL} -tp=2\n", 2),
        (f"    command: --model {MODEL} --tensor_parallel_size 2  # FlexibleArgumentParser\n", 2),
        (f"    command: --model {MODEL} --tensor-parallel-size=2 --pipeline-parallel-size 2\n", 4),
        (f"    command: --model {MODEL} -tp 2 -dp 2\n", 4),
        # the image's entrypoint replaced: the command says what runs
        (f'    entrypoint: ["vllm", "serve"]\n    command: ["{MODEL}", "-tp", "4"]\n', 4),
        (
            "    entrypoint: python3 -m vllm.entrypoints.openai.api_server\n"
            f'    command: ["--model", "{MODEL}", "-tp", "4"]\n',
            4,
        ),
        (
            '    entrypoint: ["/bin/bash", "-c"]\n'
            f'    command: ["pip install -q flashinfer && exec vllm serve {MODEL} \\\\\\n'
            '      --tensor-parallel-size 4 --port 8000"]\n',
            4,
        ),
        # no size flag: vLLM's default of one GPU
        (f'    command: ["--model", "{MODEL}"]\n', 1),
    ],
)
def test_vllm_each_spelling_is_read_as_vllm_reads_it(service: str, uses: int) -> None:
    assert warnings(stack(VLLM, service, count=str(uses))) == []
    other = 8 if uses != 8 else 2
    (w,) = warnings(stack(VLLM, service, count=str(other)))
    assert w.startswith(f"services.llm: WARNING: vLLM will use {uses} GPU"), w
    assert f'ask for {uses} (swarmgpu.gpus: "{uses}"' in w, w


def test_vllm_with_no_size_flag_says_it_uses_one_and_which_flag_to_set() -> None:
    (w,) = warnings(stack(VLLM, f'    command: ["--model", "{MODEL}"]\n', count="2"))
    assert "vLLM will use 1 GPU (no --tensor-parallel-size: 1 by default)" in w
    assert "1 of them would sit idle" in w and w.endswith("or set --tensor-parallel-size")


@pytest.mark.parametrize(
    "service",
    [
        # a config file, another node's share, a launcher render cannot follow
        f'    command: ["--model", "{MODEL}", "--config", "/etc/vllm.yaml"]\n',
        f'    command: ["--model", "{MODEL}", "-tp", "4",'
        ' "--distributed-executor-backend", "ray"]\n',
        f'    command: ["--model", "{MODEL}", "-tp", "8", "--headless"]\n',
        f'    command: ["--model", "{MODEL}", "-dp", "4", "--data-parallel-size-local", "2"]\n',
        # a value left for a shell, an abbreviation, an unclosed quote
        f'    command: ["--model", "{MODEL}", "-tp", "$${{TP}}"]\n',
        f'    command: ["--model", "{MODEL}", "--tensor-parallel", "4"]\n',
        f"    command: --model '{MODEL} -tp 4\n",
        # a wrapper script, two servers in one script
        '    entrypoint: ["/opt/start.sh"]\n    command: ["-tp", "4"]\n',
        '    entrypoint: ["sh", "-c"]\n    command: ["vllm serve a -tp 4 & vllm serve b -tp 4"]\n',
        f'    command: ["vllm", "serve", "{MODEL}", "-tp", "4"]\n',  # vllm serve vllm serve
    ],
)
def test_vllm_what_render_cannot_read_is_left_unsaid(service: str) -> None:
    assert warnings(stack(VLLM, service, count="2")) == []


@pytest.mark.parametrize(
    ("request_labels", "says"),
    [
        ('        swarmgpu.gpu-fraction: "0.5"\n', "0.5 GPU"),
        ("        swarmgpu.mig: 1g.10gb\n", "MIG 1g.10gb"),
    ],
)
def test_a_share_with_tensor_parallel_above_one_is_a_warning(
    request_labels: str, says: str
) -> None:
    tp2 = f'    command: ["--model", "{MODEL}", "-tp", "2"]\n'
    (w,) = warnings(stack(VLLM, tp2, request=request_labels))
    assert f"asks swarmgpu for {says}, which the container sees as one GPU" in w, w
    assert 'ask for 2 whole GPUs (swarmgpu.gpus: "2", no share), or change -tp' in w
    tp1 = f'    command: ["--model", "{MODEL}", "-tp", "1"]\n'
    assert warnings(stack(VLLM, tp1, request=request_labels)) == []


def test_count_all_is_compared_once_rendered_not_offline() -> None:
    text = stack(VLLM, f'    command: ["--model", "{MODEL}", "-tp", "4"]\n', count="all")
    assert warnings(text) == []  # --check: 'all' is not a number yet
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS)  # 'all' is the DGX's 8
    header = out.split("version:")[0]
    assert "vLLM will use 4 GPUs (-tp 4), but the service asks swarmgpu for 8" in header


def test_render_and_render_check_print_the_warning_and_succeed(tmp_path: Path) -> None:
    f = tmp_path / "ai.yml"
    f.write_text(stack(VLLM, f'    command: ["--model", "{MODEL}", "-tp", "4"]\n', count="2"))
    r = CliRunner().invoke(main, ["render", "--check", "--skip-interpolation", str(f)])
    assert r.exit_code == 0, r.output
    assert "swarmgpu render: services.llm: WARNING: vLLM will use 4 GPUs (-tp 4)" in r.output


def test_the_examples_and_engine_stacks_say_no_warning_where_they_agree() -> None:
    for name, text in STACKS.items():
        if name != "gpus-two":  # vllm with no flag asking for 2: below
            assert [n for n in check_stack(text).notes if "WARNING" in n] == [], name
    (w,) = [n for n in check_stack(STACKS["gpus-two"]).notes if "WARNING" in n]
    assert "vLLM will use 1 GPU" in w


@pytest.mark.parametrize(
    ("service", "refused"),
    [
        ("    command: {a: b}\n", True),
        ("    environment: 7\n    command: [--model, m, -tp, '2']\n", True),
        ('    entrypoint: ["sh", "-c"]\n    command: ["vllm serve \'unclosed -tp 4"]\n', False),
    ],
)
def test_a_malformed_service_gets_its_errors_and_no_warning(service: str, refused: bool) -> None:
    checked = check_stack(stack(VLLM, service, count="2"))
    assert bool(checked.errors) is refused, checked.errors
    assert not [n for n in checked.notes if "WARNING" in n and "/dev/shm" not in n]


SGLANG_SERVE = f"    command: python3 -m sglang.launch_server --model-path {MODEL} --host 0.0.0.0"


@pytest.mark.parametrize(
    ("flags", "uses"),
    [
        ("--tp 4", 4),
        ("--tp-size=2", 2),
        ("--tensor-parallel-size 2 --dp 2", 4),
        ("--tp 2 --pp-size 2 --dp-size 2", 8),
        # DP attention: the data-parallel ranks share the tensor-parallel GPUs
        ("--tp 8 --dp 8 --enable-dp-attention", 8),
        ("", 1),
    ],
)
def test_sglang_tp_pp_and_dp_are_read_as_sglang_reads_them(flags: str, uses: int) -> None:
    service = f"{SGLANG_SERVE} {flags}\n"
    assert warnings(stack(SGLANG, service, count=str(uses))) == []
    other = 8 if uses != 8 else 2
    (w,) = warnings(stack(SGLANG, service, count=str(other)))
    assert w.startswith(f"services.llm: WARNING: SGLang will use {uses} GPU"), w


def test_sglang_beyond_the_request_names_its_flag_and_newer_cli() -> None:
    service = f"    command: sglang serve --model-path {MODEL} --tp 4\n"
    (w,) = warnings(stack(SGLANG, service, count="2"))
    assert "SGLang will use 4 GPUs (--tp 4), but the service asks swarmgpu for 2" in w
    assert w.endswith("or change --tp")


@pytest.mark.parametrize(
    "flags", ["--tp 4 --nnodes 2 --node-rank 0", "--config /srv/sglang.yaml", "--pp 2", "-tp 4"]
)
def test_sglang_what_render_cannot_read_is_left_unsaid(flags: str) -> None:
    assert warnings(stack(SGLANG, f"{SGLANG_SERVE} {flags}\n", count="2")) == []


def test_tgi_num_shard_flag_or_variable_beyond_the_request_is_a_warning() -> None:
    flag = f"    command: --model-id {MODEL} --num-shard 4\n"
    (w,) = warnings(stack(TGI, flag, count="2"))
    assert "Text Generation Inference will use 4 GPUs (--num-shard 4)" in w
    env = f"    command: --model-id {MODEL}\n    environment:\n      NUM_SHARD: 4\n"
    (w,) = warnings(stack(TGI, env, count="2"))
    assert "will use 4 GPUs (NUM_SHARD=4)" in w and w.endswith("or change NUM_SHARD")
    listed = f"    command: --model-id {MODEL}\n    environment:\n      - NUM_SHARD=1\n"
    (w,) = warnings(stack(TGI, listed, count="2"))
    assert "will use 1 GPU (NUM_SHARD=1)" in w and "1 of them would sit idle" in w


@pytest.mark.parametrize(
    "service",
    [
        # its default shards over every GPU it is given: the request itself
        f"    command: --model-id {MODEL}\n",
        f"    command: --model-id {MODEL} --num-shard=2\n",
        f"    command: --model-id {MODEL} --sharded true --num-shard 2\n",
        # the command line overrides the variable (clap)
        f"    command: --model-id {MODEL} --num-shard 2\n    environment:\n      NUM_SHARD: 4\n",
        f"    command: --model-id {MODEL} --sharded false\n",
        f"    command: --model-id {MODEL} --num_shard 4\n",  # clap refuses it
        f'    entrypoint: ["text-generation-launcher"]\n    command: ["--model-id", "{MODEL}"]\n',
    ],
)
def test_tgi_that_agrees_or_cannot_be_read_says_nothing(service: str) -> None:
    assert warnings(stack(TGI, service, count="2")) == []


def test_tgi_num_shard_in_an_env_file_is_read_as_docker_reads_it(tmp_path: Path) -> None:
    """docker reads each env_file into the service's environment, a later file over an
    earlier one, and ``environment`` over them (docker/cli resolveEnvironment); TGI's
    flag over both. Before: NUM_SHARD=4 set only in an env_file, asking for 2, said
    nothing."""
    (tmp_path / "a.env").write_text("# the model's shards\nNUM_SHARD=3\n")
    (tmp_path / "tgi.env").write_text("HF_HOME=/data\nNUM_SHARD=4\n")

    def said(service: str) -> list[str]:
        checked = check_stack(stack(TGI, service), stack_name="ai", env_base=str(tmp_path))
        assert checked.errors == [], checked.errors
        return [n for n in checked.notes if "WARNING" in n and "/dev/shm" not in n]

    files = f"    command: --model-id {MODEL}\n    env_file: [a.env, tgi.env]\n"
    (w,) = said(files)
    assert "will use 4 GPUs (NUM_SHARD=4 from env_file)" in w, w
    assert w.endswith("or change NUM_SHARD")
    assert said(files + "    environment:\n      NUM_SHARD: 2\n") == []
    assert said(files + "    environment:\n      - NUM_SHARD=2\n") == []
    assert said(files.replace(MODEL, f"{MODEL} --num-shard 2")) == []
    (w,) = said(f"    command: --model-id {MODEL}\n    env_file: tgi.env\n")
    assert "(NUM_SHARD=4 from env_file)" in w
    # render --check reads it against the stack file's folder, as render does
    f = tmp_path / "ai.yml"
    f.write_text(stack(TGI, files))
    r = CliRunner().invoke(main, ["render", "--check", str(f)])
    assert r.exit_code == 0, r.output
    assert "Text Generation Inference will use 4 GPUs (NUM_SHARD=4 from env_file)" in r.output


TRTLLM_SERVE = f"    command: trtllm-serve {MODEL} --host 0.0.0.0 --port 8000"


@pytest.mark.parametrize(
    ("flags", "uses"),
    [
        ("--tp_size 4", 4),
        ("--tp_size=2 --pp_size 2", 4),
        ("--tensor_parallel_size 2", 2),
        ("--tp_size 2 --cp_size 2", 4),
        ("", 1),
    ],
)
def test_tensorrt_llm_sizes_are_read_as_trtllm_serve_reads_them(flags: str, uses: int) -> None:
    service = f"{TRTLLM_SERVE} {flags}\n"
    assert warnings(stack(TRTLLM, service, count=str(uses))) == []
    other = 8 if uses != 8 else 2
    (w,) = warnings(stack(TRTLLM, service, count=str(other)))
    assert w.startswith(f"services.llm: WARNING: TensorRT-LLM will use {uses} GPU"), w


@pytest.mark.parametrize(
    "service",
    [
        f"{TRTLLM_SERVE} --tp-size 4\n",  # click refuses it
        f"{TRTLLM_SERVE} --tp_size 4 --extra_llm_api_options /srv/extra.yml\n",
        f"{TRTLLM_SERVE} --tp_size 4 --gpus_per_node 2\n",
        f"    command: mpirun -n 4 trtllm-serve {MODEL} --tp_size 4\n",
        "    command: trtllm-serve disaggregated -c /srv/disagg.yaml\n",
    ],
)
def test_tensorrt_llm_what_render_cannot_read_is_left_unsaid(service: str) -> None:
    assert warnings(stack(TRTLLM, service, count="2")) == []
