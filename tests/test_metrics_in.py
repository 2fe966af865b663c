"""metrics_in and promtext: a node's page read strictly, as the most careful server would.

A page is written by someone else (a node's exporter, broken or compromised): anything
the text format does not allow, or that could be read two ways, is a counted error naming
the line, and that sample is unknown; nothing a page says takes long or reaches another
node's values.
"""

from __future__ import annotations

import pytest
from support.traced import traced_peak

from swarmgpu.core.metrics_in import UTIL, parse_metrics
from swarmgpu.core.promtext import MAX_LABEL_VALUE, LineError, parse_help, parse_sample

G = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",gpu="0"'


def _util(text: str) -> float | None:
    g = parse_metrics(text).samples_by_uuid.get("GPU-1")
    return g.util_pct if g is not None else None


def test_a_page_of_escaped_quotes_is_read_in_linear_time() -> None:
    """prometheus_client's parser sliced the label value at every escaped quote: 2 MB of
    them took 70 s (quadratic: the 8 MB a page may be, about 20 minutes), with every
    node's cycle waiting for that one page. A line that long is now skipped unread
    (metrics_in.MAX_LINE_LEN); one at the label value cap is read whole."""
    page = G + ',modelName="' + '\\"' * 1_000_000 + '"} 5\n'
    res = parse_metrics(page)  # (its line is never sliced: skipped, said so; not timed)
    assert not res.samples_by_uuid and "skipped unread" in res.errors[0]
    res = parse_metrics(G + ',modelName="' + '\\"' * (MAX_LABEL_VALUE // 2) + '"} 5\n')
    assert res.samples_by_uuid["GPU-1"].model_name.startswith('"' * 10)


@pytest.mark.parametrize(
    "line, why",
    [
        (G + "} 5 6 7\n", "not one number"),  # was read as 5, the rest dropped
        (G + ',pod="a\\tb"} 5\n', "escape"),  # \t is no escape of the format
        (G + "} 1_0\n", "not one number"),  # Python's float() reads 10, Go's ParseFloat fails
        (G + "} 5\x00\n", "not one number"),
        (G + ',__name__="x"} 5\n', "__name__"),  # expfmt: "label name __name__ is reserved"
        (G + "} -NaN\n", "not one number"),  # Go's ParseFloat signs Inf alone, not NaN
    ],
)
def test_a_line_the_format_does_not_allow_is_refused_naming_why(line: str, why: str) -> None:
    res = parse_metrics(line)
    assert not res.samples_by_uuid
    (err,) = res.errors
    assert err.startswith("line 1: DCGM_FI_DEV_GPU_UTIL sample cannot be parsed") and why in err


@pytest.mark.parametrize(
    "line",
    [
        G + ',modelName="a\\"b}c,d\\\\"} 5\n',  # quotes, braces, commas inside a value
        G + ",} 5\n",  # a trailing comma
        '\tDCGM_FI_DEV_GPU_UTIL {UUID="GPU-1"} 5\n',  # blanks before the name and '{'
        G + '} 5 # {trace_id="x"} 1\n',  # an OpenMetrics exemplar (not read)
    ],
)
def test_what_the_format_allows_is_read(line: str) -> None:
    assert _util(line) == 5 and UTIL


def test_a_page_with_crlf_line_ends_is_refused_once_naming_the_fix() -> None:
    """A CR before each LF was trimmed and the page read; Prometheus reads '5\\r' as no
    number (expfmt and the server's parser alike) and refuses the page."""
    res = parse_metrics("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\r\n" + G + "} 5\r\n" + G + "} 5\r\n")
    assert not res.samples_by_uuid
    assert res.errors == [
        "line 1: ends in CR (a CRLF line end), which Prometheus refuses; skipped, as is every "
        "such line of the page (serve LF line ends)"
    ]


def test_one_gpus_value_given_twice_differently_is_unknown_and_said() -> None:
    """The first of two samples won silently (util 5 or 90: whichever came first); with
    k8s pod labels dcgm-exporter repeats a GPU's sample, with the same value."""
    res = parse_metrics(G + ',pod="a"} 5\n' + G + ',pod="b"} 90\n' + G + ',pod="c"} 5\n')
    assert _util(G + ',pod="a"} 5\n' + G + ',pod="b"} 90\n') is None
    assert any(
        "line 2" in e and "DCGM_FI_DEV_GPU_UTIL" in e and "two values" in e for e in res.errors
    ), res.errors
    assert _util(G + ',pod="a"} 5\n' + G + ',pod="b"} 5\n') == 5


def test_a_sample_naming_two_hosts_makes_the_page_name_several() -> None:
    """hostname= was read and Hostname= of the same sample ignored: a page that said both
    'node-a' and 'node-b' passed as node-a's."""
    res = parse_metrics(G + ',hostname="node-a",Hostname="node-b"} 5\n')
    assert res.hostname is None and res.hostnames == ("node-a", "node-b")


@pytest.mark.parametrize("value", ["-5", "150", "+Inf", "-Inf", "1e400"])
def test_a_utilisation_no_gpu_can_have_is_unknown_and_counted(value: str) -> None:
    """-5 % read as idle (consolidation moves), 150 % as hot; +Inf and 1e400 were dropped
    without a word while 1e300 was reported."""
    res = parse_metrics(G + f"}} {value}\n" + G + ',pod="x"} 5\n')
    g = res.samples_by_uuid["GPU-1"]
    assert g.util_pct is None
    assert any("DCGM_FI_DEV_GPU_UTIL" in e and "GPU-1" in e for e in res.errors), res.errors


def test_a_sample_with_a_timestamp_is_not_read_as_now() -> None:
    """A timestamp (an hour-old reading, or in OpenMetrics seconds rather than 0.0.4's ms:
    which?) was dropped and the value read as this scrape's. Neither dcgm-exporter nor the
    agent writes one."""
    res = parse_metrics(G + "} 95 1700000000000\n")
    assert _util(G + "} 95 1700000000000\n") is None
    assert any("line 1" in e and "timestamp" in e for e in res.errors), res.errors


@pytest.mark.parametrize("after", [G + "} 90\n", "# HELP x y\n"])
def test_a_page_with_text_after_eof_is_refused_naming_the_line(after: str) -> None:
    """Two pages run together (a broken proxy): OpenMetrics ends a page at `# EOF` and
    calls what follows an error, 0.0.4 reads `# EOF` as a comment and goes on. The second
    page's samples were read; the scraper keeps no Content-Type to tell which, so the page
    is refused, naming the line."""
    page = G + "} 5\n# EOF\n" + after
    res = parse_metrics(page)
    assert not res.samples_by_uuid
    assert res.errors[0].startswith("line 3: text after '# EOF' (line 2)"), res.errors
    assert _util(G + "} 5\n# EOF\n\n") == 5  # an OpenMetrics page's end, blank lines after


T = "# TYPE DCGM_FI_DEV_GPU_UTIL "


@pytest.mark.parametrize(
    "page, line, why",
    [
        (T + "histogram\n" + G + "} 5\n", 2, "histogram"),  # read as a gauge
        (T + "summary\n" + G + "} 5\n", 2, "summary"),
        (T + "bla\n" + G + "} 5\n", 1, "no type"),  # an unknown type passed
        (T + "gauge\n" + T + "gauge\n" + G + "} 5\n", 2, "second TYPE"),
        (G + "} 5\n" + T + "gauge\n", 2, "after its samples (line 1)"),
    ],
)
def test_a_type_line_prometheus_refuses_makes_the_reading_unknown(
    page: str, line: int, why: str
) -> None:
    """TYPE lines were not read: a histogram's or summary's name given a plain sample
    was read as a gauge, and a second TYPE line, one after the samples or of no type
    passed. Prometheus refuses each (expfmt's "second TYPE line for metric name, or TYPE
    reported after samples", "unknown metric type")."""
    res = parse_metrics(page)
    assert _util(page) is None
    assert any(
        e.startswith(f"line {line}: DCGM_FI_DEV_GPU_UTIL") and why in e for e in res.errors
    ), res.errors


def test_a_type_line_without_a_metric_name_is_counted() -> None:
    res = parse_metrics("# TYPE met-ric gauge\n" + G + "} 5\n")
    assert res.errors == [
        "line 1: a TYPE line cannot be parsed (no metric name after TYPE); ignored"
    ]


@pytest.mark.parametrize("kind", ["gauge", "counter", "untyped", "unknown"])
def test_a_gauge_or_counter_type_is_read(kind: str) -> None:
    res = parse_metrics(T + kind + "\n" + G + "} 5\n" + T.replace("UTIL", "X") + "histogram\n")
    assert _util(T + kind + "\n" + G + "} 5\n") == 5 and not res.errors


@pytest.mark.parametrize(
    "page, why",
    [
        (G + "} 5\n" + G.replace("GPU-1", "GPU-2") + "} 7\n", "two GPUs with one index"),
        (G + "} 5\n" + G.replace('"0"', '"1"') + ',pod="x"} 5\n', "one GPU with two indexes"),
    ],
)
def test_a_gpu_index_given_two_ways_is_unknown_and_said(page: str, why: str) -> None:
    """The first gpu= label won silently: GPU-2 showed as index 0 beside GPU-1, or GPU-1 as
    0 where a later line said 1."""
    res = parse_metrics(page)
    assert all(g.index is None for g in res.samples_by_uuid.values())
    assert any(e.startswith("line 2: ") and why in e for e in res.errors), res.errors
    assert _util(page) == 5  # the readings stand: they are keyed by UUID


H = "# HELP DCGM_FI_DEV_GPU_UTIL "


@pytest.mark.parametrize(
    "page, line, why",
    [
        (H + "GPU utilization.\n" + H + "again\n" + G + "} 5\n", 2, "second HELP (line 1"),
        (H + "a\n" + G + "} 5\n" + H + "b\n", 3, "second HELP (line 1"),  # after samples
    ],
)
def test_a_second_help_line_makes_the_reading_unknown(page: str, line: int, why: str) -> None:
    """HELP lines were not read: two for one name (two pages or families run together)
    passed. Prometheus refuses the page (expfmt's "second HELP line for metric name")."""
    res = parse_metrics(page)
    assert _util(page) is None
    assert any(
        e.startswith(f"line {line}: DCGM_FI_DEV_GPU_UTIL") and why in e for e in res.errors
    ), res.errors


@pytest.mark.parametrize(
    "line, why",
    [
        (H + "a\\tb\n", "an escape other than"),  # HELP knows \\ and \n alone
        (H + 'a\\"b\n', "an escape other than"),  # \" is a label value's, not HELP's
        (H + "a\\\n", "an escape other than"),
        ("# HELP met-ric x\n", "no metric name after HELP"),
    ],
)
def test_a_help_line_prometheus_refuses_is_counted(line: str, why: str) -> None:
    """A HELP line expfmt refuses the page for passed without a word; its text is not
    read, so the readings stand."""
    (err,) = parse_metrics(line + G + "} 5\n").errors
    assert err.startswith("line 1: a HELP line cannot be parsed (") and why in err, err
    assert err.endswith("; ignored") and _util(line + G + "} 5\n") == 5


def test_a_help_line_with_no_text_is_no_help() -> None:
    """As in expfmt: `# HELP name` gives no HELP, so a later one is the first."""
    page = H.rstrip() + "\n" + H + "GPU utilization.\n" + G + "} 5\n"
    assert _util(page) == 5 and not parse_metrics(page).errors


F = "DCGM_FI_DEV_GPU"


@pytest.mark.parametrize(
    "page, line, name, why",
    [
        # expfmt reads x_count's lines as the summary x's: a TYPE of its own is x's second
        (f"# TYPE {F} summary\n# TYPE {F}_count gauge\n", 2, "_count", "second TYPE (line 1"),
        (
            f"# TYPE {F} histogram\n# HELP {F} a\n# HELP {F}_bucket b\n",
            3,
            "_bucket",
            "second HELP (line 2",
        ),
        # OpenMetrics: a counter x's samples are x_total and x_created, an info's x_info
        (f"# TYPE {F} counter\n# TYPE {F}_total gauge\n", 2, "_total", "second TYPE (line 1"),
        (f"# TYPE {F} counter\n# TYPE {F}_created gauge\n", 2, "_created", "second TYPE"),
        (f"# TYPE {F} info\n# TYPE {F}_info gauge\n", 2, "_info", "second TYPE (line 1"),
    ],
)
def test_a_type_or_help_for_a_familys_sample_name_is_a_second_one(
    page: str, line: int, name: str, why: str
) -> None:
    """A TYPE or HELP line was held to its own name alone: `x_count` declared gauge after
    the summary `x` passed, which expfmt refuses ("second TYPE line for metric name"), and
    OpenMetrics reads x_total, x_created as a counter x's samples: one name, two types."""
    res = parse_metrics(page + G.replace("UTIL", name[1:]) + "} 3\n" + G + "} 5\n")
    assert any(
        e.startswith(f"line {line}: {F}{name} has a {why}") and f"its family {F})" in e
        for e in res.errors
    ), res.errors
    assert F + name not in res.samples_by_uuid["GPU-1"].values and _util(page + G + "} 5\n")


def test_a_familys_sample_names_declared_before_it_are_their_own() -> None:
    """As in expfmt: x_count declared before any `# TYPE x summary` is a name of its own."""
    page = f"# TYPE {F}_count gauge\n# TYPE {F} summary\n" + G + "} 5\n"
    assert not parse_metrics(page).errors and _util(page) == 5


def test_a_label_value_of_many_escapes_is_read_in_little_memory() -> None:
    """The label pattern is linear in time, but Python's regex engine kept some 170
    bytes of backtracking state per escape it repeated over: one 8 MiB line of ``\\\\``
    (the scrape's byte cap) took 700 MiB of the daemon's memory. Repeated possessively,
    nothing is kept. (A value that long is then refused: longer than MAX_LABEL_VALUE.)"""
    value = "\\\\" * (512 * 1024)  # 1 MiB of escaped backslashes

    def refused() -> None:
        with pytest.raises(LineError, match="label x has a value longer than"):
            parse_sample('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-0",x="' + value + '"} 1')

    _, peak = traced_peak(refused)
    assert peak < 16 * 1024 * 1024, peak
    s = parse_sample('m{UUID="GPU-0",x="' + "\\\\" * (MAX_LABEL_VALUE // 2) + '"} 1')
    assert s.labels["x"] == "\\" * (MAX_LABEL_VALUE // 2) and s.labels["UUID"] == "GPU-0"
    assert parse_sample('m{a="x\\\\\\"y\\n"} 2').labels == {"a": 'x\\"y\n'}


def test_a_help_text_of_many_escapes_is_read_in_little_memory() -> None:
    """As a label value's: the HELP text's pattern kept backtracking state per escape."""
    got, peak = traced_peak(lambda: parse_help("# HELP m " + "\\\\" * (512 * 1024)))
    assert got == ("m", True)
    assert peak < 16 * 1024 * 1024, peak
