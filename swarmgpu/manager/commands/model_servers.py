"""A model server's own GPU count against the service's request, for `swarmgpu render`
(and `swarmgpu audit`, of a running service: ``auditservers``).

vLLM, SGLang, Text Generation Inference, TensorRT-LLM and llama.cpp's server each take
how many GPUs they use from their own flags (``vllm serve M --tensor-parallel-size 4``,
``llama-server -sm none``: one). Ollama and Triton have no such count (they take the
GPUs they are given): nothing to compare. A service that
asks swarmgpu for 2 GPUs and runs that fails to start (it sees 2); with ``-tp 1`` one of
the two GPUs it holds sits idle. render reads the service's entrypoint, command and
environment (its env files under it) as docker passes them (a string split as
docker/cli splits it, google/shlex; a ``sh -c`` script split as a shell would) and says
so in a warning, never an error.
What it cannot read it leaves unsaid: a wrapper script, a config file, a multi-node
launch, a flag spelled another way, an unsubstituted ``$VAR``, two servers in one
command. Pure (docs/requests.md, "Model servers").
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.manager.services.requests import GpuRequest, RequestError


@dataclass(frozen=True)
class Server:
    """What a model server reads its GPU count from (each source named here)."""

    name: str
    starts: tuple[tuple[str, ...], ...]  # the words that run it (the first by basename)
    # Flags whose values multiply into the GPUs it uses; each is every spelling its own
    # parser takes, the first the one a warning names.
    sizes: tuple[tuple[str, ...], ...]
    images: tuple[str, ...] = ()  # images whose own entrypoint runs it (no registry)
    # Flags that make the count unknowable here (a config file, another node's share),
    # each with the values that leave it known.
    unknowable: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    drops: Mapping[str, str] = field(default_factory=dict)  # size flag -> flag that voids it
    # The spellings of one flag whose one value fixes the GPUs it uses (llama.cpp's -sm
    # none: one), each with that value and the count; another value leaves its default.
    fixed: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # variable -> the flag it sets
    underscores: bool = False  # --a_b read as --a-b (vLLM's FlexibleArgumentParser)
    equals: bool = True  # --flag=value is a spelling (llama.cpp's parser refuses it)
    one_by_default: bool = True  # no size flag: one GPU (TGI: all it is given)
    other: frozenset[str] = frozenset()  # its subcommands that serve no model this way
    nccl: bool = True  # its GPUs talk through NCCL (llama.cpp's: through CUDA alone)

    def spelling(self, name: str) -> str:
        return "--" + name[2:].replace("_", "-") if self.underscores and name[:2] == "--" else name


# Each as its own parser reads it: vLLM's vllm/engine/arg_utils.py (argparse, with
# FlexibleArgumentParser's --a_b), SGLang's srt/server_args.py (argparse: docs write the
# abbreviations --tp and --dp), TGI's launcher/src/main.rs (clap: --flag and its
# environment variable), TensorRT-LLM's commands/serve.py (click) and llama.cpp's
# common/arg.cpp (each flag with its LLAMA_ARG_ variable, the flag winning).
SERVERS: tuple[Server, ...] = (
    Server(
        "vLLM",
        starts=(("vllm", "serve"), ("vllm.entrypoints.openai.api_server",)),
        images=("vllm/vllm-openai",),
        sizes=(
            ("--tensor-parallel-size", "-tp"),
            ("--pipeline-parallel-size", "-pp"),
            ("--data-parallel-size", "-dp"),
        ),
        unknowable={
            "--config": (),
            "--headless": (),
            "--nnodes": ("1",),
            "--node-rank": ("0",),
            "--data-parallel-size-local": (),
            "-dpl": (),
            "--data-parallel-address": (),
            "-dpa": (),
            "--data-parallel-start-rank": (),
            "-dpr": (),
            "--data-parallel-hybrid-lb": (),
            "--data-parallel-external-lb": (),
            "--data-parallel-backend": ("mp",),
            "--distributed-executor-backend": ("mp", "uni"),
        },
        underscores=True,
    ),
    Server(
        "SGLang",
        starts=(("sglang.launch_server",), ("sglang_router.launch_server",), ("sglang", "serve")),
        sizes=(
            ("--tensor-parallel-size", "--tp-size", "--tp"),
            ("--pipeline-parallel-size", "--pp-size"),
            ("--data-parallel-size", "--dp-size", "--dp"),
        ),
        unknowable={
            "--config": (),
            "--nnodes": ("1",),
            "--node-rank": ("0",),
            "--base-gpu-id": ("0",),
            "--gpu-id-step": ("1",),
        },
        # DP attention runs its data-parallel ranks inside the tensor-parallel GPUs
        drops={"--data-parallel-size": "--enable-dp-attention"},
    ),
    Server(
        "Text Generation Inference",
        starts=(("text-generation-launcher",),),
        images=("huggingface/text-generation-inference",),
        sizes=(("--num-shard",),),
        unknowable={"--sharded": ("true",)},
        env={"NUM_SHARD": "--num-shard", "SHARDED": "--sharded"},
        one_by_default=False,  # it shards over every GPU it is given
    ),
    Server(
        "TensorRT-LLM",
        starts=(("trtllm-serve",),),
        sizes=(
            ("--tp_size", "--tensor_parallel_size"),
            ("--pp_size", "--pipeline_parallel_size"),
            ("--cp_size", "--context_parallel_size"),
        ),
        unknowable={"--config": (), "--extra_llm_api_options": (), "--gpus_per_node": ()},
        other=frozenset(
            {"disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve", "grpc"}
        ),
    ),
    Server(
        "llama.cpp server",
        starts=(("llama-server",),),
        sizes=(),
        fixed={"--split-mode": ("none", 1), "-sm": ("none", 1)},  # none: "one GPU only"
        unknowable={"--device": (), "-dev": (), "--rpc": ()},
        env={"LLAMA_ARG_SPLIT_MODE": "--split-mode", "LLAMA_ARG_DEVICE": "--device"},
        underscores=True,  # ("--" words: _ read as -)
        equals=False,  # (the whole word looked up: --split-mode=none stops it starting)
        one_by_default=False,  # layer (its default) and row split over every GPU given
        nccl=False,
    ),
)

_LAUNCHERS = frozenset({"mpirun", "mpiexec", "srun", "torchrun", "trtllm-llmapi-launch"})
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_SEPARATORS = frozenset(";&|()\n")  # a token of these only ends a shell command
# Each server's starts by their first word, in SERVERS' order: a word is looked up once,
# not compared with every start (the daemon reads each GPU service's spec every cycle).
_BY_FIRST: dict[str, list[tuple[Server, tuple[str, ...]]]] = {}
for _server in SERVERS:
    for _start in _server.starts:
        _BY_FIRST.setdefault(_start[0], []).append((_server, _start))
# The most of an entrypoint and command read, in characters: a server's launch line is a
# few hundred. The daemon reads each GPU service's spec every cycle (audit's findings on
# its map), and a shell script is split a character at a time (4 MiB took 16 s), so a
# longer one is left unsaid.
MAX_TEXT = 16 << 10


def server_notes(
    svc: Mapping[str, Any],
    where: str,
    req: GpuRequest | RequestError,
    prefix: str = "swarmgpu.",
    env_files: Mapping[str, str | None] | None = None,
) -> list[str]:
    """``server_warnings`` as render says them, each after ``where``."""
    return [f"{where}: WARNING: {w}" for w in server_warnings(svc, req, prefix, env_files)]


def server_warnings(
    svc: Mapping[str, Any],
    req: GpuRequest | RequestError,
    prefix: str = "swarmgpu.",
    env_files: Mapping[str, str | None] | None = None,
) -> list[str]:
    """A warning where the model server ``svc`` runs will use another number of GPUs
    than ``req`` gives each replica; none where it cannot be told (or ``req`` is an
    error, said as one). ``svc``: a Compose service's keys (``entrypoint``, ``command``,
    ``environment``, ``image``), as render reads them and audit makes them of a
    Swarm spec. ``env_files``: what its env files set (``envfile``), which docker
    reads under its ``environment``."""
    if isinstance(req, RequestError):
        return []
    used = server_count(svc, env_files)
    if used is None:
        return []
    server, n, said, flags = used
    key = f"{prefix}gpus"
    gpus = "GPU" if n == 1 else "GPUs"
    head = f"{server.name} will use {n} {gpus} ({said}), but the service"
    if req.mig_profile or req.is_fraction:
        if n == 1:
            return []
        return [
            f"{head} asks swarmgpu for {req.describe()}, which the container sees as one "
            f'GPU: it would not start; ask for {n} whole GPUs ({key}: "{n}", no share), '
            f"or {flags}"
        ]
    if n == req.gpus:
        return []
    why = (
        f"it would not start, seeing {req.gpus}"
        if n > req.gpus
        else f"{req.gpus - n} of them would sit idle"
    )
    return [
        f'{head} asks swarmgpu for {req.gpus} ({key}: "{req.gpus}"): {why}; ask for '
        f'{n} ({key}: "{n}", or a Compose count of {n}), or {flags}'
    ]


def server_count(
    svc: Mapping[str, Any], env_files: Mapping[str, str | None] | None = None,
    seen: tuple[int, str] | None = None,
) -> tuple[Server, int, str, str] | None:
    """(the server ``svc`` runs, the GPUs it will use, the flags that said so, what to
    change); None where that cannot be told. ``seen``: the GPUs it sees and how to say
    so, which a server that takes every GPU it sees (TGI) uses without a size flag;
    None: such a server's count is not told."""
    found = _launch(svc)
    if found is None:
        return None
    server, args = found
    env = _env_words(server, svc.get("environment"), env_files or {})
    used = _used(server, [*env, *args], env, seen)
    return None if used is None else (server, *used)


def _words(v: object) -> list[str] | None:
    """An entrypoint or command as docker passes it: a string split by docker/cli's
    google/shlex (quotes, backslashes, # comments), a list as it is; None: another shape."""
    if v is None:
        return []
    if isinstance(v, str):
        if len(v) > MAX_TEXT:  # (not split: a character at a time, 4 MiB took 16 s)
            return None
        try:
            return shlex.split(v, comments=True)
        except ValueError:  # an unclosed quote: docker refuses it
            return None
    if isinstance(v, list) and all(isinstance(x, str | int | float) for x in v):
        return [str(x) for x in v]
    return None


def _image(v: object) -> str:
    """The image's repository without registry, tag or digest (``vllm/vllm-openai``)."""
    name = str(v).partition("@")[0]
    head, _, tail = name.rpartition("/")
    name = f"{head}/{tail.partition(':')[0]}" if head else tail.partition(":")[0]
    first, _, rest = name.partition("/")
    return rest if rest and ("." in first or ":" in first or first == "localhost") else name


def _launch(svc: Mapping[str, Any]) -> tuple[Server, list[str]] | None:
    """The one server the service runs, and the words after the ones that run it."""
    entrypoint, command = _words(svc.get("entrypoint")), _words(svc.get("command"))
    if entrypoint is None or command is None:
        return None
    argv = [*entrypoint, *command]
    if sum(len(w) + 1 for w in argv) > MAX_TEXT:
        return None
    if not entrypoint:  # the image's own entrypoint, where render knows it
        image = _image(svc.get("image", ""))
        own = next((s.starts[0] for s in SERVERS if image in s.images), ())
        argv = [*own, *command]
    found = [hit for seg in _segments(argv) for hit in _starts(seg)]
    return found[0] if len(found) == 1 else None  # none, or two: not render's to guess


def _segments(argv: list[str]) -> list[list[str]]:
    """``argv``, and each command of a ``sh -c`` script in it (each script once)."""
    out = [argv]
    read: set[int] = set()
    i = 0
    while i < len(argv) - 1:
        word, i = argv[i], i + 1
        if word.rpartition("/")[2] not in _SHELLS:
            continue
        j = i
        while j < len(argv) - 1 and argv[j][:1] == "-" and argv[j][:2] != "--":
            if "c" in argv[j]:  # -c, -ec, -lc: the next word is the script
                if j + 1 not in read:
                    read.add(j + 1)
                    out += _script(argv[j + 1])
                break
            j += 1
        # (a shell word among those options names the same script: once, in linear time)
        i = max(i, j)
    return out


def _script(text: str) -> list[list[str]]:
    """A shell script's commands, split at ; & | ( ) and newlines, as a shell splits them
    (a line continued with a backslash is one line); none where a quote is unclosed."""
    return [list(seg) for seg in _split_script(text)]


# The daemon reads each GPU service's spec every cycle: a script is split once, not each
# cycle (a character at a time, 16 KiB took 50 ms). 512 of MAX_TEXT: 8 MiB at most.
@functools.lru_cache(maxsize=512)
def _split_script(text: str) -> tuple[tuple[str, ...], ...]:
    lex = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=";&|()<>\n")
    lex.whitespace, lex.whitespace_split = " \t\r", True
    try:
        words = list(lex)
    except ValueError:
        return ()
    out: list[list[str]] = [[]]
    for w in words:
        if set(w) <= _SEPARATORS:
            out.append([])
        else:
            out[-1].append(w)
    return tuple(tuple(seg) for seg in out if seg)


def _starts(seg: list[str]) -> list[tuple[Server, list[str]]]:
    """Each server ``seg`` runs (none under a multi-node launcher), with its words (the
    first two: ``_launch`` reads one alone)."""
    out: list[tuple[Server, int]] = []
    launched = False  # a launcher's word before this one (one pass: linear in seg)
    for i, word in enumerate(seg):
        base = word.rpartition("/")[2]
        for server, start in _BY_FIRST.get(base, ()):
            if seg[i + 1 : i + len(start)] == [*start[1:]]:
                end = i + len(start)
                if launched or (end < len(seg) and seg[end] in server.other):
                    return []
                out.append((server, end))
        launched = launched or base in _LAUNCHERS
    return [(server, seg[end:]) for server, end in out[:2]]


def _env_words(server: Server, env: object, files: Mapping[str, str | None]) -> dict[str, str]:
    """The variables ``server`` reads as flags, as flags (to be read first, so that its
    command line overrides them, clap's order), each to the variable as written. The
    env files' (``files``) first, ``environment`` over them, as docker/cli reads them
    (loader resolveEnvironment); a name it gives no value (``NAME``, ``NAME:``) is
    unknown here, the file's value with it."""
    own: dict[str, object]
    if isinstance(env, dict):
        own = {str(k): v for k, v in env.items()}
    elif isinstance(env, list):
        own = {k: v if eq else None for k, eq, v in (str(e).partition("=") for e in env)}
    else:
        own = {}
    shown = {k: f"{k}={v} from env_file" for k, v in files.items() if v is not None}
    pairs = {k: v for k, v in files.items() if v is not None} | own
    return {
        f"{server.env[k]}={v}": f"{k}={v}" if k in own else shown[k]
        for k, v in pairs.items()
        if k in server.env and isinstance(v, str | int) and not isinstance(v, bool)
    }


def _count(v: str) -> int | None:
    return int(v) if v.isascii() and v.isdigit() and len(v) <= 4 and int(v) > 0 else None


def _used(
    server: Server, words: Sequence[str], shown: Mapping[str, str],
    sees: tuple[int, str] | None = None,
) -> tuple[int, str, str] | None:
    """(GPUs, the flags that said so as written, what to change) from the server's words
    (``shown``: how to name a word that stands for a variable, those words first; ``sees``:
    ``server_count``'s ``seen``); None where they say something render cannot read."""
    names = {s: spell[0] for spell in server.sizes for s in spell}
    keys = {s.lstrip("-").replace("_", "-") for spell in server.sizes for s in spell}
    keys |= {s.lstrip("-").replace("_", "-") for s in server.unknowable}
    given: dict[str, tuple[str, int]] = {}  # flag -> (as written, value); the last wins
    seen: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            break
        if word[:1] != "-":
            continue
        name, eq, value = word.partition("=")
        name = server.spelling(name)
        if eq and not server.equals and i > len(shown):  # (a variable's: read as its flag)
            if name in server.fixed or name in server.unknowable or name in names:
                return None  # refused as written: the server does not start
            continue
        seen.add(name)
        if name in server.fixed:
            v = value if eq else (words[i] if i < len(words) else "")
            i += 0 if eq else 1
            want, gpus = server.fixed[name]
            key = next(iter(server.fixed))
            if v == want:
                given[key] = (shown.get(word, word if eq else f"{word} {v}"), gpus)
            else:  # the last wins, as the parser reads it
                given.pop(key, None)
            continue
        if name in server.unknowable:
            v = value if eq else (words[i] if i < len(words) else "")
            if v not in server.unknowable[name]:
                return None
            continue
        if name not in names:
            key = name.lstrip("-").replace("_", "-")
            # another spelling of a size flag, or an abbreviation argparse would take
            if key in keys or (name[:2] == "--" and any(k.startswith(key) for k in keys)):
                return None
            continue
        if not eq:
            if i >= len(words):
                return None
            value, i = words[i], i + 1
        n = _count(value)
        if n is None:  # $TP left for a shell, a word: not render's to read
            return None
        given[names[name]] = (shown.get(word, word if eq else f"{word} {value}"), n)
    for flag, by in server.drops.items():
        if by in seen:
            given.pop(flag, None)
    if not given:
        if not server.one_by_default:  # every GPU it sees (none named: no size flag)
            if sees is None or not server.sizes:
                return None
            first = server.sizes[0][0]
            return sees[0], f"no {first}: {sees[1]}", f"set {first}"
        first = server.sizes[0][0]
        return 1, f"no {first}: 1 by default", f"set {first}"
    total = 1
    for _, n in given.values():
        total *= n
    said = " and ".join(w for w, _ in given.values())
    return (
        total,
        said,
        "change " + " / ".join(w.partition("=")[0].split()[0] for w, _ in given.values()),
    )
