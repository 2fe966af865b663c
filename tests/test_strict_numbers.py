"""Numbers an operator types as text (SWARMGPU_* variables, command options) are read in
one form (core.strictnum): int() and float() took ' 5 ', '+5', '1_000', '010' and a
401-digit port raised OverflowError out of `config check`."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.cli.exitcodes import CONFIG_ERROR
from swarmgpu.cli.node import facts
from swarmgpu.cli.sim import simulate
from swarmgpu.core.config import load_config_report


@pytest.mark.parametrize(("value", "why"), [
    (" 5 ", "spaces around it; remove them"),
    ("+5", "a +; write the number without it"),
    ("1_000", "a _ in it; write the digits together"),
    ("010", "a leading 0 (octal to some readers); write it without"),
    ("\u0665", "digits or signs that are not ASCII; write 0-9"),
])
@pytest.mark.parametrize(("var", "key", "kind"), [
    ("SWARMGPU_AGENTS_PORT", "agents.port", "a whole number"),
    ("SWARMGPU_SYNC_INTERVAL_S", "sync.interval_s", "a number"),
])
def test_an_environment_number_in_another_form_is_refused_saying_why(
        value: str, why: str, var: str, key: str, kind: str) -> None:
    _, errors = load_config_report(None, env={var: value})
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{var}: {key}: expected {kind}, got {value!r}: {why}; write "
                                "ASCII digits"), errors


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
def test_an_environment_float_that_is_no_finite_number_is_refused(value: str) -> None:
    _, errors = load_config_report(None, env={"SWARMGPU_SYNC_INTERVAL_S": value})
    assert len(errors) == 1 and "expected a number" in errors[0], errors


def test_an_environment_whole_number_past_64_bits_is_out_of_range_not_a_crash() -> None:
    _, errors = load_config_report(None, env={"SWARMGPU_AGENTS_PORT": "1" + "0" * 400})
    assert len(errors) == 1 and "a number out of range" in errors[0], errors


@pytest.mark.parametrize(("var", "value", "read"), [
    ("SWARMGPU_AGENTS_PORT", "9500", 9500),
    ("SWARMGPU_SYNC_INTERVAL_S", "2.5", 2.5),
    ("SWARMGPU_SYNC_INTERVAL_S", "1e1", 10.0),
    ("SWARMGPU_SYNC_INTERVAL_S", "0.5e2", 50.0),
])
def test_an_environment_number_in_the_form_is_read(var: str, value: str, read: float) -> None:
    cfg, errors = load_config_report(None, env={var: value})
    assert errors == []
    assert (cfg.agents.port if var.endswith("PORT") else cfg.sync.interval_s) == read


@pytest.mark.parametrize(("args", "shown"), [
    (["--speedup", "nan"], "'nan': not a finite number"),
    (["--speedup", "inf"], "'inf': not a finite number"),
    (["--speedup", "1e400"], "a number out of range"),
    (["--rebalance-moves", "1_0"], "'1_0': a _ in it"),
    (["--drain", "1_000"], "'1_000': a _ in it"),
    (["--drain", " 5"], "' 5': spaces around it"),
    (["--move-flight", "+1"], "'+1': a +"),
    (["--online-at", "\u0669\u0665"], "digits or signs that are not ASCII"),
    (["--online-at", "131"], "131 is not in the range 0<=x<=130"),
])
def test_a_simulate_number_option_in_another_form_is_refused_naming_it(
        args: list[str], shown: str) -> None:
    """click's INT and FLOAT are int() and float(): --drain 1_000 was 1000, --speedup nan
    a replay of nan arrivals a second, --online-at with Arabic-Indic digits 95."""
    with pytest.raises(click.BadParameter) as exc:
        simulate.make_context("simulate", list(args))
    assert exc.value.param is not None and args[0] in exc.value.param.opts
    assert shown in exc.value.format_message(), exc.value.format_message()


def test_memory_mib_option_in_another_form_is_refused() -> None:
    with pytest.raises(click.BadParameter, match="a _ in it"):
        facts.make_context("facts", ["--memory-mib", "40_960"])


@pytest.mark.parametrize(("args", "key", "read"), [
    (["--speedup", "2.5"], "speedup", 2.5),
    (["--drain", "600"], "drain_s", 600),
    (["--online-at", "0"], "online_at", 0),
    ([], "online_at", 95),
    ([], "speedup", 1.0),
])
def test_a_simulate_number_option_in_the_form_is_read(
        args: list[str], key: str, read: float) -> None:
    assert simulate.make_context("simulate", args).params[key] == read


@pytest.mark.timeout(60)  # taken, the agent serves: a hang, not a pass
@pytest.mark.parametrize(("value", "shown"), [
    ("1_0", "a _ in it"), (" 30", "spaces around it"), ("\u0663\u0660", "not ASCII"),
])
def test_the_agents_refresh_option_in_another_form_is_refused(value: str, shown: str) -> None:
    """--refresh-s had no type: click's FLOAT, from its default 30.0, read '1_0' as 10.
    Refused as its range is, exit 78 (no restart mends an option)."""
    res = CliRunner().invoke(main, ["agent", "--source", "file:/none", "--refresh-s", value])
    assert res.exit_code == CONFIG_ERROR, res.output
    assert f"swarmgpu agent: --refresh-s {value}: " in res.output and shown in res.output, \
        res.output
