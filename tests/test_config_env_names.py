"""A SWARMGPU_* variable no override reads: a typo of one (`SWARMGPU_SYNC_INTERVAL`), or
a key the environment does not override (`SWARMGPU_AGENTS_PARALLEL`), was ignored
unsaid, and `SWARMGPU_DRYRUN=true` left the daemon writing. `config check` names it and
the nearest variable that is read (a warning: other programs read SWARMGPU_* too)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.config_check import config_check


@pytest.mark.parametrize(("var", "says"), [
    ("SWARMGPU_SYNC_INTERVAL", "did you mean SWARMGPU_SYNC_INTERVAL_S?"),
    ("SWARMGPU_DRYRUN", "did you mean SWARMGPU_DRY_RUN?"),
    ("SWARMGPU_AGENTS_PARALLEL", "agents.parallel is read from the config file only;"),
    ("SWARMGPU_FOO", "no key reads it"),
])
def test_a_variable_no_key_reads_is_named_with_the_nearest(
        tmp_path: Path, var: str, says: str) -> None:
    code, out = config_check(tmp_path, f"{var}=1\n")
    assert code == 0, out
    assert f"warning: {var}: " in out and says in out, out


def test_the_agents_and_the_stacks_variables_are_not_warned_of(tmp_path: Path) -> None:
    # /etc/swarmgpu/env is the agent unit's EnvironmentFile too
    code, out = config_check(tmp_path, "SWARMGPU_AGENT_SOURCE=nvml\n"
                             "SWARMGPU_AGENT_LISTEN=0.0.0.0:9401\n"
                             "SWARMGPU_AGENT_ARGS=\nSWARMGPU_SYNC_INTERVAL_S=10\n")
    assert code == 0 and "warning" not in out, out


def test_the_shells_own_variables_are_warned_of_only_when_near_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMGPU_SOME_TOOL", "1")  # another program's
    monkeypatch.setenv("SWARMGPU_LOG_LEVLE", "DEBUG")
    out = config_check(tmp_path, config="")[1]
    assert "SWARMGPU_SOME_TOOL" not in out, out
    assert "warning: SWARMGPU_LOG_LEVLE: " in out and "SWARMGPU_LOG_LEVEL?" in out, out


@pytest.mark.parametrize(("var", "says"), [
    ("swarmgpu_dry_run", "did you mean SWARMGPU_DRY_RUN?"),
    ("Swarmgpu_Http_Listen", "did you mean SWARMGPU_HTTP_LISTEN?"),
    ("swarmgpu_agent_source", "did you mean SWARMGPU_AGENT_SOURCE?"),
    ("swarmgpu_agents_parallel", "agents.parallel is read from the config file only;"),
])
def test_a_variable_in_another_case_is_named_with_the_one_read(
        tmp_path: Path, var: str, says: str) -> None:
    # `swarmgpu_dry_run=true` in /etc/swarmgpu/env: names are case-sensitive (systemd,
    # the shell, os.environ), so the daemon read no override and wrote, unsaid.
    code, out = config_check(tmp_path, f"{var}=true\n")
    assert code == 0, out
    assert f"warning: {var}: " in out and says in out, out


def test_a_variable_in_another_case_is_named_from_the_shell_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("swarmgpu_dry_run", "true")
    out = config_check(tmp_path, config="")[1]
    assert "warning: swarmgpu_dry_run: " in out and "SWARMGPU_DRY_RUN?" in out, out


@pytest.mark.parametrize("from_shell", [False, True])
def test_the_daemons_crash_test_hook_is_named_as_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_shell: bool) -> None:
    # SWARMGPU_TEST_CRASH_AFTER is read: the daemon exits (137) at the step it names. It
    # was said "no key reads it", as if it did nothing; left in a unit, it kills the
    # daemon mid-move.
    if from_shell:
        monkeypatch.setenv("SWARMGPU_TEST_CRASH_AFTER", "move-step-1")
        out = config_check(tmp_path, config="")[1]
    else:
        out = config_check(tmp_path, "SWARMGPU_TEST_CRASH_AFTER=move-step-1\n")[1]
    assert "warning: SWARMGPU_TEST_CRASH_AFTER: " in out, out
    assert "no key reads it" not in out and "test hook" in out and "remove it" in out, out


def test_the_hook_named_is_the_one_the_daemon_reads() -> None:
    from swarmgpu.core.envnames import TEST_HOOKS
    from swarmgpu.manager.rebalance.record import CRASH_ENV

    assert CRASH_ENV in TEST_HOOKS
