"""Swarm's PluginFilter: a node whose engine lacks a plugin a service's volume mounts,
networks or log driver need never runs its task (swarmkit manager/scheduler/filter.go),
so placement does not pick it; a node whose description lists no plugins is left to
Swarm, and the plan says so."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.placement import svc
from support.planner import two_nodes

from swarmgpu.manager.placement import plan_placement
from swarmgpu.swarm.client import SwarmService, SwarmTask, task_from_api
from swarmgpu.swarm.plugins import missing, needed, unknown
from swarmgpu.swarm.swarmnode import node_from_api

# What a Docker 27 engine lists (docker info's Plugins, and the overlay driver Swarm adds)
BUILT_IN = (("Volume", "local"), ("Network", "bridge"), ("Network", "host"),
            ("Network", "ipvlan"), ("Network", "macvlan"), ("Network", "null"),
            ("Network", "overlay"), ("Log", "awslogs"), ("Log", "fluentd"),
            ("Log", "json-file"), ("Log", "local"), ("Log", "syslog"))
REXRAY = ("Volume", "rexray/s3fs:latest")


def volume(driver: str, kind: str = "volume") -> dict[str, Any]:
    return {"Type": kind, "Source": "data", "Target": "/data",
            "VolumeOptions": {"DriverConfig": {"Name": driver}}}


def with_spec(s: SwarmService, mounts: list[dict[str, Any]] | None = None,
              log: str | None = None) -> SwarmService:
    tt: dict[str, Any] = {"ContainerSpec": {"Image": "x", "Mounts": mounts or []}}
    if log is not None:
        tt["LogDriver"] = {"Name": log}
    return replace(s, spec={"Name": s.name, "TaskTemplate": tt})


def test_the_node_and_task_fields_swarm_reads_are_parsed() -> None:
    raw = {"ID": "n1", "Description": {"Hostname": "h", "Engine": {"Plugins": [
        {"Type": "Volume", "Name": "local"}, {"Type": "Log"}, "junk"]}}}
    assert node_from_api(raw).plugins == (("Volume", "local"),)
    assert node_from_api({"ID": "n1", "Description": {"Engine": {}}}).plugins is None
    assert node_from_api({"ID": "n1"}).plugins is None
    task = task_from_api({"ID": "t", "NetworksAttachments": [
        {"Network": {"DriverState": {"Name": "overlay"}}},
        {"Network": {"DriverState": {"Name": "weave"}}}, {"Network": {}}, 3,
        {"Network": {"DriverState": {"Name": "overlay"}}}]})
    assert task.network_drivers == ("overlay", "weave")


def test_swarmkits_rules_which_plugin_types_and_what_is_built_in() -> None:
    spec = with_spec(svc("s", {}), [volume("local"), volume("rexray/s3fs"),
                                    volume("nfs", kind="bind"), volume("")], log="none").spec
    assert needed(spec) == (("Volume", "rexray/s3fs"),)  # local, a bind, no driver: none
    assert needed(with_spec(svc("s", {}), log="gelf").spec, ("overlay", "weave")) == (
        ("Network", "overlay"), ("Network", "weave"), ("Log", "gelf"))
    node = replace(two_nodes()[0][0], plugins=(*BUILT_IN, REXRAY))
    assert missing(node, (("Volume", "rexray/s3fs"), ("Network", "overlay"))) == ()  # :latest
    assert missing(node, (("Network", "weave"), ("Log", "gelf"))) == (
        ("Network", "weave"), ("Log", "gelf"))
    # An engine that lists no log driver at all (older ones): no Log plugin is judged.
    old = replace(node, plugins=(("Volume", "local"), ("Network", "overlay")))
    assert missing(old, (("Log", "gelf"),)) == ()
    bare = replace(node, plugins=None)
    assert missing(bare, (("Volume", "x"),)) == () and unknown(bare, (("Volume", "x"),))


def test_a_node_lacking_the_volume_plugin_is_not_picked() -> None:
    """Whichever node the scorer would pick, the one without rexray/s3fs is left out
    (both orders). Before, placement knew nothing of plugins and Swarm left the task
    pending on its GPUs."""
    nodes, facts = two_nodes()
    llm = with_spec(svc("llm", {"swarmgpu.gpus": "1"}), [volume("rexray/s3fs")])
    for lacks, has in ((0, 1), (1, 0)):
        at = list(nodes)
        at[lacks] = replace(at[lacks], plugins=BUILT_IN)
        at[has] = replace(at[has], plugins=(*BUILT_IN, REXRAY))
        sp = plan_placement(at, [llm], [], facts).services[0]  # type: ignore[arg-type]
        assert [p.node_id for p in sp.placements] == [at[has].id], sp


def test_no_node_with_the_plugin_leaves_it_pending_naming_node_and_plugin() -> None:
    nodes, facts = two_nodes()
    nodes = [replace(n, plugins=BUILT_IN) for n in nodes]
    llm = with_spec(svc("llm", {"swarmgpu.gpus": "1"}), log="gelf")
    sp = plan_placement(nodes, [llm], [], facts).services[0]  # type: ignore[arg-type]
    assert sp.status == "pending" and not sp.placements
    assert "node-a lacks the Log plugin gelf (Swarm's PluginFilter)" in (sp.reason or ""), sp


def test_a_network_driver_is_read_from_the_services_tasks() -> None:
    """Swarm's filter reads the task's networks (their drivers as allocated): a pending
    task attached to a weave network needs the Network plugin weave."""
    nodes, facts = two_nodes()
    nodes = [replace(nodes[0], plugins=BUILT_IN),
             replace(nodes[1], plugins=(*BUILT_IN, ("Network", "weave:latest")))]
    llm = svc("llm", {"swarmgpu.gpus": "1"})
    task = SwarmTask("t1", llm.id, "", 1, "pending", "running", (),
                     network_drivers=("overlay", "weave"))
    sp = plan_placement(nodes, [llm], [task], facts).services[0]  # type: ignore[arg-type]
    assert [p.node_id for p in sp.placements] == ["n-b"], sp


def test_a_node_that_does_not_list_its_plugins_is_left_to_swarm_and_said() -> None:
    nodes, facts = two_nodes()  # neither description lists plugins
    llm = with_spec(svc("llm", {"swarmgpu.gpus": "1"}), [volume("rexray/s3fs")])
    sp = plan_placement(nodes, [llm], [], facts).services[0]  # type: ignore[arg-type]
    assert sp.status == "placed", sp
    assert ("needs the Volume plugin rexray/s3fs; the node description of node-a, node-b "
            "lists no plugins: left to Swarm's PluginFilter there") in sp.warnings, sp.warnings


def test_a_global_service_waits_on_a_node_lacking_the_plugin_and_says_which() -> None:
    nodes, facts = two_nodes()
    nodes = [replace(nodes[0], plugins=BUILT_IN), replace(nodes[1], plugins=(*BUILT_IN, REXRAY))]
    llm = replace(with_spec(svc("llm", {"swarmgpu.gpus": "1"}), [volume("rexray/s3fs")]),
                  mode="global", replicas=None)
    sp = plan_placement(nodes, [llm], [], facts).services[0]  # type: ignore[arg-type]
    assert [p.node_id for p in sp.placements] == ["n-b"]
    assert sp.nodes_waiting["node-a"] == ("node-a lacks the Volume plugin rexray/s3fs (Swarm's "
                                          "PluginFilter)"), sp.nodes_waiting
