"""GPU access only through a grant (swarmgpu.manager.services.grants, cycle.grants): which services
see GPUs placement never gave them, and the void write.

Pure detection over specs shaped as Swarm returns them; the step over an in-memory
stand-in for swarmgpu's own SwarmClient (writes recorded, the compute contract kept).
The real swarm: tests/test_grants_swarm.py.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from support.gpu_nodes import DGX_A100

from swarmgpu.core.config import Config, PlacementConfig, load_config
from swarmgpu.manager.cycle.grants import READ_PARALLEL, ImageEnvs, findings, void_one
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.placement import devices_key, env_template
from swarmgpu.manager.placement.envs import VOID_LINE, device_mount_spec, mount_target
from swarmgpu.manager.services.grants import (
    Access,
    ImageEnv,
    devices_of,
    exempt_of,
    final_env,
    find_ungranted,
    gpu_nodes,
    images_to_read,
    parse_exempt,
    service_access,
    void_env,
    void_spec,
)
from swarmgpu.swarm.client import (
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    image_filter,
    service_from_api,
)

P = "swarmgpu."
TMPL = env_template(P)
CUDA_ENV = ("PATH=/usr/local/nvidia/bin:/usr/bin", "NVARCH=x86_64",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4", "CUDA_VERSION=12.4.1",
            "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
"""The env of nvidia/cuda:12.4.1-base-ubuntu22.04 (its Dockerfile's ENV lines)."""
PLAIN_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)


def spec(env: Sequence[str] = (), *, image: str = "local/app:1", labels: Mapping[str, str]
         | None = None, mounts: Sequence[Mapping[str, Any]] = (),
         caps: Sequence[str] = (), name: str = "s") -> dict[str, Any]:
    cs: dict[str, Any] = {"Image": image, "Env": list(env)}
    if mounts:
        cs["Mounts"] = [dict(m) for m in mounts]
    if caps:
        cs["CapabilityAdd"] = list(caps)
    return {"Name": name, "Labels": dict(labels or {}),
            "TaskTemplate": {"ContainerSpec": cs, "Placement": {"Constraints": ["x==y"]},
                             "Resources": {"Limits": {"MemoryBytes": 1 << 30}}},
            "Mode": {"Replicated": {"Replicas": 1}}}


def access(env: Sequence[str] = (), image_env: Sequence[str] | None = PLAIN_ENV, *,
           managed: bool = False, grants: str = "env", **kw: Any) -> list[Access]:
    s = spec(env, **kw)
    img = ImageEnv("local/app:1", None if image_env is None else tuple(image_env),
                   "not on the manager" if image_env is None else "")
    return service_access(s, img, prefix=P, managed=managed, grants=grants)


# --- the toolkit's reading of the variable ------------------------------------------------

@pytest.mark.parametrize(("value", "kind"), [
    ("all", "all"), (" all ", "all"), ("", "none"), ("void", "none"), ("none", "none"),
    (",", "none"), ("0,1", "some"), ("GPU-0,void", "none"), ("0,all", "all"),
    ("none,all", "none"), ("all,none", "all"), ("MIG-abc", "some"), ("void,all", "none"),
])
def test_devices_of_follows_the_toolkit(value: str, kind: str) -> None:
    assert devices_of([value]) == kind


def test_final_env_last_line_wins_and_a_bare_line_unsets() -> None:
    assert final_env(["A=1", "A=2"], ["A=0", "B=1"]) == {"A": "2", "B": "1"}
    assert final_env(["B"], ["A=0", "B=1"]) == {"A": "0"}


def test_a_bare_line_unsets_only_what_the_image_set() -> None:
    # moby's ReplaceOrAppendEnvValues: a line without '=' removes the image's value; a
    # value the service's own earlier line appended stays (the toolkit reads it)
    assert final_env(["A=1", "A"], ["B=1"]) == {"A": "1", "B": "1"}
    assert final_env(["A=1", "A"], ["A=0"]) == {}
    assert final_env(["A", "A=2"], ["A=0"]) == {"A": "2"}
    own = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES"]
    (a,) = access(own, PLAIN_ENV)
    assert a.known and a.voidable and "NVIDIA_VISIBLE_DEVICES=all" in a.what
    assert access(own, CUDA_ENV) == []  # the image's value it replaced is unset
    (u,) = access([*own, "NVIDIA_REQUIRE_CUDA=cuda>=12"], None)
    assert not u.known and "NVIDIA_VISIBLE_DEVICES=all" in u.what
    (r,) = access(["DOCKER_RESOURCE_GPU=GPU-a", "DOCKER_RESOURCE_GPU", VOID_LINE], PLAIN_ENV)
    assert r.via == "resource-env" and "GPU-a" in r.what
    assert _void(own) == [VOID_LINE]


# --- env forms ---------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0",
                                  "NVIDIA_VISIBLE_DEVICES=GPU-1,GPU-2",
                                  "NVIDIA_VISIBLE_DEVICES=MIG-x"])
def test_own_variable_naming_gpus_is_ungranted(line: str) -> None:
    (a,) = access([line, "MODEL=x"])
    assert a.via == "env" and a.known and a.voidable and line in a.what


@pytest.mark.parametrize("line", ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=none",
                                  "NVIDIA_VISIBLE_DEVICES=", "NVIDIA_VISIBLE_DEVICES=0,void"])
def test_own_variable_naming_no_gpu_is_fine_whatever_the_image(line: str) -> None:
    assert access([line], CUDA_ENV) == []
    assert access([line], None) == []  # the image cannot change it: never read


def test_the_last_line_of_the_variable_decides() -> None:
    assert access(["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"]) == []
    assert access(["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all"])


def test_cuda_visible_devices_grants_no_device_node() -> None:
    assert access(["CUDA_VISIBLE_DEVICES=0,1,2,3"]) == []


def test_a_template_swarmgpu_did_not_write_is_unknown() -> None:
    (a,) = access(["NVIDIA_VISIBLE_DEVICES={{.Node.Labels.gpus}}"])
    assert not a.known and a.voidable and "known only on the node" in a.what


# --- grants ------------------------------------------------------------------------------

def test_swarmgpus_template_on_a_managed_service_is_the_grant() -> None:
    labels = {f"{P}gpus": "1", devices_key(P, "n1"): "GPU-a"}
    assert access([TMPL], CUDA_ENV, managed=True, labels=labels) == []


def test_swarmgpus_template_without_a_valid_request_grants_nothing() -> None:
    # no devices labels: the template gives void everywhere
    assert access([TMPL], CUDA_ENV, managed=False) == []
    # devices labels written by the stack itself: nobody's grant
    (a,) = access([TMPL], CUDA_ENV, managed=False, labels={devices_key(P, "n1"): "GPU-a"})
    assert a.via == "env" and "placement did not write" in a.what


def test_own_line_after_the_template_overrides_the_grant() -> None:
    (a,) = access([TMPL, "NVIDIA_VISIBLE_DEVICES=all"], managed=True)
    assert "overrides" in a.what
    assert access(["NVIDIA_VISIBLE_DEVICES=all", TMPL], managed=True) == []


# --- the image's env --------------------------------------------------------------------

def test_cuda_image_env_all_is_ungranted() -> None:
    (a,) = access([], CUDA_ENV)
    assert a.via == "image" and a.known and "sets NVIDIA_VISIBLE_DEVICES=all" in a.what


def test_image_without_the_variable_is_fine() -> None:
    assert access([], PLAIN_ENV) == []
    # a modern CUDA image with the variable unset by the service: not legacy, no GPU
    assert access(["NVIDIA_VISIBLE_DEVICES"], CUDA_ENV) == []


def test_legacy_cuda_image_with_the_variable_unset_sees_every_gpu() -> None:
    legacy = ("PATH=/usr/bin", "CUDA_VERSION=10.0.130")
    (a,) = access([], legacy)
    assert "legacy CUDA image" in a.what
    # the service's own CUDA_VERSION makes any image legacy; NVIDIA_REQUIRE_CUDA undoes it
    assert access(["CUDA_VERSION=11.0"], PLAIN_ENV)
    assert access(["CUDA_VERSION=11.0", "NVIDIA_REQUIRE_CUDA=cuda>=11.0"], PLAIN_ENV) == []


def test_image_not_on_the_manager_is_unknown_and_treated_as_cuda_images() -> None:
    (a,) = access([], None)
    assert a.via == "image" and not a.known and a.voidable
    assert "unknown" in a.what and "not on the manager" in a.what
    assert "NVIDIA_VISIBLE_DEVICES=all" in a.what
    # the service unsets the variable: only a legacy image would still see GPUs
    (b,) = access(["NVIDIA_VISIBLE_DEVICES"], None)
    assert not b.known and "legacy CUDA image" in b.what
    assert access(["NVIDIA_VISIBLE_DEVICES", "NVIDIA_REQUIRE_CUDA=cuda>=12"], None) == []


# --- DOCKER_RESOURCE_* and mounts -------------------------------------------------------

def test_own_docker_resource_line_is_read_instead_of_the_variable() -> None:
    (a,) = access(["DOCKER_RESOURCE_NVIDIA-GPU=GPU-a", "NVIDIA_VISIBLE_DEVICES=void"])
    assert a.via == "resource-env" and a.var == "DOCKER_RESOURCE_NVIDIA-GPU"
    assert access(["DOCKER_RESOURCE_NVIDIA-GPU=void", "NVIDIA_VISIBLE_DEVICES=void"]) == []


def _null(target: str, source: str = "/dev/null", typ: str = "bind") -> dict[str, Any]:
    return {"Type": typ, "Source": source, "Target": target}


def test_dev_null_mount_under_the_toolkits_root_is_ungranted_and_not_voidable() -> None:
    (a,) = access(["NVIDIA_VISIBLE_DEVICES=void"],
                  mounts=[_null("/var/run/nvidia-container-devices/all")])
    assert a.via == "mount" and not a.voidable and "all" in a.what
    assert access(mounts=[_null("/var/run/nvidia-container-devices/../x")]) == []
    assert access(mounts=[_null("/var/run/nvidia-container-devices/all", "/tmp/null")]) == []
    assert access(mounts=[_null("/var/run/nvidia-container-devices/all", "vol",
                                "volume")]) == []
    (t,) = access(mounts=[_null("/var/run/{{.Node.Hostname}}")])
    assert not t.known


def test_placements_own_mount_is_a_grant_only_for_a_managed_service() -> None:
    m = device_mount_spec(P)
    labels = {devices_key(P, "n1"): "GPU-a"}
    assert access([TMPL], managed=True, mounts=[m], labels=labels) == []
    assert access([TMPL], managed=False, mounts=[m]) == []  # no list: the mount says nothing
    env_a, mount_a = access([TMPL], managed=False, mounts=[m], labels=labels)
    assert env_a.via == "env" and mount_a.via == "mount" and not mount_a.voidable


def test_grants_as_mounts_ignore_variables_of_unprivileged_containers() -> None:
    assert access(["NVIDIA_VISIBLE_DEVICES=all"], CUDA_ENV, grants="mounts") == []
    assert access([], None, grants="mounts") == []
    (a,) = access(["NVIDIA_VISIBLE_DEVICES=all"], grants="mounts", caps=["CAP_SYS_ADMIN"])
    assert a.via == "env"
    (m,) = access(grants="mounts", mounts=[_null("/var/run/nvidia-container-devices/0")])
    assert m.via == "mount"


def _reserving(kind: str, value: int = 1, **kw: Any) -> dict[str, Any]:
    s = spec(["NVIDIA_VISIBLE_DEVICES=void"], **kw)
    s["TaskTemplate"]["Resources"]["Reservations"] = {"GenericResources": [
        {"DiscreteResourceSpec": {"Kind": kind, "Value": value}}]}
    return s


def test_a_swarm_gpu_reservation_without_a_request_is_ungranted_and_not_voidable() -> None:
    # Swarm picks named GPUs for it and appends DOCKER_RESOURCE_NVIDIA-GPU=<them> after the
    # service's env, which the toolkit reads where swarm-resource names it (deploy.md)
    img = ImageEnv("local/app:1", PLAIN_ENV)
    (a,) = service_access(_reserving("NVIDIA-GPU", 2), img, prefix=P, managed=False)
    assert a.via == "reservation" and a.known and not a.voidable
    assert "DOCKER_RESOURCE_NVIDIA-GPU" in a.what and "2 NVIDIA-GPU" in a.what
    # placement.generic_resource_kind is a GPU kind too; another kind is no GPU
    (b,) = service_access(_reserving("gpu-slot"), img, prefix=P, managed=False,
                          generic_kind="gpu-slot")
    assert b.via == "reservation"
    assert service_access(_reserving("fpga"), img, prefix=P, managed=False) == []
    # with grants as mounts the toolkit ignores swarm-resource's variables, as the env's
    assert service_access(_reserving("NVIDIA-GPU"), img, prefix=P, managed=False,
                          grants="mounts") == []
    svc = service_from_api({"ID": "id-r", "Spec": _reserving("NVIDIA-GPU", name="r"),
                            "Version": {"Index": 1}})
    (u,) = find_ungranted([svc], [_task(svc, "g")], {"g": "gpu-1"}, prefix=P,
                          managed=set(), images={"local/app:1": img})
    assert not u.voidable and "generic" in u.fix
    assert void_spec(svc.spec, img, prefix=P, managed=False) is None  # nothing to void


def test_a_managed_service_s_swarm_gpu_reservation_overrides_its_grant() -> None:
    # Swarm appends DOCKER_RESOURCE_NVIDIA-GPU=<its own pick> after the env (moby's
    # containerConfig.config); the toolkit reads a variable swarm-resource names instead of
    # NVIDIA_VISIBLE_DEVICES (as node-config sets it): the container gets Swarm's GPUs,
    # not the ledger's, and no env line of the service's can override Swarm's
    img = ImageEnv("local/app:1", PLAIN_ENV)
    managed = _reserving("NVIDIA-GPU", 1)
    managed["TaskTemplate"]["ContainerSpec"]["Env"] = [TMPL]
    (a,) = service_access(managed, img, prefix=P, managed=True)
    assert a.via == "reservation" and a.known and not a.voidable
    assert "grant" in a.what
    assert void_spec(managed, img, prefix=P, managed=True) is None  # reported, not voided
    # with grants as mounts the toolkit reads placement's mount before any variable
    assert service_access(managed, img, prefix=P, managed=True, grants="mounts") == []


def test_what_gives_no_gpu_is_not_reported() -> None:
    # capabilities of the driver come with granted GPUs only; a device node bind-mounted
    # is refused by the container's device cgroup (docs/security.md, "Other ways")
    assert access(["NVIDIA_DRIVER_CAPABILITIES=all", VOID_LINE]) == []
    assert access(mounts=[_null("/dev/nvidia0", "/dev/nvidia0"),
                          _null("/dev/dri", "/dev/dri")]) == []
    # cap_add ALL holds CAP_SYS_ADMIN: its variables are read under grants as mounts
    for cap in ("ALL", "SYS_ADMIN", "cap_sys_admin"):
        (a,) = access(["NVIDIA_VISIBLE_DEVICES=all"], grants="mounts", caps=[cap])
        assert a.via == "env"


def test_mount_target_template_names_the_same_lists_as_the_env_template() -> None:
    t = mount_target(P)
    assert '"swarmgpu.devices." .Node.ID "." .Task.Slot' in t and t.count("{{") == 4
    assert "/var/run/{{with" in t and "nvidia-container-devices/{{.}}" in t


# --- services on GPU nodes ---------------------------------------------------------------

def _node(nid: str, labels: Mapping[str, str] | None = None,
          generic: Mapping[str, tuple[str, ...]] | None = None) -> SwarmNode:
    return SwarmNode(id=nid, hostname=f"host-{nid}", addr="127.0.0.1", role="worker",
                     state="ready", availability="active", labels=dict(labels or {}),
                     engine_labels={}, version=1, generic_resources=dict(generic or {}),
                     discrete_resources={})


def _svc(name: str, env: Sequence[str] = (), **kw: Any) -> SwarmService:
    return service_from_api({"ID": f"id-{name}", "Spec": spec(env, name=name, **kw),
                             "Version": {"Index": 3}})


def _task(svc: SwarmService, nid: str, n: int = 1) -> SwarmTask:
    return SwarmTask(f"t-{svc.name}-{n}", svc.id, nid, n, "running", "running", ())


def test_gpu_nodes_from_facts_labels_or_generic_resources() -> None:
    facts = {"a": FactsResult("a", "host-a", "", DGX_A100.facts(), None, 0.0),
             "e": FactsResult("e", "host-e", "", None, "unreachable", 0.0)}
    nodes = [_node("a"), _node("b", {f"{P}gpu.count": "8"}),
             _node("c", generic={"NVIDIA-GPU": ("GPU-x",)}), _node("d"), _node("e"),
             _node("f", {f"{P}gpu.count": "0"})]
    assert set(gpu_nodes(nodes, facts, P)) == {"a", "b", "c"}


def test_find_checks_only_services_on_gpu_nodes_and_names_them() -> None:
    gpu = {"g": "gpu-1"}
    on_gpu = _svc("app", ["NVIDIA_VISIBLE_DEVICES=all"])
    on_cpu = _svc("web", ["NVIDIA_VISIBLE_DEVICES=all"])
    granted = _svc("llm", [TMPL], labels={f"{P}gpus": "1", devices_key(P, "g"): "GPU-a"})
    agent = _svc("swarmgpu_agent", ["NVIDIA_VISIBLE_DEVICES=all"])
    tasks = [_task(on_gpu, "g"), _task(on_cpu, "cpu"), _task(granted, "g"), _task(agent, "g")]
    found = find_ungranted([on_gpu, on_cpu, granted, agent], tasks, gpu, prefix=P,
                           managed={"llm"}, images={},
                           exempt=parse_exempt("swarmgpu_agent, x*"))
    assert [(u.service, u.nodes, u.exempt) for u in found] == [
        ("app", ("gpu-1",), False), ("swarmgpu_agent", ("gpu-1",), True)]
    f_app, f_agent = findings(found)
    assert f_app.kind == "ungranted-gpu-access" and not f_app.advisory
    assert "NVIDIA_VISIBLE_DEVICES=all" in f_app.message and "fix:" in f_app.message
    assert f_agent.advisory  # exempt: listed, never needs action
    d = found[0].to_dict()
    assert d["reason"] and d["fix"] and d["known"] and d["voidable"]


def test_images_read_for_every_service_on_a_gpu_node() -> None:
    # an image's DOCKER_RESOURCE_* line decides whatever the service's own variable says
    gpu = {"g": "gpu-1"}
    a = _svc("a", [], image="img/a:1")
    b = _svc("b", ["NVIDIA_VISIBLE_DEVICES=void"], image="img/b:1")
    c = _svc("c", ["NVIDIA_VISIBLE_DEVICES"], image="img/c:1")
    d = _svc("d", [], image="img/d:1")
    tasks = [_task(a, "g"), _task(b, "g"), _task(c, "g"), _task(d, "cpu")]
    assert images_to_read([a, b, c, d], tasks, gpu, P) == ["img/a:1", "img/b:1", "img/c:1"]


def test_an_images_docker_resource_line_is_read_whatever_the_services_variable() -> None:
    # ENV DOCKER_RESOURCE_NVIDIA-GPU=all in the image: where swarm-resource names it (as
    # deploy.md sets) the toolkit reads it instead of the service's void or grant
    img_env = (*PLAIN_ENV, "DOCKER_RESOURCE_NVIDIA-GPU=all")
    (a,) = access([VOID_LINE], img_env)
    assert a.via == "resource-env" and a.known and a.voidable
    assert "image" in a.what and "DOCKER_RESOURCE_NVIDIA-GPU=all" in a.what
    labels = {f"{P}gpus": "1", devices_key(P, "n1"): "GPU-a"}
    (g,) = access([TMPL], img_env, managed=True, labels=labels)
    assert g.via == "resource-env"
    assert access([VOID_LINE, "DOCKER_RESOURCE_NVIDIA-GPU=void"], img_env) == []
    # the void write overrides the image's line with the service's own
    once = _void([VOID_LINE, "A=1"], img_env)
    assert once == [VOID_LINE, "A=1", "DOCKER_RESOURCE_NVIDIA-GPU=void"]
    assert access(once, img_env) == [] and _void(once, img_env) is None
    from swarmgpu.manager.engine.proxy_policy import check_service_update

    cur = spec([VOID_LINE, "A=1"])
    check_service_update(cur, void_spec(cur, ImageEnv("x", img_env), prefix=P, managed=False),
                         P)  # the docker-proxy lets the appended void line through
    # find reads it from the image the manager has, for a service that sets the variable
    svc = _svc("app", [VOID_LINE])
    (u,) = find_ungranted([svc], [_task(svc, "g")], {"g": "gpu-1"}, prefix=P, managed=set(),
                          images={"local/app:1": ImageEnv("local/app:1", img_env)})
    assert u.access[0].via == "resource-env"


def test_exempt_globs() -> None:
    assert exempt_of("mon_dcgm-exporter", parse_exempt("swarmgpu_agent,*dcgm-exporter"))
    assert not exempt_of("swarmgpu_agent2", ["swarmgpu_agent"])


def test_image_filter_is_the_familiar_reference() -> None:
    assert image_filter("busybox") == "busybox:latest"
    assert image_filter("docker.io/library/busybox:1.36") == "busybox:1.36"
    assert image_filter("nvcr.io/nvidia/cuda:12.4.1-base@sha256:ab") == \
        "nvcr.io/nvidia/cuda@sha256:ab"
    assert image_filter("reg:5000/team/app") == "reg:5000/team/app:latest"


# --- the void write -----------------------------------------------------------------------

def _void(env: Sequence[str], image_env: Sequence[str] | None = PLAIN_ENV,
          managed: bool = False) -> list[str] | None:
    img = ImageEnv("local/app:1", None if image_env is None else tuple(image_env))
    acc = service_access(spec(env), img, prefix=P, managed=managed)
    return void_env(env, acc, prefix=P, managed=managed)


def test_void_changes_only_the_variables_line_and_keeps_every_other() -> None:
    env = ["A=1", "NVIDIA_VISIBLE_DEVICES=all", "B=2", "CUDA_VISIBLE_DEVICES=0"]
    assert _void(env) == ["A=1", VOID_LINE, "B=2", "CUDA_VISIBLE_DEVICES=0"]
    assert _void(["A=1", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=all"]) == \
        ["A=1", VOID_LINE]
    assert _void(["A=1"], CUDA_ENV) == ["A=1", VOID_LINE]  # the image's value: overridden
    assert _void(["A=1"], None) == ["A=1", VOID_LINE]  # unknown image: voided too


def test_void_of_a_managed_service_keeps_its_grant() -> None:
    env = ["NVIDIA_VISIBLE_DEVICES=all", TMPL, "NVIDIA_VISIBLE_DEVICES=all", "A=1"]
    assert _void(env, managed=True) == [TMPL, "A=1"]


def test_void_of_resource_lines() -> None:
    env = ["DOCKER_RESOURCE_NVIDIA-GPU=GPU-a", "NVIDIA_VISIBLE_DEVICES=void"]
    assert _void(env) == ["DOCKER_RESOURCE_NVIDIA-GPU=void", "NVIDIA_VISIBLE_DEVICES=void"]


def test_void_is_idempotent_and_leaves_no_gpu_access() -> None:
    for env, img in ((["NVIDIA_VISIBLE_DEVICES=all"], PLAIN_ENV), ([], CUDA_ENV), ([], None),
                     (["X=1", "DOCKER_RESOURCE_GPU=all"], PLAIN_ENV)):
        once = _void(env, img)
        assert once is not None
        assert _void(once, img) is None
        assert access(once, img) == []


def test_void_spec_changes_nothing_but_the_env() -> None:
    s = spec(["NVIDIA_VISIBLE_DEVICES=all", "A=1"], mounts=[_null("/data", "/srv")],
             caps=["NET_ADMIN"], labels={"team": "b"})
    before = copy.deepcopy(s)
    new = void_spec(s, None, prefix=P, managed=False)
    assert new is not None and s == before  # the spec given is not changed
    changed = copy.deepcopy(dict(new))
    assert changed["TaskTemplate"]["ContainerSpec"].pop("Env") == [VOID_LINE, "A=1"]
    before["TaskTemplate"]["ContainerSpec"].pop("Env")
    assert changed == before
    assert void_spec(new, None, prefix=P, managed=False) is None
    # a mount alone: nothing an env write can stop
    m = spec([], mounts=[_null("/var/run/nvidia-container-devices/all")])
    assert void_spec(m, ImageEnv("x", PLAIN_ENV), prefix=P, managed=False) is None


def test_placement_replaces_a_void_line_with_its_template() -> None:
    from swarmgpu.manager.cycle.placement import service_compute
    from swarmgpu.manager.placement.records import SpecWrites

    sp = SpecWrites(add_env=(TMPL,))
    new = service_compute(sp)(spec(["A=1", VOID_LINE, "B=2"]))
    assert new["TaskTemplate"]["ContainerSpec"]["Env"] == ["A=1", TMPL, "B=2"]
    # a user's own value that names GPUs is kept (and reported as ungranted)
    kept = service_compute(sp)(spec(["NVIDIA_VISIBLE_DEVICES=all"]))
    assert kept is None


# --- the step's write, through the gate -------------------------------------------------

class SpecSwarm:
    """swarmgpu's SwarmClient over in-memory specs: image_env and update_service_spec
    with their contracts (read-modify-write; None or unchanged: no write)."""

    def __init__(self, services: Sequence[SwarmService],
                 images: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.specs = {s.id: copy.deepcopy(dict(s.spec)) for s in services}
        self.images = dict(images or {})
        self.writes: list[str] = []
        self.image_reads: list[str] = []

    def image_env(self, ref: str) -> tuple[str, ...] | None:
        self.image_reads.append(ref)
        if ref == "broken":
            raise SwarmError("engine said no")
        return self.images.get(ref)

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **_: Any) -> bool:
        cur = self.specs[service_id]
        new = compute(copy.deepcopy(cur))
        if new is None or new == cur:
            return False
        self.writes.append(service_id)
        self.specs[service_id] = copy.deepcopy(dict(new))
        return True


def _one(svc: SwarmService, sw: SpecSwarm, dry_run: bool = False) -> tuple[bool, int]:
    gate = Writes(sw, dry_run=dry_run, who="test")  # type: ignore[arg-type]
    images = ImageEnvs(sw)  # type: ignore[arg-type]
    found = find_ungranted([svc], [_task(svc, "g")], {"g": "gpu-1"}, prefix=P, managed=set(),
                           images=images.lookup([svc.spec["TaskTemplate"]["ContainerSpec"]
                                                 ["Image"]]))
    (u,) = found
    return void_one(gate, u, prefix=P, managed=False, grants="env", images=images), \
        gate.refused


def test_void_write_lands_once_then_nothing() -> None:
    svc = _svc("app", ["NVIDIA_VISIBLE_DEVICES=all", "A=1"])
    sw = SpecSwarm([svc])
    assert _one(svc, sw) == (True, 0)
    assert sw.specs[svc.id]["TaskTemplate"]["ContainerSpec"]["Env"] == [VOID_LINE, "A=1"]
    again = service_from_api({"ID": svc.id, "Spec": sw.specs[svc.id], "Version": {"Index": 4}})
    assert find_ungranted([again], [_task(again, "g")], {"g": "gpu-1"}, prefix=P,
                          managed=set(), images={}) == []
    assert sw.writes == [svc.id]


def test_void_in_dry_run_writes_nothing() -> None:
    svc = _svc("app", ["NVIDIA_VISIBLE_DEVICES=all"])
    sw = SpecSwarm([svc])
    landed, refused = _one(svc, sw, dry_run=True)
    assert not landed and refused == 1 and sw.writes == []


def test_image_reads_are_cached_bounded_and_errors_are_unknown() -> None:
    now = [0.0]
    sw = SpecSwarm([], {"cuda:1": CUDA_ENV})
    envs = ImageEnvs(sw, ttl_s=60, max_reads=2, clock=lambda: now[0])  # type: ignore[arg-type]
    got = envs.lookup(["cuda:1", "gone:1", "broken", "later:1"])
    assert got["cuda:1"].env == CUDA_ENV
    assert got["gone:1"].env is None and "not on the manager" in got["gone:1"].note
    assert got["broken"].note == "not read yet" and got["later:1"].note == "not read yet"
    envs.lookup(["cuda:1", "gone:1", "broken"])
    assert sw.image_reads == ["cuda:1", "gone:1", "broken"]
    assert "could not be asked" in envs.lookup(["broken"])["broken"].note
    now[0] = 61.0
    envs.lookup(["cuda:1"])
    assert sw.image_reads.count("cuda:1") == 2


PINNED = "nvcr.io/nvidia/cuda:12.4.1-base@sha256:" + "ab" * 32


def test_an_image_pinned_by_digest_is_read_once_while_a_tag_is_read_again() -> None:
    now = [0.0]
    sw = SpecSwarm([], {PINNED: CUDA_ENV, "cuda:1": CUDA_ENV})
    envs = ImageEnvs(sw, ttl_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    gone = "gone@sha256:" + "cd" * 32
    envs.lookup([PINNED, "cuda:1", gone])
    now[0] = 6000.0  # long past the TTL: a tag may have moved, a digest has not
    got = envs.lookup([PINNED, "cuda:1", gone])
    assert got[PINNED].env == CUDA_ENV
    assert sw.image_reads.count(PINNED) == 1
    assert sw.image_reads.count("cuda:1") == 2
    # not on the manager's engine yet: asked again, it may have been pulled since
    assert sw.image_reads.count(gone) == 2


def test_pinned_images_kept_after_their_services_left_are_bounded() -> None:
    refs = [f"app{k}@sha256:" + f"{k:02d}" * 32 for k in range(5)]
    sw = SpecSwarm([], dict.fromkeys(refs, CUDA_ENV))
    envs = ImageEnvs(sw, max_kept=3)  # type: ignore[arg-type]
    for ref in refs:  # one service's image after another's
        envs.lookup([ref])
    envs.lookup(refs[2:])  # the last three were kept: no read
    assert sw.image_reads == refs
    envs.lookup(refs[:2])  # the first two were dropped, the least recently used
    assert sw.image_reads == refs + refs[:2]
    envs.lookup(refs)  # then dropped to make room for those two
    assert sw.image_reads[7:] == refs[2:4]
    envs.lookup(refs)  # the images a cycle needs are kept whatever the bound
    assert len(sw.image_reads) == 9


class OverlapSwarm(SpecSwarm):
    """Records how many image reads are in flight at once: each read waits (at most
    ``wait_s``) until ``meet`` of them are, as engine round trips overlap."""

    def __init__(self, images: Mapping[str, tuple[str, ...]], meet: int,
                 wait_s: float = 0.5) -> None:
        super().__init__([], images)
        self.lock = threading.Lock()
        self.met = threading.Event()
        self.meet, self.wait_s = meet, wait_s
        self.now = self.most = 0

    def image_env(self, ref: str) -> tuple[str, ...] | None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            if self.now >= self.meet:
                self.met.set()
        self.met.wait(self.wait_s)
        try:
            return super().image_env(ref)
        finally:
            with self.lock:
                self.now -= 1


def test_a_cycles_image_reads_run_together_bounded() -> None:
    refs = [f"app{k}:1" for k in range(12)]
    sw = OverlapSwarm(dict.fromkeys(refs, CUDA_ENV), meet=READ_PARALLEL)
    got = ImageEnvs(sw).lookup(refs)  # type: ignore[arg-type]
    assert sw.most == READ_PARALLEL
    assert sorted(sw.image_reads) == sorted(refs)
    assert all(got[r].env == CUDA_ENV for r in refs)


# --- the config switch -------------------------------------------------------------------

def test_config_switch_defaults_and_checks(tmp_path: Any) -> None:
    assert Config().placement.ungranted == "report"
    assert Config().placement.grants == "env"
    assert parse_exempt(Config().placement.ungranted_exempt) == ["swarmgpu_agent"]
    f = tmp_path / "c.yml"
    f.write_text("placement: {ungranted: void, grants: mounts}\n")
    cfg = load_config(f, env={})
    assert cfg.placement == PlacementConfig(ungranted="void", grants="mounts")
    f.write_text("placement: {ungranted: fix, grants: cdi}\n")
    with pytest.raises(ValueError) as e:
        load_config(f, env={})
    assert "placement.ungranted" in str(e.value) and "placement.grants" in str(e.value)


# --- placement.grants: mounts ------------------------------------------------------------

def _gated(name: str, labels: Mapping[str, str], mounts: Sequence[Mapping[str, Any]] = ()
           ) -> SwarmService:
    from swarmgpu.manager.placement import gate_constraint

    s = spec([TMPL], name=name, labels=labels, mounts=mounts)
    s["TaskTemplate"]["Placement"]["Constraints"] = [gate_constraint(P, name)]
    return service_from_api({"ID": f"id-{name}", "Spec": s, "Version": {"Index": 2}})


def _plan(services: Sequence[SwarmService], *, grants: str, adopt: bool = True) -> Any:
    from swarmgpu.manager.placement import Planner

    nodes = [_node("n-dgx")]
    return Planner(prefix=P, grants=grants, adopt_ungated=adopt).plan(
        nodes, services, [], {"n-dgx": DGX_A100.facts()})


def test_grants_as_mounts_adopt_placements_mount_beside_the_env() -> None:
    from swarmgpu.manager.cycle.placement import service_compute

    s = _gated("llm", {f"{P}gpus": "2"}, mounts=[_null("/data", "/srv")])
    (sp,) = _plan([s], grants="mounts").services
    assert sp.status == "placed" and sp.add_mounts == (device_mount_spec(P),)
    assert any("mount /dev/null" in w for w in sp.warnings)
    new = service_compute(sp.writes)(s.spec)
    assert new["TaskTemplate"]["ContainerSpec"]["Mounts"] == [
        _null("/data", "/srv"), device_mount_spec(P)]  # the user's mount kept, first
    # once the mount is there: nothing to add; env mode never adds one
    with_mount = _gated("llm", {f"{P}gpus": "2"}, mounts=[device_mount_spec(P)])
    assert _plan([with_mount], grants="mounts").services[0].add_mounts == ()
    assert _plan([s], grants="env").services[0].add_mounts == ()
    # without adoption the service waits, told what to add
    (pending,) = _plan([s], grants="mounts", adopt=False).services
    assert pending.status == "pending" and "mount /dev/null" in (pending.reason or "")


def test_render_in_grants_as_mounts_writes_the_device_mount() -> None:
    """`swarmgpu render` with the daemon's planner writes what the daemon would adopt:
    the mount (long syntax), so a deploy restarts nothing; a user's volume is kept."""
    import yaml

    from swarmgpu.manager.commands.render import render_stack
    from swarmgpu.manager.placement import Planner

    text = ("services:\n  llm:\n    image: app\n    volumes: ['/srv:/data']\n"
            "    deploy:\n      labels: {swarmgpu.gpus: '2'}\n")
    nodes = [_node("n-dgx")]
    facts = {"n-dgx": DGX_A100.facts()}
    out, plan = render_stack(text, "ai", nodes, [], [], facts, prefix=P,
                             planner=Planner(prefix=P, grants="mounts"))
    (sp,) = plan.services
    assert sp.status == "placed", sp.reason
    vols = yaml.safe_load(out)["services"]["llm"]["volumes"]
    assert vols == ["/srv:/data", {"type": "bind", "source": "/dev/null",
                                   "target": mount_target(P), "read_only": True}]
    plain, _ = render_stack(text, "ai", nodes, [], [], facts, prefix=P)
    assert yaml.safe_load(plain)["services"]["llm"]["volumes"] == ["/srv:/data"]


# --- the docker-proxy lets exactly these writes through ------------------------------------

def test_proxy_policy_lets_the_void_write_and_the_device_mount_through() -> None:
    from swarmgpu.manager.cycle.placement import service_compute
    from swarmgpu.manager.engine.proxy_policy import PolicyError, check_service_update
    from swarmgpu.manager.placement.records import SpecWrites

    cur = spec(["A=1", "NVIDIA_VISIBLE_DEVICES=all", "DOCKER_RESOURCE_GPU=GPU-a",
                "NVIDIA_VISIBLE_DEVICES=0"])
    voided = void_spec(cur, ImageEnv("x", PLAIN_ENV), prefix=P, managed=False)
    assert voided is not None
    check_service_update(cur, voided, P)  # let through
    appended = void_spec(spec(["A=1"]), None, prefix=P, managed=False)
    check_service_update(spec(["A=1"]), appended, P)
    sp = SpecWrites(add_env=(TMPL,), add_mounts=(device_mount_spec(P),))
    asked = spec([VOID_LINE, "A=1"], labels={f"{P}gpus": "2"})  # swarmgpu's: a request
    placed = service_compute(sp)(asked)
    check_service_update(asked, placed, P)  # its template over void, its device mount
    # a service that is not swarmgpu's: only the void write, nothing of placement's
    with pytest.raises(PolicyError, match="does not write it"):
        check_service_update(spec([VOID_LINE, "A=1"]), placed, P)
    for bad_env, bad_mounts in ((["A=1", "NVIDIA_VISIBLE_DEVICES=all"], ()),
                                (["A=1", "DOCKER_RESOURCE_GPU=GPU-b"], ()),
                                (["A=2"], ()),
                                (["A=1"], [_null("/var/run/nvidia-container-devices/all")]),
                                (["A=1"], [{**device_mount_spec(P), "ReadOnly": False}])):
        with pytest.raises(PolicyError):
            check_service_update(spec(["A=1"]), spec(bad_env, mounts=bad_mounts), P)


class _BadImageApi:
    """The engine API's two image reads, the inspect answering ``config`` as ``Config``."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def images(self, filters: Mapping[str, str]) -> list[dict[str, str]]:
        return [{"Id": "sha256:0123abcd"}]

    def inspect_image(self, image_id: str) -> dict[str, Any]:
        return {"Id": image_id, "Config": self.config}


@pytest.mark.parametrize("config", [
    "x", ["Env"], {"Env": "NVIDIA_VISIBLE_DEVICES=all"}, {"Env": [1]}, {"Env": {"a": 1}},
    {"Env": [None]},
])
def test_a_malformed_image_inspect_is_an_unknown_image_naming_it(config: Any) -> None:
    # The engine's answer is read, not trusted: a Config that is no mapping or an Env
    # that is no list of texts raised AttributeError or TypeError out of the grants step
    # (or read a text as its letters).
    from swarmgpu.swarm.client import SwarmClient

    client = SwarmClient.__new__(SwarmClient)
    client.endpoint = "unix:///test"
    client._api = _BadImageApi(config)
    with pytest.raises(SwarmError, match="local/app:1"):
        client.image_env("local/app:1")
    got = ImageEnvs(client).lookup(["local/app:1"])["local/app:1"]
    assert got.env is None and "local/app:1" in got.note and "Env" in got.note


def test_an_image_inspect_without_env_is_an_empty_env() -> None:
    from swarmgpu.swarm.client import SwarmClient

    client = SwarmClient.__new__(SwarmClient)
    client.endpoint = "unix:///test"
    for config in (None, {}, {"Env": None}):
        client._api = _BadImageApi(config)
        assert client.image_env("local/app:1") == ()
    client._api = _BadImageApi({"Env": ["A=1"]})
    assert client.image_env("local/app:1") == ("A=1",)


def test_ungranted_access_is_said_when_it_starts_changes_and_ends_not_every_cycle() -> None:
    """The grants step's log: each service's ungranted access once while it lasts with
    the same reason, again when its reason changes or it comes back after it ended; its
    end said once."""
    from types import SimpleNamespace

    from loguru import logger

    from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
    from swarmgpu.manager.cycle.grants import GrantsStep
    from swarmgpu.manager.services.grants import Ungranted

    host = SimpleNamespace(cfg=Config(), swarm=None, metrics=DaemonMetrics())
    step = GrantsStep(host, placement=True)  # type: ignore[arg-type]

    def seen(**why: str) -> list[Ungranted]:
        return [Ungranted(s, f"id-{s}", ("gpu-node-1",), (Access("env", w),))
                for s, w in why.items()]

    lines: list[tuple[str, str]] = []
    sink = logger.add(lambda m: lines.append((m.record["extra"]["service"],
                                              m.record["message"].split("; fix")[0])),
                      level="INFO")
    try:
        for found in (seen(a="x", b="y"), seen(a="x", b="y"), seen(a="z", b="y"),
                      seen(b="y"), seen(b="y"), seen(a="z", b="y")):
            step._log(found)
    finally:
        logger.remove(sink)
    assert lines == [
        ("a", "ungranted GPU access on gpu-node-1: x"),
        ("b", "ungranted GPU access on gpu-node-1: y"),
        ("a", "ungranted GPU access on gpu-node-1: z"),
        ("a", "ungranted GPU access: no longer"),
        ("a", "ungranted GPU access on gpu-node-1: z"),
    ], lines
