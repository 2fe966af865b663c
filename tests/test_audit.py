"""Pure tests of the audit's findings over a hand-made snapshot."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import RTX4090

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.commands.audit import audit, exit_code, render_table
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import parse_holding, read_ledger
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.labels import desired_labels

FACTS = RTX4090.facts()
UUIDS = tuple(sorted(g.uuid for g in FACTS.gpus))


def node(labels: dict[str, str], named: dict[str, tuple[str, ...]] | None = None) -> SwarmNode:
    return SwarmNode(id="n1", hostname="gpu-node-2", addr="10.0.0.2", role="worker",
                     state="ready", availability="active", labels=labels, engine_labels={},
                     version=1, generic_resources=named if named is not None else
                     {"NVIDIA-GPU": UUIDS}, discrete_resources={})


def snap(n: SwarmNode, facts_ok: bool = True, services: list[SwarmService] | None = None
         ) -> Snapshot:
    res = FactsResult("n1", n.hostname, "http://x/facts", FACTS if facts_ok else None,
                      None if facts_ok else "timed out", 0.0)
    return Snapshot([n], services or [], [], {"n1": res})


def kinds(findings: list) -> set[str]:  # type: ignore[type-arg]
    return {f.kind for f in findings}


def test_clean_node_has_no_findings() -> None:
    s = snap(node(desired_labels(FACTS)))
    assert audit(s) == []
    assert "No findings" in render_table([], s, "swarmgpu.")


def test_a_swarm_with_no_gpu_node_is_not_called_in_sync() -> None:
    # "No findings: labels match the facts." for a swarm where no agent runs and no
    # node says it has GPUs: there were no facts to match, and nothing said where to start.
    plain = replace(node({}, named={}), hostname="mgr-1", role="manager")
    res = FactsResult("n1", "mgr-1", "http://x/facts", None, "nothing listens", 0.0, False)
    s = Snapshot([plain], [], [], {"n1": res})
    assert audit(s) == []
    text = render_table([], s, "swarmgpu.")
    assert "labels match the facts" not in text
    assert text.endswith(
        "No findings, and no GPU node: no agent answered with GPUs, no node carries swarmgpu "
        "labels, gpu=true or GPU generic resources or runs agents.service; run the agent on "
        "each GPU node (README, \"Run the manager and the agents\"), then audit again.")


def test_missing_wrong_stale_and_unusable_keys() -> None:
    labels = desired_labels(FACTS)
    labels["swarmgpu.gpu.memory"] = "1"
    del labels["swarmgpu.gpu.count"]
    labels["swarmgpu.old-thing"] = "x"
    labels["nvidia.com/gpu.count"] = "8"
    found = audit(snap(node(labels)))
    assert {"wrong", "missing", "stale", "unusable-key"} <= kinds(found)
    wrong = next(f for f in found if f.kind == "wrong")
    assert (wrong.key, wrong.expected, wrong.actual) == ("swarmgpu.gpu.memory", "24564", "1")


def test_unreachable_agent_reported_with_since() -> None:
    # within health.node_lost_grace_s of its last good facts
    s = replace(snap(node(desired_labels(FACTS)), facts_ok=False), taken_at=100.0)
    found = audit(s, saved_agents={"n1": {"failing_since": 1.0, "last_ok": 0.5}})
    (f,) = found
    assert f.kind == "unreachable" and "since 1970-01-01T00:00:01Z" in f.message


def test_an_unreachable_agent_with_no_record_says_so_not_unknown() -> None:
    # "agent unreachable since unknown; last good facts unknown": audit run where the
    # daemon has kept no record of the agent (a first run, another state_dir).
    (f,) = audit(snap(node(desired_labels(FACTS)), facts_ok=False))
    assert f.kind == "unreachable"
    assert f.message == ("agent unreachable; no good facts on record (the daemon's "
                         "state_dir holds none for this node); labels kept as they are "
                         "(timed out)")
    (f,) = audit(snap(node(desired_labels(FACTS)), facts_ok=False),
                 saved_agents={"n1": {"failing_since": 1.0}})
    assert f.message.startswith("agent unreachable since 1970-01-01T00:00:01Z (")
    assert "; no good facts on record (" in f.message


def test_a_gpu_node_whose_agent_is_lost_beyond_the_grace_is_agent_lost() -> None:
    """The health policy's rule (gpuhealth.failing_why), from the agent's saved last good
    facts: lost for node_lost_grace_s or more, the node is agent-lost (not node-failing:
    its GPUs are not known bad)."""
    s = snap(node(desired_labels(FACTS)), facts_ok=False)
    saved = {"n1": {"failing_since": 1.0, "last_ok": 0.5}}
    s = replace(s, taken_at=0.5 + 299.0)
    assert kinds(audit(s, saved_agents=saved, node_lost_grace_s=300.0)) == {"unreachable"}
    s = replace(s, taken_at=0.5 + 300.0)
    found = audit(s, saved_agents=saved, node_lost_grace_s=300.0)
    (f,) = [f for f in found if f.kind == "agent-lost"]
    assert f.subject == "gpu-node-2" and not f.advisory
    # (its fix is the agent's: Swarm runs its tasks, and a drain restarted each of them)
    assert f.message.startswith("its agent has not answered for 300s; the daemon moves "
                                "nothing off it for this alone: Swarm does not report it "
                                "down, so its tasks run; bring the agent back"), f.message
    assert "drain" not in f.message
    assert kinds(audit(s, saved_agents={"n1": {"failing_since": 1.0}})) == {"unreachable"}


def test_a_node_whose_gpus_cannot_be_read_is_reported_not_drift() -> None:
    # NVML cannot initialise (a driver/library mismatch after a driver upgrade) or its
    # GPU count fails: the agent answers with no GPU and says why. Label sync keeps the
    # labels; audit says why they cannot be checked (not "count is '8', facts say '0'")
    # and needs action, as an unreachable agent does.
    for facts in (
        NodeFacts(hostname="gpu-node-2",
                  errors=("nvml: cannot initialise NVML (NVMLError_LibNvmlVersionMismatch)",)),
        NodeFacts(hostname="gpu-node-2", driver_version="550.54.15",
                  errors=("nvml: nvmlDeviceGetCount failed; no GPUs can be listed",
                          "nvml: 2 GPU pair link(s) unknown; reported as SYS")),
    ):
        n = node(desired_labels(FACTS))
        s = Snapshot([n], [], [], {"n1": FactsResult("n1", n.hostname, "https://x/facts",
                                                     facts, None, 0.0)})
        found = audit(s)
        (f,) = found
        assert f.kind == "gpus-unread" and not f.advisory and exit_code(found) == 1
        assert f.message.startswith(f"its GPUs cannot be read: {facts.errors[0]}")
        assert "run swarmgpu doctor on the node" in f.message
        assert ("labels kept as they are (swarmgpu.gpu.count=8, swarmgpu.gpu.product="
                "NVIDIA-GeForce-RTX-4090)") in f.message
        assert f.actual == facts.errors[0]
        table = render_table(found, s, "swarmgpu.")
        assert "gpu-node-2       worker   gpus-unread  8     kept" in table
        assert "[gpus-unread] gpu-node-2: its GPUs cannot be read" in table
    assert "(and 1 more)" in f.message
    # A node with none of label sync's labels yet: none is written until it can
    bare = node({})
    s = Snapshot([bare], [], [], {"n1": FactsResult("n1", bare.hostname, "https://x/facts",
                                                    facts, None, 0.0)})
    (f,) = audit(s)
    assert f.kind == "gpus-unread" and "no swarmgpu label yet" in f.message


def test_generic_resources_missing_or_different() -> None:
    (f,) = audit(snap(node(desired_labels(FACTS), {})))
    # swarmgpu's default config reserves no generic resources: only advisory, exit 0
    assert f.kind == "no-generic-resources" and f.advisory and exit_code([f]) == 0
    assert exit_code([f], strict=True) == 1
    # ... but a config that reserves them needs them on every GPU node
    (f,) = audit(snap(node(desired_labels(FACTS), {})), generic_resource_kind="NVIDIA-GPU")
    assert f.kind == "no-generic-resources" and not f.advisory and exit_code([f]) == 1
    assert audit(snap(node(desired_labels(FACTS))), generic_resource_kind="NVIDIA-GPU") == []
    (f,) = audit(snap(node(desired_labels(FACTS), {"GPU": UUIDS})),
                 generic_resource_kind="NVIDIA-GPU")
    assert "NVIDIA-GPU" in f.message and not f.advisory
    other = (*UUIDS[:-1], "GPU-not-this-one")
    found = audit(snap(node(desired_labels(FACTS), {"NVIDIA-GPU": other})))
    (f,) = [f for f in found if f.kind == "resource-mismatch"]
    assert "GPU-not-this-one" in f.message and UUIDS[-1] in f.message


def test_dangling_and_unusable_constraints_but_gates_are_fine() -> None:
    svc = SwarmService(id="s", name="web", labels={"swarmgpu.gpus": "1"}, constraints=(
        "node.labels.nvidia.com/gpu.count==8", "node.labels.team==ml",
        "node.labels.swarmgpu.service.web==true"), env=(), mode="replicated", replicas=1,
        max_replicas_per_node=None, version=1)
    found = audit(snap(node(desired_labels(FACTS)), services=[svc]))
    assert kinds(found) == {"unusable-constraint", "dangling-constraint"}
    dangling = [f for f in found if f.kind == "dangling-constraint"]
    assert [f.key for f in dangling] == ["team"]


def test_exit_codes_and_table_keep_advisories_apart() -> None:
    labels = desired_labels(FACTS)
    labels["nvidia.com/gpu.count"] = "8"  # advisory: no constraint can use it
    advisory_only = audit(snap(node(labels, {})))
    assert kinds(advisory_only) == {"unusable-key", "no-generic-resources"}
    assert all(f.advisory for f in advisory_only) and exit_code(advisory_only) == 0
    assert exit_code(advisory_only, strict=True) == 1
    assert exit_code([]) == 0 and exit_code([], strict=True) == 0
    table = render_table(advisory_only, snap(node(labels, {})), "swarmgpu.")
    assert "2 advisory (exit 0 unless --strict):" in table and "needing action" not in table

    labels["swarmgpu.gpu.memory"] = "1"
    mixed = audit(snap(node(labels, {})))
    assert exit_code(mixed) == 1
    table = render_table(mixed, snap(node(labels, {})), "swarmgpu.")
    head, tail = table.split("needing action:")[1].split("advisory (exit 0")
    assert "[wrong]" in head and "[no-generic-resources]" not in head
    assert "[no-generic-resources]" in tail and "[unusable-key]" in tail
    assert {f.to_dict()["severity"] for f in mixed} == {"action", "advisory"}


ESC = "\x1b[2K\r"  # erase the line, back to its start


def test_hostile_names_labels_and_constraints_show_escaped_in_the_table() -> None:
    labels = desired_labels(FACTS)
    labels["swarmgpu.gpu.product"] = f"RTX{ESC}ok\u202e"
    labels[f"team{ESC}"] = "x"
    n = replace(node(labels), hostname=f"gpu{ESC}fake\nOK")
    svc = SwarmService(id="s", name="web", labels={}, constraints=(
        f"node.labels.zone{ESC}\u202e==a",), env=(), mode="replicated", replicas=1,
        max_replicas_per_node=None, version=1)
    s = snap(n, services=[svc])
    table = render_table(audit(s), s, "swarmgpu.")
    assert not any(c in table for c in "\x1b\r\u202e"), table
    assert r"gpu\x1b[2K\rfake\nOK" in table and r"RTX\x1b[2K\rok\u202e" in table, table
    assert r"zone\x1b[2K\r\u202e" in table, table


def _svc(name: str, constraints: tuple[str, ...], labels: dict[str, str] | None = None
         ) -> SwarmService:
    return SwarmService(id=f"s-{name}", name=name, labels=labels or {},
                        constraints=constraints, env=(), mode="replicated", replicas=1,
                        max_replicas_per_node=None, version=1)


def test_a_gate_or_hold_on_a_service_that_asks_for_no_gpu_is_named() -> None:
    """Swarmgpu opens a gate (or replaces a hold) only for a service that asks it for
    GPUs: once its request labels are gone (``docker service update --label-rm``), the
    gate labels are released and its tasks can never be placed again. Before: skipped
    as "a placement gate", audit said nothing."""
    gated = _svc("web", ("node.labels.swarmgpu.service.web==true",))
    held = _svc("job", ("node.labels.swarmgpu.hold == true",))
    asking = _svc("llm", ("node.labels.swarmgpu.service.llm==true",), {"swarmgpu.gpus": "1"})
    # Another service's gate is the owner's (the daemon leaves it): met where it is open.
    beside = _svc("side", ("node.labels.swarmgpu.service.llm==true",))
    found = audit(snap(node(desired_labels(FACTS)), services=[gated, held, asking, beside]))
    assert [(f.kind, f.subject) for f in found] == [("gate-without-request", "web"),
                                                    ("gate-without-request", "job"),
                                                    ("dangling-constraint", "side")]
    assert all(not f.advisory for f in found) and exit_code(found) == 1
    web = found[0]
    assert web.key == "swarmgpu.service.web"
    assert "cannot be placed" in web.message and "daemon is not running" in web.message
    assert ("docker service update --constraint-rm "
            "'node.labels.swarmgpu.service.web==true' web") in web.message
    assert "swarmgpu.gpus" in web.message


def test_a_constraint_on_a_label_swarmgpu_writes_is_warned_of_not_skipped() -> None:
    """Only ``<gate>==true`` is a gate: ``!= true`` on another service's gate (not where
    its tasks run) or a ledger entry is the owner's constraint on a label swarmgpu
    changes as it places. Audit names it with the risk, advisory, and judges it as any
    other constraint. Before: skipped as "a placement gate" on a GPU service."""
    away = "node.labels.swarmgpu.service.db != true"
    near = "node.labels.swarmgpu.assign.db!=x"
    asking = _svc("llm", ("node.labels.swarmgpu.service.llm==true", away, near),
                  {"swarmgpu.gpus": "1"})
    plain = _svc("web", (away,))
    labels = {**desired_labels(FACTS), "swarmgpu.service.db": "true"}
    found = audit(snap(node(labels), services=[asking, plain]))
    warned = [f for f in found if f.kind == "owned-label-constraint"]
    assert [(f.subject, f.key) for f in warned] == [
        ("llm", "swarmgpu.service.db"), ("llm", "swarmgpu.assign.db"),
        ("web", "swarmgpu.service.db")]
    assert all(f.advisory for f in warned)
    assert away.replace(" ", "") in warned[0].message and "stops" in warned[0].message
    # db's gate is open on the only node: neither service can be placed, and audit says so
    assert [f.subject for f in found if f.kind == "dangling-constraint"] == ["llm", "web"]


def test_constraints_no_node_in_the_swarm_meets_are_named() -> None:
    """A constraint is dangling when no node meets it, not only when no node has its
    label: a value no node has, the hostname or id of a node that left the swarm, or
    constraints each met by some node but never by one node together. Before: only a
    node label key that no node had was named."""
    labels = {**desired_labels(FACTS), "zone": "a"}
    services = [
        _svc("product", ("node.labels.swarmgpu.gpu.product==NVIDIA-A100-SXM4-80GB",)),
        _svc("pinned", ("node.hostname==gpu-node-9",)),
        _svc("by-id", ("node.id==n9",)),
        _svc("both", ("node.labels.zone==a", "node.role==manager")),
        # met, values compared case-insensitively as Swarm does: nothing to say
        _svc("fine", ("node.hostname==GPU-NODE-2", "node.labels.zone==A",
                      "node.labels.swarmgpu.gpu.count!=0", "node.labels.other!=x")),
    ]
    mgr = replace(node({}, {}), id="m1", hostname="mgr-1", role="manager")
    s = replace(snap(node(labels), services=services), nodes=[node(labels), mgr])
    found = audit(s)
    got = [(f.kind, f.subject, f.key) for f in found]
    assert got == [("dangling-constraint", "product", "swarmgpu.gpu.product"),
                   ("dangling-constraint", "pinned", "node.hostname"),
                   ("dangling-constraint", "by-id", "node.id"),
                   ("unplaceable-constraints", "both", None)], got
    assert all(not f.advisory for f in found)
    product, pinned, _, both = found
    assert "no node has it with that value" in product.message
    assert "NVIDIA-GeForce-RTX-4090" in product.message  # what the nodes do have
    assert "no node in the swarm" in pinned.message and "docker node ls" in pinned.message
    assert "node.labels.zone==a" in both.message and "node.role==manager" in both.message


def test_a_down_node_and_the_entry_a_rejoined_node_left_name_their_fix() -> None:
    """A GPU node Swarm reports down is said to be down, with what to do; a down entry
    whose hostname a ready node now has is what a re-imaged node (or one that left and
    joined again) leaves behind under its old ID: `docker node rm` it. Before: both
    read "agent unreachable", and past the grace the leftover was node-failing with
    "drain it", which moves nothing off an entry that no longer runs anything."""
    labels = {**desired_labels(FACTS), "swarmgpu.assign.llm": UUIDS[0]}
    old = replace(node(labels), id="old-id", state="down")
    down = snap(old, facts_ok=False)
    saved = {"old-id": {"failing_since": 1.0, "last_ok": 0.5}}
    s = Snapshot([old], [], [], {"old-id": replace(down.facts["n1"], node_id="old-id")},
                 taken_at=10_000.0)
    (f, failing) = audit(s, saved_agents=saved, node_lost_grace_s=300.0)
    assert f.kind == "unreachable" and "Swarm reports the node down" in f.message
    assert "docker node rm old-id" in f.message
    assert failing.kind == "agent-lost"

    new = replace(node(desired_labels(FACTS)), id="new-id")
    res = snap(new).facts["n1"]
    s = replace(s, nodes=[old, new], facts={**s.facts, "new-id": replace(res, node_id="new-id")})
    found = audit(s, saved_agents=saved, node_lost_grace_s=300.0)
    (f,) = found
    assert f.kind == "replaced-node" and not f.advisory and f.subject == "gpu-node-2"
    assert "new-id" in f.message and "docker node rm old-id" in f.message
    assert "drain" not in f.message
    table = render_table(found, s, "swarmgpu.")
    assert "gpu-node-2 (new-id) worker   ok " in table
    assert "gpu-node-2 (old-id) worker   replaced " in table


def test_ledger_entries_holding_a_gpu_beyond_it_gone_or_unreadable_are_named() -> None:
    """The ledger (``<p>assign.<service>`` node labels): two services holding one GPU
    beyond its capacity, an entry naming a GPU the node's facts no longer list, and an
    entry swarmgpu cannot read. The daemon saw the first two only as plan warnings and
    dropped the third without a word (never released): with no daemon, audit said
    nothing and exited 0."""
    ledger = {
        "swarmgpu.assign.a": UUIDS[0], "swarmgpu.assign.b": UUIDS[0],  # whole, twice
        "swarmgpu.assign.c": f"{UUIDS[1]}@600", "swarmgpu.assign.d": f"{UUIDS[1]}@500",
        "swarmgpu.assign.e": f"{UUIDS[2]}@500", "swarmgpu.assign.f": f"{UUIDS[2]}@500",
        "swarmgpu.assign.g": "GPU-0ff-the-bus",
        "swarmgpu.assign.h": "not a ledger entry \x1b[2J" + "x" * 500,
    }
    n = node({**desired_labels(FACTS), **ledger})
    found = audit(snap(n))
    assert [(f.kind, f.key) for f in found] == [
        ("gpu-held-twice", UUIDS[0]), ("gpu-held-twice", UUIDS[1]),
        ("held-gpu-gone", "swarmgpu.assign.g"), ("unreadable-holding", "swarmgpu.assign.h")]
    assert all(not f.advisory and f.subject == "gpu-node-2" for f in found)
    assert exit_code(found) == 1
    twice, shares, gone, unreadable = found
    assert f"GPU {UUIDS[0]} is held by a (1000 milli) and b (1000 milli)" in twice.message
    assert "1100 milli of 1000" in shares.message
    for f in (twice, shares, gone):
        assert "next cycle" in f.message and "anew on a free GPU" in f.message
        assert "docker node update --label-rm" in f.message
    assert "--label-rm swarmgpu.assign.b --label-rm swarmgpu.service.b n1" in twice.message
    assert "GPU-0ff-the-bus" in gone.message and "no longer list" in gone.message
    assert "--label-rm swarmgpu.assign.g --label-rm swarmgpu.service.g n1" in gone.message
    assert "never released" in unreadable.message
    assert "docker node update --label-rm swarmgpu.assign.h n1" in unreadable.message
    assert len(unreadable.message) < 700  # the value is cut
    assert "\x1b" not in render_table(found, snap(n), "swarmgpu.")
    # Facts that cannot be read say nothing of which GPUs are gone: only the label-only
    # findings stay (the daemon keeps such a node's holdings as they are).
    down = audit(snap(n, facts_ok=False), saved_agents={"n1": {"last_ok": 0.5}})
    assert [f.kind for f in down if f.kind not in ("unreachable", "agent-lost")] == [
        "gpu-held-twice", "gpu-held-twice", "unreadable-holding"]


def test_a_ledger_entry_naming_one_gpu_twice_is_unreadable_not_two_holdings() -> None:
    """Before: ``GPU-a,GPU-a`` read as one service holding the GPU twice (2000 milli of
    it, counted as two holdings), and audit called it gpu-held-twice with nothing to
    release (the service against itself)."""
    twice = f"{UUIDS[0]},{UUIDS[0]}"
    for value in (twice, f"{UUIDS[0]}@300,{UUIDS[1]},{UUIDS[0]}@300", f"s1={twice}"):
        assert parse_holding("a", "n1", value) is None, value
    n = node({**desired_labels(FACTS), "swarmgpu.assign.a": twice,
              "swarmgpu.assign.b": UUIDS[1]})
    assert set(read_ledger([n], "swarmgpu.")) == {"b"}  # as any entry it cannot read
    found = audit(snap(n))
    assert [(f.kind, f.key) for f in found] == [("unreadable-holding", "swarmgpu.assign.a")]
    assert "each GPU once" in found[0].message
    assert "docker node update --label-rm swarmgpu.assign.a n1" in found[0].message


def _at(n: SwarmNode, facts_ok: bool = True, facts: NodeFacts = FACTS) -> FactsResult:
    res = snap(n, facts_ok=facts_ok).facts["n1"]
    return replace(res, node_id=n.id, facts=facts if facts_ok else None)


# Another machine of the same build: its own GPUs (one UUID in two nodes' facts is a
# finding of its own, gpu-uuid-conflict).
OTHER = replace(FACTS, gpus=tuple(replace(g, uuid=g.uuid + "-b") for g in FACTS.gpus))


def test_two_nodes_with_one_hostname_audit_apart() -> None:
    """Swarm's identity of a node is its ID: two nodes may share a hostname. Each
    finding names the node ID it is about (JSON ``node``), and the table joins findings
    to rows by it. Before: rows were joined by hostname, so the drift of one showed on
    both rows, and the findings could not say which of the two they were about."""
    clean = replace(node(desired_labels(FACTS)), id="n1")
    drifted = replace(node({**desired_labels(FACTS), "swarmgpu.gpu.memory": "1"},
                           {"NVIDIA-GPU": tuple(g.uuid for g in OTHER.gpus)}),
                      id="n2", addr="10.0.0.3")
    s = Snapshot([clean, drifted], [], [], {"n1": _at(clean), "n2": _at(drifted, facts=OTHER)})
    found = audit(s)
    (f,) = found
    assert f.kind == "wrong" and f.node == "n2" and f.to_dict()["node"] == "n2"
    table = render_table(found, s, "swarmgpu.")
    rows = [line for line in table.splitlines() if line.startswith("gpu-node-2")]
    assert [r.split()[1] for r in rows] == ["(n1)", "(n2)"], table
    assert "in-sync" in rows[0] and "drifted" in rows[1], table
    assert "[wrong] gpu-node-2 (n2): label swarmgpu.gpu.memory" in table
    # one node to a hostname: the table says it as before
    one = render_table(audit(snap(node(desired_labels(FACTS)))), snap(node({})), "swarmgpu.")
    assert "(n1)" not in one


def test_the_entry_a_rejoined_node_left_keeps_its_ledger_apart_from_the_new_node() -> None:
    """The old ID's labels and ledger entries are the old entry's: one replaced-node
    finding about it (its ID, the services its ledger holds, the fix), none of them
    reported as the re-joined node's, whose own rows and findings are its own. Before:
    the old entry's ledger entries were gpu-held-twice against the hostname (the daemon
    'keeps one holder' on a node it can no longer read), and the new node's drift made
    the old entry's row 'drifted' too."""
    ledger = {"swarmgpu.assign.llm": UUIDS[0], "swarmgpu.assign.web": UUIDS[0],
              "swarmgpu.assign.bad": "not a ledger entry"}
    old = replace(node({**desired_labels(FACTS), **ledger}), id="old-id", state="down")
    new = replace(node({}), id="new-id")  # re-joined: label sync has not labelled it yet
    s = Snapshot([old, new], [], [], {"old-id": _at(old, facts_ok=False),
                                      "new-id": _at(new)}, taken_at=10_000.0)
    found = audit(s, saved_agents={"old-id": {"last_ok": 0.5}})
    assert {f.node for f in found} == {"old-id", "new-id"}
    mine = [f for f in found if f.node == "old-id"]
    (f,) = mine
    assert f.kind == "replaced-node" and f.subject == "gpu-node-2" and f.key == "old-id"
    assert "bad, llm, web" in f.message and "docker node rm old-id" in f.message
    assert "new-id" in f.message
    assert all(f.kind == "missing" for f in found if f.node == "new-id")
    table = render_table(found, s, "swarmgpu.")
    rows = {line.split()[1]: line for line in table.splitlines()
            if line.startswith("gpu-node-2")}
    assert rows["(new-id)"].split()[3:6] == ["ok", "8*", "drifted"], table
    assert rows["(old-id)"].split()[3:6] == ["replaced", "8", "-"], table


def test_a_down_node_sharing_its_hostname_with_another_machine_is_not_replaced() -> None:
    """A down node is the entry a re-joined node left only when something says it is
    the same machine: the same address, or a GPU UUID of its ledger or its engine's
    resources that the ready node has. Two machines with one hostname: the down one is
    down (bring it back), with the other named. Before: any ready node of that hostname
    made it replaced-node, 'docker node rm' it."""
    other = replace(node({**desired_labels(FACTS), "swarmgpu.assign.llm": "GPU-elsewhere"},
                         {"NVIDIA-GPU": ("GPU-elsewhere",)}),
                    id="b-id", addr="10.0.0.9", state="down")
    up = replace(node(desired_labels(FACTS)), id="a-id")
    s = Snapshot([other, up], [], [], {"b-id": _at(other, facts_ok=False), "a-id": _at(up)},
                 taken_at=10_000.0)
    found = audit(s, saved_agents={"b-id": {"failing_since": 9_990.0, "last_ok": 9_980.0}})
    (f,) = found
    assert f.kind == "unreachable" and f.node == "b-id"
    assert "Swarm reports the node down" in f.message and "a-id" in f.message
    # the same address, or a GPU UUID in common: the same machine, re-joined
    for same in (replace(other, addr=up.addr),
                 replace(other, generic_resources={"NVIDIA-GPU": UUIDS})):
        s2 = replace(s, nodes=[same, up])
        assert [f.kind for f in audit(s2)] == ["replaced-node"]


def test_a_node_not_labelled_yet_shows_what_its_agent_answers_marked() -> None:
    """GPUS and PRODUCT are the node's labels: a node whose agent answers before the
    daemon labelled it showed "-" in both, as if it had no GPU. They show the agent's
    answer, marked as not labelled yet, and a line says what the mark means."""
    s = snap(node({}))
    found = audit(s)
    want = desired_labels(FACTS)
    text = render_table(found, s, "swarmgpu.")
    row = next(line for line in text.splitlines() if line.startswith("gpu-node-2"))
    assert row.split()[3:] == ["8*", "drifted", want["swarmgpu.gpu.product"] + "*"], row
    assert "* not labelled yet: what the node's agent answers" in text
    labelled = render_table([], snap(node(want)), "swarmgpu.")
    assert "*" not in labelled and "8     in-sync" in labelled
    down = render_table(audit(snap(node({}), facts_ok=False)), snap(node({}), False),
                        "swarmgpu.")
    assert "not labelled yet" not in down  # no answer: nothing to show but "-"


def test_a_long_hostname_is_cut_in_the_table_and_the_columns_stay_in_line() -> None:
    """A 200-character hostname (or label value) pushed every column after it off to
    the right of its row alone: it is cut to CELL_WIDTH with "...", the NODE column as
    wide as the longest name shown; control characters stay escaped, none cut in two."""
    long_host = "gpu-" + "x" * 196
    hostile = "h" * 30 + f"{ESC}" + "y" * 300
    labels = {**desired_labels(FACTS), "swarmgpu.gpu.product": "P" * 200}
    nodes = [replace(node(labels), id="n1", hostname=long_host),
             replace(node(desired_labels(FACTS)), id="n2", hostname=hostile),
             replace(node(desired_labels(FACTS)), id="n3", hostname="short")]
    s = Snapshot(nodes, [], [], {n.id: _at(n) for n in nodes})
    table = render_table(audit(s), s, "swarmgpu.")
    rows = table.splitlines()[:4]  # (the findings below are text, not columns)
    assert "\x1b" not in table and not any(long_host in r for r in rows), table
    assert all(len(r) <= 130 for r in rows), rows
    assert len({r.index(" worker" if r[0] != "N" else " ROLE") for r in rows}) == 1, table
    assert any(r.startswith("gpu-" + "x" * 33 + "...") for r in rows), table
    assert "P" * 37 + "..." in rows[1] and "P" * 38 not in rows[1], table
    # the escape fitted whole: shown whole, then cut before the next that did not fit
    assert any(r.startswith("h" * 30 + r"\x1b[2K" + "...") for r in rows), table


def test_two_hostnames_cut_alike_in_the_table_show_their_ids() -> None:
    """Two long hostnames alike in their first CELL_WIDTH - 3 characters read the same
    once cut ("..."): a node joined under another's long name and one more character
    passed as that node in the table. Cut names shared by several nodes carry the IDs,
    as a hostname two nodes have does."""
    base = "gpu-" + "x" * 60
    nodes = [replace(node(desired_labels(FACTS)), id=f"id-{i}", hostname=base + tail)
             for i, tail in enumerate(("a", "b"))]
    s = Snapshot(nodes, [], [], {n.id: _at(n) for n in nodes})
    rows = render_table(audit(s), s, "swarmgpu.").splitlines()[1:3]
    assert [r.split("  ")[0].split(" worker")[0] for r in rows] == [
        "gpu-" + "x" * 33 + "... (id-0)", "gpu-" + "x" * 33 + "... (id-1)"], rows


def test_an_unreachable_agents_finding_says_whether_its_last_facts_are_stale() -> None:
    """The daemon's placement adds nothing to a node whose last good facts are
    health.node_lost_grace_s old (agentbook.stale_nodes); audit, which has no stand-in
    facts, says their age and which side of that bound they are on."""
    s = snap(node(desired_labels(FACTS)), facts_ok=False)
    saved = {"n1": {"failing_since": 1.0, "last_ok": 0.5}}
    (fresh,) = audit(replace(s, taken_at=40.5), saved_agents=saved, node_lost_grace_s=300.0)
    assert "its last good facts are 40s old: the daemon places on them until" in fresh.message
    stale = audit(replace(s, taken_at=400.5), saved_agents=saved, node_lost_grace_s=300.0)
    (f,) = [f for f in stale if f.kind == "unreachable"]
    assert ("its last good facts are 400s old, health.node_lost_grace_s (300s) or more: "
            "stale, the daemon places nothing new on it") in f.message, f.message


def test_a_node_whose_agent_answered_with_old_facts_is_lost_from_that_answer() -> None:
    """An agent whose source hangs answers with facts read long ago: the daemon's record
    dates the facts by their read (stale from the grace on), and the answer itself
    (``answered_at``). Lost is counted from the answer, as the health policy's rule
    says ("has not answered for"): from the read, one missed answer was node-failing."""
    s = replace(snap(node(desired_labels(FACTS)), facts_ok=False), taken_at=1030.0)
    saved = {"n1": {"failing_since": 1030.0, "last_ok": 600.0, "answered_at": 1000.0}}
    found = audit(s, saved_agents=saved, node_lost_grace_s=300.0)
    assert kinds(found) == {"unreachable"}, found
    (f,) = found
    assert "its last good facts are 430s old, health.node_lost_grace_s" in f.message
