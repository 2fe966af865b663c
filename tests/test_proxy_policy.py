"""What the docker-proxy lets the daemon's writes change (``manager.engine.proxy_policy``).

The current specs are the engine's own (tests/fixtures/engine/, captured from the test
swarm's dockerd). The daemon's real edit functions (``cycle.placement.service_compute``,
the rebalancer's ``spec_edit``) must pass; everything else a hostile client could post
must not, including a change to any single field outside the allowed paths
(property-based). The real engine behind the proxy: tests/test_dockerproxy_swarm.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import FIXTURES
from support.traced import traced_peak

from swarmgpu.manager.cycle.placement import service_compute
from swarmgpu.manager.engine.proxy_policy import (
    PolicyError,
    check_node_update,
    check_service_update,
    check_swarm_update,
    is_swarmgpus,
    write_checks,
)
from swarmgpu.manager.placement.envs import (
    ORDER_ENV,
    device_mount_spec,
    env_template,
    env_template_per_node,
)
from swarmgpu.manager.placement.keys import gate_constraint, hold_constraint
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.rebalance.record import spec_edit, spec_labels
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.swarm import jsonstrict
from swarmgpu.swarm.dockerproxy import WRITE_KINDS, without_join_tokens
from swarmgpu.swarm.jsonstrict import JsonError, first_difference, load_json, same

P = "swarmgpu."
ENGINE = FIXTURES / "engine"


def _raw(name: str) -> dict[str, Any]:
    return dict(json.loads((ENGINE / f"inspect_{name}.json").read_text()))


def service() -> dict[str, Any]:
    return dict(_raw("service")["Spec"])


def node() -> dict[str, Any]:
    return dict(_raw("node")["Spec"])


def swarm() -> dict[str, Any]:
    return dict(_raw("swarm")["Spec"])


def _refused(check: Callable[[Any, Any, str], None], cur: Any, new: Any) -> str:
    with pytest.raises(PolicyError) as exc:
        check(cur, new, P)
    return str(exc.value)


def test_every_service_write_placement_makes_passes() -> None:
    cur = service()
    # a gate naming another service (placement replaces it) and the older env template
    cur["TaskTemplate"]["Placement"]["Constraints"].append(
        "node.labels.swarmgpu.service.other == true")
    cur["TaskTemplate"]["ContainerSpec"]["Env"].append(env_template_per_node(P))
    cur["TaskTemplate"]["Placement"]["Constraints"].append(hold_constraint(P))
    sp = SpecWrites(
        service_labels_set={P + "devices.n1": "GPU-b", P + "state.max-replicas": "2"},
        service_labels_remove=(P + "gpus",),
        remove_constraints=("node.labels.swarmgpu.service.other == true",
                            hold_constraint(P)),  # a stack deployed as written
        add_constraints=(gate_constraint(P, "cap_llm2"),), set_max_replicas=2,
        force_update=True, set_generic=("NVIDIA-GPU", 2), set_update_parallelism=0,
        replace_env=((env_template_per_node(P), env_template(P)),),
        add_env=(*env_lines(P), ORDER_ENV))
    new = service_compute(sp)(cur)
    assert new is not None and first_difference(cur, new) is not None
    check_service_update(cur, new, P)


def test_a_move_and_the_labels_the_rebalancer_and_preemption_write_pass() -> None:
    cur = service()

    def move(spec: dict[str, Any]) -> None:  # make-before-break, as the mover writes it
        spec_labels(spec).update({P + "state.move": "{}", P + "devices.n2": "GPU-c"})
        spec["Mode"]["Replicated"]["Replicas"] = 2
        spec["TaskTemplate"]["Placement"]["MaxReplicas"] = 1

    new = spec_edit(move)(cur)
    check_service_update(cur, new, P)
    back = spec_edit(lambda s: s["TaskTemplate"]["Placement"].pop("MaxReplicas"))(new)
    check_service_update(new, back, P)


def _svc(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    new = copy.deepcopy(service())
    edit(new)
    return new


def _cs(spec: dict[str, Any]) -> dict[str, Any]:
    return dict(spec["TaskTemplate"]["ContainerSpec"])


HOSTILE_SERVICE: dict[str, Callable[[dict[str, Any]], None]] = {
    "a bind mount of /": lambda s: s["TaskTemplate"]["ContainerSpec"].update(
        Mounts=[{"Type": "bind", "Source": "/", "Target": "/host"}]),
    # Python's 1 == True: the engine's Go decoder refuses a number for a bool today, but
    # what passes is placement's mount as JSON has it, not one equal to it in Python.
    "placement's device mount with ReadOnly 1": lambda s: s["TaskTemplate"][
        "ContainerSpec"].update(Mounts=[{**device_mount_spec(P), "ReadOnly": 1}]),
    "the image": lambda s: s["TaskTemplate"]["ContainerSpec"].update(Image="evil:latest"),
    "a capability": lambda s: s["TaskTemplate"]["ContainerSpec"].update(
        CapabilityAdd=["CAP_SYS_ADMIN"]),
    "privileges": lambda s: s["TaskTemplate"]["ContainerSpec"]["Privileges"].update(
        SELinuxContext={"Disable": True}),
    "the user": lambda s: s["TaskTemplate"]["ContainerSpec"].update(User="0"),
    "sysctls": lambda s: s["TaskTemplate"]["ContainerSpec"].update(
        Sysctls={"kernel.core_pattern": "|/host/x"}),
    "a foreign env line": lambda s: s["TaskTemplate"]["ContainerSpec"]["Env"].append(
        "LD_PRELOAD=/host/evil.so"),
    "an env line that looks like swarmgpu's": lambda s: s["TaskTemplate"]["ContainerSpec"][
        "Env"].append("NVIDIA_VISIBLE_DEVICES=all"),
    "a user's env line removed": lambda s: s["TaskTemplate"]["ContainerSpec"].update(
        Env=[e for e in s["TaskTemplate"]["ContainerSpec"]["Env"] if "PCI_BUS_ID" in e]
        + ["X=1"]),
    "the command": lambda s: s["TaskTemplate"]["ContainerSpec"].update(Args=["sh"]),
    "a container label": lambda s: s["TaskTemplate"]["ContainerSpec"]["Labels"].update(
        {P + "x": "1"}),
    "a service label outside the prefix": lambda s: s["Labels"].update(
        {"com.docker.stack.namespace": "other"}),
    "a network": lambda s: s["TaskTemplate"]["Networks"].append({"Target": "host"}),
    "a published port": lambda s: s["EndpointSpec"].update(
        Ports=[{"TargetPort": 22, "PublishedPort": 2222}]),
    "a constraint that is not a gate": lambda s: s["TaskTemplate"]["Placement"][
        "Constraints"].append("node.role==manager"),
    "a constraint on a gate label that is not a gate": lambda s: s["TaskTemplate"][
        "Placement"]["Constraints"].append("node.labels.swarmgpu.service.other != true"),
    "placement preferences": lambda s: s["TaskTemplate"]["Placement"].update(
        Preferences=[{"Spread": {"SpreadDescriptor": "node.id"}}]),
    "a limit": lambda s: s["TaskTemplate"]["Resources"].update(
        Limits={"MemoryBytes": 1}),
    "a named generic resource": lambda s: s["TaskTemplate"]["Resources"].update(
        Reservations={"GenericResources": [{"NamedResourceSpec": {
            "Kind": "NVIDIA-GPU", "Value": "GPU-x"}}]}),
    "the restart policy, 0 -> false": lambda s: s["TaskTemplate"]["RestartPolicy"].update(
        MaxAttempts=False),
    "the runtime": lambda s: s["TaskTemplate"].update(Runtime="plugin"),
    "the mode": lambda s: s.update(Mode={"Global": {}}),
    "the name": lambda s: s.update(Name="other"),
    "a secret": lambda s: s["TaskTemplate"]["ContainerSpec"].update(
        Secrets=[{"SecretID": "x", "SecretName": "y"}]),
    "the update order": lambda s: s.update(UpdateConfig={"Parallelism": 1,
                                                         "Order": "start-first"}),
    "a key in another case": lambda s: s["TaskTemplate"].update(
        containerspec={"Image": "evil"}),
}


@pytest.mark.parametrize("what", sorted(HOSTILE_SERVICE))
def test_a_service_write_that_changes_anything_else_is_refused(what: str) -> None:
    msg = _refused(check_service_update, service(), _svc(HOSTILE_SERVICE[what]))
    assert "this service update changes " in msg


def test_a_service_that_is_not_swarmgpus_is_not_written_at_all() -> None:
    cur = service()
    cur["Labels"] = {k: v for k, v in cur["Labels"].items() if not k.startswith(P)}
    cur["TaskTemplate"]["Placement"] = {}
    cur["TaskTemplate"]["ContainerSpec"]["Env"] = ["A=1"]
    assert not is_swarmgpus(cur, P)
    for edit in (lambda s: s["TaskTemplate"].update(ForceUpdate=1),
                 lambda s: s["Mode"]["Replicated"].update(Replicas=0),
                 lambda s: s["Labels"].update({P + "gpus": "1"})):
        new = copy.deepcopy(cur)
        edit(new)
        assert "the daemon does not write it" in _refused(check_service_update, cur, new)
    # any one sign of swarmgpu makes it the daemon's: a request label, a gate, its env
    for sign in (lambda s: s["Labels"].update({P + "gpus": "1"}),
                 lambda s: s["TaskTemplate"]["Placement"].update(
                     Constraints=["node.labels.swarmgpu.service.x == true"]),
                 lambda s: s["TaskTemplate"]["ContainerSpec"]["Env"].append(env_template(P))):
        owned = copy.deepcopy(cur)
        sign(owned)
        assert is_swarmgpus(owned, P)


def test_an_owners_constraint_on_a_gate_label_may_not_be_removed() -> None:
    """Only ``<gate>==true`` is a gate the daemon may take out; ``!= true`` or
    ``== false`` on a gate label is the owner's, and alone does not make a service
    swarmgpu's."""
    for mine in ("node.labels.swarmgpu.service.db != true",
                 "node.labels.swarmgpu.service.db==false"):
        cur = service()
        cur["TaskTemplate"]["Placement"]["Constraints"].append(mine)
        new = service()
        assert "TaskTemplate.Placement" in _refused(check_service_update, cur, new)
        cur["Labels"] = {k: v for k, v in cur["Labels"].items() if not k.startswith(P)}
        cur["TaskTemplate"]["Placement"] = {"Constraints": [mine]}
        cur["TaskTemplate"]["ContainerSpec"]["Env"] = ["A=1"]
        assert not is_swarmgpus(cur, P)


def test_cuda_device_order_alone_does_not_make_a_service_swarmgpus() -> None:
    """``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is a line swarmgpu adds, but also one GPU
    services commonly set themselves: it names no swarmgpu label. A service with it and
    nothing of swarmgpu's stays another's: the daemon may not give it the device
    template (GPUs named by labels it writes), labels, gates or replicas."""
    cur = service()
    cur["Labels"] = {k: v for k, v in cur["Labels"].items() if not k.startswith(P)}
    cur["TaskTemplate"]["Placement"] = {}
    cur["TaskTemplate"]["ContainerSpec"]["Env"] = [ORDER_ENV, "NVIDIA_VISIBLE_DEVICES=0"]
    assert not is_swarmgpus(cur, P)
    new = copy.deepcopy(cur)
    new["Labels"][P + "devices.n1"] = "all"
    new["TaskTemplate"]["ContainerSpec"]["Env"] = [ORDER_ENV, env_template(P)]
    _refused(check_service_update, cur, new)


@pytest.mark.parametrize("replicas", [3, 50, 10**6, 2.0, True, "2", -1, None])
def test_replicas_rise_by_one_at_most_and_are_whole_numbers(replicas: Any) -> None:
    """The surge of a make-before-break move adds one replica (1 -> 2 here) and its end
    takes it back; nothing the daemon writes asks for more, nor for a count that is not
    a whole number (``Replicas: null`` included)."""
    cur = service()
    assert cur["Mode"]["Replicated"]["Replicas"] == 1
    msg = _refused(check_service_update, cur,
                   _svc(lambda s: s["Mode"]["Replicated"].update(Replicas=replicas)))
    assert "Mode.Replicated.Replicas" in msg
    for ok in (0, 1, 2):  # down to none, as is, the surge
        check_service_update(cur, _svc(lambda s, n=ok: s["Mode"]["Replicated"].update(
            Replicas=n)), P)
    surged = _svc(lambda s: s["Mode"]["Replicated"].update(Replicas=5))
    check_service_update(surged, _svc(lambda s: s["Mode"]["Replicated"].update(
        Replicas=1)), P)  # the end of a surge, after the owner had scaled


def test_the_refusal_names_what_changed() -> None:
    msg = _refused(check_service_update, service(), _svc(HOSTILE_SERVICE["a bind mount of /"]))
    assert "TaskTemplate.ContainerSpec.Mounts" in msg


def test_node_writes_change_only_labels_under_the_prefix() -> None:
    cur = node()
    check_node_update(cur, {**cur, "Labels": {P + "gpu.count": "8",
                                              P + "service.x": "true"}}, P)
    for new in ({**cur, "Availability": "drain"}, {**cur, "Role": "manager"},
                {**cur, "Name": "x"}, {**cur, "Labels": {"evil": "1"}},
                {k: v for k, v in cur.items() if k != "Availability"}, [cur], "x"):
        _refused(check_node_update, cur, new)
    # another prefix is another daemon's: not this one's to change
    with pytest.raises(PolicyError):
        check_node_update(cur, {**cur, "Labels": {"other.x": "1"}}, P)


@pytest.mark.parametrize("key", [P + "state.renew", P + "state.x", P + "hold"])
def test_a_node_write_never_sets_a_label_no_node_carries(key: str) -> None:
    """The hold and the renewal constraint (``node.labels.<p>hold==true``,
    ``node.labels.<p>state.renew!=<n>``) are met or not because no node has their
    label, and every other ``<p>state.`` key is a record kept on a service or the swarm
    object: the daemon writes none on a node. A node write that set
    ``<p>state.renew`` to a service's value was let through (the label is under the
    prefix): that service's renewal constraint excluded the node, its task stopped
    there. Removing one, or a write leaving one as the node has it, passes."""
    cur = node()
    for value in ("7", "true", ""):
        msg = _refused(check_node_update, cur, {**cur, "Labels": {
            **cur.get("Labels", {}), key: value}})
        assert key in msg and "--label-rm" in msg, msg
    had = {**cur, "Labels": {**cur.get("Labels", {}), key: "7"}}
    _refused(check_node_update, had, {**had, "Labels": {**had["Labels"], key: "8"}})
    check_node_update(had, cur, P)  # label sync removes it
    check_node_update(had, {**had, "Labels": {**had["Labels"], P + "gpu.count": "8"}}, P)
    # the labels the daemon writes on nodes: facts, gates, ledger
    check_node_update(cur, {**cur, "Labels": {P + "gpu.count": "8", P + "service.x": "true",
                                              P + "assign.x": "GPU-1", P + "holder": "x",
                                              P + "statex": "1"}}, P)


def test_swarm_writes_change_only_labels_under_the_prefix() -> None:
    cur = swarm()
    check_swarm_update(cur, {**cur, "Labels": {P + "state.workload": "{}"}}, P)
    hostile = [
        {**cur, "CAConfig": {"NodeCertExpiry": 3600 * 10**9}},
        {**cur, "CAConfig": {**cur["CAConfig"], "ExternalCAs": [
            {"Protocol": "cfssl", "URL": "https://evil"}]}},
        {**cur, "CAConfig": {**cur["CAConfig"], "SigningCACert": "x", "SigningCAKey": "y"}},
        {**cur, "EncryptionConfig": {"AutoLockManagers": True}},
        {**cur, "Dispatcher": {"HeartbeatPeriod": 1}},
        {**cur, "TaskDefaults": {"LogDriver": {"Name": "syslog"}}},
        {**cur, "Labels": {"evil": "1"}},
    ]
    for new in hostile:
        _refused(check_swarm_update, cur, new)


def test_json_is_read_strictly() -> None:
    assert load_json(b'{"a": [1, 2.5, true, null]}') == {"a": [1, 2.5, True, None]}
    for body in (b'{"a": 1, "a": 2}', b'{"x": {"Image": 1, "Image": 2}}', b'{"a": NaN}',
                 b'{"a": Infinity}', '{"a": 1}'.encode("utf-16"), b'{"a": "\xff"}',
                 b"[" * 100_000, b"", b"{"):
        with pytest.raises(JsonError):
            load_json(body)


def test_a_number_beyond_64_bits_is_refused_not_raised() -> None:
    """Python reads a 5000-digit integer as a ValueError that is no JSONDecodeError (its
    4300-digit limit), and 1e999 as inf, which the proxy would post on as Infinity: the
    engine's Go decoder holds 64-bit numbers, so both are refused, naming the number."""
    for body, says in ((b'{"a": ' + b"9" * 5000 + b"}", "5000 digits"),
                       (b'{"a": -' + b"9" * 21 + b"}", "21 digits"),
                       (b'{"a": [1e999]}', "'1e999'"), (b'{"a": -1E400}', "'-1E400'")):
        with pytest.raises(JsonError, match=says):
            load_json(body)
    assert load_json(b'[18446744073709551615, -9223372036854775808, 1.5e308, 1e-400]') == [
        18446744073709551615, -9223372036854775808, 1.5e308, 0.0]


def test_a_body_of_too_many_json_values_is_refused_before_it_is_parsed() -> None:
    """A 1 MiB body of ``[{},{},...]`` is 350,000 dicts once parsed (77 MiB in the proxy,
    with the write check's deep copy; benchmarks/bench_proxy_memory.py): a body with more
    values and keys than any spec has is refused from its text, with little memory. A
    long string counts once, and what its text holds not at all."""
    limit = jsonstrict.MAX_JSON_VALUES
    body = b'{"X": [' + b",".join([b"{}"] * (limit // 2 + 1)) + b"]}"

    def refused() -> None:
        with pytest.raises(JsonError, match=f"more than {limit} JSON values and keys"):
            load_json(body)

    _, peak = traced_peak(refused)
    assert peak < 4 * len(body), peak
    # Quotes that never close: one pass, not one from each. The strings' scan makes one
    # match, from the first quote to the end, so no scan starts at a later quote (a
    # pattern that can fail there rescanned the rest from each: quadratic). Counted, not
    # timed: how long is benchmarks/bench_json_quotes.py.
    unclosed = '["' + '\\"' * 400_000
    spans = [m.span() for m in jsonstrict._STRING.finditer(unclosed)]
    assert spans == [(1, len(unclosed))], spans[:3]
    with pytest.raises(JsonError):
        load_json(unclosed.encode())
    big = {"Env": [f"V{i}=[{{,:}}]\\\"" for i in range(limit // 4)],
           "Labels": {f"swarmgpu.k{i}": "v" for i in range(limit // 4)}}
    assert load_json(json.dumps(big).encode()) == big


def test_a_body_nested_deeper_than_any_spec_is_refused_from_its_text() -> None:
    """A spec nests some 8 deep; the check's copy and comparison recurse, so a body
    deeper than ``MAX_JSON_DEPTH`` is refused before it is parsed. Brackets inside a
    string are text, not nesting."""
    depth = jsonstrict.MAX_JSON_DEPTH
    assert load_json(b"[" * depth + b"]" * depth) is not None
    with pytest.raises(JsonError, match=f"nested more than {depth} deep"):
        load_json(b'{"a": ' + b"[" * depth + b"]" * depth + b"}")
    assert load_json(json.dumps({"a": "[" * 1000}).encode()) == {"a": "[" * 1000}


def test_equality_knows_json_types() -> None:
    assert same({"a": [1, "x"]}, {"a": [1, "x"]})
    assert not same({"a": 0}, {"a": False}) and not same({"a": 1}, {"a": 1.0})
    assert not same({"a": True}, {"a": 1}) and not same({"a": None}, {})
    assert first_difference({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}) == "a.b[1]"


def test_write_checks_cover_every_write_and_check_the_prefix() -> None:
    checks = write_checks(P)
    assert set(checks) == set(WRITE_KINDS)
    cur = node()
    checks["node-update"](cur, {**cur, "Labels": {P + "x": "1"}})
    with pytest.raises(PolicyError):
        checks["node-update"](cur, {**cur, "Labels": {"x": "1"}})
    with pytest.raises(PolicyError):  # the prefix handed over is the one checked
        write_checks("other.")["node-update"](cur, {**cur, "Labels": {P + "x": "1"}})
    for bad in ("", "swarmgpu", "a/b.", ".x."):
        with pytest.raises(ValueError, match="prefix"):
            write_checks(bad)


@pytest.mark.parametrize("prefix", ["com.docker.", "com.", "io.docker.stack.",
                                    "org.dockerproject."])
def test_a_prefix_in_dockers_label_namespaces_is_refused_as_the_daemon_refuses_it(
        prefix: str) -> None:
    """The daemon's config refuses such a sync.prefix; the proxy took it, and then every
    stack service (``com.docker.stack.namespace``) was the daemon's to write, that label
    too."""
    with pytest.raises(ValueError, match="reserved by Docker"):
        write_checks(prefix)


def test_join_tokens_are_dropped_and_nothing_else() -> None:
    raw = _raw("swarm")
    out = without_join_tokens(raw)
    assert "JoinTokens" not in out and {**out, "JoinTokens": raw["JoinTokens"]} == raw
    assert without_join_tokens([1]) == [1]


# --- property: a change to any one field outside the allowed paths is refused -------

def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))]
    if isinstance(obj, list) and obj:
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))]
    return [path]


def _allowed(path: tuple[Any, ...]) -> bool:
    """The paths the daemon writes (as ``proxy_policy`` lists them)."""
    text = ".".join(map(str, path))
    return (text.startswith(f"Labels.{P}") or text == "TaskTemplate.ForceUpdate"
            or text == "Mode.Replicated.Replicas"
            or text.startswith("TaskTemplate.Placement.Constraints")
            or text.startswith("TaskTemplate.ContainerSpec.Env"))


SPEC_LEAVES = [p for p in _leaves(service()) if p and not _allowed(p)]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                   st.just({}), st.just([]), st.just({"Type": "bind", "Source": "/"}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(SPEC_LEAVES), value=VALUES)
def test_prop_any_other_field_changed_is_refused(path: tuple[Any, ...], value: Any) -> None:
    cur = service()
    new = copy.deepcopy(cur)
    at = new
    for k in path[:-1]:
        at = at[k]
    if same(at[path[-1]], value):
        return
    at[path[-1]] = value
    with pytest.raises(PolicyError):
        check_service_update(cur, new, P)


@settings(max_examples=200, deadline=None)
@given(labels=st.dictionaries(st.text(max_size=12).map(lambda s: P + s),
                              st.text(max_size=12), max_size=5),
       replicas=st.integers(0, 2), force=st.integers(0, 10**6),
       env=st.lists(st.sampled_from([env_template(P), ORDER_ENV, *env_lines(P)]),
                    max_size=4))
def test_prop_what_the_daemon_writes_passes(labels: dict[str, str], replicas: int,
                                            force: int, env: list[str]) -> None:
    cur = service()
    new = copy.deepcopy(cur)
    new["Labels"] = {**{k: v for k, v in cur["Labels"].items() if not k.startswith(P)},
                     **labels}
    new["Mode"]["Replicated"]["Replicas"] = replicas
    new["TaskTemplate"]["ForceUpdate"] = force
    cs = new["TaskTemplate"]["ContainerSpec"]
    cs["Env"] = [e for e in cs["Env"] if e not in env] + env
    check_service_update(cur, new, P)


@pytest.mark.parametrize("value", ["all", "nvidia.com/gpu=all", "vendor.example/dev=x",
                                   "GPU-a,vendor.example/dev=x", "0", "GPU-a,,GPU-b", 1])
def test_a_device_list_names_gpus_as_facts_do(value: Any) -> None:
    """In the toolkit's CDI mode a qualified name in NVIDIA_VISIBLE_DEVICES (or a device
    mount's path) is injected as it is: any CDI device of the node, its mounts and hooks;
    ``all`` is every GPU. The daemon writes lists of its facts' UUIDs, nothing else."""
    key = P + "devices.n1.1"
    msg = _refused(check_service_update, service(),
                   _svc(lambda s: s["Labels"].update({key: value})))
    assert key in msg
    for ok in ("GPU-5ca1ab1e-0000-1111-2222-333333333333,MIG-9a0b", "MIG-GPU-a/1/0", ""):
        check_service_update(service(), _svc(lambda s, v=ok: s["Labels"].update({key: v})), P)
    had = _svc(lambda s: s["Labels"].update({key: "all"}))  # the owner's, kept as it is
    check_service_update(had, _svc(lambda s: s["Labels"].update({key: "all", P + "x": "1"})),
                         P)
