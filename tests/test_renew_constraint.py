"""The renewal constraint (``node.labels.<prefix>state.renew!=<n>``): the change of
placement alone with which placement replaces a task Swarm no longer tries beside a
running replica (tests/test_stranded.py). swarmgpu owns it wherever it reads or writes
constraints: the docker-proxy lets it through, a release takes it out, a plan is not
made from it, audit does not judge it; and no node ever has its label, so every node
meets it."""

from __future__ import annotations

import copy
from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.placement import DGX, FACTS, node, plan_placement, svc

from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.engine.proxy_policy import check_service_update
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.keys import (
    RENEW_STATE,
    is_renew,
    next_renewal,
    renew_constraint,
)
from swarmgpu.manager.placement.planned import planned_from
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.swarm.labels import desired_labels, owned_by_label_sync

P = "swarmgpu."
RENEW = renew_constraint(P, 7)


def test_the_renewal_is_read_as_swarm_reads_it_and_only_in_its_own_form() -> None:
    assert is_renew(RENEW, P) and is_renew(f" node.labels.{P}{RENEW_STATE} != 7 ", P)
    assert not is_renew(f"node.labels.{P}{RENEW_STATE}==7", P)  # the owner's
    assert not is_renew(f"node.labels.other.{RENEW_STATE}!=7", P)
    # The next value is past the spec version and every value the spec carries.
    assert next_renewal([RENEW], P, 3) == (renew_constraint(P, 8),)
    assert next_renewal([], P, 3) == (renew_constraint(P, 3),)


def test_no_node_ever_has_its_label() -> None:
    """Label sync never writes the key and owns it (a hand-set one is removed), so every
    node meets ``!=<n>`` (the config refuses a zone label under the prefix)."""
    labels = desired_labels(RTX4090.facts(), P)
    assert not any(k.startswith(P + "state.") for k in labels)
    assert owned_by_label_sync(P + RENEW_STATE, P)


def _spec(*cons: str) -> dict[str, object]:
    return {"Name": "app", "Labels": {f"{P}gpus": "1"},
            "TaskTemplate": {"ContainerSpec": {"Image": "busybox"},
                             "Placement": {"Constraints": ["node.labels.zone==a", *cons]}},
            "Mode": {"Replicated": {"Replicas": 2}}}


def test_the_proxy_lets_a_renewal_through() -> None:
    cur = _spec(RENEW)
    sp = SpecWrites(remove_constraints=(RENEW,), add_constraints=(renew_constraint(P, 9),))
    new = service_compute(sp)(copy.deepcopy(cur))
    assert new is not None and new != cur
    check_service_update(cur, new, P)


def test_a_plan_is_not_made_from_it() -> None:
    assert planned_from(_spec(RENEW), P) == planned_from(_spec(), P)


def test_a_release_takes_it_out_and_only_it() -> None:
    own = f"node.labels.{P}{RENEW_STATE}==x"  # not the renewal's form: the owner's
    s = replace(svc("app", {"team": "x"}), constraints=(*svc("app", {}).constraints,
                                                          RENEW, own))
    (sp,) = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services
    assert sp.status == "released" and RENEW in sp.remove_constraints
    assert own not in sp.remove_constraints


def test_audit_does_not_judge_it() -> None:
    n = node("n1", "gpu-node-2", {P + RENEW_STATE: "7"})  # set by hand, before sync
    s = replace(svc("app", {f"{P}gpus": "1"}), constraints=(RENEW,))
    res = FactsResult("n1", n.hostname, "http://x/facts", RTX4090.facts(), None, 0.0)
    found = audit(Snapshot([n], [s], [], {"n1": res}))
    assert not [f for f in found if f.subject == "app"], found
