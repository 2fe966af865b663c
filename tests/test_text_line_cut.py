"""`plan`'s and `status`'s free-text lines (a service name opening a line, ``why:``,
``note:``, a move's reason) cut by the columns a terminal gives them, as a finding's
message is (``peertext.text_line``, ``cell``'s cut and ``...``): a 10,000-character
service name or reason flooded the terminal. ``--json`` keeps the whole."""

from __future__ import annotations

import json
from pathlib import Path

from swarmgpu.core.peertext import LINE_WIDTH, cell, text_line, text_width
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.placement import ReplicaPlacement, ServicePlan
from swarmgpu.manager.web.cluster_view import render_status

HUGE = "s" * 10_000  # a service name or reason far past any terminal's width


def _plan(name: str = "web", reason: str = "", warnings: tuple[str, ...] = ()) -> str:
    sp = ServicePlan(name, "id-web", None, "gpus=1", "running", "Running", reason=reason,
                     warnings=warnings, placements=(
                         ReplicaPlacement("n1", "gpu-1", (0,), ("GPU-1",), (1000,)),))
    return render_plan([sp], ungranted=[], workload={}, health=[], listen="x",
                       moves={"proposed": [{"service": name, "from": "gpu-1", "to": "gpu-2",
                                            "reason": reason}]})


def test_plan_cuts_a_huge_service_name_why_and_note_to_the_line_width() -> None:
    text = _plan(HUGE, reason="why " + HUGE, warnings=("note " + HUGE,))
    lines = text.splitlines()
    assert max(text_width(ln) for ln in lines) <= LINE_WIDTH, [len(ln) for ln in lines]
    cut = [ln for ln in lines if "sss" in ln]
    assert cut and all(ln.endswith("...") for ln in cut), cut
    assert any(ln.startswith("  why: why sss") for ln in cut), cut
    assert any(ln.startswith("  note: note sss") for ln in cut), cut


def test_plan_keeps_lines_that_fit_whole() -> None:
    text = _plan("web", reason="waiting for room", warnings=("a note",))
    assert "  why: waiting for room" in text.splitlines()
    assert "  note: a note" in text.splitlines()


def test_status_cuts_a_huge_service_name_and_reason_to_the_line_width() -> None:
    doc = json.loads((Path(__file__).parent / "web_sample_cluster.json").read_text())
    doc["pending"] = [{"service": HUGE, "request": "gpus=1", "reason": HUGE}]
    doc["moves"]["proposed"] = [{"service": HUGE, "from": "a", "to": "b", "reason": HUGE}]
    lines = render_status(doc).splitlines()
    assert max(text_width(ln) for ln in lines) <= LINE_WIDTH, [len(ln) for ln in lines]
    cut = [ln for ln in lines if "sss" in ln]
    assert len(cut) == 2 and all(ln.endswith("...") for ln in cut), cut


def test_a_line_cut_by_display_width_counts_wide_characters_two() -> None:
    shown = text_line("节" * 400)  # 800 columns
    assert shown == "节" * 298 + "...", len(shown)


def test_a_line_cut_never_parts_an_escape_a_name_in_it_shows() -> None:
    """A hostname in the line was escaped (``cell``) before the line was cut: the cut
    falls before its escape, not inside it (``\\x1`` and ``...``)."""
    line = "x" * (LINE_WIDTH - 5) + cell("\x1bhost") + "y" * 50
    shown = text_line(line)
    assert shown == "x" * (LINE_WIDTH - 5) + "...", shown[-12:]
    assert text_line("a\x1bb") == "a\\x1bb"  # (escaped as before when it fits)


FLAG = "\U0001F1E9\U0001F1EA"  # two regional indicators: one flag (DE)


def test_a_line_cut_never_parts_a_flags_two_regional_indicators() -> None:
    # a cut between them left a lone indicator: a letter in a box, not the flag
    for text in ("ab" + FLAG * 5, "a" + FLAG * 5, "x" * 4 * 20 + FLAG * 20):
        for width in range(4, 24):
            for cut in (text_line(text, width), cell(text, width)):
                kept = cut.removesuffix("...")
                flags = kept.lstrip("abx")
                assert len(flags) % 2 == 0 and flags == FLAG * (len(flags) // 2), \
                    (text, width, cut)


def test_a_cut_long_text_never_parts_a_flag_where_its_bound_falls() -> None:
    # past 4 characters a column the text is cut where that bound falls: among marks
    # (none wide) it may fall between a flag's indicators
    text = "a" + ("\u0301" * 40 + FLAG * 4 + "\u0301" * 40) * 4
    for width in range(4, 40):
        kept = text_line(text, width).removesuffix("...")
        indicators = sum("\U0001F1E6" <= c <= "\U0001F1FF" for c in kept)
        assert indicators % 2 == 0, (width, kept)
