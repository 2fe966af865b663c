"""The preemption budgets' hour on the swarm object (``manager.cycle.preempt_budget``):
what a new leader counts from the labels, and what it refuses to count. The fail-over
itself: tests/test_tenants.py::test_a_new_leader_spends_what_is_left_of_the_hour."""

from __future__ import annotations

from swarmgpu.manager.cycle.preempt_budget import MAX_SKEW_S, SpentHour

P = "swarmgpu."
NOW = 1_800_000_000.0
KEY = P + "state.preemptions"


def test_written_then_read_back_by_a_fresh_daemon() -> None:
    old = SpentHour(P)
    for t, tenant in ((NOW - 100, "team-a"), (NOW - 100, "team-a"), (NOW - 50, "team-b")):
        old.spend(t, tenant)
    labels = old.labels({"other": "kept"})
    assert labels is not None and labels["other"] == "kept"
    assert old.labels(labels) is None  # already says so: no write
    new = SpentHour(P)
    new.read(labels, NOW, ("team-a", "team-b"))
    assert list(new.all) == [NOW - 100, NOW - 100, NOW - 50]  # one preemption, two victims
    assert len(new.tenant("team-a")) == 2 and len(new.tenant("team-b")) == 1


def test_memory_and_label_count_each_second_once_at_the_larger_count() -> None:
    h = SpentHour(P)
    h.spend(NOW - 10, "")
    h.read({KEY: f"{NOW - 10:.0f},{NOW - 10:.0f},{NOW - 5:.0f}"}, NOW, ())
    assert list(h.all) == [NOW - 10, NOW - 10, NOW - 5]
    h.read({KEY: f"{NOW - 10:.0f}"}, NOW, ())  # read again: nothing counted twice
    assert len(h.all) == 3


def test_what_a_hand_edit_could_put_there_is_not_counted() -> None:
    h = SpentHour(P)
    h.read({KEY: ",".join(["x", "nan", "inf", "", f"{NOW + 10 * MAX_SKEW_S:.0f}",
                           f"{NOW - 3600:.0f}", f"{NOW - 7200:.0f}", f"{NOW - 1:.0f}"]),
            KEY + ".team-z": f"{NOW - 1:.0f}"}, NOW, ("team-a",))
    # garbage, a time far ahead (it would hold the budget spent) and times older than
    # the hour are dropped; a tenant the config does not name is not read
    assert list(h.all) == [NOW - 1]
    assert "team-z" not in h.by_tenant


def test_the_hour_passes() -> None:
    h = SpentHour(P)
    h.spend(NOW - 3599, "team-a")
    h.read({}, NOW, ("team-a",))
    assert len(h.all) == 1
    h.read({}, NOW + 2, ("team-a",))
    assert not h.all and not h.tenant("team-a")
