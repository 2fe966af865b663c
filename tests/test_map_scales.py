"""The map's scales in one place each: the hot lines (style.css's ``--hot-*``, read by
app.js isHot and by the daemon's header counts, ``webmap.HOT_*``) and the heat map's
colour steps (app.js ``COLOR_STEPS``, read by cellClass and the legend). Pure: the
packaged files read as text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.browser import Cdp, MapServer
from support.paths import REPO

from swarmgpu.manager.web import webmap

WEB = REPO / "swarmgpu" / "manager" / "web"
CSS = (WEB / "style.css").read_text()
JS = (WEB / "app.js").read_text()
DARK = "@media (prefers-color-scheme: dark) {\n  :root { --bg: #000; %s }\n}\n"


def test_the_daemons_hot_lines_are_the_pages() -> None:
    assert webmap.root_number(CSS, "--hot-util-pct") == webmap.HOT_UTIL_PCT == 90
    assert webmap.root_number(CSS, "--hot-temp-c") == webmap.HOT_TEMP_C == 85


@pytest.mark.parametrize("extra", [
    DARK % "--hot-temp-c: 80;",  # dark mode: the page draws 80, the daemon counted 85
    ":root { --hot-temp-c: 80; }\n",  # a later block: the page takes it, last wins
    ".tile { color: red; }\n@media print { :root { --hot-temp-c:80 } }\n",
], ids=["dark-mode", "second-root", "print"])
def test_a_hot_line_set_twice_is_refused_naming_the_file_and_the_fix(extra: str) -> None:
    """The daemon read the first ``:root`` block only: a ``--hot-*`` set again in a later
    block (dark mode's, a second one) reached the page (the last that applies to the
    viewer's screen wins) but not the daemon's header counts. Which one applies is the
    viewer's (their colour scheme, printing), not the daemon's to know: refused."""
    with pytest.raises(RuntimeError) as err:
        webmap.root_number(CSS + extra, "--hot-temp-c")
    said = str(err.value)
    assert "swarmgpu/manager/web/style.css" in said and "--hot-temp-c" in said, said
    assert "set it once, in the top-level :root block" in said, said
    assert webmap.root_number(CSS + extra, "--hot-util-pct") == 90  # the other is one


@pytest.mark.parametrize("css", [
    DARK % "--hot-temp-c: 80;",  # only in dark mode: the light page reads no number
    ":root { --hot-temp-c: hot; }",
    ":root { --bg: #fff; }",
    ":root { /* --hot-temp-c: 80; */ --bg: #fff; }",
], ids=["dark-only", "not-a-number", "none", "commented-out"])
def test_a_hot_line_not_set_once_as_a_number_at_the_top_is_refused(css: str) -> None:
    with pytest.raises(RuntimeError, match=r"swarmgpu/manager/web/style\.css: .*--hot-temp-c"):
        webmap.root_number(css, "--hot-temp-c")


def test_a_hot_line_set_once_is_read_wherever_it_stands_in_its_block() -> None:
    assert webmap.root_number(":root{--hot-temp-c:80}", "--hot-temp-c") == 80
    assert webmap.root_number("/* x { */\n:root {\n  --a: 1;\n  --hot-temp-c: 72.5 ;\n}\n"
                              "@media (prefers-color-scheme: dark) { :root { --a: 2 } }",
                              "--hot-temp-c") == 72.5


def _function(name: str) -> str:
    """The text of app.js's ``function name(...) { ... }``, to its closing brace."""
    start = JS.index(f"  function {name}(")
    return JS[start:JS.index("\n  }\n", start)]


def test_the_heat_maps_steps_are_one_table_that_cells_and_legend_read() -> None:
    """cellClass and the legend each wrote the steps (45/60/72 °C, 10/35/60 %): one
    could change without the other, and the legend would name the wrong colours."""
    table = re.search(r"\n  const COLOR_STEPS = [^\n]*\n", JS)
    assert table is not None, "app.js has no COLOR_STEPS table"
    for steps in ("[45, 60, 72]", "[10, 35, 60]"):
        assert JS.count(steps) == 1, f"app.js writes the colour steps {steps} twice"
    cell, legend = _function("cellClass"), _function("legend")
    assert "colorSteps(color)" in cell and "colorSteps(color)" in legend
    for body in (cell, legend, _function("scaleSwatches")):  # no step of their own
        assert not re.search(r"\b(?:10|35|45|60|72)\b", body), body


def _doc_at_the_steps() -> dict[str, Any]:
    """A fleet (the heat map) whose first GPUs sit on and just below each step."""
    from support.web_fleet import fleet_doc

    doc = fleet_doc(30)
    gpus = [g for n in doc["nodes"] for g in n["gpus"] if not g["mig"]]
    for g, (temp, util) in zip(gpus, [(44, 9), (45, 10), (59, 34), (60, 35), (71, 59),
                                      (72, 60), (84, 89), (85, 90), (99.5, 100)],
                               strict=False):
        g["temp_c"], g["util_pct"] = temp, util
    return doc


def _legend_steps(text: str, unit: str) -> list[float]:
    """The steps the legend names: "< a unit", "a\u2013b", ..., "≥ d unit"."""
    first = re.search(rf"< ([0-9.]+) {unit}", text)
    last = re.search(rf"≥ ([0-9.]+) {unit}", text)
    assert first and last, text
    steps = [float(first.group(1))]
    for a, b in re.findall(r"([0-9.]+)\u2013([0-9.]+)", text):
        assert float(a) == steps[-1], text  # each band starts where the last ended
        steps.append(float(b))
    assert steps[-1] == float(last.group(1)) and len(steps) == 4, text
    return steps


def test_each_cell_has_the_colour_the_legend_names_for_its_value(chromium: str) -> None:
    """In Chromium: the legend's bands read back, every cell's class is the band its
    value falls in, and the top step is the daemon's hot line."""
    doc = _doc_at_the_steps()
    srv = MapServer(lambda: doc)
    cdp = Cdp(chromium, (1366, 900))
    try:
        for color, field, unit, hot in (("temp", "temp_c", "°C", webmap.HOT_TEMP_C),
                                        ("util", "util_pct", "%", webmap.HOT_UTIL_PCT)):
            cdp.open(f"{srv.url}?color={color}")
            cdp.wait_for("document.querySelectorAll('.fleet .cell[class*=\" v\"]').length > 0")
            steps = _legend_steps(cdp.js("document.querySelector('.legend').innerText"), unit)
            assert steps[-1] == hot, steps
            cells = dict(cdp.js("Array.from(document.querySelectorAll('.fleet .cell'))"
                                ".map((e) => [e.dataset.key, e.className])"))
            seen = set()
            for n in doc["nodes"]:
                for g in n["gpus"]:
                    v = g.get(field)
                    want = "v-unknown" if v is None else f"v{sum(v >= s for s in steps)}"
                    got = cells[f"{n['hostname']}/{g['index']}"].split()
                    assert want in got, (color, n["hostname"], g["index"], v, got)
                    seen.add(want)
            assert {"v0", "v1", "v2", "v3", "v4"} <= seen, seen
    finally:
        cdp.close()
        srv.close()


def test_the_daemon_reads_the_colour_steps_from_app_js() -> None:
    assert webmap.color_steps(JS) == {"util": [10, 35, 60], "temp": [45, 60, 72]}
    assert webmap.hot_line(CSS, JS, "temp") == webmap.HOT_TEMP_C == 85


@pytest.mark.parametrize("value", ["60", "50"], ids=["at-the-step", "below-it"])
def test_a_hot_line_not_above_the_last_colour_step_is_refused_naming_both(
        value: str) -> None:
    """The hot line is the heat map's top step: set at or below the last colour step
    (60 %) the steps stopped rising, and the legend read "60\u201350"."""
    css = CSS.replace("--hot-util-pct: 90;", f"--hot-util-pct: {value};")
    with pytest.raises(RuntimeError) as err:
        webmap.hot_line(css, JS, "util")
    said = str(err.value)
    for part in ("swarmgpu/manager/web/style.css", "--hot-util-pct", value,
                 "swarmgpu/manager/web/app.js", "COLOR_STEPS", "10, 35, 60"):
        assert part in said, (part, said)
    assert webmap.hot_line(css, JS, "temp") == 85  # the other line is fine


@pytest.mark.parametrize("js", ["", JS.replace('hot: "temp"', 'hot: "util"'),
                                JS.replace("[45, 60, 72]", "[45, 72, 60]")],
                         ids=["none", "twice", "not-rising"])
def test_colour_steps_app_js_does_not_write_once_rising_are_refused(js: str) -> None:
    with pytest.raises(RuntimeError, match=r"swarmgpu/manager/web/app\.js: .*COLOR_STEPS"):
        webmap.color_steps(js)
