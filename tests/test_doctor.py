"""`swarmgpu doctor` and `swarmgpu node-config`: each fixture root finds exactly its problem."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fake_pynvml import pynvml as fake
from support.fake_pynvml.builder import build_layout
from support.paths import TOPOLOGY

from swarmgpu.agent.doctor import (
    Check,
    Status,
    check_grants,
    dpkg_version,
    norm_bus_id,
    parse_generic_resources,
    parse_proc_devices,
    parse_version,
    read_facts_within,
    read_view,
    render_text,
    run_checks,
    run_doctor,
)
from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.facts.nvml_session import shutdown
from swarmgpu.agent.facts.registry import open_source
from swarmgpu.agent.nodeconfig import node_config
from swarmgpu.cli import main
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts

ROOTS = Path(__file__).parent / "doctor_roots"
UA = "GPU-2a8c5b3e-9d1f-4c6a-8e7b-1f0d3c5a7b91"
UB = "GPU-7e4d2f1a-3b6c-4d8e-9a0f-5c1b7d3e9f24"

# case -> {check id: (status, text the found/fix must contain)}; every other check is OK,
# except the ones listed in SKIPPED.
EXPECTED: dict[str, dict[str, tuple[Status, str]]] = {
    "healthy": {},
    "no-daemon-json": {"docker.daemon-json": (Status.FAIL, "Create it")},
    "bad-daemon-json": {"docker.daemon-json": (Status.FAIL, "line 4 column 1")},
    "runc-default": {"runtime.default": (Status.FAIL, '"default-runtime": "nvidia"')},
    "dockerd-not-restarted": {"runtime.default": (Status.FAIL, "systemctl restart docker")},
    "stale-uuid": {"resources.generic": (Status.FAIL, "GPU-0b9e8d7c-6a5f-4e3d-2c1b-a09f8e7d6c5b")},
    "missing-uuid": {"resources.generic": (Status.FAIL, f"GPU1 {UB}")},
    "discrete-count": {"resources.generic": (Status.FAIL, "NVIDIA-GPU=GPU-<uuid>")},
    "swarm-resource-unset": {
        "toolkit.swarm-resource": (Status.FAIL, 'swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"')},
    "swarm-resource-wrong-kind": {
        "toolkit.swarm-resource": (Status.FAIL, "nvidia-container-toolkit#57")},
    "swarm-resource-misplaced": {
        "toolkit.swarm-resource": (Status.FAIL, "above the first [section]")},
    "toolkit-1.18-jit-cdi": {"toolkit.mode": (Status.FAIL, 'mode = "legacy"')},
    "toolkit-missing": {
        "toolkit.swarm-resource": (Status.FAIL, "Install nvidia-container-toolkit")},
    "uvm-stale-major": {"devices.nodes": (Status.FAIL, "mknod -m 666 /dev/nvidia-uvm c 510 0")},
    "uvm-not-loaded": {"devices.nodes": (Status.FAIL, "modprobe nvidia-uvm")},
    "no-driver": {"devices.nodes": (Status.FAIL, "modprobe nvidia")},
    "cgroup-v1-no-devices": {"cgroup.devices": (Status.FAIL, "cgroup_disable=devices")},
    "no-dev-char-links": {
        "cgroup.dev-char-links": (Status.WARN, "create-dev-char-symlinks")},
    "pci-order": {"gpu.order": (Status.WARN, "CUDA_DEVICE_ORDER=PCI_BUS_ID")},
    "numa-unknown": {"gpu.numa": (Status.WARN, "numa_node")},
    "hami-hard": {},  # HAMi-core installed: sharing.mode hard (test below)
    "hami-no-lock-dir": {"sharing.mode": (Status.WARN, "mkdir -m 1777 /tmp/vgpulock")},
    "hami-preload-names-missing-lib": {
        "sharing.mode": (Status.WARN, "/usr/local/vgpu/lib/libvgpu.so, not an installed")},
}
SKIPPED: dict[str, set[str]] = {
    "no-daemon-json": {"docker.daemon-keys", "runtime.default", "resources.generic"},
    "bad-daemon-json": {"docker.daemon-keys", "runtime.default", "resources.generic"},
    "toolkit-missing": {"toolkit.mode", "toolkit.grants", "toolkit.cdi-spec"},
    "no-driver": {"resources.generic", "gpu.facts", "gpu.order", "gpu.numa"},  # no facts
}


def test_every_fixture_root_has_an_expectation() -> None:
    assert sorted(p.name for p in ROOTS.iterdir() if p.is_dir()) == sorted(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_fixture_root_finds_exactly_its_problem(case: str) -> None:
    checks = {c.id: c for c in run_checks(read_view(str(ROOTS / case)))}
    for cid, check in checks.items():
        if cid in EXPECTED[case]:
            status, text = EXPECTED[case][cid]
            assert check.status is status, f"{case}/{cid}: {check}"
            assert text in check.found + " " + check.fix + " " + check.why, f"{case}/{cid}: {check}"
            assert check.why and check.fix, f"{case}/{cid}: a problem needs why and fix"
        elif cid in SKIPPED.get(case, set()):
            assert check.status is Status.SKIP, f"{case}/{cid}: {check}"
        else:
            assert check.status is Status.OK, f"{case}/{cid}: {check}"


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_exit_code_and_json(case: str) -> None:
    text, code = run_doctor(str(ROOTS / case), as_json=True)
    data = json.loads(text)
    failed = any(s is Status.FAIL for s, _ in EXPECTED[case].values())
    assert code == (1 if failed else 0)
    assert data["summary"]["fail"] == sum(s is Status.FAIL for s, _ in EXPECTED[case].values())
    assert {c["id"] for c in data["checks"]} >= {"runtime.default", "toolkit.swarm-resource"}
    assert all(set(c) == {"id", "status", "found", "why", "fix", "details"}
               for c in data["checks"])


def test_text_report_shows_why_and_fix_for_problems_only() -> None:
    text, code = run_doctor(str(ROOTS / "swarm-resource-wrong-kind"))
    assert code == 1
    lines = text.splitlines()
    fail = next(i for i, ln in enumerate(lines) if ln.startswith("FAIL"))
    assert "toolkit.swarm-resource" in lines[fail]
    assert lines[fail + 1].strip().startswith("why:")
    assert lines[fail + 2].strip().startswith("fix:")
    assert sum(ln.strip().startswith("why:") for ln in lines) == 1


def test_numa_table_is_shown() -> None:
    text, _ = run_doctor(str(ROOTS / "healthy"))
    assert "GPU1  00000000:0F:00.0 numa 0" in text
    text, _ = run_doctor(str(ROOTS / "numa-unknown"))
    assert "numa ? (sysfs says 0)" in text


def test_bad_root_exits_2(tmp_path: Path) -> None:
    text, code = run_doctor(str(tmp_path / "nope"))
    assert code == 2 and "not a directory" in text
    bad = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", bad)
    (bad / "dev" / ".swarmgpu-devices.json").write_text('{"nodes": {"nvidia0": "195-0"}}')
    text, code = run_doctor(str(bad), as_json=True)
    assert code == 2 and "MAJOR:MINOR" in json.loads(text)["error"]


def test_given_facts_and_docker_info_win_over_fixture_files() -> None:
    only_a = NodeFacts(hostname="n", gpus=(Gpu(index=0, uuid=UA, product="A100", memory_mib=1,
                                                pci_bus_id="0000:07:00.0", numa_node=0,
                                                cpu_affinity="0-7"),))
    checks = {c.id: c for c in run_checks(read_view(str(ROOTS / "healthy"), facts=only_a,
                                                    docker_info={"DefaultRuntime": "runc"}))}
    assert checks["resources.generic"].status is Status.FAIL  # UB no longer present
    assert checks["runtime.default"].status is Status.FAIL


def test_real_root_runs() -> None:
    # This machine may have no GPU; the point is the os.stat path and no exception.
    text, code = run_doctor("/")
    assert code in (0, 1), text
    assert "devices.nodes" in text


def test_mig_devices_count_as_present(tmp_path: Path) -> None:
    mig = Gpu(index=0, uuid=UA, product="A100", memory_mib=40960, mig_enabled=True,
              mig_devices=(MigDevice("3g.20gb", "MIG-aaaa", 20096),
                           MigDevice("3g.20gb", "MIG-bbbb", 20096)),
              numa_node=0, cpu_affinity="0-7")
    facts = NodeFacts(hostname="n", gpus=(mig,))
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root)
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    daemon["node-generic-resources"] = ["NVIDIA-GPU=MIG-aaaa", "NVIDIA-GPU=MIG-bbbb"]
    (root / "etc/docker/daemon.json").write_text(json.dumps(daemon))
    checks = {c.id: c for c in run_checks(read_view(str(root), facts=facts, docker_info={}))}
    assert checks["resources.generic"].status is Status.OK, checks["resources.generic"]


ESC = "\x1b[2K\r"  # erase the line, back to its start


def test_hostile_names_from_the_facts_show_escaped() -> None:
    odd = Gpu(index=0, uuid=f"GPU-{ESC}\u202e", product="A100", memory_mib=1,
              pci_bus_id="0000:07:00.0", numa_node=0, cpu_affinity="0-7")
    text, code = run_doctor(str(ROOTS / "healthy"),
                            facts=NodeFacts(hostname=f"n{ESC}", gpus=(odd,)))
    assert code == 1
    assert not any(c in text for c in "\x1b\r\u202e"), text
    assert r"host n\x1b[2K\r " in text and r"GPU0 GPU-\x1b[2K\r\u202e" in text, text


def test_no_facts_on_the_live_node_shows_its_hostname_marked() -> None:
    # NVML cannot start (no driver): the header named no host ("host ?"); on the live
    # node ("/") the machine's own name is shown, marked as not the facts' word.
    view = dataclasses.replace(read_view(str(ROOTS / "healthy")), root="/", facts=None)
    text = render_text(view, [])
    assert f"host {socket.gethostname()} (this machine's name: no GPU facts)" in text, text
    # A fixture or mounted root is another machine: nothing is guessed for it.
    other = dataclasses.replace(view, root=str(ROOTS / "healthy"))
    assert "  host ?  " in render_text(other, []), render_text(other, [])

# --- node-config: what it prints is what doctor accepts --------------------------------


def _facts() -> NodeFacts:
    return NodeFacts.from_dict(json.loads(
        (ROOTS / "healthy" / ".swarmgpu-fixture" / "facts.json").read_text()))


def _fragments(text: str) -> tuple[dict[str, object], dict[str, object]]:
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    split = body.index("")
    return (json.loads("\n".join(body[:split])),
            tomllib.loads("\n".join(body[split:]).strip()))


@pytest.mark.parametrize("kind", ["NVIDIA-GPU", "gpu"])
def test_node_config_round_trips_through_doctor(tmp_path: Path, kind: str) -> None:
    text = node_config(_facts(), kind=kind)
    daemon, toml = _fragments(text)
    assert daemon["default-runtime"] == "nvidia"
    assert daemon["node-generic-resources"] == [f"{kind}={UA}", f"{kind}={UB}"]
    assert toml == {"swarm-resource": f"DOCKER_RESOURCE_{kind.upper()}"}
    assert text.count("# why:") == 3  # daemon.json, config.toml, HAMi-core (optional)
    # A node configured from the fragments passes the checks the fragments are for.
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "swarm-resource-unset", root)
    (root / "etc/docker/daemon.json").write_text(json.dumps(daemon))
    conf = root / "etc/nvidia-container-runtime/config.toml"
    conf.write_text(f'swarm-resource = "{toml["swarm-resource"]}"\n' + conf.read_text())
    checks = {c.id: c for c in run_checks(read_view(str(root), docker_info={}))}
    for cid in ("runtime.default", "resources.generic", "toolkit.swarm-resource"):
        assert checks[cid].status is Status.OK, checks[cid]


def _root_with_toolkit(tmp_path: Path, top: str, mode: str | None = None) -> Path:
    """The healthy root with ``top`` at the top of config.toml (and its mode replaced)."""
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root)
    conf = root / "etc/nvidia-container-runtime/config.toml"
    text = conf.read_text()
    if mode is not None:
        text = text.replace('mode = "auto"', f'mode = "{mode}"')
    conf.write_text(top + "\n" + text)
    return root


def _grants(root: Path, grants: str) -> Check:
    view = dataclasses.replace(read_view(str(root)), grants=grants)
    return check_grants(view)


def test_node_config_grants_as_mounts_round_trips_through_doctor(tmp_path: Path) -> None:
    text = node_config(_facts(), grants="mounts")
    _, toml = _fragments(text)
    assert toml["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert toml["accept-nvidia-visible-devices-as-volume-mounts"] is True
    assert toml["nvidia-container-runtime"] == {"mode": "legacy"}
    top = "\n".join(f"{k} = {json.dumps(v)}" for k, v in toml.items()
                    if k.startswith("accept-"))
    root = _root_with_toolkit(tmp_path, top, mode="legacy")
    ok = _grants(root, "mounts")
    assert ok.status is Status.OK, ok
    # the daemon still granting through the variable: its grants would be ignored
    env = _grants(root, "env")
    assert env.status is Status.FAIL and "placement.grants: mounts" in env.fix
    with pytest.raises(ValueError, match="grants 'cdi'"):
        node_config(_facts(), grants="cdi")


def test_grants_checks_name_what_is_missing(tmp_path: Path) -> None:
    healthy = ROOTS / "healthy"
    fail = _grants(healthy, "mounts")
    assert fail.status is Status.FAIL
    assert "envvar-when-unprivileged is not false" in fail.found
    assert "as-volume-mounts is not true" in fail.found
    keys = ("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
            "accept-nvidia-visible-devices-as-volume-mounts = true")
    # mode auto on toolkit 1.19.1 is jit-cdi: a grant of several GPUs would not start
    jit = _grants(_root_with_toolkit(tmp_path, keys), "mounts")
    assert jit.status is Status.WARN and 'mode = "legacy"' in jit.fix
    assert "jit-cdi" in jit.found
    legacy = _grants(_root_with_toolkit(tmp_path / "b", keys, mode="legacy"), "mounts")
    assert legacy.status is Status.OK, legacy
    open_door = _grants(_root_with_toolkit(
        tmp_path / "c", "accept-nvidia-visible-devices-as-volume-mounts = true"), "env")
    assert open_door.status is Status.WARN
    assert _grants(healthy, "env").status is Status.OK


def test_node_config_lists_mig_devices_and_rejects_bad_input() -> None:
    mig = Gpu(index=0, uuid=UA, product="A100", memory_mib=40960, mig_enabled=True,
              mig_devices=(MigDevice("7g.40gb", "MIG-cccc", 40192),))
    daemon, _ = _fragments(node_config(NodeFacts(hostname="n", gpus=(mig,))))
    assert daemon["node-generic-resources"] == ["NVIDIA-GPU=MIG-cccc"]
    with pytest.raises(ValueError, match="kind 'NVIDIA GPU'"):
        node_config(_facts(), kind="NVIDIA GPU")
    with pytest.raises(ValueError, match="no GPUs"):
        node_config(NodeFacts(hostname="n"))


# --- parsers -------------------------------------------------------------------------


def test_parsers() -> None:
    status = (ROOTS / "healthy" / "var/lib/dpkg/status").read_text()
    assert dpkg_version(status) == "1.19.1-1"
    assert dpkg_version("Package: nvidia-container-toolkit\nStatus: deinstall ok config-files\n"
                        "Version: 1.14.0-1\n") is None
    assert parse_version("1.17.8-1") == ((1, 17, 8), False)
    assert parse_version("1.19.0~rc.2-1") == ((1, 19, 0), True)
    assert parse_version("garbage") is None
    majors = parse_proc_devices((ROOTS / "healthy" / "proc/devices").read_text())
    assert majors["nvidia-frontend"] == 195 and majors["nvidia-uvm"] == 510
    assert "sd" not in majors  # block devices are not character devices
    assert norm_bus_id("00000000:3B:00.0") == norm_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    res, errs = parse_generic_resources(["NVIDIA-GPU=GPU-1", "bad", "gpu=2"], "x")
    assert [(r.kind, r.value, r.discrete) for r in res] == [("NVIDIA-GPU", "GPU-1", False),
                                                            ("gpu", "2", True)]
    assert errs == ["x[1]: 'bad' is not KIND=VALUE (e.g. NVIDIA-GPU=GPU-<uuid>)"]


def test_mixed_products_warn_about_cuda_order() -> None:
    gpus = (Gpu(index=0, uuid=UA, product="NVIDIA A100", memory_mib=1, pci_bus_id="0000:07:00.0",
                numa_node=0, cpu_affinity="0-7"),
            Gpu(index=1, uuid=UB, product="NVIDIA T4", memory_mib=1, pci_bus_id="0000:0f:00.0",
                numa_node=0, cpu_affinity="0-7"))
    checks = {c.id: c for c in run_checks(read_view(str(ROOTS / "healthy"),
                                                    facts=NodeFacts(hostname="n", gpus=gpus)))}
    assert checks["gpu.order"].status is Status.WARN
    assert "mixed products" in checks["gpu.order"].found


@pytest.mark.parametrize(("version", "mode", "status"), [
    ("1.17.8-1", "auto", Status.OK),       # auto -> legacy before 1.18
    ("1.17.8-1", "jit-cdi", Status.FAIL),
    ("1.18.2-1", "auto", Status.FAIL),     # auto -> jit-cdi, no Swarm support
    ("1.18.2-1", "legacy", Status.OK),
    ("1.19.0~rc.1-1", "auto", Status.FAIL),
    ("1.19.0-1", "cdi", Status.OK),
    ("1.20.0-1", "auto", Status.OK),
])
def test_toolkit_mode_table(tmp_path: Path, version: str, mode: str, status: Status) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root)
    conf = root / "etc/nvidia-container-runtime/config.toml"
    conf.write_text(conf.read_text().replace('mode = "auto"', f'mode = "{mode}"'))
    dpkg = root / "var/lib/dpkg/status"
    dpkg.write_text(dpkg.read_text().replace("1.19.1-1", version))
    checks = {c.id: c for c in run_checks(read_view(str(root)))}
    assert checks["toolkit.mode"].status is status, checks["toolkit.mode"]


def test_sharing_mode_hard_soft_and_node_config_set_up(tmp_path: Path) -> None:
    text, code = run_doctor(str(ROOTS / "hami-hard"), as_json=True)
    data = json.loads(text)
    assert code == 0 and data["sharing_mode"] == "hard"
    (c,) = [c for c in data["checks"] if c["id"] == "sharing.mode"]
    assert c["status"] == "ok" and c["found"].startswith("hard: HAMi-core /usr/local/vgpu/")
    for case in ("healthy", "hami-no-lock-dir", "hami-preload-names-missing-lib"):
        assert json.loads(run_doctor(str(ROOTS / case), as_json=True)[0])["sharing_mode"] \
            == "soft", case
    # a node set up as node-config prints it is hard
    cmds = [ln[4:].split("   #")[0].strip() for ln in node_config(_facts()).splitlines()
            if ln.startswith("#   ") and not ln.startswith("#   #")]
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root)
    for cmd in cmds:
        if cmd.startswith("install -D"):
            dst = root / cmd.split()[-1].lstrip("/")
            dst.parent.mkdir(parents=True)
            dst.write_bytes(b"\x7fELF")
        elif cmd.startswith("echo /"):
            lib, dst_s = cmd[len("echo "):].split(" > ")
            (root / dst_s.lstrip("/")).write_text(lib + "\n")
        elif cmd.startswith("mkdir"):
            (root / cmd.split()[-1].lstrip("/")).mkdir(parents=True)
    assert json.loads(run_doctor(str(root), as_json=True)[0])["sharing_mode"] == "hard", cmds


# --- the CLI: `doctor --source topo:` and `node-config --source nvml` without a driver ---
TOPO_A100 = TOPOLOGY / "topo_dgx_a100_nv12.txt"
TOPO_ARGS = ["--source", f"topo:{TOPO_A100}", "--product", "NVIDIA A100-SXM4-40GB",
             "--memory-mib", "40960"]


def test_doctor_cli_takes_the_topo_source_options() -> None:
    res = CliRunner().invoke(main, ["doctor", "--root", str(ROOTS / "healthy"), "--json",
                                    *TOPO_ARGS, "--mig", "0:1g.5gb*7", "--hostname", "gpu-a"])
    report = json.loads(res.stdout)
    checks = {c["id"]: c for c in report["checks"]}
    assert report["hostname"] == "gpu-a"
    assert "known for 8 GPU(s)" in checks["gpu.numa"]["found"]
    # The topo facts' synthetic UUIDs (naming.synthetic_uuid) are not the fixture's
    # daemon.json ones: the check compared them, so the topo facts reached the checks.
    generic = checks["resources.generic"]
    assert generic["status"] == "fail" and "GPU0 GPU-5ca1ab1e-" in generic["found"]
    assert res.exit_code == 1


def test_doctor_cli_topo_source_without_memory_says_what_to_pass() -> None:
    res = CliRunner().invoke(main, ["doctor", "--root", str(ROOTS / "healthy"), "--source",
                                    f"topo:{TOPO_A100}", "--product", "NVIDIA A100-SXM4-40GB"])
    assert res.exit_code == 2
    assert "--memory-mib N" in res.stderr


def test_doctor_topo_source_on_this_host_runs_its_checks() -> None:
    # The command as an operator types it, root / (this machine's real files).
    out = subprocess.run([str(Path(sys.executable).parent / "swarmgpu"), "doctor", *TOPO_ARGS],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode in (0, 1), out.stderr
    assert "gpu.numa: NUMA node and CPU affinity known for 8 GPU(s)" in out.stdout
    assert "cannot read facts" not in out.stderr


def test_node_config_nvml_names_what_is_missing() -> None:
    # Real NVML, no fake: on a host without the NVIDIA driver (this test machine) the
    # message names the missing library and the fix; on a GPU host it prints the config.
    facts = NvmlSource().read()
    res = CliRunner().invoke(main, ["node-config", "--source", "nvml"])
    if facts.gpus:
        assert res.exit_code == 0 and '"default-runtime": "nvidia"' in res.stdout
        return
    assert res.exit_code == 2 and res.stdout == ""
    assert "list no GPUs" not in res.stderr
    assert facts.errors[0] in res.stderr
    assert "--source gfd:FILE or topo:FILE" in res.stderr
    if "NVMLError_LibraryNotFound" in facts.errors[0]:
        assert "libnvidia-ml.so.1" in res.stderr and "install the driver" in res.stderr


def test_nvml_library_not_found_says_install_the_driver(tmp_path: Path) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.init_error = fake.NVML_ERROR_LIBRARY_NOT_FOUND
    facts = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs).read()
    assert "libnvidia-ml.so.1" in facts.errors[0] and "install the driver" in facts.errors[0]


# --- odd files: a finding each, never a traceback, a hang or an unbounded read ---------


def _healthy_copy(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root)
    return root


def _by_id(root: Path) -> tuple[dict[str, Check], int]:
    text, code = run_doctor(str(root), as_json=True)
    return {c["id"]: Check(c["id"], Status(c["status"]), c["found"], c["why"], c["fix"])
            for c in json.loads(text)["checks"]}, code


def test_daemon_json_symlink_loop_is_a_finding(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    daemon = root / "etc/docker/daemon.json"
    daemon.unlink()
    daemon.symlink_to("daemon.json")
    checks, code = _by_id(root)
    c = checks["docker.daemon-json"]
    assert code == 1 and c.status is Status.FAIL, c
    assert "symlink loop" in c.found and "ls -lL" in c.fix, c
    assert checks["toolkit.swarm-resource"].status is Status.OK  # the others still ran


def test_config_files_that_are_not_regular_files_are_findings(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    (root / "etc/docker/daemon.json").unlink()
    (root / "etc/docker/daemon.json").mkdir()
    conf = root / "etc/nvidia-container-runtime/config.toml"
    conf.unlink()
    # the root's own /dev/zero (an absolute link resolves inside the root): a FIFO stands
    # in for the device, which a test cannot make without root
    os.mkfifo(root / "dev/zero")
    conf.symlink_to("/dev/zero")
    checks, code = _by_id(root)
    assert code == 1
    assert "not a regular file" in checks["docker.daemon-json"].found
    assert "not a regular file" in checks["toolkit.swarm-resource"].found
    assert checks["toolkit.swarm-resource"].fix.startswith("Replace")


@pytest.mark.timeout(10)
def test_daemon_json_fifo_does_not_hang(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    (root / "etc/docker/daemon.json").unlink()
    os.mkfifo(root / "etc/docker/daemon.json")
    checks, _ = _by_id(root)
    assert "not a regular file" in checks["docker.daemon-json"].found


def test_huge_config_file_is_a_finding_not_read_whole(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    (root / "etc/docker/daemon.json").write_text("{}" + " " * (2 << 20))
    checks, _ = _by_id(root)
    c = checks["docker.daemon-json"]
    assert c.status is Status.FAIL and "larger than 1 MiB" in c.found, c


def test_unreadable_daemon_json_names_run_as_root(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = _healthy_copy(tmp_path)
    real_open = os.open

    def denied(path: object, *args: object, **kw: object) -> int:
        if str(path).endswith("daemon.json"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    checks, code = _by_id(root)
    c = checks["docker.daemon-json"]
    assert code == 1 and c.status is Status.FAIL, c
    assert "permission denied" in c.found and "sudo swarmgpu doctor" in c.fix, c


def test_unreadable_sysfs_and_dev_char_are_skipped_not_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _healthy_copy(tmp_path)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    real_iterdir = Path.iterdir

    def iterdir(self: Path) -> object:
        if self.name == "devices":
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    _, code = run_doctor(str(root))
    assert code == 0


def test_fixture_docker_info_not_an_object_exits_2(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    (root / ".swarmgpu-fixture/docker-info.json").write_text("[1, 2]")
    text, code = run_doctor(str(root))
    assert code == 2 and "docker-info.json" in text and "object" in text, text


@pytest.mark.parametrize("text", ["", " \n", "\ufeff"])
def test_empty_daemon_json_is_read_as_dockerd_reads_it(tmp_path: Path, text: str) -> None:
    # dockerd starts with an empty daemon.json (moby config.go: "early return on empty
    # config"): the finding is what it then lacks, not a syntax error.
    root = _healthy_copy(tmp_path)
    (root / "etc/docker/daemon.json").write_text(text, encoding="utf-8")
    checks, _ = _by_id(root)
    assert checks["docker.daemon-json"].status is Status.OK, checks["docker.daemon-json"]
    assert "empty" in checks["docker.daemon-json"].found
    assert "default-runtime is not set" in checks["runtime.default"].found


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_daemon_json_with_a_bom_parses_as_dockerd_reads_it(tmp_path: Path,
                                                            encoding: str) -> None:
    # Notepad writes UTF-8 with a BOM, Windows PowerShell UTF-16 LE with one; dockerd
    # decodes both (moby config.go, BOMOverride).
    root = _healthy_copy(tmp_path)
    daemon = root / "etc/docker/daemon.json"
    daemon.write_bytes(daemon.read_text().encode(encoding))
    checks, code = _by_id(root)
    assert code == 0 and checks["docker.daemon-json"].status is Status.OK, checks


def test_daemon_json_not_utf8_is_named(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    (root / "etc/docker/daemon.json").write_bytes(b'{"log-driver": "\xff"}')
    c = _by_id(root)[0]["docker.daemon-json"]
    assert c.status is Status.FAIL and "not valid UTF-8 at byte 16" in c.found, c
    assert "Save it as UTF-8" in c.fix


# --- GPU facts: NVML that cannot list the GPUs, or loses one ---------------------------
NO_LIB = ("nvml: cannot initialise NVML (NVMLError_LibraryNotFound): libnvidia-ml.so.1 is "
          "not found; install the driver")


def test_nvml_without_gpus_is_a_finding_not_a_node_without_gpus() -> None:
    # NvmlSource.read() on a node whose driver does not load: no GPUs, an error why.
    facts = NodeFacts(hostname="n", errors=(NO_LIB,))
    checks = {c.id: c for c in run_checks(read_view(str(ROOTS / "healthy"), facts=facts))}
    c = checks["gpu.facts"]
    assert c.status is Status.FAIL and "install the driver" in c.found, c
    # not "advertised but not on this node" with a fix to edit daemon.json
    assert checks["resources.generic"].status is Status.SKIP, checks["resources.generic"]
    assert checks["gpu.numa"].status is Status.SKIP


def test_nvml_facts_that_could_not_be_read_are_a_finding() -> None:
    text, code = run_doctor(str(ROOTS / "healthy"), facts_error="nvml: NVMLError_Unknown")
    assert code == 1 and "gpu.facts: cannot read the GPU facts: nvml: NVMLError_Unknown" \
        in text, text


def test_a_lost_gpu_is_named_with_its_fix_not_as_a_stale_uuid() -> None:
    ok = _facts().gpus[0]
    lost = Gpu(index=1, uuid="GPU-unknown-index-1", product="unknown", memory_mib=1,
               healthy=False, error="GPU is lost (NVMLError_GpuIsLost); UUID unknown")
    facts = NodeFacts(hostname="n", gpus=(ok, lost),
                      errors=("nvml: GPU 1: GPU is lost (NVMLError_GpuIsLost)",))
    checks = {c.id: c for c in run_checks(read_view(str(ROOTS / "healthy"), facts=facts))}
    c = checks["gpu.facts"]
    assert c.status is Status.FAIL and "GPU1" in c.found and "Xid" in c.fix, c
    generic = checks["resources.generic"]
    assert generic.status is Status.SKIP and "GPU1" in generic.found, generic


# --- the engine: unreachable, or not in a swarm (asked on the live node only) ----------


@pytest.mark.parametrize(("error", "fix"), [
    ("Error while fetching server API version: ('Connection aborted.', "
     "PermissionError(13, 'Permission denied'))", "docker group"),
    ("Error while fetching server API version: ('Connection aborted.', "
     "FileNotFoundError(2, 'No such file or directory'))", "systemctl start docker"),
    ("UnixHTTPConnectionPool(host='localhost', port=None): Read timed out. (read timeout=5)",
     "journalctl -u docker"),
])
def test_engine_unreachable_is_a_finding_naming_the_fix(error: str, fix: str) -> None:
    text, code = run_doctor(str(ROOTS / "healthy"), as_json=True, engine_probed=True,
                            docker_error=error)
    (c,) = [c for c in json.loads(text)["checks"] if c["id"] == "docker.engine"]
    assert code == 1 and c["status"] == "fail" and fix in c["fix"], c


@pytest.mark.parametrize(("swarm", "status", "text"), [
    ({"LocalNodeState": "inactive"}, "fail", "docker swarm join"),
    ({"LocalNodeState": "locked"}, "fail", "docker swarm unlock"),
    ({"LocalNodeState": "error", "Error": "rpc error"}, "fail", "rpc error"),
    ({"LocalNodeState": "active", "NodeID": "n1", "ControlAvailable": False}, "ok", "worker"),
    ({"LocalNodeState": "active", "NodeID": "n1", "ControlAvailable": True}, "ok", "manager"),
])
def test_engine_swarm_state(swarm: dict[str, object], status: str, text: str) -> None:
    info = json.loads((ROOTS / "healthy/.swarmgpu-fixture/docker-info.json").read_text())
    out, _ = run_doctor(str(ROOTS / "healthy"), as_json=True, engine_probed=True,
                        docker_info={**info, "Swarm": swarm})
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "docker.engine"]
    assert c["status"] == status and text in c["found"] + c["fix"], c


@pytest.mark.parametrize(("path", "found"), [
    ("/usr/local/nvidia/toolkit/nvidia-container-runtime", "does not exist"),
    (5, "not a path"),
])
def test_nvidia_runtime_path_pointing_nowhere_is_a_finding(tmp_path: Path, path: object,
                                                            found: str) -> None:
    root = _healthy_copy(tmp_path)
    daemon_path = root / "etc/docker/daemon.json"
    daemon = json.loads(daemon_path.read_text())
    daemon["runtimes"]["nvidia"]["path"] = path
    daemon_path.write_text(json.dumps(daemon))
    c = _by_id(root)[0]["runtime.default"]
    assert c.status is Status.FAIL and found in c.found, c
    # there once installed: ok
    if isinstance(path, str):
        (root / path.lstrip("/")).parent.mkdir(parents=True)
        (root / path.lstrip("/")).write_text("#!/bin/sh\n")
        (root / path.lstrip("/")).chmod(0o755)
        c = _by_id(root)[0]["runtime.default"]
        assert c.status is Status.OK, c


def test_malformed_generic_resources_are_named_boundedly(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    daemon_path = root / "etc/docker/daemon.json"
    daemon = json.loads(daemon_path.read_text())
    daemon["node-generic-resources"] = ["x" * 100_000, {"kind": "gpu"}, *["bad"] * 5000]
    daemon_path.write_text(json.dumps(daemon))
    c = _by_id(root)[0]["resources.generic"]
    assert c.status is Status.FAIL and "[1]: {'kind': 'gpu'} is not KIND=VALUE" in c.found, c
    assert "and 4999 more" in c.found and len(c.found) < 1000, len(c.found)


class _RaisingSource:
    spec = "nvml"

    def read(self) -> NodeFacts:
        raise RuntimeError("NVMLError_Unknown")


def test_a_facts_read_that_raises_is_said_once_in_gpu_facts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the CLI printed it on stderr too, the same words twice."""
    monkeypatch.setattr("swarmgpu.cli.node._open", lambda *a: _RaisingSource())
    res = CliRunner().invoke(main, ["doctor", "--root", str(ROOTS / "healthy"),
                                    "--source", "nvml"])
    assert res.exit_code == 1
    assert "gpu.facts: cannot read the GPU facts: nvml: NVMLError_Unknown" in res.stdout
    assert res.stderr == ""


# --- NVML that does not answer (a GPU fallen off the bus can hang nvmlInit for minutes) ---


def _facts_thread_done() -> None:
    deadline = time.monotonic() + 5
    while any(t.name == "doctor-facts" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.timeout(60)  # a hang guard: the call waits until released, after the checks
@pytest.mark.parametrize("call", ["nvmlInit", "nvmlDeviceGetCount"])
def test_nvml_that_does_not_answer_fails_gpu_facts_and_the_other_checks_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    """Before: the doctor waited on NVML for as long as the driver hung."""
    b = build_layout("hgx_h100_nv18", tmp_path)
    release = threading.Event()
    real = getattr(b.nvml, call)
    monkeypatch.setattr(b.nvml, call, lambda *a: release.wait() and real(*a))
    src = NvmlSource(hostname="n", nvml_module=b.nvml, sysfs_root=b.sysfs, xid_events=False)
    try:
        got = read_facts_within(src, "nvml", timeout_s=0.2)
        assert (got.facts, got.hung) == (None, True)  # returned while NVML still hangs
        assert got.error == "nvml: NVML did not answer within 0.2 s"
        text, code = run_doctor(str(ROOTS / "healthy"), facts_error=got.error,
                                facts_hung=got.hung, as_json=True)
        checks = {c["id"]: c for c in json.loads(text)["checks"]}
        assert code == 1
        facts = checks["gpu.facts"]
        assert (facts["status"], facts["found"]) == (
            "fail", "cannot read the GPU facts: nvml: NVML did not answer within 0.2 s")
        assert "dmesg | grep -i xid" in facts["fix"] and "reboot" in facts["fix"]
        assert checks["docker.daemon-json"]["status"] == "ok"  # the other checks ran
    finally:
        release.set()
        _facts_thread_done()
        shutdown(b.nvml)


def test_a_source_that_answers_or_raises_is_read_as_before() -> None:
    ok = read_facts_within(type("S", (), {"read": lambda self: _facts()})(), "file:x")
    assert (ok.facts, ok.error, ok.hung) == (_facts(), None, False)
    bad = read_facts_within(_RaisingSource(), "nvml")
    assert (bad.facts, bad.error, bad.hung) == (None, "nvml: NVMLError_Unknown", False)


def test_a_source_whose_error_names_itself_is_named_once(tmp_path: Path) -> None:
    # "cannot read the GPU facts: file:X: file:X: a directory, ...": the source's own
    # error already starts with its spec, and the doctor named it again.
    src = open_source(f"file:{tmp_path}")
    got = read_facts_within(src, f"file:{tmp_path}")
    assert got.error == (f"file:{tmp_path}: a directory, not a regular file; give the "
                         "path of the JSON/YAML file itself")
    bad = tmp_path / "facts.json"  # "file:X: file:X.gpus[0].memory_mib: ..."
    data = _facts().to_dict()
    data["gpus"][0]["memory_mib"] = -1
    bad.write_text(json.dumps(data))
    got = read_facts_within(open_source(f"file:{bad}"), f"file:{bad}")
    assert got.error == (f"file:{bad}.gpus[0].memory_mib: -1 is below the minimum 1 "
                         "(schema: docs/facts-schema.md)")


def test_facts_that_list_no_gpu_warn_not_ok() -> None:
    # "OK gpu.facts: 0 GPU(s) read from nvml" on the node being set up as a GPU node:
    # its agent would label it gpu.count=0 and placement send it no GPU service.
    facts = dataclasses.replace(_facts(), gpus=())
    text = run_doctor(str(ROOTS / "healthy"), facts=facts, as_json=True)[0]
    check = {c["id"]: c for c in json.loads(text)["checks"]}["gpu.facts"]
    assert check["status"] == "warn"
    assert check["found"].startswith("no GPU listed by ")
    assert "nvidia-smi -L" in check["fix"]


def test_the_doctor_exits_when_nvml_init_never_returns() -> None:
    """The read is abandoned, and the process still ends: NVML's exit hook waits on the
    lock the hung init holds (and the pool joins hung GPU reads), so nothing may wait."""
    script = textwrap.dedent(f"""
        import threading, types
        import swarmgpu.agent.facts.nvml_session as session
        import swarmgpu.agent.doctor.factsread as factsread
        hung = types.SimpleNamespace(nvmlInit=lambda: threading.Event().wait(),
                                     NVMLError=Exception)
        session.load_pynvml = lambda: hung
        factsread.FACTS_DEADLINE_S = 0.3
        from swarmgpu.cli import main
        main(["doctor", "--root", {str(ROOTS / "healthy")!r}, "--source", "nvml"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 1, out.stderr
    assert "gpu.facts: cannot read the GPU facts: nvml: NVML did not answer within 0.3 s" \
        in out.stdout
    assert out.stderr == ""



def test_a_fact_file_that_never_answers_names_the_file_not_the_driver() -> None:
    text, code = run_doctor(str(ROOTS / "healthy"), as_json=True, facts_hung=True,
                            facts_error="file:/run/facts.fifo: the source did not answer "
                                        "within 20 s")
    facts = {c["id"]: c for c in json.loads(text)["checks"]}["gpu.facts"]
    assert code == 1 and facts["status"] == "fail"
    assert "FIFO" in facts["fix"] and "Xid" not in facts["fix"]
