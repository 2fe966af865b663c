"""Pure tests of facts -> labels, the diff, ownership and the running-task guard."""

from __future__ import annotations

from dataclasses import replace

from swarmgpu.core.config import Config
from swarmgpu.core.labelkeys import usable_label_key
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, task_from_api
from swarmgpu.swarm.labels import desired_labels, plan_node_labels


def _facts(n: int = 2, link: str = "NV12", product: str = "NVIDIA A100-SXM4-40GB") -> NodeFacts:
    gpus = tuple(
        Gpu(index=i, uuid=f"GPU-{i:08d}", product=product, memory_mib=40960,
            compute_major=8, compute_minor=0, mig_capable=True, numa_node=i // 2)
        for i in range(n)
    )
    links = tuple(tuple("X" if i == j else link for j in range(n)) for i in range(n))
    return NodeFacts(hostname="gpu-node-1", gpus=gpus, links=links, driver_version="535.104.05",
                     cuda_driver_version="12.2")


def _node(labels: dict[str, str]) -> SwarmNode:
    return SwarmNode(id="n1", hostname="gpu-node-1", addr="10.0.0.2", role="worker",
                     state="ready", availability="active", labels=labels, engine_labels={},
                     version=10, generic_resources={}, discrete_resources={})


def test_desired_labels_gfd_names_and_usable_keys() -> None:
    labels = desired_labels(_facts(4))
    assert labels["swarmgpu.gpu.count"] == "4"
    assert labels["swarmgpu.gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["swarmgpu.gpu.memory"] == "40960"
    assert labels["swarmgpu.gpu.family"] == "ampere"
    assert labels["swarmgpu.gpu.compute.major"] == "8"
    assert labels["swarmgpu.cuda.driver-version.major"] == "12"
    assert labels["swarmgpu.cuda.driver-version.minor"] == "2"
    assert labels["swarmgpu.nvlink"] == "true"
    assert labels["swarmgpu.nvlink.largest-group"] == "4"
    assert labels["swarmgpu.numa.nodes"] == "2"
    assert labels["swarmgpu.numa.max-gpus"] == "2"
    assert labels["swarmgpu.mig.strategy"] == "none"
    assert all(usable_label_key(k) for k in labels)


def test_pcie_node_has_no_nvlink_group() -> None:
    labels = desired_labels(_facts(8, link="PIX"))
    assert labels["swarmgpu.nvlink"] == "false"
    assert labels["swarmgpu.nvlink.largest-group"] == "1"


def test_mig_profile_counts() -> None:
    base = _facts(1)
    g = base.gpus[0]
    migs = (*(MigDevice("1g.10gb", f"MIG-{i}", 9728) for i in range(3)),
            MigDevice("3g.40gb", "MIG-x", 40192))
    facts = NodeFacts(hostname="h", gpus=(Gpu(**{**g.__dict__, "mig_enabled": True,
                                                  "mig_devices": migs}),))
    labels = desired_labels(facts)
    assert labels["swarmgpu.mig-1g.10gb.count"] == "3"
    assert labels["swarmgpu.mig-3g.40gb.count"] == "1"
    assert labels["swarmgpu.mig.strategy"] == "mixed"


def test_one_mig_profile_spelled_several_ways_is_one_label() -> None:
    """An agent's 1g.10gb, 1G.10GB and mig-1g.10gb made three labels (two of them no
    request's spelling) and a mixed strategy; now one count of the one spelling."""
    g = _facts(1).gpus[0]
    migs = tuple(MigDevice(p, f"MIG-{i}", 9728)
                 for i, p in enumerate(("1g.10gb", "1G.10GB", "MIG-1g.10gb")))
    facts = NodeFacts(hostname="h", gpus=(Gpu(**{**g.__dict__, "mig_enabled": True,
                                                  "mig_devices": migs}),))
    labels = desired_labels(facts)
    assert {k: v for k, v in labels.items() if k.startswith("swarmgpu.mig-")} == {
        "swarmgpu.mig-1g.10gb.count": "3"}
    assert labels["swarmgpu.mig.strategy"] == "single"


def test_zero_gpus_is_valid() -> None:
    labels = desired_labels(NodeFacts(hostname="h"))
    assert labels == {"swarmgpu.gpu.count": "0"}


def test_plan_only_touches_owned_keys() -> None:
    node = _node({"zone": "a", "swarmgpu.gpu.count": "1", "swarmgpu.old": "x",
                  "swarmgpu.service.stack_web": "true"})
    plan = plan_node_labels(node, _facts(2))
    assert plan.set["swarmgpu.gpu.count"] == "2"
    assert plan.remove == ("swarmgpu.old",)
    new = plan.apply_to(node.labels)
    assert new["zone"] == "a"
    assert new["swarmgpu.service.stack_web"] == "true"  # placement's gate, not ours


def test_second_plan_is_empty() -> None:
    facts = _facts(2)
    first = plan_node_labels(_node({}), facts)
    second = plan_node_labels(_node(first.apply_to({})), facts)
    assert second.empty


def test_unreachable_agent_changes_nothing() -> None:
    plan = plan_node_labels(_node({"swarmgpu.gpu.count": "8"}), None, facts_error="timeout")
    assert plan.empty and plan.skipped == "timeout"


def test_facts_that_cannot_list_the_gpus_change_nothing() -> None:
    # NVML cannot initialise (a driver/library mismatch after a driver upgrade) or its
    # GPU count fails: the facts list no GPU and say why. That says nothing about the
    # GPUs the node has; count=0 and the other labels removed would stop every running
    # task whose constraints read them.
    ours = desired_labels(_facts(2))
    node = _node({**ours, "zone": "a"})
    for facts in (
        NodeFacts(
            hostname="gpu-node-1",
            errors=("nvml: cannot initialise NVML (NVMLError_LibNvmlVersionMismatch)",),
        ),
        NodeFacts(
            hostname="gpu-node-1",
            driver_version="550.54.15",
            errors=("nvml: nvmlDeviceGetCount failed; no GPUs can be listed",),
        ),
    ):
        for allow_disruptive in (False, True):
            plan = plan_node_labels(node, facts, allow_disruptive=allow_disruptive)
            assert plan.empty and not plan.held, plan
            assert plan.skipped is not None and facts.errors[0] in plan.skipped
            assert "cannot be read" in plan.skipped


def test_zero_gpus_without_an_error_are_an_answer() -> None:
    # A node whose source lists no GPU and no error has none: its labels say so.
    node = _node({**desired_labels(_facts(2)), "zone": "a"})
    plan = plan_node_labels(node, NodeFacts(hostname="gpu-node-1"))
    assert plan.skipped is None
    assert plan.apply_to(node.labels) == {"swarmgpu.gpu.count": "0", "zone": "a"}
    # Errors beside GPUs it did list (one GPU lost) are not "unread" either.
    sick = _facts(2).with_errors("nvml: GPU 1: GPU is lost")
    assert plan_node_labels(_node({}), sick).set == desired_labels(sick)


def test_change_that_would_stop_running_task_is_held() -> None:
    node = _node({"swarmgpu.gpu.product": "NVIDIA-H100", "swarmgpu.gpu.count": "2"})
    svc = SwarmService(id="s1", name="llm", labels={},
                       constraints=("node.labels.swarmgpu.gpu.product==NVIDIA-H100",),
                       env=(), mode="replicated", replicas=1, max_replicas_per_node=None,
                       version=1)
    task = SwarmTask(id="t1", service_id="s1", node_id="n1", slot=1, state="running",
                     desired_state="running", env=())
    plan = plan_node_labels(node, _facts(2), services=[svc], tasks=[task])
    assert "swarmgpu.gpu.product" not in plan.set
    assert [h.key for h in plan.held] == ["swarmgpu.gpu.product"]
    assert plan.held[0].tasks == ("t1",)
    # The fix it names is a key the config has (it said labels.allow_disruptive).
    assert "set sync.allow_disruptive: true" in plan.held[0].reason
    assert hasattr(Config().sync, "allow_disruptive")
    # Harmless changes still go through.
    assert plan.set["swarmgpu.gpu.memory"] == "40960"
    forced = plan_node_labels(node, _facts(2), services=[svc], tasks=[task],
                              allow_disruptive=True)
    assert forced.set["swarmgpu.gpu.product"] == "NVIDIA-A100-SXM4-40GB"


def test_change_that_would_stop_a_running_job_task_is_held() -> None:
    # A job's tasks have desired state "complete", and Swarm's constraint enforcer stops
    # them as it stops a service's (every desired state up to "complete").
    node = _node({"swarmgpu.gpu.product": "NVIDIA-H100", "swarmgpu.gpu.count": "2"})
    job = SwarmService(id="s1", name="train", labels={},
                       constraints=("node.labels.swarmgpu.gpu.product==NVIDIA-H100",),
                       env=(), mode="replicated-job", replicas=1, max_replicas_per_node=None,
                       version=1)
    task = SwarmTask(id="t1", service_id="s1", node_id="n1", slot=1, state="running",
                     desired_state="complete", env=())
    plan = plan_node_labels(node, _facts(2), services=[job], tasks=[task])
    assert "swarmgpu.gpu.product" not in plan.set
    assert [h.key for h in plan.held] == ["swarmgpu.gpu.product"]
    assert plan.held[0].tasks == ("t1",)
    # A job task that finished is not stopped by a label: the change goes through.
    done = SwarmTask(id="t1", service_id="s1", node_id="n1", slot=1, state="complete",
                     desired_state="complete", env=())
    plan = plan_node_labels(node, _facts(2), services=[job], tasks=[done])
    assert plan.set["swarmgpu.gpu.product"] == "NVIDIA-A100-SXM4-40GB" and not plan.held


def test_change_that_would_reject_a_job_task_in_its_restart_delay_is_held() -> None:
    """A failed job task's replacement has desired state "ready" while its restart delay
    runs, on its node already (the daemon reads it: ``jobs.job_task_read``); Swarm's
    constraint enforcer rejects it as any task from "assigned" up to "complete", which
    spends one of the job's restart attempts. Before: only desired running and complete
    were looked at, and the change went through."""
    node = _node({"swarmgpu.gpu.product": "NVIDIA-H100", "swarmgpu.gpu.count": "2"})
    job = SwarmService(id="s1", name="train", labels={},
                       constraints=("node.labels.swarmgpu.gpu.product==NVIDIA-H100",),
                       env=(), mode="replicated-job", replicas=1, max_replicas_per_node=None,
                       version=1)
    task = SwarmTask(id="t2", service_id="s1", node_id="n1", slot=1, state="ready",
                     desired_state="ready", env=())
    plan = plan_node_labels(node, _facts(2), services=[job], tasks=[task])
    assert "swarmgpu.gpu.product" not in plan.set
    assert [h.key for h in plan.held] == ["swarmgpu.gpu.product"] and plan.held[0].tasks == ("t2",)


def test_change_that_would_stop_a_task_by_its_own_constraints_is_held() -> None:
    """Swarm's constraint enforcer stops a task by the constraints of its own spec, not its
    service's: while an update of the service rolls out (or waits, paused), an old task
    still runs under the old constraints, and a task whose service the snapshot does not
    hold (created after it was read) has only its own. Before: only the service's were
    checked, and a change its task's constraint reads went through."""
    node = _node({"swarmgpu.gpu.product": "NVIDIA-H100", "swarmgpu.gpu.count": "2"})
    updated = SwarmService(id="s1", name="llm", labels={}, constraints=(), env=(),
                           mode="replicated", replicas=1, max_replicas_per_node=None,
                           version=2)
    old = task_from_api({
        "ID": "t1", "ServiceID": "s1", "NodeID": "n1", "Slot": 1, "DesiredState": "running",
        "Status": {"State": "running"},
        "Spec": {"Placement": {"Constraints": ["node.labels.swarmgpu.gpu.product==NVIDIA-H100"]}},
    })
    for services in ([updated], []):
        plan = plan_node_labels(node, _facts(2), services=services, tasks=[old])
        assert "swarmgpu.gpu.product" not in plan.set
        assert [h.key for h in plan.held] == ["swarmgpu.gpu.product"]
        assert plan.held[0].tasks == ("t1",)
    # The service's constraints still count too (its next task is placed by them).
    svc = replace(updated, constraints=("node.labels.swarmgpu.gpu.product==NVIDIA-H100",))
    plan = plan_node_labels(node, _facts(2), services=[svc], tasks=[replace(old, constraints=())])
    assert [h.key for h in plan.held] == ["swarmgpu.gpu.product"]
