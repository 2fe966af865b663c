"""A metrics page's lines without a GPU UUID carry no reading metrics_in keeps, yet each
was parsed whole (its labels unescaped into a dict, its value read) before being dropped:
~0.9 s for an 8 MiB page of them. Now such a line in the plain form is checked in one
pass (``promtext.unread_sample``), and parsed only when its form asks (an escape, a fault
to name): what the page reads and what it says are the same as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmgpu.core import metrics_in, promtext
from swarmgpu.core.metrics_in import parse_metrics
from swarmgpu.core.promtext import LineError, parse_sample, unread_sample

CAPTURES = Path(__file__).resolve().parent / "fixtures" / "captures"
GOOD = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",gpu="0",Hostname="gpu-1"} 5\n'
LABELS = ",".join(f'l{j}="{"v" * 20}"' for j in range(18))

# Lines without UUID, good and broken, that the check must judge as the parse does.
EDGES = [
    "a 1", "a{} 1", "a {} 1", 'a{b="c"} 1 123', 'a { b = "c" , } 1', 'a{b="c",} +Inf',
    'a{b="c",b="d"} 1', 'a{b="c\\n"} 1', 'a{b="c\\t"} 1', 'a{__name__="x"} 1',
    'a{b="c"d="e"} 1', 'a{b="x a=",j="y"} 1', 'a{b="c"}1', 'a{b="c"} 1 2 3', "a NaN",
    "a -NaN", "a 0x1", "a 1_000", 'a{b="c"} 1 # {t="x"} 2', 'a{,} 1', 'a{b=c} 1', "a{ 1",
    '{b="c"} 1', "1a 1", 'a{b="' + "v" * 4096 + '"} 1', 'a{b="' + "v" * 4097 + '"} 1',
    "a{" + ",".join(f'k{i}="v"' for i in range(64)) + "} 1",
    "a{" + ",".join(f'k{i}="v"' for i in range(65)) + "} 1",
    'a{b="c",,d="e"} 1', 'a{b ="c"} 1.5e3 -12', 'a{b="c"} .5 1.5', "a 1 -1.",
]


def _parsed(line: str) -> tuple[str, str | None] | None:
    try:
        s = parse_sample(line)
    except LineError:
        return None
    return s.name, s.timestamp


def _agrees(line: str) -> None:
    """unread_sample never passes a line parse_sample refuses, nor reads one otherwise."""
    got = unread_sample(line)
    if got is not None:
        assert _parsed(line) == (got.name, got.timestamp), line
        assert got.labels == {}


@pytest.mark.parametrize("line", EDGES)
def test_the_check_judges_each_edge_as_the_parse(line: str) -> None:
    _agrees(line)


def test_the_check_passes_the_plain_lines_of_real_pages() -> None:
    plain = [line for p in sorted(CAPTURES.glob("dcgm_*.txt"))
             for line in p.read_text().splitlines()
             if line and not line.startswith("#") and "UUID" not in line
             and "\\" not in line]
    for line in plain:
        _agrees(line)
        assert unread_sample(line) is not None, line


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='ab_:{}=", \t\\n1.e+-#x', max_size=40))
def test_the_check_agrees_with_the_parse_on_any_text(line: str) -> None:
    _agrees(line.strip(" \t"))


def test_a_plain_line_without_a_uuid_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, every one of these lines went through parse_sample."""
    parsed: list[str] = []
    real = metrics_in.parse_sample

    def counted(line: str) -> promtext.Sample:
        parsed.append(line)
        return real(line)

    monkeypatch.setattr(metrics_in, "parse_sample", counted)
    page = GOOD + "".join(f"m{i}{{{LABELS}}} 1.5\n" for i in range(2000))
    res = parse_metrics(page)
    assert parsed == [GOOD.strip()], len(parsed)
    assert list(res.samples_by_uuid) == ["GPU-1"] and not res.errors, res.errors


def _pages() -> list[str]:
    hostile = (GOOD + 'go_info{version="go1.22"} 1\n' + 'broken{a="b" 1\n'
               + 'stamped{a="b"} 1 1700000000\n' + 'escaped{a="b\\"c"} 1\n'
               + '# TYPE late gauge\nlate 1\nlate{UUID="GPU-1"} 2\n'
               + 'twice{a="b",a="c"} 1\n# TYPE h histogram\nh_bucket{le="1"} 1\n'
               + '# TYPE after gauge\n' + 'DCGM_FI_DEV_FB_USED{UUID="GPU-1"} 9\n'
               + 'x 1\n# TYPE x gauge\nx{UUID="GPU-1"} 3\n')
    return [p.read_text() for p in sorted(CAPTURES.glob("dcgm_*.txt"))] + [hostile]


@pytest.mark.parametrize("page", _pages())
def test_a_page_reads_and_says_the_same_checked_or_parsed(
        page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = parse_metrics(page)
    monkeypatch.setattr(metrics_in, "unread_sample", lambda _line: None)  # parse all
    assert fast == parse_metrics(page)
