"""promtext against promtool (Prometheus' own expfmt reader): every hostile page promtool
refuses, metrics_in refuses too, naming a line, or the difference is written here.

promtool refuses a whole page at its first fault; metrics_in reads a page line by line
(a broken line is counted and skipped, the rest read: real exporters print broken lines),
so "refuses" here is: at least one counted error. Where metrics_in is stricter than
promtool (a `GAUGE` TYPE, a timestamp, CRLF read by neither) nothing is asserted.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from swarmgpu.core.metrics_in import parse_metrics

G = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",gpu="0"'
H = "# HELP DCGM_FI_DEV_GPU_UTIL "
T = "# TYPE DCGM_FI_DEV_GPU_UTIL "

PAGES: dict[str, str] = {
    "help_twice": H + "a\n" + H + "b\n" + G + "} 5\n",
    "help_escape_t": H + "a\\tb\n" + G + "} 5\n",
    "help_escape_quote": H + 'a\\"b\n' + G + "} 5\n",
    "help_lone_backslash": H + "a\\\n" + G + "} 5\n",
    "help_bad_name": "# HELP met-ric x\n" + G + "} 5\n",
    "type_twice": T + "gauge\n" + T + "gauge\n" + G + "} 5\n",
    "type_after_samples": G + "} 5\n" + T + "gauge\n",
    "type_of_summary_part": "# TYPE x summary\n# TYPE x_count gauge\n" + G + "} 5\n",
    "help_of_histogram_part": "# TYPE x histogram\n# HELP x a\n# HELP x_sum b\n" + G + "} 5\n",
    "type_bad": T + "bla\n" + G + "} 5\n",
    "type_bad_name": "# TYPE met-ric gauge\n" + G + "} 5\n",
    "label_twice": G + ',gpu="1"} 5\n',
    "label_name_reserved": G + ',__name__="x"} 5\n',
    "label_escape_t": G + ',a="x\\ty"} 5\n',
    "label_unquoted": "DCGM_FI_DEV_GPU_UTIL{UUID=GPU-1} 5\n",
    "label_single_quotes": "DCGM_FI_DEV_GPU_UTIL{UUID='GPU-1'} 5\n",
    "label_name_colon": 'DCGM_FI_DEV_GPU_UTIL{UU:ID="GPU-1"} 5\n',
    "labels_no_comma": 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1"gpu="0"} 5\n',
    "labels_comma_alone": "DCGM_FI_DEV_GPU_UTIL{,} 5\n",
    "labels_two_commas": G + ",,} 5\n",
    "labels_unclosed": G + " 5\n",
    "value_missing": G + "}\n",
    "value_three": G + "} 5 6 7\n",
    "value_underscore": G + "} 1_0\n",
    "value_hex": G + "} 0x10\n",
    "value_nan_signed": G + "} -NaN\n",
    "value_nan_plus": G + "} +nan\n",
    "value_overflow": G + "} 1e400\n",
    "value_vertical_tab": G + "}\x0b5\n",
    "value_nul": G + "} 5\x00\n",
    "timestamp_float": G + "} 5 1.5\n",
    "timestamp_then_text": G + "} 5 1 x\n",
    "crlf": T + "gauge\r\n" + G + "} 5\r\n",
    "name_dash": "DCGM-FI 5\n",
}
# promtool refuses these, metrics_in reads them, on purpose:
DIFFERENCES: dict[str, str] = {
    # The server's own parser (textparse) skips blanks before the line's end; expfmt
    # reads one as the start of a timestamp.
    "trailing_blank": G + "} 5 \n",
    # OpenMetrics, which metrics_in also reads (exporters may answer with it): an
    # exemplar, and its 'unknown' type (0.0.4's 'untyped').
    "exemplar": G + '} 5 # {a="b"} 1\n',
    "type_unknown": T + "unknown\n" + G + "} 5\n",
}


def _promtool_refuses(page: str) -> tuple[bool, str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/setup.sh does)"
    r = subprocess.run(
        [promtool, "check", "metrics"],
        input=page.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    out = (r.stdout + r.stderr).decode()
    assert r.returncode in (0, 1, 3), out  # 3: lint remarks alone
    return r.returncode == 1, out


@pytest.mark.parametrize("page", PAGES.values(), ids=PAGES.keys())
def test_what_promtool_refuses_metrics_in_refuses(page: str) -> None:
    refused, out = _promtool_refuses(page)
    assert refused, f"promtool reads it (move it out of PAGES): {out}"
    errors = parse_metrics(page).errors
    assert any(e.startswith("line ") for e in errors), (out, errors)


@pytest.mark.parametrize("page", DIFFERENCES.values(), ids=DIFFERENCES.keys())
def test_what_promtool_alone_refuses_is_read_on_purpose(page: str) -> None:
    """The differences written down: promtool still refuses each (else the note is
    stale), metrics_in reads it without an error."""
    refused, out = _promtool_refuses(page)
    assert refused, out
    res = parse_metrics(page)
    assert not res.errors and res.samples_by_uuid["GPU-1"].util_pct == 5
