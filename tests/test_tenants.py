"""Tenants (config ``tenants:``): a stack's labels ask, the operator's config decides.

The config's keys as the issue writes them, and every bad tenant section as a named
error; matching (first in file order, ``default`` for the rest); the limits applied to
requests (priority capped, opt-out ignored, a foreign queue refused, the default queue);
the same rules in the planner, preemption (budgets spent per tenant), ``render --check``
(exit 1) and ``audit``. Daemon cycles run over the recording fake SwarmClient of
tests/test_forged_state.py (faked only at swarmgpu's own boundary).
"""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.forged import DGX_F, R4090_F, RecordingSwarm, closed_port, sw_node, sw_svc

from swarmgpu.core.config import (
    AgentsConfig,
    Config,
    ConfigError,
    SyncConfig,
    load_config,
    queue_quotas,
)
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.cycle.placement import SELF_DECLARED, audit_checks, new_planner
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agentbook import AgentRecord
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.preempted import recorded_cooling
from swarmgpu.manager.services.requests import GpuRequest, RequestError, parse_request
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)  # the 8 RTX 4090s of n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}

# The keys, exactly as written there.
AS_WRITTEN = """\
tenants:
  team-a: {stacks: ["team-a*"], max_priority: 100, may_opt_out: true}
  default: {max_priority: 0, may_opt_out: false}
"""


def _cfg(tmp_path: Path, text: str) -> Config:
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent(text))
    return load_config(f, env={})


def _tenants(tmp_path: Path, text: str) -> Tenants:
    t = Tenants.from_config(_cfg(tmp_path, text))
    assert t is not None
    return t


def _req(**labels: str) -> GpuRequest:
    r = parse_request({f"{P}gpus": "1", **{f"{P}{k}": v for k, v in labels.items()}})
    assert isinstance(r, GpuRequest)
    return r


# --- the config -----------------------------------------------------------------------


def test_the_keys_work_as_written(tmp_path: Path) -> None:
    t = _tenants(tmp_path, AS_WRITTEN)
    a, d = t.of("team-a-infer_api", "team-a-infer"), t.of("x_y", "x")
    assert (a.name, a.max_priority, a.may_opt_out) == ("team-a", 100, True)
    assert (d.name, d.max_priority, d.may_opt_out) == ("default", 0, False)
    # preemption.max_per_hour 10 (the default): each tenant's own budget is half of it
    assert a.preemptions_per_hour == d.preemptions_per_hour == 5


def test_no_tenants_section_is_todays_behaviour(tmp_path: Path) -> None:
    assert Tenants.from_config(_cfg(tmp_path, "queues: {q: {max: 2}}\n")) is None
    assert Tenants.from_config(Config()) is None
    planner = new_planner(Config())
    assert planner.tenants is None


@pytest.mark.parametrize(("text", "says"), [
    ("tenants: {team-a: {stacks: [a*], max_prio: 5}}",
     "tenants.team-a.max_prio: unknown key; did you mean 'max_priority'?"),
    ("tenants: {team-a: {stacks: [a*], colour: red}}", "tenants.team-a.colour: unknown key"),
    ("tenants: {team-a: {stacks: \"team-a*\"}}",
     "tenants.team-a.stacks: expected a non-empty list of names or globs"),
    ("tenants: {team-a: {stacks: []}}", "tenants.team-a.stacks: expected a non-empty list"),
    ("tenants: {team-a: {stacks: [\"team a\"]}}", "'team a' is not a name or glob"),
    ("tenants: {team-a: {stacks: [\"team-[a\"]}}", "'team-[a' is not a name or glob"),
    ("tenants: {team-a: {services: [\"a/b\"]}}", "'a/b' is not a name or glob"),
    ("tenants: {team-a: {stacks: [a*], max_priority: -1}}",
     "tenants.team-a.max_priority: expected a whole number from 0 to 999999, got -1"),
    ("tenants: {team-a: {stacks: [a*], max_priority: 10000000}}",
     "tenants.team-a.max_priority: expected a whole number from 0"),
    ("tenants: {team-a: {stacks: [a*], max_priority: urgent}}",
     "a priority class names one of batch, critical, inference"),
    ("tenants: {team-a: {stacks: [a*], guaranteed: -2}}",
     "tenants.team-a.guaranteed: expected a number of GPUs from 0"),
    ("tenants: {team-a: {stacks: [a*], guaranteed: 4, max: 2}}",
     "tenants.team-a: need guaranteed <= max"),
    ("tenants: {team-a: {stacks: [a*], preemptions_per_hour: -1}}",
     "tenants.team-a.preemptions_per_hour: expected a whole number from 0"),
    ("tenants: {team-a: {stacks: [a*], may_opt_out: maybe}}",
     "tenants.team-a.may_opt_out: expected true or false"),
    ("tenants: {team-a: {max_priority: 5}}", "tenants.team-a: matches no service"),
    ("tenants: {default: {stacks: [x*]}}", "tenants.default: default takes every service"),
    ("tenants: {\"team a\": {stacks: [a*]}}", "a tenant name is letters, digits"),
    ("tenants: {team-a: [a*]}", "tenants.team-a: expected a mapping"),
    ("tenants: [team-a]", "tenants: expected a mapping of tenant"),
    ("tenants: {team-a: {stacks: [a*], queues: [nope]}}",
     "tenants.team-a.queues: 'nope' is not a queue of the config's queues"),
    ("queues: {q: {max: 4}}\ntenants: {a: {stacks: [a*], queues: [q]}, "
     "b: {stacks: [b*], queues: [q]}}", "tenants.b.queues: q is already tenant a's"),
    ("queues: {q: {max: 4}}\ntenants: {a: {stacks: [a*], queues: [q, q]}}",
     "tenants.a.queues: q is listed twice; name each queue once"),
    ("queues: {q: {max: 4}}\ntenants: {a: {stacks: [a*]}}", "queues.q: owned by no tenant"),
    ("queues: {'': {max: 4}}\ntenants: {a: {stacks: [a*], queues: ['']}}",
     "queues.'': a queue needs a name"),
    ("queues: {a: {max: 4}}\ntenants: {a: {stacks: [a*], max: 2, queues: [a]}}",
     "tenants.a: guaranteed/max make a queue named a, but queues.a exists too"),
])
def test_bad_tenant_sections_are_named_errors(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, text + "\n")
    assert any(says in err for err in e.value.errors), e.value.errors


def test_config_check_prints_every_tenant_error(tmp_path: Path) -> None:
    from swarmgpu.cli import main

    f = tmp_path / "c.yml"
    f.write_text("tenants: {a: {stacks: [], max_priority: -3, wat: 1}}\n")
    res = CliRunner().invoke(main, ["config", "check", str(f)])
    assert res.exit_code == 2
    for says in ("tenants.a.wat: unknown key", "tenants.a.stacks: expected a non-empty",
                 "tenants.a.max_priority: expected a whole number"):
        assert says in res.output, res.output


def test_show_defaults_says_each_tenant_key() -> None:
    from swarmgpu.core.config import describe_defaults

    text = describe_defaults()
    assert "tenants: {}" in text
    for key in ("stacks", "services", "max_priority: 0", "may_opt_out: false", "queues",
                "guaranteed", "preemptions_per_hour"):
        assert key in text


# --- matching ---------------------------------------------------------------------------


def test_first_tenant_in_file_order_wins_and_default_takes_the_rest(tmp_path: Path) -> None:
    t = _tenants(tmp_path, """\
        tenants:
          infer-api: {stacks: ["infer*"], services: ["*_api"], max_priority: 1000}
          infer: {stacks: ["infer*"], max_priority: 100}
          research: {services: ["lab-*"], max_priority: 10}
        """)
    assert t.of("infer-prod_api", "infer-prod").name == "infer-api"  # both keys match
    assert t.of("infer-prod_worker", "infer-prod").name == "infer"  # services glob fails
    assert [x.name for x in t.matching("infer-prod_api", "infer-prod")] == ["infer-api",
                                                                            "infer"]
    assert t.of("lab-x", None).name == "research"  # a plain service (no stack)
    assert t.of("infer_api", None).name == "default"  # stacks given: needs a stack
    assert t.of("whatever_x", "whatever").name == "default"
    assert [x.name for x in t.matching("whatever_x", "whatever")] == ["default"]


def test_an_empty_stack_label_is_a_service_of_no_stack(tmp_path: Path) -> None:
    """`docker stack deploy` never names a stack ''; a service made by hand with
    `--label com.docker.stack.namespace=` has no stack, and a tenant with stacks (even
    `*`) never takes it (docs/requests.md, "Which tenant")."""
    t = _tenants(tmp_path, """\
        tenants:
          every-stack: {stacks: ["*"], max_priority: 1000}
          research: {services: ["lab-*"], max_priority: 10}
        """)
    assert t.of("lab-x", "").name == "research"
    assert t.of("x", "").name == "default"
    assert t.of("x", "s").name == "every-stack"



@pytest.mark.parametrize(("first", "then"), [
    ('{stacks: ["team-*"]}', '{stacks: ["team-b*"]}'),
    ('{stacks: ["team-?"]}', '{stacks: ["team-b", "team-[cd]"]}'),
    ('{stacks: ["infer*"]}', '{stacks: ["infer*"], services: ["*_api"]}'),
    ('{services: ["*_api"]}', '{stacks: ["x*"], services: ["x*_api"]}'),
    ('{stacks: ["[a-z]*"]}', '{stacks: ["team-b*"]}'),
])
def test_a_tenant_an_earlier_one_takes_every_service_of_is_refused(
        tmp_path: Path, first: str, then: str) -> None:
    # The first tenant in the file's order takes a service: team-b's limits, the
    # operator's word for its stacks, applied to none of them, and config check passed.
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, f"tenants:\n  team-a: {first}\n  team-b: {then}\n")
    assert any("tenants.team-b: tenants.team-a, listed before it, matches every service "
               "it matches" in err for err in e.value.errors), e.value.errors
    # In the other order, each takes its own: team-b carves its services out of team-a's.
    _cfg(tmp_path, f"tenants:\n  team-b: {then}\n  team-a: {first}\n")


@pytest.mark.parametrize(("first", "then"), [
    ('{stacks: ["team-b*"]}', '{stacks: ["team-*"]}'),
    ('{stacks: ["team-?"]}', '{stacks: ["team-bb"]}'),
    ('{stacks: ["infer*"], services: ["*_api"]}', '{stacks: ["infer*"]}'),
    ('{stacks: ["x*"]}', '{services: ["x*"]}'),  # (a service of no stack: the second's)
    ('{stacks: ["[a-c]*"]}', '{stacks: ["d*"]}'),
])
def test_tenants_that_overlap_only_in_part_are_taken_in_file_order(
        tmp_path: Path, first: str, then: str) -> None:
    _cfg(tmp_path, f"tenants:\n  team-a: {first}\n  team-b: {then}\n")

def test_a_service_matching_no_tenant_gets_the_defaults_limits(tmp_path: Path) -> None:
    t = _tenants(tmp_path, """\
        queues: {shared: {guaranteed: 0, max: 2}}
        tenants:
          team-a: {stacks: ["team-a*"], max_priority: 100, may_opt_out: true}
          default: {max_priority: 5, may_opt_out: false, queues: [shared],
                    preemptions_per_hour: 1}
        """)
    got = t.apply(_req(priority="critical", preemptible="false"), "other_x", "other")
    assert isinstance(got, GpuRequest)
    assert (got.tenant, got.priority, got.queue) == ("default", 5, "shared")
    assert got.is_preemptible(100) and got.preemptible is None
    assert got.limits == (
        "priority critical (1000) capped at 5 by tenant default (its max_priority)",
        f"{P}preemptible=false ignored: tenant default may not opt out of preemption")
    assert t.budget("default") == 1 and t.budget("no-such-tenant") == 1
    # Out of the box (no default written): priority 0, preemptible, no queue, budget 5.
    t2 = _tenants(tmp_path, AS_WRITTEN.replace("  default: {max_priority: 0, may_opt_out: "
                                               "false}\n", ""))
    got = t2.apply(_req(priority="50"), "x", None)
    assert isinstance(got, GpuRequest)
    assert (got.tenant, got.priority, got.queue, got.always_preemptible) == (
        "default", 0, "", True)
    assert t2.budget("default") == 5


# --- the limits ---------------------------------------------------------------------------


QUEUES = """\
    queues: {research: {guaranteed: 2, max: 8}, scratch: {max: 2}}
    tenants:
      team-a: {stacks: ["team-a*"], max_priority: 100, may_opt_out: true,
               queues: [research, scratch]}
      team-b: {stacks: ["team-b*"], max_priority: 0, may_opt_out: false, guaranteed: 1,
               max: 4}
    """


def test_labels_may_ask_for_less_never_more(tmp_path: Path) -> None:
    t = _tenants(tmp_path, QUEUES)
    for asked, got_p in (("50", 50), ("100", 100), ("inference", 100), ("-5", -5)):
        got = t.apply(_req(priority=asked), "team-a_x", "team-a")
        assert isinstance(got, GpuRequest) and got.priority == got_p and not got.limits
    got = t.apply(_req(priority="critical"), "team-a_x", "team-a")
    assert isinstance(got, GpuRequest) and (got.priority, got.priority_class) == (100, "")
    assert got.limits == ("priority critical (1000) capped at 100 by tenant team-a (its "
                          "max_priority)",)
    assert "priority 100" in got.describe()
    # team-a may opt out: its label is honoured; team-b's is ignored, with the reason
    got = t.apply(_req(preemptible="false"), "team-a_x", "team-a")
    assert isinstance(got, GpuRequest) and got.preemptible is False
    assert not got.is_preemptible(100) and not got.limits
    got = t.apply(_req(priority="999999", preemptible="false"), "team-b_x", "team-b")
    assert isinstance(got, GpuRequest) and got.priority == 0 and got.is_preemptible(0)
    assert [w.split(" ")[0] for w in got.limits] == ["priority", f"{P}preemptible=false"]
    assert "capped at 0 by tenant team-b" in got.limits[0]


def test_a_queue_owned_by_another_tenant_is_refused(tmp_path: Path) -> None:
    t = _tenants(tmp_path, QUEUES)
    got = t.apply(_req(queue="research"), "team-b_x", "team-b")
    assert isinstance(got, RequestError) and got.key == f"{P}queue"
    assert str(got) == (f"{P}queue='research': expected a queue of tenant team-b (team-b); "
                        "research is tenant team-a's (config tenants.team-b.queues)")
    got = t.apply(_req(queue="nowhere"), "team-a_x", "team-a")
    assert isinstance(got, RequestError) and "nowhere is no tenant's queue" in str(got)
    # its own: taken; none named: its first queue (team-b's own, from guaranteed/max)
    got = t.apply(_req(queue="scratch"), "team-a_x", "team-a")
    assert isinstance(got, GpuRequest) and got.queue == "scratch"
    got = t.apply(_req(), "team-b_x", "team-b")
    assert isinstance(got, GpuRequest) and got.queue == "team-b"
    assert t.quotas(_cfg(tmp_path, QUEUES).queues) == {
        "research": (2000, 8000), "scratch": (0, 2000), "team-b": (1000, 4000)}


# --- the planner and preemption --------------------------------------------------------


TWO_TEAMS = """\
    preemption: {dry_run: false, max_per_hour: 10}
    tenants:
      team-a: {stacks: ["team-a*"], max_priority: 100, may_opt_out: true,
               preemptions_per_hour: 1}
      team-b: {stacks: ["team-b*"], max_priority: 0, may_opt_out: false}
    """


def _stack_svc(stack: str, name: str, labels: dict[str, str]) -> SwarmService:
    return sw_svc(f"{stack}_{name}", {STACK_LABEL: stack, **labels})


def _full_4090(holders: dict[str, tuple[str, int]], pending: dict[str, tuple[str, dict[str, str]]]
               ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """``holders``: full name -> (stack, GPUs) holding n-4090's GPUs in order, running;
    ``pending``: full name -> (stack, labels) that want RTX 4090s and wait."""
    labels: dict[str, str] = {}
    services, tasks, at = [], [], 0
    for full, (stack, n) in holders.items():
        uuids = R_UUIDS[at:at + n]
        at += n
        labels |= {assign_key(P, full): Holding(full, "n-4090", uuids,
                                                tuple(1000 for _ in uuids)).label_value(),
                   gate_key(P, full): "true"}
        s = _stack_svc(stack, full.split("_", 1)[1], {
            f"{P}gpus": str(n), devices_key(P, "n-4090"): ",".join(uuids)})
        services.append(s)
        tasks.append(SwarmTask(f"t-{full}", s.id, "n-4090", 1, "running", "running", ()))
    for full, (stack, extra) in pending.items():
        s = _stack_svc(stack, full.split("_", 1)[1], {f"{P}gpu-product": "*RTX 4090*",
                                                      **extra})
        services.append(s)
        tasks.append(SwarmTask(f"t-{full}", s.id, "", 1, "pending", "running", ()))
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", labels)]
    return nodes, services, tasks


HIGH = {"team-a_high": ("team-a", {f"{P}gpus": "2", f"{P}priority": "100"})}  # at its ceiling


def _held_whole(full: str, stack: str, extra: dict[str, str],
                pending: dict[str, tuple[str, dict[str, str]]]
                ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """``_full_4090`` with ``full`` (of ``stack``) holding all of n-4090's GPUs, its labels
    with ``extra`` (what its stack wrote after it was placed), ``pending`` waiting."""
    nodes, services, tasks = _full_4090({full: (stack, 8)}, pending)
    services[0] = _stack_svc(stack, full.split("_", 1)[1], {**services[0].labels, **extra})
    return nodes, services, tasks


def test_above_the_ceiling_preempts_nothing_and_plan_says_why(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, TWO_TEAMS)
    nodes, services, tasks = _full_4090(
        {"team-b_batch": ("team-b", 8)},
        {"team-b-greedy_x": ("team-b-greedy", {f"{P}gpus": "2", f"{P}priority": "999999",
                                               f"{P}preemptible": "false"})})
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    by = {sp.name: sp for sp in plan.services}
    greedy = by["team-b-greedy_x"]
    assert greedy.status == "pending" and greedy.request is not None
    assert greedy.request.priority == 0 and greedy.request.tenant == "team-b"
    assert greedy.to_dict()["tenant"] == "team-b"
    assert greedy.to_dict()["limits"][0] == ("priority 999999 capped at 0 by tenant team-b "
                                             "(its max_priority)")
    assert by["team-b_batch"].to_dict()["limits"] == []  # it asked for nothing more
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []
    # Without tenants the same labels take the node (today's self-declared priorities).
    bare = new_planner(Config()).plan(nodes, services, tasks, FACTS)
    assert "tenant" not in bare.services[0].to_dict()
    assert [p.describe() for p in choose_preemptions(
        bare, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100)] == [
        "preempt team-b_batch (priority 0) on gpu-node-2 for team-b-greedy_x "
        "(priority 999999)"]


def test_team_a_at_its_ceiling_preempts_team_b_which_may_not_opt_out(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, TWO_TEAMS)
    # team-b's batch says preemptible: false; team-b may not opt out, so it is a victim
    nodes, services, tasks = _held_whole("team-b_batch", "team-b",
                                         {f"{P}preemptible": "false"}, HIGH)
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert [p.describe() for p in choose_preemptions(
        plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100)] == [
        "preempt team-b_batch (priority 0) on gpu-node-2 for team-a_high (priority 100)"]


BROKEN_LABELS = [
    pytest.param({f"{P}preemptible": "nope"}, id="a-bad-value"),
    pytest.param({f"{P}queue": "team-a"}, id="another-tenants-queue"),
    pytest.param({f"{P}priority": "high!"}, id="a-bad-priority"),
]


@pytest.mark.parametrize("broken", BROKEN_LABELS)
def test_a_holder_that_breaks_its_labels_is_still_a_victim(tmp_path: Path,
                                                           broken: dict[str, str]) -> None:
    """A label change restarts no task, and an invalid request keeps its GPUs: read as
    no request, team-b (which may not opt out) made its batch service no victim, by
    priority or by reclaim, by breaking one label after it was placed. It is read as
    the most team-b's labels could ask (priority 0, preemptible), stopped, never moved."""
    cfg = _cfg(tmp_path, TWO_TEAMS.replace(
        "team-a: {", "team-a: {queues: [team-a], ").replace(
        "    tenants:", "    queues: {team-a: {guaranteed: 2}}\n    tenants:"))
    nodes, services, tasks = _held_whole("team-b_batch", "team-b", broken, HIGH)
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert {sp.name: sp.status for sp in plan.services}["team-b_batch"] == "invalid"
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [p.describe() for p in got] == [
        "preempt team-b_batch (priority 0) on gpu-node-2 for team-a_high (priority 100)"]
    assert not got[0].moves  # (a move would place its broken request again)
    # by quota alone too: team-a's queue is below its guarantee, team-b has none
    level = [replace(s, labels={**s.labels, f"{P}priority": "0"})
             if s.name == "team-a_high" else s for s in services]
    plan = new_planner(cfg).plan(nodes, level, tasks, FACTS)
    assert [p.describe() for p in choose_preemptions(
        plan, nodes, level, tasks, FACTS, prefix=P, preemptible_below=100)] == [
        "preempt team-b_batch (priority 0) on gpu-node-2 for team-a_high (priority 0)"]


def test_the_daemon_stops_a_holder_that_broke_its_labels(tmp_path: Path) -> None:
    nodes, services, tasks = _held_whole("team-b_batch", "team-b",
                                         {f"{P}preemptible": "nope"}, HIGH)
    sw = RecordingSwarm(nodes, services, tasks)
    _daemon(sw, tmp_path, TWO_TEAMS).cycle()
    assert gate_key(P, "team-b_batch") not in sw.node("n-4090").labels
    record = json.loads(sw.service("id-team-b_batch").labels[f"{P}state.preempted"])
    assert record["by"] == "team-a_high"


def test_a_broken_holder_keeps_what_its_tenants_labels_could_give(tmp_path: Path) -> None:
    """Read as the most its tenant's labels could ask, no less: team-a may opt out, so
    its holder whose label broke is protected as a valid opt-out was; and its priority
    is team-a's ceiling, so a request of 100 or below stops it no more than before."""
    cfg = _cfg(tmp_path, TWO_TEAMS.replace("max_priority: 100, may_opt_out: true",
                                           "max_priority: 100, may_opt_out: false"))
    nodes, services, tasks = _held_whole("team-a_batch", "team-a",
                                         {f"{P}preemptible": "nope"}, HIGH)
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []
    opt = new_planner(_cfg(tmp_path, TWO_TEAMS.replace("priority: 100, may_opt_out: true",
                                                       "priority: 50, may_opt_out: true")))
    plan = opt.plan(nodes, services, tasks, FACTS)
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []
    # Without tenants, labels are self-declared (any holder may say preemptible: false):
    # a broken one is no victim, as before.
    plan = new_planner(Config()).plan(nodes, services, tasks, FACTS)
    assert plan.held_as == {}


def _daemon(sw: RecordingSwarm, tmp: Path, cfg_text: str) -> Daemon:
    from swarmgpu.manager.cycle.wiring import daemon_steps

    base = _cfg(tmp, cfg_text)
    port = closed_port()
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(port=port, timeout_s=0.5, identity="none"),
                 preemption=base.preemption, tenants=base.tenants, queues=base.queues)
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=DGX_F)
    d.book.records["n-4090"] = AgentRecord("gpu-node-2", last_ok=time.time(), facts=R4090_F)
    d.use(daemon_steps(d))
    return d


def _closed(sw: RecordingSwarm) -> set[str]:
    """The holders whose gate on n-4090 was closed (preempted)."""
    node = sw.node("n-4090").labels
    return {n for n in ("batch_b1", "batch_b2", "batch_b3", "batch_b4")
            if gate_key(P, n) not in node}


BUDGETS = """\
    preemption: {dry_run: false, max_per_hour: 3, settle_s: 0}
    tenants:
      team-a: {stacks: ["team-a*"], max_priority: 100, preemptions_per_hour: 1}
      team-b: {stacks: ["team-b*"], max_priority: 100, preemptions_per_hour: 2}
      batch: {stacks: ["batch"], max_priority: 0}
    """


def test_preemption_budgets_are_spent_per_tenant(tmp_path: Path) -> None:
    """Four batch holders of 2 GPUs each fill n-4090. team-a's two preemptors could take
    two of them, but team-a's budget is 1 an hour; team-b's two take two more (its own
    budget of 2). The cluster's max_per_hour (3) still caps the whole: the fourth goes
    to nobody."""
    want = {f"{P}gpus": "2", f"{P}priority": "100"}
    sw = RecordingSwarm(*_full_4090(
        {f"batch_b{i}": ("batch", 2) for i in range(1, 5)},
        {"team-a_a1": ("team-a", want), "team-a_a2": ("team-a", want),
         "team-b_b1": ("team-b", want), "team-b_b2": ("team-b", want)}))
    d = _daemon(sw, tmp_path, BUDGETS)
    d.cycle()
    closed = _closed(sw)
    # In one cycle: team-a's first (its budget of 1), team-b's two (its budget of 2).
    assert len(closed) == 3, closed
    by_record = {json.loads(sw.service(f"id-{n}").labels[f"{P}state.preempted"])["by"]
                 for n in closed}
    assert by_record == {"team-a_a1", "team-b_b1", "team-b_b2"}
    for _ in range(2):  # more cycles within the hour: neither budget lets more go
        d.cycle()
    assert len(_closed(sw)) == 3


def test_a_new_leader_spends_what_is_left_of_the_hour(tmp_path: Path) -> None:
    """The hour is kept on the swarm object: a fail-over (a new daemon, nothing in its
    memory) must not give team-a a fresh budget. max_per_hour 4, so only team-a's own
    budget (1) keeps its second preemptor from the fourth batch holder."""
    want = {f"{P}gpus": "2", f"{P}priority": "100"}
    sw = RecordingSwarm(*_full_4090(
        {f"batch_b{i}": ("batch", 2) for i in range(1, 5)},
        {"team-a_a1": ("team-a", want), "team-a_a2": ("team-a", want),
         "team-b_b1": ("team-b", want), "team-b_b2": ("team-b", want)}))
    cfg = BUDGETS.replace("max_per_hour: 3", "max_per_hour: 4")
    _daemon(sw, tmp_path, cfg).cycle()
    assert len(_closed(sw)) == 3
    stored = sw.swarm_labels()
    assert len(stored[f"{P}state.preemptions"].split(",")) == 3
    assert len(stored[f"{P}state.preemptions.team-a"].split(",")) == 1
    assert len(stored[f"{P}state.preemptions.team-b"].split(",")) == 2
    (tmp_path / "new").mkdir()
    new_leader = _daemon(sw, tmp_path / "new", cfg)
    for _ in range(2):
        new_leader.cycle()
    assert len(_closed(sw)) == 3, "the new leader gave team-a a fresh hour"


def test_the_cluster_cap_still_holds_over_the_tenants(tmp_path: Path) -> None:
    want = {f"{P}gpus": "2", f"{P}priority": "100"}
    sw = RecordingSwarm(*_full_4090(
        {f"batch_b{i}": ("batch", 2) for i in range(1, 5)},
        {"team-a_a1": ("team-a", want), "team-b_b1": ("team-b", want),
         "team-b_b2": ("team-b", want)}))
    d = _daemon(sw, tmp_path, BUDGETS.replace("max_per_hour: 3", "max_per_hour: 1"))
    d.cycle()
    assert len(_closed(sw)) == 1


# --- render --check and audit -----------------------------------------------------------


STACK = """\
version: "3.8"
services:
  x:
    image: busybox
    deploy:
      labels: {LABELS}
"""


def _check(tmp_path: Path, stack_name: str, labels: dict[str, str],
           cfg_text: str = TWO_TEAMS) -> Any:
    from swarmgpu.cli import main

    cfg = tmp_path / "config.yml"
    cfg.write_text(textwrap.dedent(cfg_text))
    f = tmp_path / "stack.yml"
    f.write_text(STACK.replace("{LABELS}", json.dumps(labels)))
    return CliRunner().invoke(main, ["render", "--check", "--config", str(cfg),
                                     "-n", stack_name, str(f)])


def test_render_check_refuses_labels_above_the_tenants_ceiling(tmp_path: Path) -> None:
    greedy = {f"{P}gpus": "2", f"{P}priority": "999999", f"{P}preemptible": "false"}
    res = _check(tmp_path, "team-b-greedy", greedy)
    assert res.exit_code == 1, res.output
    assert ("services.x.deploy.labels: priority 999999 capped at 0 by tenant team-b (its "
            "max_priority) (stack team-b-greedy; ask for no more, or change "
            "tenants.team-b in the config)") in res.output
    assert f"{P}preemptible=false ignored: tenant team-b may not opt out" in res.output
    assert "2 error(s); nothing written" in res.output
    # At or below the ceiling: valid. The same labels under team-a's stack name: valid.
    ok = {f"{P}gpus": "2", f"{P}priority": "0"}
    assert _check(tmp_path, "team-b-greedy", ok).exit_code == 0
    res = _check(tmp_path, "team-a-x", {**greedy, f"{P}priority": "inference"})
    assert res.exit_code == 0, res.output
    assert _check(tmp_path, "team-a-x", {**greedy}).exit_code == 1  # 999999 > 100
    # A class resolves to its number first, then the ceiling applies.
    res = _check(tmp_path, "team-a-x", {f"{P}priority": "critical"})
    assert res.exit_code == 1 and "priority critical (1000) capped at 100" in res.output
    # Without tenants in the config: as today, self-declared (valid).
    assert _check(tmp_path, "team-b-greedy", greedy, "{}\n").exit_code == 0


def test_render_check_refuses_another_tenants_queue(tmp_path: Path) -> None:
    res = _check(tmp_path, "team-b", {f"{P}queue": "research"}, QUEUES)
    assert res.exit_code == 1
    assert "research is tenant team-a's" in res.output
    assert _check(tmp_path, "team-a", {f"{P}queue": "research"}, QUEUES).exit_code == 0


def test_audit_says_priorities_are_self_declared_without_tenants(tmp_path: Path) -> None:
    nodes, services, tasks = _full_4090(
        {"team-b_batch": ("team-b", 8)},
        {"team-b-greedy_x": ("team-b-greedy", {f"{P}gpus": "2", f"{P}priority": "999999"})})
    snap = Snapshot(nodes, services, tasks, {})
    (check,) = audit_checks(Config())
    found = check(snap)
    assert SELF_DECLARED in found and SELF_DECLARED.advisory
    assert not [f for f in found if f.kind == "tenant-limit"]
    (check,) = audit_checks(_cfg(tmp_path, TWO_TEAMS))
    found = check(snap)
    assert SELF_DECLARED not in found
    limits = [(f.kind, f.subject, f.advisory, f.message) for f in found
              if f.kind == "tenant-limit"]
    assert limits == [("tenant-limit", "team-b-greedy_x", False, "tenant team-b: priority "
                       "999999 capped at 0 by tenant team-b (its max_priority)")]
    # No GPU request at all: nothing to say.
    assert check(Snapshot(nodes[:2], [], [], {})) == []
    (bare,) = audit_checks(Config())
    assert bare(Snapshot(nodes[:2], [], [], {})) == []


def test_audit_names_a_service_several_tenants_match(tmp_path: Path) -> None:
    nodes, services, tasks = _full_4090({"team-a_x": ("team-a", 1)}, {})
    (check,) = audit_checks(_cfg(tmp_path, """\
        tenants:
          team: {stacks: ["team*"], services: ["*_x"]}
          team-a: {stacks: ["team-a*"], max_priority: 100}
        """))  # (team-a still takes team-a_y: team before it without services is refused)
    (f,) = [f for f in check(Snapshot(nodes, services, tasks, {})) if f.kind == "tenant-overlap"]
    assert f.advisory and f.message == ("matches tenants team, team-a; the first in the "
                                        "config's order, team, takes it")


def test_status_and_the_map_document_carry_the_limits(tmp_path: Path) -> None:
    from swarmgpu.manager.web.cluster_view import build_cluster, render_status

    cfg = _cfg(tmp_path, TWO_TEAMS)
    nodes, services, tasks = _full_4090(
        {"team-b_batch": ("team-b", 8)},
        {"team-b-greedy_x": ("team-b-greedy", {f"{P}gpus": "2", f"{P}priority": "999999"})})
    snap = Snapshot(nodes, services, tasks, {})
    doc = build_cluster(snap, new_planner(cfg).plan(nodes, services, tasks, FACTS), prefix=P)
    (sv,) = [sv for sv in doc["services"] if sv["name"] == "team-b-greedy_x"]
    assert sv["tenant"] == "team-b" and "capped at 0 by tenant team-b" in sv["limits"][0]
    text = render_status(doc)
    assert "tenant limits (the labels asked for more):" in text
    assert "team-b-greedy_x: priority 999999 capped at 0 by tenant team-b" in text
    js = (Path(__file__).parents[1] / "swarmgpu" / "manager" / "web" / "app.js").read_text()
    assert 'svc.tenant ? ["Tenant", svc.tenant]' in js and '["Limited", why]' in js


# --- the example of docs/requests.md -------------------------------------------------------


def _documented(tmp_path: Path) -> Config:
    """The config block of docs/requests.md, "An example: one inference team, two research
    teams", as written there."""
    doc = (Path(__file__).parents[1] / "docs" / "requests.md").read_text()
    part = doc.split("#### An example: one inference team, two research teams", 1)[1]
    block = part.split("```yaml\n", 1)[1].split("```", 1)[0]
    return _cfg(tmp_path, block)


def test_the_documented_example_does_what_the_docs_say(tmp_path: Path) -> None:
    cfg = _documented(tmp_path)
    t = Tenants.from_config(cfg)
    assert t is not None
    assert [x.name for x in t.specs] == ["inference", "research-vision", "research-nlp",
                                         "default"]
    assert {x.name: x.preemptions_per_hour for x in t.specs} == {
        "inference": 6, "research-vision": 2, "research-nlp": 2, "default": 5}
    assert t.quotas(cfg.queues) == {"inference": (8000, None), "research-vision": (4000, 12000),
                                    "research-nlp": (4000, 12000), "default": (0, 0)}
    # inference: up to 100 (critical capped), may opt out
    got = t.apply(_req(priority="critical", preemptible="false"), "infer-chat_api",
                  "infer-chat")
    assert isinstance(got, GpuRequest) and (got.priority, got.preemptible) == (100, False)
    assert got.limits == ("priority critical (1000) capped at 100 by tenant inference (its "
                          "max_priority)",)
    # research: priority 0, always preemptible, only its own queue
    got = t.apply(_req(priority="inference", preemptible="false"), "vision-x_train", "vision-x")
    assert isinstance(got, GpuRequest) and got.priority == 0 and got.is_preemptible(100)
    assert got.queue == "research-vision" and len(got.limits) == 2
    assert isinstance(t.apply(_req(queue="research-nlp"), "vision-x_t", "vision-x"),
                      RequestError)
    assert isinstance(t.apply(_req(queue="inference"), "nlp-y_t", "nlp-y"), RequestError)

    planner = new_planner(cfg)
    # anything else: pending at its queue's max of 0
    nodes, services, tasks = _full_4090({}, {"misc_x": ("misc", {f"{P}gpus": "1"})})
    (sp,) = planner.plan(nodes, services, tasks, FACTS).services
    assert sp.status == "pending" and (sp.reason or "").startswith(
        "queue default at its quota: max 0 GPUs")
    # inference at its ceiling preempts research work, down to research's guarantee of 4
    # (a guarantee holds against another queue's priority: vision-x_train holding all 8
    # is not stopped, which would leave research-vision none)
    chat = {"infer-chat_api": ("infer-chat", {f"{P}gpus": "2", f"{P}priority": "inference"})}
    for held, says in (({"vision-x_a": ("vision-x", 4), "vision-x_b": ("vision-x", 4)},
                        ["preempt vision-x_a (priority 0) -> moved to gpu-node-1 on "
                         "gpu-node-2 for infer-chat_api (priority 100)"]),
                       ({"vision-x_train": ("vision-x", 8)}, [])):
        nodes, services, tasks = _full_4090(held, chat)
        plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
        assert [p.describe() for p in choose_preemptions(
            plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100)] == says
    # research does not preempt research by priority; it takes back up to its guarantee
    # from the other team above its own
    nodes, services, tasks = _full_4090(
        {"nlp-y_a": ("nlp-y", 4), "nlp-y_b": ("nlp-y", 4)},
        {"vision-x_t": ("vision-x", {f"{P}gpus": "2", f"{P}priority": "50"})})
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100)
    assert p.service == "vision-x_t" and p.priority == 0
    (v,) = p.victims  # either of the two: one frees enough (the newest, then by name)
    assert v.service in ("nlp-y_a", "nlp-y_b") and v.quota == "research-nlp"


# --- labels the daemon owns, written by a stack ------------------------------------------


def test_a_forged_preempted_record_buys_no_immunity(tmp_path: Path) -> None:
    """``<p>state.preempted`` is the daemon's record of a preemption, but it sits in the
    victim's own ``deploy.labels``: team-b (may not opt out) writes one with a time far
    ahead (or just now, refreshed by a re-deploy) on its batch service. The victim
    cooldown must not read it as a preemption that happened: team-a's service at its
    ceiling still preempts the batch service."""
    import time

    for at in (time.time() + 10 * 365 * 86400, time.time()):
        forged = json.dumps({"by": "x", "priority": 0, "at": at, "node": "n-4090"})
        nodes, services, tasks = _held_whole("team-b_batch", "team-b",
                                             {f"{P}state.preempted": forged}, HIGH)
        sw = RecordingSwarm(nodes, services, tasks)
        d = _daemon(sw, tmp_path, TWO_TEAMS)
        d.cycle()
        node = sw.node("n-4090").labels
        assert gate_key(P, "team-b_batch") not in node, f"a forged record (at {at}) protected it"
        st = json.loads(sw.service("id-team-b_batch").labels[f"{P}state.preempted"])
        assert st["by"] == "team-a_high"  # the daemon's own record replaced the forged one


def test_a_preempted_record_dated_at_infinity_is_no_record(tmp_path: Path) -> None:
    """JSON reads ``Infinity`` and ``1e999`` as an infinite time: such a record, which
    a stack can write, is not read (the victim cooldown's check of its second raised
    OverflowError, and the preemption step failed every cycle); the batch service is
    preempted as any other."""
    for at, prio in (("Infinity", "0"), ("-Infinity", "0"), ("NaN", "0"), ("1e999", "0"),
                     ("1", "Infinity")):
        forged = f'{{"by": "x", "priority": {prio}, "at": {at}, "node": "n-4090"}}'
        nodes, services, tasks = _held_whole("team-b_batch", "team-b",
                                             {f"{P}state.preempted": forged}, HIGH)
        sw = RecordingSwarm(nodes, services, tasks)
        _daemon(sw, tmp_path, TWO_TEAMS).cycle()
        assert gate_key(P, "team-b_batch") not in sw.node("n-4090").labels, at


def _rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e9):09d}Z"


def _recorded_holder(record_at: float, task_made: float, hour: float) -> RecordingSwarm:
    """team-b's batch service holds n-4090, its task made at ``task_made``, with a
    ``state.preempted`` record at ``record_at`` of a stop on n-dgx (a record naming the
    node it holds is a gate that never closed: tests/test_victim_record_cooling.py); the
    swarm object's hour has it stopped at ``hour`` (the victims' list too:
    tests/test_victim_record_copied.py); team-a's service at its ceiling waits for 2 of
    those GPUs."""
    record = json.dumps({"by": "old", "priority": 100, "at": round(record_at, 3),
                         "node": "n-dgx"})
    nodes, services, tasks = _held_whole("team-b_batch", "team-b",
                                         {f"{P}state.preempted": record}, HIGH)
    tasks[0] = replace(tasks[0], created_at=_rfc3339(task_made))
    return RecordingSwarm(nodes, services, tasks, {
        f"{P}state.preemptions": f"{round(hour)}",
        f"{P}state.preempted-victims": f"{services[0].id}@{round(hour)}"})


def test_a_genuine_preempted_record_still_cools_the_victim_under_a_new_leader(
        tmp_path: Path) -> None:
    """The record the daemon wrote, with the stop in the hour on the swarm object, on a
    victim whose task was made again after that stop (a job's new run keeps its record
    while it runs): a new leader (nothing in its memory) keeps the victim's cooldown."""
    now = time.time() - 5
    sw = _recorded_holder(now, now + 2, now)
    _daemon(sw, tmp_path, TWO_TEAMS).cycle()
    assert gate_key(P, "team-b_batch") in sw.node("n-4090").labels


def test_a_preempted_record_copied_onto_a_running_holder_buys_no_immunity(
        tmp_path: Path) -> None:
    """A genuine record's second is in the hour, but the record is a label its stack can
    copy (from one of its services that was preempted) onto another that has run all
    along, and re-add each time placement takes it off. A holder whose task ran before
    the stop it names was not that stop's victim: team-a's service still preempts it."""
    now = time.time() - 5
    sw = _recorded_holder(now, now - 3600, now)
    _daemon(sw, tmp_path, TWO_TEAMS).cycle()
    assert gate_key(P, "team-b_batch") not in sw.node("n-4090").labels
    # the stop's victim named in the preemption's list (its record is its cooldown now)
    victims = sw.swarm_labels()[f"{P}state.preempted-victims"].split(",")
    batch = next(s for s in sw.services() if s.name == "team-b_batch")
    assert victims[-1].startswith(batch.id + "@"), victims


def test_a_job_victims_record_counts_by_the_tasks_of_its_new_run() -> None:
    """A preempted job's spec write starts a new run; tasks of its earlier run, made
    before the stop, are not the ones that bear the record out (a new leader). Its stop
    was on n-dgx, its new run on n-4090 (one still on the node its record names is no
    victim whose gate closed, whatever its tasks)."""
    now = time.time() - 5
    record = json.dumps({"by": "old", "priority": 100, "at": round(now, 3), "node": "n-dgx"})
    job = replace(_stack_svc("team-b", "train", {f"{P}gpus": "1",
                                                 f"{P}state.preempted": record}),
                  mode="replicated-job", job_iteration=2)
    tasks = [SwarmTask(f"t{run}", job.id, "n-4090", 1, "running", "complete", (),
                       job_iteration=run, created_at=_rfc3339(at))
             for run, at in ((1, now - 3600), (2, now + 2))]
    held = {"n-4090": {job.name: ()}}
    victims = {job.id: frozenset({round(now)})}  # (the preemption's list names it)
    got = recorded_cooling([job], tasks, P, now + 5, 600, [now], held, victims)
    assert got == {job.name}
    assert recorded_cooling([job], [replace(t, job_iteration=2) for t in tasks], P, now + 5,
                            600, [now], held, victims) == set()


# --- a queue's max, whatever the service's mode or labels ---------------------------------


CAPPED = """\
    tenants:
      team-b: {stacks: ["team-b*"], max_priority: 0, guaranteed: 0, max: 2}
      default: {max: 0}
    """


def _two_nodes() -> list[SwarmNode]:
    return [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
            sw_node("n-4090", "gpu-node-2")]


def _used(plan: Any, queue: str) -> float:
    (q,) = [q for q in plan.queues if q["queue"] == queue]
    return float(q["used_gpus"])


def test_device_labels_a_stack_writes_do_not_bypass_its_queues_max(tmp_path: Path) -> None:
    """``<p>devices.<node>`` lists in a stack's own labels (no ledger entry) are adopted
    onto free GPUs. Adopting them is placing them: team-b (max 2 GPUs) names four free
    GPUs on each node for its 2 replicas of 4, and an unknown stack (default, max 0)
    names one; neither gets a ledger entry or an open gate."""
    cfg = _cfg(tmp_path, CAPPED)
    d_uuids = [g.uuid for g in DGX_F.gpus]
    greedy = _stack_svc("team-b", "x", {
        f"{P}gpus": "4", devices_key(P, "n-dgx"): ",".join(d_uuids[:4]),
        devices_key(P, "n-4090"): ",".join(R_UUIDS[:4])})
    greedy = replace(greedy, replicas=2)
    nobody = _stack_svc("misc", "y", {f"{P}gpus": "1", devices_key(P, "n-dgx"): d_uuids[7]})
    plan = new_planner(cfg).plan(_two_nodes(), [greedy, nobody], [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    for name, queue in (("team-b_x", "team-b"), ("misc_y", "default")):
        assert by[name].status == "pending" and not by[name].placements, by[name].to_dict()
        assert "at its quota" in (by[name].reason or "")
        assert _used(plan, queue) == 0
        for labels in plan.node_set.values():
            assert assign_key(P, name) not in labels and gate_key(P, name) not in labels
    # Within the max, a declared list is adopted as before (a rendered stack).
    ok = _stack_svc("team-b", "z", {f"{P}gpus": "2", devices_key(P, "n-dgx"): ",".join(
        d_uuids[:2])})
    (sp,) = new_planner(cfg).plan(_two_nodes(), [ok], [], FACTS).services
    assert sp.status == "placed" and [p.gpus for p in sp.placements] == [(0, 1)]


def test_a_global_service_stays_within_its_queues_max(tmp_path: Path) -> None:
    """A global service gets one holding per GPU node: with a max of 2 GPUs, a 2-GPU
    global service of team-b holds on one node and the other waits, saying why; an
    unknown stack's (max 0) holds nothing."""
    cfg = _cfg(tmp_path, CAPPED)
    g = _stack_svc("team-b", "g", {f"{P}gpus": "2"})
    g = replace(g, mode="global", replicas=None)
    plan = new_planner(cfg).plan(_two_nodes(), [g], [], FACTS)
    (sp,) = plan.services
    assert len(sp.placements) == 1 and _used(plan, "team-b") == 2
    (why,) = sp.nodes_waiting.values()
    assert "queue team-b at its quota: max 2 GPUs" in why
    assert sum(assign_key(P, "team-b_g") in labels for labels in plan.node_set.values()) == 1
    other = replace(_stack_svc("misc", "g", {f"{P}gpus": "1"}), mode="global", replicas=None)
    plan = new_planner(cfg).plan(_two_nodes(), [other], [], FACTS)
    (sp,) = plan.services
    assert sp.status == "pending" and not sp.placements and _used(plan, "default") == 0
    assert (sp.reason or "").startswith("queue default at its quota: max 0 GPUs")


def test_a_replicated_job_stays_within_its_queues_max(tmp_path: Path) -> None:
    """A replicated job holds GPUs for the tasks that may run at once: 3 x 2 GPUs is
    above team-b's max of 2, so it waits (as a replicated service holding nothing
    does); 1 x 2 GPUs fits."""
    cfg = _cfg(tmp_path, CAPPED)
    for conc, placed in ((3, 0), (1, 1)):
        job = replace(_stack_svc("team-b", "j", {f"{P}gpus": "2"}), mode="replicated-job",
                      replicas=None, max_concurrent=conc, total_completions=3)
        plan = new_planner(cfg).plan(_two_nodes(), [job], [], FACTS)
        (sp,) = plan.services
        assert len(sp.placements) == placed and _used(plan, "team-b") <= 2, sp.to_dict()
        if not placed:
            assert "queue team-b at its quota" in (sp.reason or "")


def test_a_global_services_ledger_holdings_stay_above_a_lowered_max(tmp_path: Path) -> None:
    """The max never stops running work: holdings in the ledger on both nodes stay when
    the max is below them; only a device list the stack declares is held back."""
    cfg = _cfg(tmp_path, CAPPED)
    d_uuids = [g.uuid for g in DGX_F.gpus]
    nodes = _two_nodes()
    held = {"n-dgx": d_uuids[:2], "n-4090": list(R_UUIDS[:2])}
    nodes = [replace(n, labels={
        assign_key(P, "team-b_g"): Holding("team-b_g", n.id, tuple(held[n.id]),
                                           (1000, 1000)).label_value(),
        gate_key(P, "team-b_g"): "true"}) if n.id in held else n for n in nodes]
    g = replace(_stack_svc("team-b", "g", {
        f"{P}gpus": "2", **{devices_key(P, nid): ",".join(u) for nid, u in held.items()}}),
        mode="global", replicas=None)
    plan = new_planner(cfg).plan(nodes, [g], [], FACTS)
    (sp,) = plan.services
    assert len(sp.placements) == 2 and not sp.nodes_waiting and _used(plan, "team-b") == 4
    assert not [k for ks in plan.node_remove.values() for k in ks if "team-b_g" in k]


def test_a_packed_services_replicas_are_counted_once(tmp_path: Path) -> None:
    """4 replicas x 1 GPU packed on one node use 4 GPUs of the queue, not 4 plus the 3
    slots beyond the node's one holding (which held team-b's next service back)."""
    from support.placement import apply

    cfg = _cfg(tmp_path, CAPPED.replace("max: 2", "max: 5"))
    nodes = [sw_node("n-4090", "gpu-node-2")]
    s = replace(_stack_svc("team-b", "x", {f"{P}gpus": "1", f"{P}pack": "always"}),
                replicas=4)
    planner = new_planner(cfg)
    plan = planner.plan(nodes, [s], [], {"n-4090": R4090_F})
    nodes = apply(nodes, plan)
    s = replace(s, labels={**s.labels, **plan.services[0].service_labels_set}, version=2)
    one = _stack_svc("team-b", "y", {f"{P}gpus": "1"})
    plan = planner.plan(nodes, [s, one], [], {"n-4090": R4090_F})
    by = {sp.name: sp for sp in plan.services}
    assert len(by["team-b_x"].placements) == 4 and by["team-b_y"].status == "placed"
    assert _used(plan, "team-b") == 5


def test_a_holder_moved_to_another_of_its_tenants_queues_frees_no_room_past_their_maxes(
        tmp_path: Path) -> None:
    """team-a owns research and scratch, each max 2. Its holder in scratch relabelled
    to research keeps its GPUs (the max never stops running work) and scratch reads
    empty; before, a new scratch service was placed there and team-a held 6 GPUs, and
    again each time it moved a holder over. Its queues together bound its new work."""
    from support.placement import apply

    cfg = _cfg(tmp_path, """\
        queues: {research: {max: 2}, scratch: {max: 2}}
        tenants:
          team-a: {stacks: ["team-a*"], queues: [research, scratch]}
        """)
    planner, nodes = new_planner(cfg), _two_nodes()
    x = _stack_svc("team-a", "x", {f"{P}gpus": "2", f"{P}queue": "scratch"})
    r = _stack_svc("team-a", "r", {f"{P}gpus": "2", f"{P}queue": "research"})
    plan = planner.plan(nodes, [x, r], [], FACTS)
    nodes = apply(nodes, plan)
    x = replace(x, labels={**x.labels, f"{P}queue": "research"}, version=2)
    y = _stack_svc("team-a", "y", {f"{P}gpus": "2", f"{P}queue": "scratch"})
    plan = planner.plan(nodes, [x, r, y], [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert len(by["team-a_x"].placements) == 1  # running work kept
    assert (_used(plan, "research"), _used(plan, "scratch")) == (4, 0)
    assert by["team-a_y"].status == "pending" and not by["team-a_y"].placements
    assert by["team-a_y"].reason == (
        "tenant team-a at its quota (its queues research, scratch together): max 4 GPUs, "
        "4 used, this service needs 2")
    assert [q["blocked"] for q in plan.queues if q["queue"] == "scratch"] == [["team-a_y"]]


RECLAIM = """\
    preemption: {dry_run: false}
    queues: {research: {guaranteed: 2}, scratch: {guaranteed: 2}}
    tenants:
      team-a: {stacks: ["team-a*"], queues: [research, scratch]}
      team-b: {stacks: ["team-b*"], guaranteed: 1}
    """


def _queued(services: list[SwarmService], queues: dict[str, str]) -> list[SwarmService]:
    """``services`` with ``swarmgpu.queue`` set as ``queues`` says (full name -> queue)."""
    return [replace(s, labels={**s.labels, f"{P}queue": queues[s.name]})
            if s.name in queues else s for s in services]


def test_a_holder_moved_to_another_of_its_tenants_queues_reclaims_nothing_past_their_guarantees(
        tmp_path: Path) -> None:
    """team-a owns research and scratch, each guaranteed 2, and holds them both; team-b
    holds 4 on a guarantee of 1. team-a relabels its scratch holder to research (it keeps
    its GPUs): scratch reads empty, below its guarantee. Before, a new scratch service
    reclaimed 2 of team-b's GPUs and team-a held 6, past the 4 its guarantees sum to.
    Its queues' guarantees together bound what it reclaims: it takes back from its own
    research, above its guarantee, and from no other tenant."""
    cfg = _cfg(tmp_path, RECLAIM)
    y = {"team-a_y": ("team-a", {f"{P}gpus": "2", f"{P}queue": "scratch"})}
    held = {"team-a_x": ("team-a", 2), "team-a_r": ("team-a", 2), "team-b_a": ("team-b", 2),
            "team-b_b": ("team-b", 2)}
    nodes, services, tasks = _full_4090(held, y)
    services = _queued(services, {"team-a_x": "research", "team-a_r": "research"})
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert (_used(plan, "research"), _used(plan, "scratch")) == (4, 0)
    assert [q["tenant"] for q in plan.queues] == ["team-a", "team-a", "team-b"]
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100)
    (v,) = p.victims  # one of its own research holders (4 on 2), not team-b's (4 on 1)
    assert p.service == "team-a_y" and v.service in ("team-a_x", "team-a_r")
    assert v.quota == "research"
    # Below the sum it still reclaims, up to it: team-a holding 2, team-b 6
    held = {"team-a_r": ("team-a", 2), "team-b_a": ("team-b", 2), "team-b_b": ("team-b", 4)}
    nodes, services, tasks = _full_4090(held, y)
    services = _queued(services, {"team-a_r": "research"})
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert [p.describe() for p in choose_preemptions(
        plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100)] == [
        "preempt team-b_a (priority 0) -> moved to gpu-node-1 on gpu-node-2 for "
        "team-a_y (priority 0)"]


def test_a_guaranteed_queue_takes_back_gpus_an_unknown_stack_took_while_it_was_idle(
        tmp_path: Path) -> None:
    """Out of the box the default tenant has no queue. misc (no tenant's) took all 8 RTX
    4090s while team-a, guaranteed 4, was idle; before, team-a's request never got them
    back: reclaim took only from a configured queue, so the unconfigured outranked the
    operator's guarantee. Work of no queue is guaranteed nothing now: reclaimed, its
    ``preemptible: false`` ignored (default may not opt out); ops may, and keeps its."""
    cfg = _cfg(tmp_path, """\
        preemption: {dry_run: false}
        tenants:
          team-a: {stacks: ["team-a*"], guaranteed: 4}
          ops: {stacks: ["ops*"], may_opt_out: true}
        """)
    want = {"team-a_y": ("team-a", {f"{P}gpus": "2"})}
    for stack, says in (("misc", ["preempt misc_x (priority 0) on gpu-node-2 for team-a_y "
                                  "(priority 0)"]), ("ops", [])):
        nodes, services, tasks = _held_whole(f"{stack}_x", stack,
                                             {f"{P}preemptible": "false"}, want)
        plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
        assert [p.describe() for p in choose_preemptions(
            plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100)] == says


@pytest.mark.parametrize(("text", "says"), [
    ("queues: {1: {max: 4}}", "queues.1 (a queue name): expected a string, got 1 (a whole "
     "number); quote it as the file writes it if it is meant as text"),
    ("queues: {1: {max: 4}, q: {max: 2}}\ntenants: {a: {stacks: [a*]}}",
     "queues.1 (a queue name): expected a string"),  # was a TypeError (sorting 1 and 'q')
    ("queues: {~: {max: 4}}", "queues.None (a queue name): expected a string, got None"),
    ("tenants: {1: {stacks: [a*]}}", "tenants.1 (a tenant name): expected a string, got 1 "
     "(a whole number); quote it as the file writes it if it is meant as text"),
])
def test_a_name_that_is_not_text_is_refused_not_read_as_text(tmp_path: Path, text: str,
                                                             says: str) -> None:
    # queue_quotas took str(1): a queue "1" no config check had seen; with tenants, the
    # check sorted 1 beside "q" and stopped with a traceback.
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, text + "\n")
    assert any(says in err for err in e.value.errors), e.value.errors


@pytest.mark.parametrize("name", ["a b", "-x", "team/a", "é", "x" * 64])
def test_a_queue_no_label_can_name_is_refused(tmp_path: Path, name: str) -> None:
    # A queue named "a b" was accepted, and no swarmgpu.queue label could ever ask for it.
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, f"queues: {{'{name}': {{max: 4}}}}\n")
    assert any(f"queues.{name}: a queue name is what a swarmgpu.queue label can carry"
               in err for err in e.value.errors), e.value.errors
    _cfg(tmp_path, "queues: {research.v2_a-1: {max: 4}}\n")  # what a label can carry


def test_a_tenants_first_queue_needs_no_name_a_label_can_carry(tmp_path: Path) -> None:
    # A tenant's services without swarmgpu.queue count against its first queue: "team a"
    # is reached with no label, and worked; the label-name rule refused the config, and
    # the daemon did not start. A queue only a label could reach is still refused.
    text = ("queues: {'team a': {guaranteed: 4}, 'x y': {max: 2}, q: {max: 1}}\n"
            "tenants: {a: {stacks: [a*], queues: ['team a']}, "
            "b: {stacks: [b*], queues: [q, 'x y']}}\n")
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, text)
    (refused,) = [err for err in e.value.errors if "a queue name is" in err]
    assert "queues.x y: a queue name is what a swarmgpu.queue label can carry" in refused
    _cfg(tmp_path, text.replace("[q, 'x y']", "[q]").replace(", 'x y': {max: 2}", ""))
    assert queue_quotas({"team a": {"guaranteed": 4}}) == {"team a": (4000, None)}


def test_preemptors_of_one_queue_stop_no_more_victims_than_its_max_leaves_room_for(
        tmp_path: Path) -> None:
    """team-a (max 2 GPUs, holding none) has three 1-GPU services at priority 100 waiting
    for the RTX 4090s team-b's eight services hold. Each fits the max alone, so none is
    held at it; before, each preempted a victim, and the third's stop freed a GPU the
    max then kept it from: team-b lost a service for nothing. The round counts what its
    preemptors take against their queue's max, as the planner does."""
    cfg = _cfg(tmp_path, """\
        preemption: {dry_run: false, max_per_hour: 10}
        tenants:
          team-a: {stacks: ["team-a*"], max_priority: 100, max: 2}
          team-b: {stacks: ["team-b*"]}
        """)
    held = {f"team-b_x{i}": ("team-b", 1) for i in range(8)}
    want = {f"team-a_{n}": ("team-a", {f"{P}gpus": "1", f"{P}priority": "100"})
            for n in "pqr"}
    nodes, services, tasks = _full_4090(held, want)
    nodes = [n for n in nodes if n.id != "n-dgx"]  # (no room to move a victim to)
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert [q["blocked"] for q in plan.queues if q["queue"] == "team-a"] == [[]]
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [p.service for p in got] == ["team-a_p", "team-a_q"]
    # A tenant's queues together: research holds 3 (above its own max of 2: relabelled
    # there), scratch none; the two scratch services fit scratch's max, one the tenant's.
    cfg = _cfg(tmp_path, """\
        preemption: {dry_run: false, max_per_hour: 10}
        queues: {research: {max: 2}, scratch: {max: 2}}
        tenants:
          team-a: {stacks: ["team-a*"], max_priority: 100, queues: [research, scratch]}
          team-b: {stacks: ["team-b*"]}
        """)
    held = {**{f"team-a_r{i}": ("team-a", 1) for i in range(3)},
            **{f"team-b_x{i}": ("team-b", 1) for i in range(5)}}
    want = {f"team-a_{n}": ("team-a", {f"{P}gpus": "1", f"{P}priority": "100",
                                       f"{P}queue": "scratch"}) for n in "pq"}
    nodes, services, tasks = _full_4090(held, want)
    nodes = [n for n in nodes if n.id != "n-dgx"]
    services = _queued(services, {f"team-a_r{i}": "research" for i in range(3)})
    plan = new_planner(cfg).plan(nodes, services, tasks, FACTS)
    assert (_used(plan, "research"), _used(plan, "scratch")) == (3, 0)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [p.service for p in got] == ["team-a_p"]
