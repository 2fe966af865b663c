"""GPU health on the real test swarm: an agent on an edited ``file:`` facts source stands
in for NVML (the health signals are part of the facts schema). Xid 13 (the application's)
changes nothing; Xid 79 moves the holder off that GPU within 90 s, the log and the daemon's
metric say why, and a new service is never given it. With the only free healthy GPUs on
the other node, the health policy moves the holder there make-before-break through its
mover, even with rebalance in dry-run (the shipped default)."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    HTTP_AUTH,
    LOGS,
    cfg_file,
    eventually,
    kwargs_for_logs,
    labels_of,
    remove_stacks,
    run_cli,
    start_agent,
    start_daemon,
    stop,
    swarmgpu_env,
    wait_log,
    wait_port,
)
from support.health_swarm import FactsFile
from support.swarm_harness import SwarmCluster, edit_node_labels
from support.swarm_services import deploy, devices_of, tasks_running, wait_running

pytestmark = pytest.mark.swarm
HOST = "gpu-node-2"
OTHER = "gpu-node-1"
API_PORT = 9402  # the daemon's HTTP on the manager's bridge address: plan reads its moves
LOG = LOGS / "health-daemon.log"


@pytest.fixture(scope="module")
def setup(swarm: SwarmCluster, agents: dict[str, Any],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("health")
    facts = FactsFile(tmp / "facts.json")
    node = swarm.node(HOST)
    stop(agents[HOST])
    agent = swarm.exec_in_netns(node, [
        sys.executable, "-m", "swarmgpu.cli", "agent", "--source", f"file:{facts.path}",
        "--hostname", HOST, "--listen", f"{node.addr}:9401", "--refresh-s", "1",
        "--identity", "swarm-pki", "--data-root", str(node.data_root),
    ], env=swarmgpu_env(), **kwargs_for_logs(LOGS / "agent-health-file.log"))
    wait_port(node.addr, 9401)
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 2}, agents={"watch_s": 1},
                   health={"clean_window_s": 600},
                   http={"listen": f"{swarm.manager.addr}:{API_PORT}"})  # plan reads moves
    log_at = LOG.stat().st_size if LOG.exists() else 0  # the log is appended to
    state = {"facts": facts, "tmp": tmp, "cfg": cfg, "daemon": start_daemon(swarm, cfg, LOG),
             "log_at": log_at}
    try:
        yield state
    finally:
        stop(state["daemon"])  # a test may have restarted it with other settings
        stop(agent)
        agents[HOST] = start_agent(swarm, HOST)


def _log(setup: dict[str, Any]) -> str:
    """This run's part of the daemon's log."""
    return LOG.read_bytes()[setup["log_at"]:].decode(errors="replace")


def _one(swarm: SwarmCluster, svc: str) -> str:
    devs = devices_of(swarm, svc)
    assert list(devs) == [HOST] and len(devs[HOST]) == 1, devs
    return devs[HOST][0]


def test_application_xid_changes_nothing_then_xid79_moves_the_holder(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    facts: FactsFile = setup["facts"]
    deploy(swarm, setup["tmp"], "hl", {"one": {
        "labels": {"swarmgpu.gpus": "1"},
        "constraints": [f"node.hostname=={HOST}"]}})
    wait_running(swarm, "hl_one", 1, timeout=90)
    uuid = _one(swarm, "hl_one")
    task = tasks_running(swarm, "hl_one")[0]["ID"]

    facts.xid(uuid, 13)  # the application's fault: nothing moves
    time.sleep(12)  # several agent refreshes, facts watches and cycles
    assert tasks_running(swarm, "hl_one")[0]["ID"] == task
    assert _one(swarm, "hl_one") == uuid

    facts.xid(uuid, 79)  # fallen off the bus
    t0 = time.monotonic()
    wait_running(swarm, "hl_one", 1, timeout=90,
                 each=lambda t: uuid not in devices_of(swarm, "hl_one").get(HOST, [uuid]),
                 what=" off the failed GPU")
    took = time.monotonic() - t0
    print(f"Xid 79 in the facts file -> holder running on a healthy GPU: {took:.1f}s")
    assert _one(swarm, "hl_one") != uuid
    # The daemon's log lines, written around the move the test waited for: waited for too.
    text = wait_log(LOG, "is failed: Xid 79: GPU has fallen off the bus (suggested action: "
                    "reboot)",
                    # its constraint keeps it on gpu-node-2: the health policy repins it there
                    f"move {HOST} -> {HOST} started: health: {HOST} GPU",
                    since=setup["log_at"])
    assert "Xid 13" not in text

    # plan, status and audit (their own snapshot, the daemon's saved states) say it too.
    def plan_says() -> None:
        res = run_cli("plan", "--config", str(setup["cfg"]))
        assert res.returncode == 0, res.stderr
        assert f"GPU health: {HOST} GPU" in res.stdout and "failed: Xid 79" in res.stdout
        assert "suggested: reboot" in res.stdout

    def status_says() -> None:
        res = run_cli("status", "--config", str(setup["cfg"]), "--json")
        gpus = [g for n in json.loads(res.stdout)["nodes"] for g in n.get("gpus", [])
                if g.get("uuid") == uuid]
        assert gpus and gpus[0]["healthy"] is False and "Xid 79" in gpus[0]["error"]

    def audit_says() -> None:
        res = run_cli("audit", "--config", str(setup["cfg"]), "--json")
        failed = [f for f in json.loads(res.stdout)["findings"] if f["kind"] == "gpu-failed"]
        assert len(failed) == 1 and uuid in failed[0]["message"], failed

    for check in (plan_says, status_says, audit_says):
        eventually(check, 30, check.__name__)

    # A new service is never given the failed GPU: 6 of the 7 GPUs left, one of them
    # failed, so only the 6 healthy ones fit.
    deploy(swarm, setup["tmp"], "hl2", {"six": {
        "labels": {"swarmgpu.gpus": "6"},
        "constraints": [f"node.hostname=={HOST}"]}})
    wait_running(swarm, "hl2_six", 1, timeout=90)
    six = devices_of(swarm, "hl2_six")[HOST]
    assert len(six) == 6 and uuid not in six
    assert not set(six) & set(devices_of(swarm, "hl_one")[HOST])


def test_flapping_gpu_moves_its_holder_once_and_the_label_holds(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    """Failed, clean, failed again within the clean window: the holder moves once, and
    swarmgpu.gpu.healthy-count does not bounce back in between."""
    facts: FactsFile = setup["facts"]
    remove_stacks(swarm, "hl2")  # room for a move
    before = int(labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"])
    v = _one(swarm, "hl_one")
    facts.xid(v, 48)  # double-bit ECC: failed
    wait_running(swarm, "hl_one", 1, timeout=90,
                 each=lambda t: v not in devices_of(swarm, "hl_one").get(HOST, [v]),
                 what=" off the second failed GPU")
    task = tasks_running(swarm, "hl_one")[0]["ID"]
    swarm.wait_for(lambda: labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"]
                   == str(before - 1), 30, "healthy-count down by one")
    g = next(g for g in facts.data["gpus"] if g["uuid"] == v)
    g["health"] = {"xid_events": []}  # clean again (as after a reset, before the window)
    facts.write()
    time.sleep(10)
    assert labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"] == str(before - 1)
    facts.xid(v, 48)  # and failed again
    time.sleep(10)
    assert labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"] == str(before - 1)
    assert [t["ID"] for t in tasks_running(swarm, "hl_one")] == [task]  # moved once
    assert _log(setup).count(f"gpu={v} GPU") == 1  # one change logged, no bouncing


def _set_node_labels(swarm: SwarmCluster, host: str, change: dict[str, str | None]) -> None:
    """The operator's read-modify-write of node labels; again when the daemon wrote the
    node in between (Swarm: "update out of sequence")."""
    def edit(labels: dict[str, str]) -> None:
        for k, v in change.items():
            if v is None:
                labels.pop(k, None)
            else:
                labels[k] = v

    edit_node_labels(swarm.client(swarm.manager).api, swarm.node(host).node_id, edit)


def _ts(text: str) -> float:
    """Swarm's RFC 3339 time (nanoseconds, Z) in seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head).timestamp() + float("0." + (frac or "0"))


def _assert_eq(got: object, want: object) -> None:
    assert got == want, (got, want)


def _done(swarm: SwarmCluster) -> float:
    """swarmgpu_health_evacuations_total{outcome="done"} on the daemon's /metrics."""
    url = f"http://{swarm.manager.addr}:{API_PORT}/metrics"
    with urllib.request.urlopen(urllib.request.Request(url, headers=HTTP_AUTH),
                                timeout=3) as resp:
        text = resp.read().decode()
    key = 'swarmgpu_health_evacuations_total{outcome="done"} '
    return sum(float(ln[len(key):]) for ln in text.splitlines() if ln.startswith(key))


def test_health_policy_moves_the_holder_to_the_other_node_make_before_break(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    """gpu-node-2 full, gpu-node-1 free: a 1-GPU replicated service whose GPU reports Xid
    79 is moved to gpu-node-1 by the health policy through its mover (new task running
    before the old one stops), with rebalance in dry-run; log, plan and metric say why."""
    facts: FactsFile = setup["facts"]
    api = swarm.client(swarm.manager).api
    remove_stacks(swarm, "hl", "hl2")
    # The operator's way back for the GPUs the earlier tests failed: every GPU healthy.
    failed = [g["uuid"] for g in facts.data["gpus"] if g.get("health", {}).get("xid_events")]
    ok = {f"swarmgpu.gpu.{u}.health": "ok" for u in failed}
    _set_node_labels(swarm, HOST, dict(ok))
    try:
        swarm.wait_for(lambda: labels_of(swarm, HOST).get("swarmgpu.gpu.healthy-count")
                       == str(len(facts.data["gpus"])), 30, "every GPU of gpu-node-2 healthy")
        tmp = setup["tmp"]
        deploy(swarm, tmp, "hb", {"block": {  # gpu-node-1's 7 whole GPUs, for now
            "labels": {"swarmgpu.gpus": "7"}, "constraints": [f"node.hostname=={OTHER}"]}})
        wait_running(swarm, "hb_block", 1, timeout=90)
        deploy(swarm, tmp, "hm", {"one": {"labels": {"swarmgpu.gpus": "1"}}})
        wait_running(swarm, "hm_one", 1, timeout=90)
        u = _one(swarm, "hm_one")  # only gpu-node-2 had room
        old = tasks_running(swarm, "hm_one")[0]
        deploy(swarm, tmp, "hf", {"fill": {  # the rest of gpu-node-2
            "labels": {"swarmgpu.gpus": "7"}, "constraints": [f"node.hostname=={HOST}"]}})
        wait_running(swarm, "hf_fill", 1, timeout=90)
        remove_stacks(swarm, "hb")  # gpu-node-1 free again
        log_at = LOG.stat().st_size
        done_before = _done(swarm)  # the earlier tests' repins are health moves too

        facts.xid(u, 79)
        t0 = time.monotonic()
        (new,) = wait_running(
            swarm, "hm_one", 1, timeout=90,
            each=lambda t: swarm.node(t["NodeID"]).hostname == OTHER
            and u not in devices_of(swarm, "hm_one").get(OTHER, [u]),
            what=f" on {OTHER}, off the failed GPU")
        took = time.monotonic() - t0
        print(f"Xid 79 -> holder running on {OTHER} (health policy, mover): {took:.1f}s")
        swarm.wait_for(lambda: "swarmgpu.state.move" not in api.inspect_service(
            new["ServiceID"])["Spec"]["Labels"], 60, "the move finished")
        spec = api.inspect_service(new["ServiceID"])["Spec"]
        assert spec["Mode"]["Replicated"]["Replicas"] == 1
        # The daemon writes the move's `done` line and counts it after it removed the
        # label the test waited for: each is waited for in turn, with a deadline.
        text = wait_log(LOG, f"move {HOST} -> {OTHER} started: health: {HOST} GPU",
                        f"move {HOST} -> {OTHER} done: health:", since=log_at)
        started = [ln for ln in text.splitlines()
                   if f"move {HOST} -> {OTHER} started: health: {HOST} GPU" in ln]
        assert started and "Xid 79: GPU has fallen off the bus" in started[0], text[-3000:]
        assert "make-before-break" in started[0] and "service=hm_one" in started[0]
        assert "ignored" not in text and "stale or released twice" not in text

        # make-before-break: the old task stopped only once the new one ran
        def old_stopped_after() -> None:
            gone = next(t for t in api.tasks(filters={"service": "hm_one"})
                        if t["ID"] == old["ID"])
            assert gone["DesiredState"] == "shutdown"
            assert _ts(gone["Status"]["Timestamp"]) >= _ts(new["Status"]["Timestamp"]), \
                (gone, new)

        eventually(old_stopped_after, 30, "the old task stopped after the new one ran")

        def plan_says_done() -> None:
            res = run_cli("plan", "--config", str(setup["cfg"]))
            assert res.returncode == 0, res.stderr
            assert f"recent hm_one: {HOST} -> {OTHER}: done (health: {HOST} GPU" in \
                res.stdout, res.stdout

        eventually(plan_says_done, 30, "plan shows the move done")
        eventually(lambda: _assert_eq(_done(swarm), done_before + 1), 30,
                   'swarmgpu_health_evacuations_total{outcome="done"} counts it')
        # the filler never moved: it holds healthy GPUs only
        assert len(devices_of(swarm, "hf_fill")[HOST]) == 7
    finally:
        for stack in ("hb", "hm", "hf"):
            remove_stacks(swarm, stack)
        _set_node_labels(swarm, HOST, {k: None for k in ok})


def _gone(swarm: SwarmCluster, *prefixes: str) -> None:
    api = swarm.client(swarm.manager).api
    swarm.wait_for(lambda: not [s for s in api.services()
                                if s["Spec"]["Name"].startswith(prefixes)],
                   60, f"{prefixes} removed")


def _restart_with(swarm: SwarmCluster, setup: dict[str, Any], file: str, section: str,
                  key: str, value: Any) -> Path:
    """The module's daemon stopped and started again on its config with ``section.key``
    set to ``value`` (written to ``file`` beside it, returned); the fixture stops the new
    one."""
    stop(setup["daemon"])
    cfg = json.loads(Path(setup["cfg"]).read_text())
    cfg.setdefault(section, {})[key] = value
    path = Path(setup["tmp"]) / file
    path.write_text(json.dumps(cfg))
    setup["daemon"] = start_daemon(swarm, path, LOG)
    return path


def test_a_failing_node_is_drained_only_with_health_drain_node(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    """With rebalance.health_drain_node, two more failed GPUs make gpu-node-2 a failing
    node, and a service on one of its healthy GPUs moves to gpu-node-1 (health mover)."""
    facts: FactsFile = setup["facts"]
    _gone(swarm, "hb_", "hm_", "hf_")
    # the flat key of earlier releases, still read as rebalance.health.drain_node
    _restart_with(swarm, setup, "drain.yml", "rebalance", "health_drain_node", True)
    try:
        tmp = setup["tmp"]
        deploy(swarm, tmp, "db", {"block": {
            "labels": {"swarmgpu.gpus": "7"}, "constraints": [f"node.hostname=={OTHER}"]}})
        wait_running(swarm, "db_block", 1, timeout=90)
        deploy(swarm, tmp, "dd", {"one": {"labels": {"swarmgpu.gpus": "1"}}})
        wait_running(swarm, "dd_one", 1, timeout=90)
        held = _one(swarm, "dd_one")
        remove_stacks(swarm, "db")
        log_at = LOG.stat().st_size
        # Two GPUs that nobody holds fail: gpu-node-2 (one failed GPU already) is failing.
        bad = [g["uuid"] for g in facts.data["gpus"]
               if g["uuid"] != held and not g.get("health", {}).get("xid_events")][:2]
        for u in bad:
            facts.xid(u, 48)
        t0 = time.monotonic()
        wait_running(swarm, "dd_one", 1, timeout=90,
                     each=lambda t: swarm.node(t["NodeID"]).hostname == OTHER,
                     what=f" drained to {OTHER}")
        print(f"failing node -> its healthy holder running on {OTHER}: "
              f"{time.monotonic() - t0:.1f}s")
        wait_log(LOG, f"health: node {HOST} is failing (3 of 8 GPUs failed): its GPU "
                 "services are moved off it",
                 f"move {HOST} -> {OTHER} started: health: node {HOST} is failing",
                 since=log_at)
    finally:
        remove_stacks(swarm, "db")
        remove_stacks(swarm, "dd")


def _xid79_on_a_new_holder(swarm: SwarmCluster, setup: dict[str, Any], stack: str,
                           want: str) -> tuple[str, str, int]:
    """Deploy ``<stack>_one`` (1 GPU on HOST), report Xid 79 on its GPU and wait until the
    log says ``want``: (the GPU's UUID, the task's ID, the log offset before the XID)."""
    deploy(swarm, setup["tmp"], stack, {"one": {
        "labels": {"swarmgpu.gpus": "1"}, "constraints": [f"node.hostname=={HOST}"]}})
    wait_running(swarm, f"{stack}_one", 1, timeout=90)
    u = _one(swarm, f"{stack}_one")
    task = tasks_running(swarm, f"{stack}_one")[0]["ID"]
    log_at = LOG.stat().st_size
    setup["facts"].xid(u, 79)
    swarm.wait_for(lambda: want in LOG.read_bytes()[log_at:].decode(errors="replace"),
                   30, f"{want!r} in the log")
    return u, task, log_at


def test_evacuate_false_reports_the_holder_and_moves_nothing(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    """health.evacuate: false: the holder of a failed GPU keeps its task and its GPU
    (placement leaves it to the policy, which only reports it): log and plan say so."""
    _gone(swarm, "db_", "dd_")
    report_cfg = _restart_with(swarm, setup, "report.yml", "health", "evacuate", False)
    try:
        want = "hr_one on gpu-node-2 stays (health.evacuate: false): health: gpu-node-2 GPU"
        u, task, log_at = _xid79_on_a_new_holder(swarm, setup, "hr", want)
        time.sleep(8)  # cycles go by: nothing moves
        assert [t["ID"] for t in tasks_running(swarm, "hr_one")] == [task]
        assert _one(swarm, "hr_one") == u

        def plan_says() -> None:
            res = run_cli("plan", "--config", str(report_cfg))
            assert res.returncode == 0, res.stderr
            assert f"health: {want}" in res.stdout and "Xid 79" in res.stdout, res.stdout

        eventually(plan_says, 30, "plan reports the holder staying")
        text = LOG.read_bytes()[log_at:].decode(errors="replace")
        assert "move " not in text and "re-placed" not in text, text[-3000:]
    finally:
        remove_stacks(swarm, "hr")


def test_a_restarted_daemon_sees_the_hours_spent_health_budget(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    """The hour's health moves are counted from the swarm object (records in flight and
    swarmgpu.state.health-spent), not daemon memory: a daemon started with
    health.evacuations_per_hour 1, after this module's earlier daemons moved holders
    within the hour, starts no health move; the holder of a new Xid 79 waits for it."""
    api = swarm.client(swarm.manager).api
    _gone(swarm, "hr_")
    spent = api.inspect_swarm()["Spec"]["Labels"].get("swarmgpu.state.health-spent", "")
    assert spent and all(time.time() - float(t) < 3600 for t in spent.split(",")), spent
    _restart_with(swarm, setup, "hour.yml", "health", "evacuations_per_hour", 1)
    try:
        want = "hw_one on gpu-node-2 waits for the health budget: budget: 1 health move(s) " \
            "per hour ("
        u, task, log_at = _xid79_on_a_new_holder(swarm, setup, "hw", want)
        time.sleep(6)  # cycles go by: nothing moves
        assert [t["ID"] for t in tasks_running(swarm, "hw_one")] == [task]
        assert _one(swarm, "hw_one") == u
        text = LOG.read_bytes()[log_at:].decode(errors="replace")
        assert "move " not in text and "re-placed" not in text, text[-3000:]
    finally:
        remove_stacks(swarm, "hw")
