"""The hostile-agent suite on the real test swarm (issue 13, proof).

gpu-node-1 runs an honest agent; gpu-node-2's port 9401 is taken by a hostile stand-in
(tests/support/hostile_agent.py), one class of attack at a time. A stack holds an honest GPU
service beside one whose label is a 5,000-digit number. For every class, one daemon
cycle (`swarmgpu run --once`) must: finish within a bound, exit 0, sync gpu-node-1,
place the honest service there, report the hostile node (without echoing what it
sent), leave gpu-node-2's labels alone (or write only clean values), and mark the bad
service invalid. Agent impersonation with another node's certificate is in
tests/test_identity_swarm.py.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    LOGS,
    PLAIN_AGENTS,
    cfg_file,
    kwargs_for_logs,
    labels_of,
    run_cli,
    start_agent,
    stop,
    swarmgpu_env,
    wait_port,
)
from support.hostile_agent import MODES
from support.paths import REPO
from support.swarm_harness import SwarmCluster
from support.swarm_services import stack_yaml

pytestmark = pytest.mark.swarm
REFUSED = ("drip", "hang", "deep-json", "too-many-gpus", "mig-flood", "redirect", "garbage",
           "huge")
STACK = "hs"


@pytest.fixture(scope="module")
def scene(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("hostile")
    honest = start_agent(swarm, "gpu-node-1", secure=False)  # hostile agents speak HTTP
    f = tmp / "stack.yml"
    f.write_text(stack_yaml(STACK, {
        "llm": {"labels": {"swarmgpu.gpus": "1", "swarmgpu.gpu-product": "*A100*"}},
        "bad": {"labels": {"swarmgpu.gpus": "9" * 5000}},
    }))
    swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(f), STACK)
    # gpu-node-2 carries a swarmgpu label: an agent is expected there, so its failure
    # is an error of the cycle, not a debug line.
    api = swarm.client(swarm.manager).api
    n2 = swarm.node("gpu-node-2")
    spec = api.inspect_node(n2.node_id)
    api.update_node(n2.node_id, spec["Version"]["Index"], {
        **spec["Spec"], "Labels": {**(spec["Spec"].get("Labels") or {}),
                                   "swarmgpu.gpu.count": "8"}})
    cfg = cfg_file(tmp, swarm, agents={"timeout_s": 2, **PLAIN_AGENTS},
                   rebalance={"scrape_timeout_s": 2})
    yield {"cfg": cfg, "tmp": tmp}
    swarm.cli(swarm.manager, "stack", "rm", STACK, check=False)
    stop(honest)


def _hostile(swarm: SwarmCluster, mode: str) -> Any:
    n2 = swarm.node("gpu-node-2")
    proc = swarm.exec_in_netns(
        n2, [sys.executable, str(REPO / "tests/support/hostile_agent.py"), mode, n2.addr, "9401",
             "gpu-node-2"], env=swarmgpu_env(), **kwargs_for_logs(LOGS / f"hostile-{mode}.log"))
    wait_port(n2.addr, 9401)
    return proc


@pytest.mark.parametrize("mode", MODES)
def test_hostile_node_never_stops_the_honest_one(swarm: SwarmCluster, scene: dict[str, Any],
                                                 mode: str) -> None:
    before2 = labels_of(swarm, "gpu-node-2")
    proc = _hostile(swarm, mode)
    try:
        t0 = time.monotonic()
        # agents.timeout_s and scrape_timeout_s are 2 s: a stalled read would take
        # minutes, past run_cli's timeout (a hang guard, 30 of those deadlines).
        res = run_cli("run", "--config", str(scene["cfg"]), "--once", timeout=60)
        took = time.monotonic() - t0
    finally:
        stop(proc)
    print(f"\n[hostile {mode}] one cycle beside it: {took:.1f} s")
    assert res.returncode == 0, res.stderr
    assert "SECRET" not in res.stderr and "SECRET" not in res.stdout
    one = labels_of(swarm, "gpu-node-1")
    assert one.get("swarmgpu.gpu.count") == "8" and one.get("swarmgpu.nvlink") == "true"
    two = labels_of(swarm, "gpu-node-2")
    if mode in REFUSED:
        assert "gpu-node-2" in res.stderr, res.stderr
        assert {k: v for k, v in two.items() if k.startswith("swarmgpu.gpu")} == \
            {k: v for k, v in before2.items() if k.startswith("swarmgpu.gpu")}, mode
    for k, v in two.items():
        if k.startswith("swarmgpu."):
            assert v.isascii() and not any(c.isspace() for c in v) and len(v) <= 128, (k, v)
    plan = run_cli("plan", "--config", str(scene["cfg"]), "--json")
    assert plan.returncode == 0, plan.stderr
    by = {s["name"]: s for s in json.loads(plan.stdout)["services"]}
    llm, bad = by[f"{STACK}_llm"], by[f"{STACK}_bad"]
    # GPUs chosen on gpu-node-1 (Swarm may still be starting the task: Allocated/Active)
    assert {p["node"] for p in llm["placements"]} == {"gpu-node-1"}, json.dumps(llm)
    assert llm["state"] in ("Allocated", "Bound", "Active"), json.dumps(llm)
    assert bad["status"] == "invalid" and bad["reason"], bad


def test_suite_covers_every_mode() -> None:
    assert set(REFUSED) <= set(MODES)
    assert Path(REPO / "tests/support/hostile_agent.py").exists()
