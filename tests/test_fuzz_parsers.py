"""Property-based fuzzing of every parser and validator swarmgpu has (hypothesis).

Each property feeds random and mutated-real input to one parser and checks:
no crash other than the module's documented error type, no hang (a per-input
alarm), and an error message that names the input (key, field, line or file).

``SWARMGPU_FUZZ_EXAMPLES`` sets the examples per property (default sized so the whole
suite runs in well under 60 s on 2 cores); e.g. ``SWARMGPU_FUZZ_EXAMPLES=50000``.
"""

from __future__ import annotations

import copy
import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.paths import CAPTURES, TOPOLOGY

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.gfd import facts_from_labels, parse_labels
from swarmgpu.agent.facts.topo import parse_topo
from swarmgpu.core.config import ConfigError, load_config
from swarmgpu.core.metrics_in import ScrapeResult, parse_metrics
from swarmgpu.core.model import FactsError, Gpu, NodeFacts
from swarmgpu.manager.commands.render import StackError, load_stack, render_stack
from swarmgpu.manager.services.requests import KEYS, GpuRequest, RequestError, parse_all
from swarmgpu.swarm.client import SwarmNode

T = TypeVar("T")

DEFAULT_EXAMPLES = 1000
HANG_S = 2.0  # one parse slower than this is a hang
COUNTS: dict[str, int] = {}  # property -> inputs fed (reported at the end of the module)


def examples(default: int = DEFAULT_EXAMPLES) -> int:
    raw = os.environ.get("SWARMGPU_FUZZ_EXAMPLES")
    return int(raw) if raw else default


def fuzz(default: int = DEFAULT_EXAMPLES) -> Any:
    # Default: a fixed, reproducible run without shrinking (a found bug fails fast and
    # keeps the suite inside its time budget). SWARMGPU_FUZZ_EXAMPLES=N: N random
    # examples per property, shrunk to the smallest failing input.
    explore = "SWARMGPU_FUZZ_EXAMPLES" in os.environ
    phases = list(Phase) if explore else [Phase.explicit, Phase.generate]
    return settings(
        max_examples=examples(default), deadline=None, database=None,
        derandomize=not explore, phases=phases, report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much],
    )


class Hang(AssertionError):
    pass


@contextmanager
def no_hang(what: str) -> Iterator[None]:
    def fire(_sig: int, _frame: Any) -> None:
        raise Hang(f"{what} took more than {HANG_S}s on one input")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def call(name: str, fn: Callable[[], T]) -> T:
    COUNTS[name] = COUNTS.get(name, 0) + 1
    with no_hang(name):
        return fn()


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    total = sum(COUNTS.values())
    print(f"\nfuzz cases: {total} total; " + ", ".join(f"{k}={v}" for k, v in COUNTS.items()))


# --- strategies ----------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner,
                                                                  max_size=5),
    max_leaves=20,
)
TOKENS = ["X", "NV12", "NV0", "SYS", "PIX", "NODE", "NaN", "-1", "0-", "N/A", "",
          "99999999999999999999", "GPU9", "GPU0", "é", "\x00", "1e400", "=", "{", "}", ":",
          "nvidia.com/gpu.count=8", "#", "\t", "inf", "0x10", "1_000"]


def read_all(folder: Path, pattern: str) -> list[str]:
    return [p.read_text(errors="replace") for p in sorted(folder.glob(pattern))]


TOPO_CORPUS = read_all(TOPOLOGY, "*.txt") + read_all(CAPTURES, "nvsmi_topo_*.txt")
GFD_CORPUS = read_all(CAPTURES, "gfd_labels_*")
DCGM_CORPUS = read_all(CAPTURES, "dcgm_*.txt")


@st.composite
def mutated(draw: st.DrawFn, corpus: list[str]) -> str:
    """A real capture with a few lines deleted, duplicated, swapped or garbled."""
    lines = draw(st.sampled_from(corpus)).splitlines()
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["del", "dup", "garble", "token", "swap", "trunc"]))
        if op == "del":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "garble":
            lines[i] = draw(st.text(max_size=80))
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "trunc":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            toks = lines[i].split(" ")
            k = draw(st.integers(0, len(toks) - 1))
            toks[k] = draw(st.sampled_from(TOKENS) | st.text(max_size=8))
            lines[i] = " ".join(toks)
    return "\n".join(lines)


def corpus_or_text(corpus: list[str]) -> st.SearchStrategy[str]:
    return mutated(corpus) | st.text(max_size=400)


# --- annotations: requests.parse_all ---------------------------------------------------

request_values = st.sampled_from([
    "1", "2", "0", "-1", "8", "99999999999999999999", "0.5", "0.25", "1.5", "1/2", "nan",
    "inf", "40GB", "10gib", "1.5t", "80 g", "nvlink", "numa", "any", "NVLINK", "never",
    "auto", "1g.5gb", "3g.20gb", "7g.80gb", "1c.2g.10gb", "A100*", "*", "a,b,,c", "zone-a",
    "-bad", "", " ", "é", "\x00"]) | st.text(max_size=30)
request_keys = (st.sampled_from(KEYS).map(lambda k: "swarmgpu." + k)
                | st.sampled_from(["swarmgpu.gpu", "swarmgpu.devices.abc", "swarmgpu.",
                                   "other.key", "swarmgpu.gpus.x", "SWARMGPU.gpus"])
                | st.text(max_size=20))


@fuzz(2000)
@given(st.dictionaries(request_keys, request_values, max_size=6))
def test_fuzz_request_labels(labels: dict[str, str]) -> None:
    res = call("annotations", lambda: parse_all(labels))
    assert res is None or isinstance(res, GpuRequest | RequestError)
    if isinstance(res, RequestError):
        assert res.key in labels, f"error names a key that is not in the input: {res}"
        assert res.key in str(res) and "expected" in str(res)
    elif isinstance(res, GpuRequest):
        assert res.describe()  # a parsed request can always be described


# --- config: config.load_config with random YAML -----------------------------------------

CONFIG_KEYS = {
    "docker_host": None, "dry_run": None, "state_dir": None,
    "agents": ["port", "url_template", "timeout_s", "max_response_bytes", "parallel"],
    "sync": ["interval_s", "prefix", "allow_disruptive", "watch_events"],
    "placement": ["enabled", "adopt_ungated", "zone_label"],
    "http": ["listen"], "log": ["level", "format"],
}


@st.composite
def config_docs(draw: st.DrawFn) -> Any:
    """Mostly-valid config shapes with random values, plus arbitrary YAML."""
    if draw(st.integers(0, 4)) == 0:
        return draw(json_values)
    doc: dict[str, Any] = {}
    for top in draw(st.lists(st.sampled_from([*CONFIG_KEYS, "bogus", "sync_"]), max_size=4)):
        subs = CONFIG_KEYS.get(top)
        if subs is None:
            doc[top] = draw(json_values)
        else:
            doc[top] = draw(st.dictionaries(st.sampled_from([*subs, "typo"]), json_values,
                                            max_size=3) | json_values)
    return doc


@fuzz(800)
@given(config_docs(), st.booleans(), st.text(max_size=200))
def test_fuzz_config_yaml(tmp_path_factory: pytest.TempPathFactory, doc: Any, raw: bool,
                          text: str) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz-config.yml"
    if raw:
        path.write_text(text, errors="surrogatepass")
    else:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        cfg = call("config", lambda: load_config(path, env={}))
    except ConfigError as exc:
        msg = str(exc)
        assert msg and "Traceback" not in msg
        return
    assert cfg.sync.interval_s >= 1 and 0 < cfg.agents.port <= 65535


# --- facts JSON: model.NodeFacts.from_dict ----------------------------------------------

def _real_facts() -> list[dict[str, Any]]:
    from support.gpu_nodes import GPU_NODES

    return [n.facts().to_dict() for n in GPU_NODES.values()]


REAL_FACTS = _real_facts()


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):  # the first few GPUs/rows are enough
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_facts(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(REAL_FACTS)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["replace", "delete", "add"]))
        if op == "replace":
            parent[path[-1]] = draw(json_values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return doc


@fuzz(1000)
@given(mutated_facts() | json_values)
def test_fuzz_facts_json(doc: Any) -> None:
    # What the daemon does with an agent's body: json round-trip first.
    try:
        data = json.loads(json.dumps(doc))
    except ValueError:
        data = doc
    try:
        facts = call("facts", lambda: NodeFacts.from_dict(data, where="facts from agent-x"))
    except FactsError as exc:
        assert "facts from agent-x" in str(exc), f"error does not name the input: {exc}"
        return
    assert all(isinstance(g, Gpu) for g in facts.gpus)
    # Anything accepted must survive its own round trip (what the agent serves).
    again = NodeFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again.gpus == facts.gpus


# --- GFD files: facts.gfd.parse_labels + facts_from_labels --------------------------------

gfd_lines = st.lists(
    st.tuples(st.sampled_from(["gpu.count", "gpu.product", "gpu.memory", "gpu.compute.major",
                               "gpu.compute.minor", "mig.strategy", "cuda.driver.major",
                               "cuda.driver.minor", "cuda.driver.rev", "gpu.family",
                               "mig-1g.5gb.count", "mig-3g.20gb.memory", "gpu.replicas",
                               "mig.capable", "gpu.count.x"]) | st.text(max_size=12),
              request_values),
    max_size=10,
).map(lambda kv: "\n".join(f"nvidia.com/{k}={v}" for k, v in kv))


@fuzz(1500)
@given(corpus_or_text(GFD_CORPUS) | gfd_lines, st.none() | st.just("NVIDIA T4"),
       st.none() | st.integers(-5, 200_000))
def test_fuzz_gfd(text: str, product: str | None, memory: int | None) -> None:
    try:
        labels = call("gfd", lambda: parse_labels(text, where="gfd:/x/features"))
        facts = facts_from_labels(labels, hostname="n1", origin="features", product=product,
                                  memory_mib=memory, spec="gfd:/x/features")
    except SourceError as exc:
        assert "gfd:/x/features" in str(exc), f"error does not name the file: {exc}"
        return
    assert facts.hostname == "n1"
    NodeFacts.from_dict(json.loads(json.dumps(facts.to_dict())))


# --- `nvidia-smi topo -m` text: facts.topo.parse_topo -------------------------------------

@fuzz(2000)
@given(corpus_or_text(TOPO_CORPUS))
def test_fuzz_topo(text: str) -> None:
    try:
        topo = call("topo", lambda: parse_topo(text, where="topo.txt"))
    except FactsError as exc:
        assert str(exc).startswith("topo.txt"), f"error does not name the file: {exc}"
        return
    n = topo.gpu_count
    assert len(topo.links) == n and all(len(r) == n for r in topo.links)
    assert len(topo.numa_node) == n and len(topo.cpu_affinity) == n


# --- metrics text: metrics_in.parse_metrics (documented: never raises) ---------------------

@fuzz(1000)
@given(corpus_or_text(DCGM_CORPUS))
def test_fuzz_metrics(text: str) -> None:
    res = call("metrics", lambda: parse_metrics(text))
    assert isinstance(res, ScrapeResult)
    assert len(res.errors) <= 51, "error list must stay bounded"
    for sample in res.to_samples():
        assert sample.uuid


# --- stack files: render.load_stack / render_stack ----------------------------------------

NODE = SwarmNode("n1", "node-1", "10.0.0.1", "worker", "ready", "active", {}, {}, 1, {}, {})


@st.composite
def stacks(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.text(max_size=200))
    services: dict[str, Any] = {}
    for name in draw(st.lists(st.text("abcxyz_-", min_size=1, max_size=6), max_size=3)):
        deploy: Any = {
            "labels": draw(st.dictionaries(request_keys, request_values, max_size=3)
                           | st.lists(st.text(max_size=20), max_size=3) | json_values),
            "replicas": draw(st.integers(-2, 5) | json_values),
            "placement": draw(st.fixed_dictionaries(
                {"constraints": st.lists(st.text(max_size=20), max_size=2) | json_values})
                | json_values),
            "mode": draw(st.sampled_from(["replicated", "global"]) | json_values),
        }
        svc: Any = {"image": "x", "deploy": draw(st.just(deploy) | json_values),
                    "environment": draw(st.lists(st.text(max_size=20), max_size=3)
                                        | st.dictionaries(st.text(max_size=8), json_scalars,
                                                          max_size=3) | json_values)}
        services[name] = draw(st.just(svc) | json_values)
    doc: Any = {"version": "3.8", "services": services}
    return yaml.safe_dump(doc, allow_unicode=True)


@fuzz(400)  # each case runs the planner: ~25 ms
@given(stacks())
def test_fuzz_stack(text: str) -> None:
    try:
        call("stack", lambda: load_stack(text, where="stack.yml"))
    except StackError as exc:
        assert "stack.yml" in str(exc)
        return
    try:
        out, _plan = call("stack", lambda: render_stack(text, "s", [NODE], [], [], {}))
    except StackError as exc:
        assert "services" in str(exc) or "stack" in str(exc), f"error names nothing: {exc}"
        return
    yaml.safe_load(out)


# Found by test_fuzz_stack: render.stack_services trusts the shape of deploy/placement/
# replicas/environment; each must be a StackError naming the service, not a crash.
@pytest.mark.parametrize("deploy", [
    "placement: true", "placement: 3", "replicas: null", "replicas: many", "deploy_is_list",
])
def test_stack_bad_shapes_are_stack_errors(deploy: str) -> None:
    body = ("    deploy: [1, 2]\n" if deploy == "deploy_is_list" else
            f"    deploy:\n      labels: {{swarmgpu.gpus: '1'}}\n      {deploy}\n")
    text = f"services:\n  api:\n    image: x\n{body}"
    with pytest.raises(StackError, match=r"services\.api"):
        render_stack(text, "s", [NODE], [], [], {})
