"""`swarmgpu config check` reports every problem of a file in one run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fifo import make_fifo, read_within

from swarmgpu.cli import main
from swarmgpu.core.config import ConfigError, load_config, load_config_report

THREE_WRONG = """\
agents:
  port: 70000          # not a TCP port
  timout_s: 3          # misspelt
sync:
  interval_s: soon     # not a number
log:
  format: xml          # neither text nor json
"""


def test_config_check_prints_every_error_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("SWARMGPU_SYNC_INTERVAL_S", "SWARMGPU_LOG_FORMAT", "SWARMGPU_AGENTS_PORT"):
        monkeypatch.delenv(var, raising=False)
    workload = tmp_path / "w.yml"
    workload.write_text("- {gpus: -1}\n")
    cfg = tmp_path / "c.yml"
    cfg.write_text(THREE_WRONG + f"placement:\n  workload: {workload}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    lines = [re.sub(rf"^{re.escape(str(cfg))}(:\d+)?: ", "", ln) for ln in res.output.splitlines()]
    assert lines[0] == "5 errors"
    assert lines[1].startswith("agents.timout_s: unknown key; did you mean 'timeout_s'?")
    body = "\n".join(lines[1:])
    for key in (
        "agents.port: 70000",
        "sync.interval_s: expected a number",
        "log.format: 'xml'",
        "placement.workload:",
    ):
        assert key in body, body
    assert len(lines) == 6


def test_one_error_reads_as_before(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("log:\n  format: xml\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2
    assert res.output == f"{cfg}:2: log.format: 'xml'; use 'text' or 'json'\n"


def test_load_config_raises_with_every_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text(THREE_WRONG)
    with pytest.raises(ConfigError) as exc:
        load_config(cfg, env={})
    assert len(exc.value.errors) == 4
    assert str(exc.value) == "\n".join(exc.value.errors)
    built, errors = load_config_report(cfg, env={})
    assert errors == exc.value.errors
    assert built.agents.port == 70000 and built.sync.interval_s == 30.0  # bad: default


def test_broken_yaml_is_one_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents: [\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2 and res.output.startswith(f"{cfg}:2:1: not valid YAML: "), res.output
    assert " errors\n" not in res.output


@pytest.mark.parametrize("make", ["missing", "directory", "list"])
def test_a_file_level_error_names_the_file_once(tmp_path: Path, make: str) -> None:
    # It read "c.yml: config file c.yml: cannot read it": the located form's FILE: and
    # the loader's own naming, both.
    cfg = tmp_path / "c.yml"
    if make == "directory":
        cfg.mkdir()
    elif make == "list":
        cfg.write_text("- a\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert res.output.count(str(cfg)) == 1, res.output
    assert res.output.startswith(f"{cfg}: "), res.output
    want = {"missing": "cannot read it (No such file or directory)",
            "directory": "a directory, not a regular file",
            "list": "expected a mapping at the top level"}[make]
    assert want in res.output, res.output


def test_a_fifo_as_the_config_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "c.yml")
    got = read_within(lambda: load_config(fifo, env={}), fifo)
    assert isinstance(got, ConfigError), got
    assert str(got) == (
        f"config file {fifo}: a FIFO (a named pipe), not a regular file; "
        "give the path of the YAML file itself"
    )


def test_a_device_as_the_config_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "c.yml").symlink_to("/dev/zero")  # was 8 MiB of NULs read, then refused
    with pytest.raises(ConfigError, match=r"c\.yml: a character device, not a regular"):
        load_config(tmp_path / "c.yml", env={})


def test_a_config_over_8_mib_is_refused_naming_the_limit(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("log: {}\n" + "#" * (8 << 20))
    with pytest.raises(ConfigError, match=r"c\.yml: larger than 8 MiB; not read$"):
        load_config(cfg, env={})


# Issue 33 point 2: no silent coercion; each error names the key, the file and the line.
LOOSE_TYPES = """\
docker_host: 42
agents:
  port: 9401.7
  parallel: "4"
history:
  samples: 2.9
sync:
  interval_s: "30"
  allow_disruptive: "false"
"""


def test_wrong_types_are_errors_with_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("SWARMGPU_DOCKER_HOST", "SWARMGPU_AGENTS_PORT", "SWARMGPU_SYNC_INTERVAL_S"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "c.yml"
    cfg.write_text(LOOSE_TYPES)
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert res.output.splitlines() == [
        f"{cfg}: 6 errors",
        f"{cfg}:1: docker_host: expected a string, got 42 (a whole number); quote it if "
        "it is meant as text: '42'",
        f"{cfg}:3: agents.port: expected a whole number, got 9401.7 (a number with a fraction)",
        f"{cfg}:4: agents.parallel: expected a whole number, got '4' (a string); remove the quotes",
        f"{cfg}:6: history.samples: expected a whole number, got 2.9 (a number with a fraction)",
        f"{cfg}:8: sync.interval_s: expected a number, got '30' (a string); remove the quotes",
        f"{cfg}:9: sync.allow_disruptive: expected true or false, got 'false' (a string)",
    ]


def test_the_real_cli_reports_the_same_lines(tmp_path: Path) -> None:
    """As a subprocess, as an operator runs it: exit 2, every error on its line."""
    import subprocess
    import sys

    cfg = tmp_path / "c.yml"
    cfg.write_text(LOOSE_TYPES)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SWARMGPU_")}
    res = subprocess.run(
        [sys.executable, "-m", "swarmgpu.cli", "config", "check", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    for line in (1, 3, 4, 6, 8, 9):
        assert f"{cfg}:{line}: " in res.stderr, res.stderr


def test_integers_stand_for_floats_and_env_text_is_parsed(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("sync:\n  interval_s: 10\nagents:\n  port: 9500\n")
    built = load_config(cfg, env={"SWARMGPU_AGENTS_TIMEOUT_S": "2.5", "SWARMGPU_DRY_RUN": "true"})
    assert built.sync.interval_s == 10.0 and isinstance(built.sync.interval_s, float)
    assert built.agents.timeout_s == 2.5 and built.dry_run is True
    _, errors = load_config_report(cfg, env={"SWARMGPU_AGENTS_PORT": "9401.7"})
    assert errors == ["SWARMGPU_AGENTS_PORT: agents.port: expected a whole number, got '9401.7'; "
                      "write ASCII digits alone, a - before them at most (e.g. 30)"]


def test_an_empty_section_takes_its_environment_override(tmp_path: Path) -> None:
    # "agents:" with its keys commented out is an empty section, read as the defaults;
    # with SWARMGPU_AGENTS_PORT set it was refused whole: "agents: expected a mapping".
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n#  port: 9500\nsync:\n")
    env = {"SWARMGPU_AGENTS_PORT": "9500", "SWARMGPU_SYNC_INTERVAL_S": "12"}
    built = load_config(cfg, env=env)
    assert built.agents.port == 9500 and built.sync.interval_s == 12.0


def test_a_section_of_no_mapping_is_located_with_an_environment_override(
        tmp_path: Path) -> None:
    # Raised before the file was built: no line, and every other problem unsaid.
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents: 5\nlog:\n  format: xml\n")
    _, errors = load_config_report(cfg, env={"SWARMGPU_AGENTS_PORT": "9500"})
    assert errors[0] == f"{cfg}:1: agents: expected a mapping of keys, got 5", errors
    assert len(errors) == 2 and errors[1].startswith(f"{cfg}:3: log.format: "), errors


def test_a_base_60_number_is_not_a_number_of_seconds(tmp_path: Path) -> None:
    # YAML 1.1 read 1:30 as 90 (and 12:00 as 720): one reader's minutes and seconds,
    # another's hours. Text, as docker's reader and YAML 1.2 read it, so refused here.
    cfg = tmp_path / "c.yml"
    cfg.write_text("sync:\n  interval_s: 1:30\n")
    _, errors = load_config_report(cfg, env={})
    assert errors == [f"{cfg}:2: sync.interval_s: expected a number, got '1:30' (a string)"]


def test_daemon_start_names_file_and_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  port: 9401.7\n")
    res = CliRunner().invoke(main, ["status", "--config", str(cfg)])
    assert res.exit_code == 2
    assert (
        f"swarmgpu status: configuration error: {cfg}:2: agents.port: expected a whole number"
        in res.output
    )


def test_queue_quotas_are_numbers(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("queues:\n  team:\n    guaranteed: '2'\n    max: 4\n")
    _, errors = load_config_report(cfg, env={})
    assert errors == [f"{cfg}:3: queues.team.guaranteed: expected a number of GPUs, got '2'"]


def test_residual_stop_weight_is_checked_at_its_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    for bad in ("2", "-0.1", ".nan"):  # (NaN is refused by the number reader already)
        cfg.write_text(f"placement:\n  workload: auto\n  residual_stop_weight: {bad}\n")
        _, errors = load_config_report(cfg, env={})
        assert len(errors) == 1, errors
        assert errors[0].startswith(f"{cfg}:3: placement.residual_stop_weight: "), errors
        if bad != ".nan":
            assert errors[0] == (
                f"{cfg}:3: placement.residual_stop_weight: {float(bad)!r}; "
                "a weight from 0 to 1 (default 0.01)"
            ), errors
    cfg.write_text("placement:\n  residual_stop_weight: '0.5'\n")
    _, errors = load_config_report(cfg, env={})
    assert errors == [
        f"{cfg}:2: placement.residual_stop_weight: expected a number, got "
        "'0.5' (a string); remove the quotes"
    ]
    for good in ("0", "1", "0.05"):
        cfg.write_text(f"placement:\n  residual_stop_weight: {good}\n")
        assert load_config(cfg, env={}).placement.residual_stop_weight == float(good)


def test_residual_stop_weight_reaches_the_daemons_planner(tmp_path: Path) -> None:
    from swarmgpu.allocator.fragmentation import STOP_WEIGHT
    from swarmgpu.core.config import PlacementConfig
    from swarmgpu.manager.cycle.placement import new_planner
    from swarmgpu.manager.placement.planner import Planner

    # simulate's Planner keeps the default: the same value the daemon's config defaults to
    assert PlacementConfig().residual_stop_weight == STOP_WEIGHT == Planner().scorer.stop
    assert new_planner(load_config(None, env={})).scorer.stop == STOP_WEIGHT
    cfg = tmp_path / "c.yml"
    cfg.write_text("placement:\n  residual_stop_weight: 0\n")
    planner = new_planner(load_config(cfg, env={}))
    assert planner.scorer.stop == 0.0 and planner.scorer.waste is not None
    assert planner.scorer.waste.stop == 0.0  # the model it scores with
    planner.scorer.set_workload(planner.scorer.workload)  # a relearned mix keeps it
    assert planner.scorer.waste is not None and planner.scorer.waste.stop == 0.0


@pytest.mark.parametrize(
    "value",
    [
        "!!int " + "1" * 5000,
        "!!int abc",
        "!!bool maybe",
        "!!float x",
        "!!timestamp x",
        "!!timestamp 2001-13-01",
    ],
)
def test_a_value_its_tag_cannot_read_is_an_error_at_its_line(tmp_path: Path, value: str) -> None:
    # PyYAML's constructors raised ValueError, KeyError or AttributeError: a traceback
    # from `config check`, where a line and the fix were due.
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"log:\n  level: INFO\nsync:\n  interval_s: {value}\n")
    with pytest.raises(ConfigError) as exc:
        load_config_report(cfg, env={})
    assert str(exc.value).startswith(f"config file {cfg}: the value at line 4 ("), exc.value
    assert "cannot be read as" in str(exc.value) and "; quote it (with no !! tag)" in str(exc.value)
    assert len(str(exc.value)) < 300  # 5000 digits are not echoed back


@pytest.mark.parametrize(
    ("first", "second", "read", "quote"),
    [
        ("1", "01", "1", True),  # YAML 1.1's octal: both the number 1
        ("1", "0x1", "1", True),
        ("10", "1_0", "10", True),
        ("1", "1.0", "1", True),  # 1 == 1.0: one dict key
        ("1", "true", "1", True),  # True == 1: one dict key
        ("~", "null", "None", True),
        ("1", '"1"', "'1'", False),  # the number and the text: one name once read as text
        ("true", "'True'", "'True'", True),
    ],
)
def test_keys_that_are_one_key_once_read_are_refused_with_both_lines(
    tmp_path: Path, first: str, second: str, read: str, quote: bool
) -> None:
    # PyYAML built {1: ..} from `1:` and `01:`, keeping the last silently; a queue named
    # 1 and one named "1" became one quota (queue_quotas keys by text).
    cfg = tmp_path / "c.yml"
    cfg.write_text(
        f"queues:\n  {first}: {{guaranteed: 1}}\n  team: {{max: 2}}\n"
        f"  {second}: {{guaranteed: 2}}\n"
    )
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"{cfg}: keys "), res.output
    assert "(line 2) and " in res.output and "(line 4) are one key once read" in res.output
    assert f"once read ({read}" in res.output, res.output
    fix = "; write it once, or quote both if they are two names" if quote else "; write it once"
    assert res.output.rstrip().endswith(fix), res.output


def test_keys_that_read_apart_are_kept_apart(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text(
        "queues:\n  '1': {guaranteed: 1}\n  '01': {guaranteed: 2}\n  <<: {'1': {guaranteed: 3}}\n"
    )  # a merged key: the own one wins
    queues = load_config(cfg, env={}).queues
    assert sorted(queues) == ["01", "1"] and queues["1"] == {"guaranteed": 1}


@pytest.mark.parametrize(
    ("written", "read"),
    [("007", "7"), ("0x1F", "31"), ("010", "8"), ("1_000", "1000"), ("true", "True")],
)
def test_a_name_read_as_no_text_is_named_at_its_line_without_another_name(
    tmp_path: Path, written: str, read: str
) -> None:
    # The error said `queues.7 ... quote it if it is meant as text: '7'` at the line of
    # `queues:`: quoted as told, 007 became another queue ("7"), which the services'
    # swarmgpu.queue=007 do not name.
    cfg = tmp_path / "c.yml"
    cfg.write_text(
        f"queues:\n  prod: {{guaranteed: 1}}\n  {written}: {{max: 4}}\n"
        f"tenants:\n  {written}: {{stacks: [a*]}}\n"
    )
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    queue, tenant = (line for line in res.output.splitlines() if "name):" in line)
    assert queue.startswith(f"{cfg}:3: queues.{read} (a queue name): expected a string"), queue
    assert tenant.startswith(f"{cfg}:5: tenants.{read} (a tenant name): expected a string")
    for line in (queue, tenant):
        assert f"'{read}'" not in line and "quote it as the file writes it" in line, line


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["config", "check", ""], "'PATH'"),
        (["status", "--config", ""], "'--config'"),
        (["run", "--once", "--config", ""], "'--config'"),
    ],
)
def test_an_empty_config_path_is_refused_naming_the_option(args: list[str], named: str) -> None:
    """An empty path was read as '.': "config file .: a directory" named no option, and
    no path the user gave."""
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert f"Invalid value for {named}: an empty path; give the path of the YAML" in res.output
    assert "a directory" not in res.output
    with pytest.raises(ConfigError, match=r"^config file: an empty path; give the path"):
        load_config("", env={})


@pytest.mark.parametrize("section", ["log:\n  level", "http:\n  listen", "sync:\n  prefix",
                                     "placement:\n  grants"])
def test_a_huge_bad_value_is_named_cut_not_echoed_whole(tmp_path: Path, section: str) -> None:
    """A config value named in an error was echoed whole (up to the 8 MiB a config may
    hold): it is cut, its start and its length, as a stack's are."""
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"{section}: {'x' * 1_000_000}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output[:300]
    assert "... [1000000 characters]" in res.output and len(res.output) < 2000, \
        res.output[:300]


def test_config_check_warns_of_a_tenant_whose_globs_take_the_agents_service(
        tmp_path: Path) -> None:
    """Valid (exit 0), but team-a's stacks glob ``*`` matches the stack ``swarmgpu`` of
    the agents' service ``swarmgpu_agent`` and team-b's services glob its name: the
    daemon would take it for a tenant's, its tasks marking no GPU node. Said with the
    tenant, the glob and the fix; before: "ok", found out only by `audit` on a swarm.
    team-c (stacks team-c*) and default say nothing, nor does agents.service: ""."""
    cfg = tmp_path / "c.yml"
    body = ("tenants:\n  team-c: {stacks: ['team-c*']}\n  team-a: {stacks: ['*']}\n"
            "  team-b: {services: ['*_agent']}\n  default: {}\n")
    cfg.write_text(body)
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 0, res.output
    warned = [ln for ln in res.output.splitlines() if ": warning: " in ln]
    assert len(warned) == 2, res.output
    a, b = warned
    for part in ("tenants.team-a:", "stacks glob '*' matches 'swarmgpu', the stack",
                 "agents.service 'swarmgpu_agent'", "narrow tenants.team-a's globs",
                 'agents.service: ""'):
        assert part in a, a
    assert "tenants.team-b:" in b and "services glob '*_agent'" in b, b
    assert res.output.rstrip().endswith("ok (2 warning(s): see above)"), res.output
    cfg.write_text(body + "agents: {service: ''}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 0 and "warning" not in res.output, res.output


def test_the_agents_service_warning_names_the_tenant_that_takes_it_first() -> None:
    """team-a and team-b both match swarmgpu_agent; the daemon takes it for team-a's,
    the first in file order (``claimed_by``). Before, team-b's warning said the daemon
    would take it for team-b's; now it names team-a as the taker, and says that team-b
    would take it once team-a no longer does."""
    from swarmgpu.core.tenants import TenantSpec, agents_service_takers, claimed_by

    specs = [TenantSpec("team-a", stacks=("*",)), TenantSpec("team-b", services=("*_agent",)),
             TenantSpec("default")]
    a, b = agents_service_takers(specs, "swarmgpu_agent")
    taker = claimed_by(specs, "swarmgpu_agent", "swarmgpu")
    assert taker is not None and taker.name == "team-a"
    assert "for tenant team-a's" in a, a
    assert "for tenant team-b's" not in b and "tenant team-a, before it in the file, " \
        "takes it first (this one would once team-a's globs no longer match)" in b, b


def test_config_check_of_a_valid_file_in_a_fresh_process_says_ok(tmp_path: Path) -> None:
    """As the `swarmgpu` command runs it: a process that imports nothing first. In the
    test process the planner is imported already, which hid an import cycle through
    ``manager.placement``'s ``__init__``: every valid file ended in an ImportError."""
    cfg = tmp_path / "c.yml"
    cfg.write_text("tenants:\n  team-a: {stacks: ['team-a*'], max: 4}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMGPU_")}
    r = subprocess.run([sys.executable, "-m", "swarmgpu.cli", "config", "check", str(cfg)],
                       capture_output=True, text=True, env=env, timeout=300,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == f"{cfg}: ok\n"
