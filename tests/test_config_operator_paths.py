"""The config's paths and text as an operator writes them, checked before the daemon
starts: a relative path (the daemon under systemd runs in /, a check in a shell ran
where the shell was), a NUL byte (no path, name or URL has one) and an empty
``SWARMGPU_*`` override (a placeholder left empty silently turned a key off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.cli.config import load_checked
from swarmgpu.core.config import ConfigError, load_config, load_config_report


def _errors(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[str]:
    cfg = tmp_path / "config.yml"
    cfg.write_text(text)
    return load_config_report(str(cfg), env=env or {})[1]


@pytest.mark.parametrize("key", [
    "state_dir: var/state", "state_dir: ''", "state_dir: ~/state",
    "agents:\n  token_file: secrets/token", "agents:\n  ca_file: ca.pem",
    "agents:\n  cert_file: c.pem\n  key_file: /etc/k.pem", "http:\n  token_file: token",
    "placement:\n  workload: shapes.yaml",
])
def test_a_relative_path_is_refused_naming_the_key_and_the_absolute_one(
        tmp_path: Path, key: str) -> None:
    # The daemon under systemd runs with its working directory /: `state_dir: var/state`
    # was /var/state there, and ./var/state where the shell that checked it ran.
    errors = _errors(tmp_path, key + "\n")
    assert len(errors) == 1, errors
    assert "not an absolute path" in errors[0], errors
    assert f"{tmp_path}/config.yml:" in errors[0], errors


def test_the_absolute_path_suggested_is_written_as_a_path_is(tmp_path: Path) -> None:
    # (`token_file: ./token` was suggested as e.g. /etc/swarmgpu/./token, the `./` kept)
    errors = _errors(tmp_path, "http:\n  token_file: ./secrets//token\n")
    assert errors[0].endswith(f"write it whole, e.g. {tmp_path}/secrets/token"), errors


def test_a_relative_path_from_the_environment_is_refused_naming_the_variable(
        tmp_path: Path) -> None:
    errors = _errors(tmp_path, "", {"SWARMGPU_STATE_DIR": "state"})
    assert errors and errors[0].startswith("SWARMGPU_STATE_DIR: state_dir: "), errors
    assert "not an absolute path" in errors[0], errors
    assert str(tmp_path) not in errors[0], errors  # (not beside a file that did not set it)


def test_absolute_paths_and_auto_pass(tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.yml"
    shapes.write_text("- {gpus: 1, weight: 1}\n")
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"state_dir: /var/lib/x\nagents:\n  ca_file: /etc/ca.pem\n"
                   f"placement:\n  workload: {shapes}\n")
    load_checked(str(cfg), env={})
    cfg.write_text("placement:\n  workload: auto\n")
    load_checked(str(cfg), env={})


@pytest.mark.parametrize("text", [
    'state_dir: "/var/lib/a\\0b"', 'docker_host: "unix:///run/docker.sock\\0"',
    'http:\n  token_file: "/run/secrets/t\\0"', 'agents:\n  ca_file: "/etc/ca\\0.pem"',
    'log:\n  level: "INFO\\0"',
])
def test_a_nul_byte_in_any_text_is_refused(tmp_path: Path, text: str) -> None:
    # `config check` said ok; the daemon failed at start (open: "embedded null byte"),
    # or read a token file that can never exist as "no token".
    errors = _errors(tmp_path, text + "\n")
    assert any("NUL" in e for e in errors), errors


@pytest.mark.parametrize("var", ["SWARMGPU_HTTP_TOKEN_FILE", "SWARMGPU_STATE_DIR",
                                 "SWARMGPU_AGENTS_URL_TEMPLATE", "SWARMGPU_DOCKER_HOST",
                                 "SWARMGPU_SYNC_INTERVAL_S", "SWARMGPU_DRY_RUN"])
def test_an_empty_override_is_refused_naming_the_variable(tmp_path: Path, var: str) -> None:
    # `SWARMGPU_HTTP_TOKEN_FILE=` (a placeholder left empty) silently replaced the
    # file's token_file with none: the daemon started without its token.
    errors = _errors(tmp_path, "http:\n  token_file: /run/secrets/t\n", {var: ""})
    assert len(errors) == 1 and errors[0].startswith(f"{var}: "), errors
    assert "empty" in errors[0] and "remove" in errors[0], errors


def test_a_config_error_is_raised_for_them(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("state_dir: state\n")
    with pytest.raises(ConfigError, match="state_dir"):
        load_config(str(cfg), env={})


@pytest.mark.parametrize(("var", "value"), [
    ("SWARMGPU_AGENTS_PORT", "\u0669\u0664\u0660\u0661"),  # Arabic-Indic 9401
    ("SWARMGPU_AGENTS_TIMEOUT_S", "\u0661\u0660"),  # 10
    ("SWARMGPU_SYNC_INTERVAL_S", "\uff13\uff10"),  # full-width 30
])
def test_an_override_in_digits_other_than_ascii_is_refused(
        tmp_path: Path, var: str, value: str) -> None:
    # Python's int() and float() read Arabic-Indic and full-width digits: the port was
    # 9401 from the environment, while the file (YAML: text) and http.listen refuse them.
    errors = _errors(tmp_path, "", {var: value})
    assert len(errors) == 1 and errors[0].startswith(f"{var}: "), errors
    assert "expected" in errors[0], errors


@pytest.mark.parametrize(("text", "says"), [
    ("agents:\n  timeout_s: .inf\n", "got inf (infinity)"),
    ("agents:\n  timeout_s: -.inf\n", "got -inf (infinity)"),
    ("agents:\n  timeout_s: .nan\n", "got nan (not a number)"),
    ("agents:\n  parallel: .inf\n", "got inf (infinity)"),
])
def test_infinity_and_nan_are_named_as_such(tmp_path: Path, text: str, says: str) -> None:
    # YAML's .inf was "got inf (a number with a fraction)": no fraction was written.
    errors = _errors(tmp_path, text)
    assert len(errors) == 1 and says in errors[0], errors


def test_a_policy_typo_names_the_nearest_policy(tmp_path: Path) -> None:
    # A key's typo named the nearest key; a policy's listed all six, naming none.
    errors = _errors(tmp_path, 'rebalance:\n  policies: "hotspot,consolidaton"\n')
    assert len(errors) == 1 and "did you mean 'consolidation'?" in errors[0], errors


@pytest.mark.parametrize(("text", "says"), [
    ("http:\n  token_file: ${CREDENTIALS_DIRECTORY}/http-token",
     "nothing expands ${CREDENTIALS_DIRECTORY} in the config"),
    ("http:\n  token_file: $CREDENTIALS_DIRECTORY/http-token",
     "nothing expands $CREDENTIALS_DIRECTORY in the config"),
    ("agents:\n  token_file: '%d/agent-token'", "nothing expands %d in the config"),
    ("state_dir: $STATE_DIRECTORY", "nothing expands $STATE_DIRECTORY in the config"),
])
def test_a_variable_or_specifier_in_a_path_is_named_not_put_beside_the_file(
        tmp_path: Path, text: str, says: str) -> None:
    # The fix was `e.g. /etc/swarmgpu/${CREDENTIALS_DIRECTORY}/http-token`: a path
    # beside the config file for what the operator meant as systemd's credentials.
    errors = _errors(tmp_path, text + "\n")
    assert len(errors) == 1 and says in errors[0], errors
    assert f"{tmp_path}/" not in errors[0].split(": ", 1)[1], errors
    if "CREDENTIALS" in text or "%d" in text:
        assert "/run/credentials/swarmgpu.service/" in errors[0], errors


def test_a_windows_path_is_named_as_one(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "agents:\n  ca_file: 'C:\\certs\\ca.pem'\n")
    assert len(errors) == 1 and "a Windows path" in errors[0], errors
    assert f"{tmp_path}/" not in errors[0].split(": ", 1)[1], errors
