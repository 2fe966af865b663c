"""What `swarmgpu plan`, `status` and `apply` print: others' text (names, labels, agents' and the
daemon's words) shows its control characters escaped, one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.manager.commands.plan import entries, render_plan
from swarmgpu.manager.placement import ReplicaPlacement, ServicePlan
from swarmgpu.manager.web.cluster_view import render_status

ESC = "\x1b[2K\r"  # erase the line, back to its start
SHOWN = r"\x1b[2K\r"


def test_hostile_names_reasons_and_moves_show_escaped() -> None:
    sp = ServicePlan(
        f"web{ESC}",
        "id-web",
        None,
        f"gpus=1{ESC}",
        "pending",
        "Pending",
        placements=(ReplicaPlacement("n1", f"gpu{ESC}host", (0,), (f"GPU-{ESC}",), (1000,)),),
        reason=f"no fit{ESC}OK\u202e",
        warnings=(f"label x{ESC}\nnote",),
    )
    moves = {
        "proposed": [
            {
                "service": f"llm{ESC}",
                "from": "a",
                "to": "b",
                "gpus": [0],
                "trigger": "pack",
                "window": "5m",
                "reason": f"r{ESC}",
                "gain": 1,
            }
        ],
        "recent": [
            {"service": f"old{ESC}", "from": "a", "to": "b", "outcome": f"done{ESC}", "reason": "x"}
        ],
        "health": {"failing_nodes": {f"h{ESC}": f"why{ESC}"}},
        "notes": [f"health: {ESC}fake"],
    }
    text = render_plan(
        [sp],
        ungranted=[{"service": f"s{ESC}", "nodes": [f"n{ESC}"], "reason": "r", "fix": "f"}],
        workload={"source": f"w{ESC}", "top": []},
        health=[{"node": f"h{ESC}", "gpu": 0, "uuid": "GPU-1", "health": f"failed{ESC}"}],
        moves=moves,
        listen="127.0.0.1:9400",
    )
    assert not any(c in text for c in "\x1b\r\u202e"), text
    for shown in (
        f"web{SHOWN}: pending (Pending) gpus=1{SHOWN}",
        f"  gpu{SHOWN}host: GPU 0 GPU-{SHOWN}",
        rf"  why: no fit{SHOWN}OK\u202e",
        rf"  note: label x{SHOWN}\nnote",
        f"move llm{SHOWN}: a -> b",
        f"recent old{SHOWN}: a -> b: done{SHOWN}",
        f"node failing: h{SHOWN}: why{SHOWN}",
        f"health: {SHOWN}fake",
        f"  s{SHOWN} on n{SHOWN}: r",
        f"workload model: w{SHOWN}",
        f"GPU health: h{SHOWN} GPU 0 GPU-1: failed{SHOWN}",
    ):
        assert shown in text.splitlines() or any(
            ln.startswith(shown) for ln in text.splitlines()
        ), (shown, text)


def test_status_shows_hostile_hostnames_products_and_pending_reasons_escaped() -> None:
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    n = next(n for n in doc["nodes"] if n["gpu_count"])
    n["hostname"] = f"gpu{ESC}fake"
    n["product"] = f"H100{ESC}\u202e"
    n["agent"]["cause"] = f"it said{ESC}\nok"
    doc["pending"][0]["reason"] = f"no fit{ESC}"
    text = render_status(doc)
    assert not any(c in text for c in "\x1b\r\u202e"), text
    assert f"gpu{SHOWN}fake (" in text and rf"H100{SHOWN}\u202e" in text, text
    assert rf"it said{SHOWN}\nok" in text and f"- no fit{SHOWN}" in text, text


def test_apply_shows_hostile_changes_and_errors_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmgpu.cli import main
    from swarmgpu.cli import manager as cli_manager
    from swarmgpu.manager.services import release
    from swarmgpu.swarm import client

    def held(*_a: object, **_k: object) -> list[release.Released]:
        return [
            release.Released("web", [f"add env X=1{ESC}", "add constraint a==b\u202e"]),
            release.Released("llm", error=f"llm: invalid GPU request: gpus{ESC}x"),
        ]

    monkeypatch.setattr(cli_manager, "_snapshot", lambda cfg, _tenants, *_: None)
    monkeypatch.setattr(client, "SwarmClient", lambda *a, **k: None)
    monkeypatch.setattr(release, "release_held", held)
    res = CliRunner().invoke(main, ["apply", "--service", "web", "--service", "llm", "--dry-run"])
    assert res.exit_code == 1, res.output
    assert not any(c in res.output for c in "\x1b\r\u202e"), res.output
    assert rf"web: would write: add env X=1{SHOWN}; add constraint a==b\u202e" in res.output
    assert f"swarmgpu apply: llm: invalid GPU request: gpus{SHOWN}x" in res.output


def test_a_lone_surrogate_shows_escaped_and_the_text_can_be_printed() -> None:
    # JSON from the engine may carry "\ud800": printed raw, UTF-8 cannot encode it
    # and the command stopped with a UnicodeEncodeError.
    sp = ServicePlan("web\ud800", "id-web", None, "gpus=1", "pending", "Pending")
    text = render_plan([sp], ungranted=[], workload={}, health=[], moves=None, listen="x")
    assert text.encode("utf-8").startswith(rb"web\ud800: pending"), text


def test_an_answer_on_the_daemons_port_that_is_not_moves_is_read_not_trusted() -> None:
    # Whatever answers on http.listen (another program, an older daemon) was indexed as
    # the daemon's moves: a move without "from" stopped plan with a KeyError, an entry
    # that is not a mapping with an AttributeError.
    for moves in ({"proposed": [{"service": "llm"}], "recent": [{}]},
                  {"proposed": ["x", 1, None], "recent": "no", "health": [], "notes": 5},
                  {"proposed": {"a": 1}, "health": {"failing_nodes": {1: "x", "b": 2}}}):
        text = render_plan([], ungranted=[], workload={}, health=[], moves=moves,
                           listen="127.0.0.1:9402")
        assert "Traceback" not in text
    text = render_plan([], ungranted=[], workload={}, health=[],
                       moves={"proposed": [{"service": "llm"}]}, listen="127.0.0.1:9402")
    assert "move llm: None -> None" in text
    assert entries({"proposed": ["x", {"service": "a"}]}, "proposed") == [{"service": "a"}]


def test_plan_says_a_failed_service_in_its_text_and_exit_status(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A service whose planning raised (placement.isolate) is a swarmgpu fault: `plan`
    says so last and exits 1, as text and as JSON; a pending one is no fault (exit 0)."""
    from support.forged import snapshot, sw_svc

    from swarmgpu.cli import main
    from swarmgpu.cli import manager as cli_manager
    from swarmgpu.manager.cycle import grants, oneshot_plan
    from swarmgpu.manager.placement import PlacementPlan
    from swarmgpu.manager.placement.isolate import failed_plan
    from swarmgpu.manager.services.requests import RequestError
    from swarmgpu.swarm import client

    bad = failed_plan(sw_svc("bad", {"swarmgpu.gpus": "1"}),
                      RequestError("swarmgpu.gpus", "1", "x"), KeyError("k"))
    waits = ServicePlan("web", "id-web", None, "gpus=1", "pending", "Pending", reason="full")
    plans = {"now": [bad, waits]}
    monkeypatch.setattr(cli_manager, "_snapshot", lambda cfg, _tenants, *_: snapshot([], [], []))
    monkeypatch.setattr(cli_manager, "_daemon_moves", lambda cfg: None)
    monkeypatch.setattr(client, "SwarmClient", lambda *a, **k: None)
    monkeypatch.setattr(grants, "find", lambda *a, **k: [])
    monkeypatch.setattr(oneshot_plan, "plan_as_daemon",
                        lambda *a, **k: PlacementPlan(services=list(plans["now"])))
    res = CliRunner().invoke(main, ["plan"])
    assert res.exit_code == 1, res.output
    assert "bad: failed (Failed)" in res.output
    assert res.output.rstrip().splitlines()[-1].startswith("planning failed for bad: a "
                                                          "swarmgpu fault")
    res = CliRunner().invoke(main, ["plan", "--json"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.output)["services"][0]["status"] == "failed"
    plans["now"] = [waits]
    res = CliRunner().invoke(main, ["plan"])
    assert res.exit_code == 0, res.output
    assert "planning failed" not in res.output


LONG = "gpu-" + "x" * 196  # a 200-character hostname


def test_plan_and_status_cut_a_long_hostname_and_keep_the_escapes() -> None:
    """A 200-character hostname made each line it is in run on for screens: `plan` and
    `status` show its start and "..." (``peertext.CELL_WIDTH``), its escapes whole."""
    from swarmgpu.core.peertext import CELL_WIDTH

    hostile = "h" * 30 + ESC + "y" * 300
    sp = ServicePlan("web", "id-web", None, "gpus=1", "running", "Running", placements=(
        ReplicaPlacement("n1", LONG, (0,), ("GPU-1",), (1000,)),
        ReplicaPlacement("n2", hostile, (0,), ("GPU-2",), (1000,))))
    text = render_plan([sp], ungranted=[], workload={}, moves=None, listen="x",
                       health=[{"node": LONG, "gpu": 0, "uuid": "GPU-1", "health": "failed"}])
    assert "\x1b" not in text and LONG not in text, text
    cut = LONG[:CELL_WIDTH - 3] + "..."
    assert f"  {cut}: GPU 0 GPU-1" in text.splitlines(), text
    assert "  " + "h" * 30 + r"\x1b[2K...: GPU 0 GPU-2" in text.splitlines(), text
    assert f"GPU health: {cut} GPU 0 GPU-1: failed" in text.splitlines(), text
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    n = next(n for n in doc["nodes"] if n["gpu_count"])
    n["hostname"], n["product"] = LONG, "P" * 200
    text = render_status(doc)
    assert LONG not in text and f"{cut} (" in text and "P" * 37 + "..., driver" in text, text


def test_plan_json_keeps_a_long_hostname_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.forged import snapshot

    from swarmgpu.cli import main
    from swarmgpu.cli import manager as cli_manager
    from swarmgpu.manager.cycle import grants, oneshot_plan
    from swarmgpu.manager.placement import PlacementPlan
    from swarmgpu.swarm import client

    sp = ServicePlan("web", "id-web", None, "gpus=1", "running", "Running", placements=(
        ReplicaPlacement("n1", LONG, (0,), ("GPU-1",), (1000,)),))
    monkeypatch.setattr(cli_manager, "_snapshot", lambda cfg, _tenants, *_: snapshot([], [], []))
    monkeypatch.setattr(cli_manager, "_daemon_moves", lambda cfg: None)
    monkeypatch.setattr(client, "SwarmClient", lambda *a, **k: None)
    monkeypatch.setattr(grants, "find", lambda *a, **k: [])
    monkeypatch.setattr(oneshot_plan, "plan_as_daemon",
                        lambda *a, **k: PlacementPlan(services=[sp]))
    res = CliRunner().invoke(main, ["plan", "--json"])
    assert res.exit_code == 0, res.output
    (pl,) = json.loads(res.output)["services"][0]["placements"]
    assert LONG in json.dumps(pl), pl
    res = CliRunner().invoke(main, ["plan"])
    assert LONG not in res.output and LONG[:37] + "..." in res.output, res.output


def test_a_cut_cell_is_at_most_its_width_and_never_halves_an_escape() -> None:
    from swarmgpu.core.peertext import cell

    assert cell("gpu-1") == "gpu-1" and cell("a\x1bb") == r"a\x1bb"
    assert cell("z" * 10_000_000) == "z" * 37 + "..."  # (bounded work: cut first)
    assert cell("x" * 36 + "\u202e" + "y") == "x" * 36 + "..."  # \u202e: 6 wide, left out
    for n in range(60):  # escapes whole, then w's: never a piece of one
        shown = cell("\x1b" * n + "w" * 50)
        assert len(shown) <= 40 and shown.endswith("..."), shown
        assert shown[:-3].replace(r"\x1b", "").strip("w") == "", shown


def test_status_names_two_nodes_cut_alike_by_their_ids() -> None:
    """Two long hostnames alike up to the cut read as one node in `status`'s text (a
    node joined under another's long name and one more character passed as it): where
    cut names are alike, each head says its node's ID."""
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    a, b = doc["nodes"][:2]
    a["hostname"], b["hostname"] = LONG + "a", LONG + "b"
    heads = [line for line in render_status(doc).splitlines()
             if line.startswith(LONG[:37] + "...")]
    assert heads == [h for h in heads if f"... [{a['id']}]" in h or f"... [{b['id']}]" in h]
    assert len(heads) == 2, heads


def test_plan_names_the_nodes_of_placements_on_hostnames_cut_alike() -> None:
    """Placements on two nodes whose long hostnames are alike up to the cut read as
    one node in `plan`'s text: each says its node's ID there; a name cut alone none."""
    sp = ServicePlan("web", "id-web", None, "gpus=1", "running", "Running", placements=(
        ReplicaPlacement("n1", LONG + "a", (0,), ("GPU-1",), (1000,)),
        ReplicaPlacement("n2", LONG + "b", (0,), ("GPU-2",), (1000,)),
        ReplicaPlacement("n3", "short", (0,), ("GPU-3",), (1000,))))
    text = render_plan([sp], ungranted=[], workload={}, moves=None, listen="x", health=[])
    cut = LONG[:37] + "..."
    lines = text.splitlines()
    assert f"  {cut} [n1]: GPU 0 GPU-1" in lines and f"  {cut} [n2]: GPU 0 GPU-2" in lines
    assert "  short: GPU 0 GPU-3" in lines, text


def test_names_cut_alike_are_those_two_names_read_as_after_the_cut() -> None:
    """``cut_alike``: the one reading of `status`'s and `audit`'s tables: a cut two
    long names share, or a short name twice; a name alone, or cut alone, is not."""
    from swarmgpu.core.peertext import cut_alike

    cut = LONG[:37] + "..."
    assert cut_alike([LONG + "a", LONG + "b", "short", "x", "x"]) == {cut, "x"}
    assert cut_alike([LONG + "a", "short"]) == set()


HOST253 = "gpu-" + "x" * 248  # with one letter more: a hostname's 253 characters at most


def test_status_and_plan_cut_hostnames_in_their_node_lists_and_keep_them_apart() -> None:
    """A global service's nodes, its waiting nodes and ungranted access's nodes were
    listed whole: three 253-character hostnames filled the line's 600 columns and cut
    the rest off. Each is cut as the tables cut it, and names cut alike are told apart
    by their node's ID; ``--json`` keeps them whole (the document is not changed)."""
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    a, b, c = doc["nodes"][1:4]
    a["hostname"], b["hostname"], c["hostname"] = (HOST253 + s for s in "abc")
    sv = doc["services"][0]
    sv["mode"], sv["progress"] = "global", ""
    sv["placements"] = [{"node": n["hostname"], "node_id": n["id"], "gpus": [0], "uuids": []}
                        for n in (a, b)]
    sv["nodes_waiting"] = {c["hostname"]: "gate closed by its label"}
    doc["ungranted"] = [{"service": "rogue", "nodes": [a["hostname"], b["hostname"]],
                         "reason": "sees all GPUs", "fix": "grant it", "exempt": False}]
    before = json.dumps(doc)
    text = render_status(doc)
    assert json.dumps(doc) == before and HOST253 not in text, text
    cut = HOST253[:37] + "..."
    lines = text.splitlines()
    on = f"{cut} [{a['id']}], {cut} [{b['id']}]"
    assert f"  {sv['name']} (global): on {on}" in lines, text
    assert f"    {cut} [{c['id']}]: waiting, gate closed: gate closed by its label" in lines
    assert f"  rogue on {on}: sees all GPUs" in lines, text
    # plan: the same list, named by the swarm's (hostname, ID) pairs
    plan = render_plan([], ungranted=doc["ungranted"], workload={}, moves=None, listen="x",
                       health=[], nodes=[(n["hostname"], n["id"]) for n in (a, b)])
    assert f"  rogue on {on}: sees all GPUs" in plan.splitlines(), plan
    assert HOST253 not in plan, plan


def test_waiting_nodes_of_one_long_hostname_keep_their_ids_past_the_cut() -> None:
    """Two nodes of one hostname wait under ``host (ID)`` (``nodes_waiting``): the cut
    of that key took the ID off a 253-character hostname, and both lines read alike.
    Each is named by its hostname cut and its node's ID, in `status` and `plan`."""
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    a, b = doc["nodes"][1:3]
    a["hostname"] = b["hostname"] = HOST253
    waiting = {f"{HOST253} ({n['id']})": "no room" for n in (a, b)}
    sv = doc["services"][0]
    sv["mode"], sv["progress"], sv["placements"] = "global", "", []
    sv["nodes_waiting"] = waiting
    cut = HOST253[:37] + "..."
    want = [f"{cut} [{i}]: waiting, gate closed: no room" for i in sorted((a["id"], b["id"]))]
    assert [f"    {w}" for w in want] == [
        line for line in render_status(doc).splitlines() if "waiting" in line]
    sp = ServicePlan("g", "id-g", None, "gpus=1", "pending", "Pending", mode="global",
                     nodes_waiting=waiting)
    plan = render_plan([sp], ungranted=[], workload={}, moves=None, listen="x", health=[],
                       nodes=[(n["hostname"], n["id"]) for n in (a, b)])
    assert [f"  {w}" for w in want] == [ln for ln in plan.splitlines() if "waiting" in ln]
