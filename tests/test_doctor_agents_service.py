"""``swarmgpu doctor``'s ``agents.service`` check: the daemon's key (``doctor
--agents-service``) against Swarm's lists, read on a manager. Before, the doctor did
not look at the key: a misspelled name marked no node as a GPU node, and only the
daemon's log (once) and ``audit`` said so. Pure: the lists are given as a manager
answers them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner
from support.forged import sw_node, sw_svc

from swarmgpu.agent.doctor import (
    Check,
    Status,
    SwarmRead,
    check_agents_service,
    run_doctor,
)
from swarmgpu.agent.doctor.read import read_view
from swarmgpu.cli import main
from swarmgpu.cli.node import daemon_keys
from swarmgpu.manager.placement.cpunodes import gpu_hint
from swarmgpu.swarm.client import SwarmTask

AGENT = sw_svc("swarmgpu_agent", {}, gated=False, mode={"Global": {}})
GPU_A = sw_node("n-a", "gpu-a", {"gpu": "true"})
GPU_B = replace(sw_node("n-b", "gpu-b"), engine_labels={"gpu": "TRUE"})
CPU = sw_node("n-c", "cpu-c")
DOCTOR_ROOTS = Path(__file__).parent / "doctor_roots"


def _task(node_id: str, state: str = "running") -> SwarmTask:
    return SwarmTask(id=f"t-{node_id}", service_id=AGENT.id, node_id=node_id, slot=None,
                     state=state, desired_state="running", env=())


def _check(name: str | None, read: SwarmRead | None) -> Check:
    view = replace(read_view(str(DOCTOR_ROOTS / "healthy")), agents_service=name, swarm=read)
    return check_agents_service(view)


def test_a_misspelled_agents_service_fails_naming_the_key_and_the_fix() -> None:
    read = SwarmRead([GPU_A, CPU], [AGENT], [_task("n-a")])
    c = _check("swarmgpu-agent", read)
    assert c.status is Status.FAIL and c.id == "agents.service", c
    assert c.found.startswith("agents.service: no Swarm service is named 'swarmgpu-agent'")
    assert "swarmgpu_agent" in c.found, c.found  # the service of that stack's form
    assert 'agents.service: ""' in c.fix and "docker service ls" in c.fix, c.fix
    assert "--agents-service" in c.fix


def test_the_service_runs_on_each_gpu_labelled_node_or_the_nodes_left_are_named() -> None:
    every = SwarmRead([GPU_A, GPU_B, CPU], [AGENT], [_task("n-a"), _task("n-b")])
    assert _check("swarmgpu_agent", every).status is Status.OK
    left = SwarmRead([GPU_A, GPU_B, CPU], [AGENT], [_task("n-a"), _task("n-b", "pending")])
    c = _check("swarmgpu_agent", left)
    assert c.status is Status.WARN and "gpu-b" in c.found, c
    assert "gpu-a" not in c.found and "cpu-c" not in c.found, c.found
    assert "docker service ps swarmgpu_agent" in c.fix, c.fix
    drained = replace(GPU_B, availability="drain")  # Swarm runs nothing there
    ok = SwarmRead([GPU_A, drained], [AGENT], [_task("n-a")])
    assert _check("swarmgpu_agent", ok).status is Status.OK


def test_an_empty_agents_service_says_plainly_how_gpu_nodes_are_known() -> None:
    c = _check("", SwarmRead())
    assert c.status is Status.OK, c
    assert "known only from their agents' answers and their labels" in c.found, c.found


def test_a_worker_cannot_list_services_and_the_check_says_so() -> None:
    c = _check("swarmgpu_agent", SwarmRead(error="this node is no Swarm manager"))
    assert c.status is Status.SKIP and "run swarmgpu doctor on a manager" in c.found, c


def test_the_doctor_fails_a_misspelled_name_and_leaves_a_fixture_tree_unchecked() -> None:
    root = str(DOCTOR_ROOTS / "healthy")
    read = SwarmRead([GPU_A], [AGENT], [_task("n-a")])
    text, code = run_doctor(root, as_json=True, agents_service="swarmgpu-agent", swarm=read)
    (c,) = [c for c in json.loads(text)["checks"] if c["id"] == "agents.service"]
    assert c["status"] == "fail" and code == 1, c
    text, _ = run_doctor(root, as_json=True)
    assert "agents.service" not in [c["id"] for c in json.loads(text)["checks"]]


def test_the_doctor_takes_agents_service_from_the_daemons_config(tmp_path: Path) -> None:
    """Before, the doctor took no --config: the operator repeated agents.service as
    --agents-service, and a doctor run without it checked swarmgpu_agent, not the name
    the daemon uses. An explicit --agents-service still wins ('' too)."""
    cfg = tmp_path / "swarmgpu.yml"
    cfg.write_text("agents:\n  service: gpus_agent\n")
    assert daemon_keys(None, str(cfg))[0] == "gpus_agent"
    assert daemon_keys("other_agent", str(cfg))[0] == "other_agent"
    assert daemon_keys("", str(cfg))[0] == ""
    assert daemon_keys(None, None) == ("swarmgpu_agent", "swarmgpu.", "")


def test_the_doctors_config_is_checked_as_the_daemon_checks_it(tmp_path: Path) -> None:
    """A misspelled key ends the doctor (exit 2), naming the file's line and the key, as
    every command that loads the configuration does."""
    cfg = tmp_path / "swarmgpu.yml"
    cfg.write_text("agents:\n  servce: gpus_agent\n")
    res = CliRunner().invoke(main, ["doctor", "--root", str(DOCTOR_ROOTS / "healthy"),
                                    "--config", str(cfg)])
    assert res.exit_code == 2, res.output
    assert "configuration error" in res.output and "servce" in res.output, res.output
    cfg.write_text("agents:\n  service: gpus_agent\n")
    res = CliRunner().invoke(main, ["doctor", "--root", str(DOCTOR_ROOTS / "healthy"),
                                    "--config", str(cfg), "--json"])
    assert res.exit_code in (0, 1) and "configuration error" not in res.output, res.output


def test_a_misspelled_agents_service_says_its_fix_once() -> None:
    """Before, the finding carried the daemon's one-line text, its fix included, and the
    check's own fix line said it again (and its why twice): the fix is said once, on
    its line; the daemon's log and audit keep the one line."""
    read = SwarmRead([GPU_A, CPU], [AGENT], [_task("n-a")])
    c = _check("swarmgpu-agent", read)
    assert "fix:" not in c.found and "docs/systemd.md" not in c.found, c.found
    assert c.fix.count('agents.service: ""') == 1, c.fix
    text, _ = run_doctor(str(DOCTOR_ROOTS / "healthy"), agents_service="swarmgpu-agent",
                         swarm=read)
    assert text.count("docs/systemd.md") == 1, text


def test_gpu_labelled_nodes_are_known_by_the_daemons_label_prefix(tmp_path: Path) -> None:
    """Before, the check knew label sync's labels by ``swarmgpu.`` alone: with the
    daemon's ``sync.prefix`` another (``--config``), a node marked only by label sync's
    labels, no agent's task there, was not named."""
    cfg = tmp_path / "swarmgpu.yml"
    cfg.write_text("sync:\n  prefix: acme.\n")
    name, prefix, _ = daemon_keys(None, str(cfg))
    assert (name, prefix) == ("swarmgpu_agent", "acme.")
    synced = sw_node("n-s", "gpu-s", {"acme.gpu.count": "2"})
    read = SwarmRead([GPU_A, synced], [AGENT], [_task("n-a")], prefix=prefix)
    c = _check(name, read)
    assert c.status is Status.WARN and "gpu-s" in c.found, c
    assert _check(name, replace(read, prefix="swarmgpu.")).status is Status.OK


def test_a_misspelled_agents_service_is_no_fail_where_no_node_is_gpu_labelled() -> None:
    """Before, the doctor failed it on a swarm without GPU nodes, while the daemon and
    ``audit`` say it only where GPU nodes exist (``swarm.agentservice``): now ``ok``,
    saying what it saw; with a GPU-labelled node it still fails."""
    c = _check("swarmgpu-agent", SwarmRead([CPU], [AGENT], []))
    assert c.status is Status.OK, c
    assert "no Swarm service is named 'swarmgpu-agent'" in c.found, c.found
    assert "no node is GPU-labelled" in c.found and "1 node(s)" in c.found, c.found
    c = _check("swarmgpu-agent", SwarmRead([CPU, GPU_B], [AGENT], []))
    assert c.status is Status.FAIL, c


def test_a_misspelled_agents_service_fails_where_a_node_advertises_gpu_resources() -> None:
    """A node with no GPU label whose engine advertises GPU generic resources (what
    ``swarmgpu node-config`` prints) is a GPU node to the daemon and ``audit``
    (``gpu_hint``), which say the misspelled name there. Before, the doctor judged by
    the labels alone: ``ok``, "no agent is expected", on that very swarm."""
    gen = replace(sw_node("n-g", "gpu-g"), discrete_resources={"NVIDIA-GPU": 4})
    named = replace(sw_node("n-h", "gpu-h"),
                    generic_resources={"nvidia.com/gpu": ("GPU-0a1b",)})
    for node in (gen, named):
        c = _check("swarmgpu-agent", SwarmRead([CPU, node], [AGENT], []))
        assert c.status is Status.FAIL, c
    other = replace(sw_node("n-o", "fpga-o"), discrete_resources={"FPGA": 1})
    assert _check("swarmgpu-agent", SwarmRead([CPU, other], [AGENT], [])).status is Status.OK


def test_a_node_advertising_only_the_configured_gpu_kind_is_a_gpu_node_to_the_doctor(
        tmp_path: Path) -> None:
    """A node whose engine advertises only ``placement.generic_resource_kind`` (a custom
    GPU kind) is a GPU node to the daemon (``gpu_hint``). Before, ``doctor --config``
    passed agents.service and sync.prefix on, not the kind: ``ok``, "no agent is
    expected", for a misspelled agents.service on that very swarm."""
    cfg = tmp_path / "swarmgpu.yml"
    cfg.write_text("agents:\n  service: swarmgpu-agent\n"
                   "placement:\n  generic_resource_kind: ACME-GPU\n  grants: mounts\n")
    name, prefix, kind = daemon_keys(None, str(cfg))
    assert kind == "ACME-GPU"
    acme = replace(sw_node("n-x", "gpu-x"), discrete_resources={"ACME-GPU": 2})
    read = SwarmRead([CPU, acme], [AGENT], [], prefix=prefix, kind=kind)
    c = _check(name, read)
    assert c.status is Status.FAIL, c
    assert _check(name, replace(read, kind="")).status is Status.OK


def test_the_doctor_and_the_daemon_call_the_same_nodes_gpu_nodes() -> None:
    """One reading of a node's labels (``agentservice.gpu_label_why``) serves the
    daemon's ``gpu_hint`` and the doctor: on the same node, prefix and kind, the doctor
    fails a misspelled agents.service (a GPU node is there) exactly where the daemon
    takes the node for a GPU node whose agent must be read (no agents' task there)."""
    labelled = [{"gpu": "true"}, {"gpu": "TRUE"}, {"gpu": "yes"}, {"gpu": "false"},
                {"swarmgpu.gpu.count": "2"}, {"acme.gpu.count": "2"},
                {"swarmgpu.service.web": "true"}, {"zone": "a"}, {}]
    nodes = [sw_node(f"n-{i}", f"host-{i}", labels) for i, labels in enumerate(labelled)]
    nodes += [replace(sw_node("n-e", "host-e"), engine_labels={"gpu": "True"}),
              replace(sw_node("n-d", "host-d"), discrete_resources={"NVIDIA-GPU": 4}),
              replace(sw_node("n-g", "host-g"),
                      generic_resources={"nvidia.com/gpu": ("GPU-0a1b",)}),
              replace(sw_node("n-x", "host-x"), discrete_resources={"ACME-GPU": 2}),
              replace(sw_node("n-f", "host-f"), discrete_resources={"FPGA": 1})]
    seen = set()
    for prefix in ("swarmgpu.", "acme."):
        for kind in ("", "ACME-GPU"):
            for n in nodes:
                daemon = gpu_hint(n, prefix, kind) is not None
                doctor = _check("swarmgpu-agent", SwarmRead([CPU, n], [AGENT], [],
                                                            prefix=prefix, kind=kind))
                assert (doctor.status is Status.FAIL) == daemon, (n, prefix, kind, doctor)
                seen.add(daemon)
    assert seen == {True, False}


def test_a_hostile_hostname_in_the_finding_shows_escaped_in_text_and_json() -> None:
    """A node's hostname is the node's own word (its engine reports it): one carrying an
    escape sequence and a newline is shown escaped on the report's line, never forging
    another line or colouring the terminal, and the JSON report decodes to it."""
    host = "gpu-x\x1b[31m\nOK    agents.service: forged\u202e"
    read = SwarmRead([sw_node("n-x", host, {"gpu": "true"})], [AGENT], [])
    root = str(DOCTOR_ROOTS / "healthy")
    text, _ = run_doctor(root, agents_service="swarmgpu_agent", swarm=read)
    assert not any(c in text for c in "\x1b\r\u202e"), text
    (line,) = [ln for ln in text.split("\n") if "agents.service" in ln]
    assert line.startswith("WARN") and r"gpu-x\x1b[31m\nOK" in line, line
    doc, _ = run_doctor(root, as_json=True, agents_service="swarmgpu_agent", swarm=read)
    assert "\x1b" not in doc and "\u202e" not in doc, doc
    (c,) = [c for c in json.loads(doc)["checks"] if c["id"] == "agents.service"]
    assert host in c["found"], c
