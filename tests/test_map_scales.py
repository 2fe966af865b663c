"""The map's scales in one place each: the hot lines (style.css's ``--hot-*``, read by
app.js isHot and by the daemon's header counts, ``webmap.HOT_*``) and the heat map's
colour steps (app.js ``COLOR_STEPS``, read by cellClass and the legend). Pure: the
packaged files read as text."""

from __future__ import annotations

import pytest
from support.paths import REPO

from swarmgpu.manager.web import webmap

WEB = REPO / "swarmgpu" / "manager" / "web"
CSS = (WEB / "style.css").read_text()
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
