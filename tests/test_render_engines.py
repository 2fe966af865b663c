"""`swarmgpu render` writes what every supported engine accepts, and reads its input as
hostile (issue 33 point 1, issue 32 point 5).

- The output carries ``version: "3.8"`` (a docker CLI before 23.0 refuses a file without
  one) and validates against docker/cli's own compose schema 3.8, vendored in
  swarmgpu/manager/commands/schema/ and read here with jsonschema directly, not through render.
- Compose-specification GPU keys (``gpus: all``, ``gpus: N``) become swarmgpu.gpus;
  ``runtime`` and a top-level ``name`` are refused with their fix; every key Swarm
  ignores is named.
- An alias bomb is refused, bounded; escape sequences are printed escaped; the keys the
  daemon owns are errors naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support.render_compose import FACTS, NODES
from support.render_engines import (
    BOMB,
    GPUS_2,
    GPUS_ALL,
    SCHEMA,
    STACKS,
    VERSIONLESS,
    schema_errors,
)
from support.traced import traced_peak

from swarmgpu.cli import main
from swarmgpu.core.peertext import escaped
from swarmgpu.core.yamlfile import MAX_NODES, parse_yaml
from swarmgpu.manager.commands.composefile import SWARM_IGNORES
from swarmgpu.manager.commands.render import StackError, check_stack, render_stack


def test_the_vendored_schema_is_docker_clis_with_its_licence() -> None:
    sources = (SCHEMA.parent / "SOURCES.md").read_text()
    assert "docker/cli" in sources and "config_schema_v3.8.json" in sources
    assert "Apache License" in (SCHEMA.parent / "LICENSE").read_text()
    assert json.loads(SCHEMA.read_text())["id"] == "config_schema_v3.8.json"


@pytest.mark.parametrize("name", sorted(STACKS))
def test_rendered_stack_validates_against_docker_clis_v3_8_schema(name: str) -> None:
    out, plan = render_stack(STACKS[name], name, NODES, [], [], FACTS)
    doc = yaml.safe_load(out)
    assert doc["version"] == "3.8"
    assert next(iter(doc)) == "version"
    assert schema_errors(doc) == []
    assert all(sp.status == "placed" for sp in plan.services), plan.services
    # and --check says the same, offline
    assert check_stack(STACKS[name], stack_name=name).errors == []


def test_versionless_input_gets_version_and_says_so() -> None:
    assert schema_errors(yaml.safe_load(VERSIONLESS))  # as written the schema refuses it
    out, _ = render_stack(VERSIONLESS, "v", NODES, [], [], FACTS)
    assert '# version: "3.8" added: a docker CLI before 23.0 refuses' in out


@pytest.mark.parametrize(("text", "count"), [(GPUS_ALL, "8"), (GPUS_2, "2")])
def test_compose_spec_gpus_become_a_request(text: str, count: str) -> None:
    out, plan = render_stack(text, "g", NODES, [], [], FACTS)
    doc = yaml.safe_load(out)
    (svc,) = doc["services"].values()
    assert "gpus" not in svc
    assert svc["deploy"]["labels"]["swarmgpu.gpus"] == count
    assert "gpus became swarmgpu.gpus" in out.split("services:")[0]
    (sp,) = plan.services
    assert sum(len(p.uuids) for p in sp.placements) == int(count)


def test_gpus_all_offline_is_checked_only() -> None:
    c = check_stack(GPUS_ALL)
    assert c.errors == [] and any("count all: checked only" in n for n in c.notes)


@pytest.mark.parametrize("bad", ["0", "two", "true", "{count: 1}"])
def test_bad_gpus_value_is_an_error(bad: str) -> None:
    c = check_stack(GPUS_ALL.replace("gpus: all", f"gpus: {bad}"))
    assert any(e.startswith("services.trainer.gpus") for e in c.errors), c.errors


def test_gpus_and_devices_must_agree() -> None:
    text = GPUS_2.replace("    deploy:\n", "    deploy:\n      resources:\n        reservations:\n"
                          "          devices: [{driver: nvidia, count: 3}]\n")
    err = check_stack(text).errors[0]
    assert "the GPU counts differ" in err and "services.llm.gpus = 2" in err


def test_runtime_and_top_level_name_are_not_valid() -> None:
    text = "name: myproject\n" + GPUS_2.replace("    gpus: 2\n",
                                                "    gpus: 2\n    runtime: nvidia\n")
    errors = check_stack(text).errors
    assert any(e.startswith("name: docker stack deploy refuses a top-level name") and
               "-n NAME" in e for e in errors), errors
    assert any(e.startswith("services.llm.runtime: docker stack deploy refuses it") and
               "default-runtime" in e for e in errors), errors


def test_render_check_cli_refuses_runtime(tmp_path: Path) -> None:
    f = tmp_path / "s.yml"
    f.write_text(GPUS_2.replace("    gpus: 2\n", "    runtime: nvidia\n"))
    res = CliRunner().invoke(main, ["render", "--check", str(f)])
    assert res.exit_code == 1
    assert "services.llm.runtime: docker stack deploy refuses it" in res.output
    assert "valid" not in res.output


@pytest.mark.parametrize(("line", "fix"), [
    ("cpus: 2", "use deploy.resources.limits.cpus"),
    ("mem_reservation: 1g", "use deploy.resources.reservations.memory"),
    ("platform: linux/amd64", "add a constraint (node.platform.arch == x86_64)"),
    ("profiles: [debug]", "put a profile's services in a file of their own"),
    ("pull_policy: always", "remove pull_policy"),
])
def test_compose_spec_keys_format_3_8_lacks_are_refused_with_their_fix(line: str,
                                                                       fix: str) -> None:
    """A compose habit the schema refuses was named alone ("additional property 'cpus'
    is not allowed"); now with what Swarm has instead."""
    key = line.partition(":")[0]
    errors = check_stack(GPUS_2.replace("    gpus: 2\n", f"    gpus: 2\n    {line}\n")).errors
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"services.llm.{key}: docker stack deploy refuses it; "), errors
    assert fix in errors[0], errors


@pytest.mark.parametrize("key", sorted(SWARM_IGNORES))
def test_every_key_swarm_ignores_is_named(key: str) -> None:
    text = VERSIONLESS.replace("    image: nginx:1.27\n",
                               f"    image: nginx:1.27\n    {key}: {_value(key)}\n")
    c = check_stack(text)
    assert c.errors == [], c.errors
    assert any(n.startswith(f"services.web.{key}: docker stack deploy ") for n in c.notes), \
        c.notes


def _value(key: str) -> str:
    """A value the v3.8 schema takes for ``key`` (and docker: restart: host it refuses,
    tests/test_render_restart_value.py)."""
    return {"build": ".", "depends_on": "[db]", "devices": '["/dev/fuse:/dev/fuse"]',
            "expose": '["80"]', "external_links": "[db]", "links": "[db]",
            "privileged": "true", "security_opt": '["no-new-privileges"]',
            "shm_size": "1gb", "restart": "on-failure"}.get(key, "host")


def test_cli_refused_keys_are_errors() -> None:
    c = check_stack(VERSIONLESS.replace("    image: nginx:1.27\n",
                                        "    image: nginx:1.27\n    mem_limit: 1g\n"))
    assert c.errors == ["services.web.mem_limit: docker stack deploy refuses it; use "
                        "deploy.resources.limits.memory"]


def test_other_schema_breaks_are_reported_as_the_cli_would() -> None:
    c = check_stack(VERSIONLESS.replace("    image: nginx:1.27\n",
                                        "    image: nginx:1.27\n    oom_score_adj: 100\n"))
    (err,) = c.errors
    assert err.startswith("services.web: additional property 'oom_score_adj' is not allowed "
                          "(docker/cli's compose schema 3.8")


def test_old_and_newer_3x_versions_become_3_8() -> None:
    for v in ("3", "3.3", "3.9", "3.13"):
        c = check_stack(f'version: "{v}"\n' + VERSIONLESS)
        assert c.errors == [] and c.stack["version"] == "3.8"
        assert any(n.startswith(f"version: '{v}' became \"3.8\"") for n in c.notes)
    assert check_stack('version: "2.4"\n' + VERSIONLESS).errors[0].startswith(
        "stack: version '2.4': docker stack deploy takes Compose format 3 only")


# --- hostile input (issue 32, point 5) ---------------------------------------------------


@pytest.mark.timeout(10)  # a deadline, not a measurement: benchmarks/bench_yaml_bomb.py
def test_alias_bomb_is_refused_with_bounded_memory() -> None:
    assert len(BOMB.encode()) == 506
    c, peak = traced_peak(lambda: check_stack(BOMB, where="bomb.yml"))
    (err,) = c.errors
    assert err.startswith(f"bomb.yml: more than {MAX_NODES} values once its aliases are "
                          "expanded"), err
    assert peak < 16 * 1024 * 1024, peak  # allocations, counted (not timed): 16 MiB


def test_recursive_alias_and_deep_nesting_are_refused() -> None:
    with pytest.raises(StackError, match="recursive alias"):
        parse_yaml("services: &s {a: *s}\n", "s.yml", StackError)
    with pytest.raises(StackError, match="nested"):
        parse_yaml("services: " + "[" * 5000 + "]" * 5000, "s.yml", StackError)


def test_a_key_given_twice_is_refused() -> None:
    c = check_stack(VERSIONLESS + "  web:\n    image: evil\n", where="s.yml")
    assert c.errors == ["s.yml: key 'web' given twice in one mapping (lines 2 and 8); "
                        "keep one"]


ESC = "\x1b]0;pwned\x07\x1b[2J"


def test_escape_sequences_in_names_keys_and_values_are_printed_escaped(
        tmp_path: Path) -> None:
    f = tmp_path / "s.yml"
    doc = {"services": {f"web{ESC}": {"image": "x", "deploy": {"labels": {
        f"swarmgpu.gpus{ESC}": "1", "swarmgpu.gpu-memory": f"4G{ESC}"}}}}}
    f.write_text(json.dumps(doc))  # JSON escapes them; YAML reads them back raw
    res = CliRunner().invoke(main, ["render", "--check", str(f)])
    assert res.exit_code == 1
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert r"\x1b]0;pwned\x07\x1b[2J" in res.output, res.output


def test_notes_in_the_rendered_header_are_escaped() -> None:
    text = GPUS_2.replace("llm:", "llm\u202e:")
    c = check_stack(text)
    assert c.errors  # the schema refuses such a name...
    assert all("\u202e" not in escaped(e) for e in c.errors)  # ...and it prints escaped
    assert escaped("a\nb\x1bc\u202e") == r"a\nb\x1bc\u202e"


@pytest.mark.parametrize(("label", "value"), [
    ("swarmgpu.state.move", '{"phase": "done"}'),
    ("swarmgpu.state.max-replicas", "4"),
    ("swarmgpu.devices.n-dgx", "GPU-0"),
    ("swarmgpu.share.fraction.n-dgx", "1.0"),
])
def test_daemon_owned_labels_in_the_input_are_errors(label: str, value: str) -> None:
    text = VERSIONLESS.replace('        swarmgpu.gpus: "1"\n',
                               f'        swarmgpu.gpus: "1"\n        {label}: \'{value}\'\n')
    (err,) = check_stack(text).errors
    assert err.startswith(f"services.web.deploy.labels: {label}: owned by the swarmgpu daemon")
    with pytest.raises(StackError, match=label.replace(".", r"\.")):
        render_stack(text, "s", NODES, [], [], FACTS)


def test_another_services_gate_is_an_error_its_own_is_not() -> None:
    own = VERSIONLESS + "      placement:\n        constraints:\n" \
        "          - node.labels.swarmgpu.service.s_web==true\n"
    assert check_stack(own, stack_name="s").errors == []
    assert check_stack(own).errors == []  # stack name unknown: the service's own name
    (err,) = check_stack(own, stack_name="other").errors
    assert "the placement gate of 's_web', owned by the swarmgpu daemon" in err
    theirs = own.replace("s_web", "prod_llm")
    (err,) = check_stack(theirs, stack_name="s").errors
    assert err.startswith("services.web.deploy.placement.constraints: "
                          "'node.labels.swarmgpu.service.prod_llm==true'")


def test_an_owners_constraint_on_a_swarmgpu_label_is_kept_with_a_warning() -> None:
    """``!= true`` on another service's gate (not where its tasks run) is not a gate: it
    renders as written, beside the service's own gate, and the header warns that the
    label is swarmgpu's and changes as it places."""
    away = "node.labels.swarmgpu.service.prod_db != true"
    text = VERSIONLESS + f"      placement:\n        constraints:\n          - {away}\n"
    checked = check_stack(text, stack_name="s")
    assert checked.errors == []
    (note,) = [n for n in checked.notes if away in n]
    assert "swarmgpu writes" in note and "stops a running task" in note, note
    out, _ = render_stack(text, "s", NODES, [], [], FACTS)
    cons = yaml.safe_load(out)["services"]["web"]["deploy"]["placement"]["constraints"]
    assert cons == [away, "node.labels.swarmgpu.service.s_web==true"]
    assert away in out.split("\nservices:")[0]  # the header says it too


@pytest.mark.parametrize(("text", "where"), [
    (VERSIONLESS + "        true: x\n", "services.web.deploy.labels"),
    ("services:\n  1:\n    image: nginx\n", "services"),
    ("services:\n  web:\n    image: nginx\n    environment:\n      null: x\n",
     "services.web.environment"),
])
def test_a_non_string_key_is_refused_as_docker_refuses_it(text: str, where: str) -> None:
    # docker/cli's loader: "non-string key in services.web.deploy.labels: true"; render
    # crashed (jsonschema's pattern match on a bool or int key) or rewrote the key.
    (err,) = check_stack(text, where="s.yml").errors
    assert err.startswith(f"s.yml: non-string key in {where}: "), err
    assert "quote it" in err


def test_values_docker_reads_as_text_are_written_back_as_that_text() -> None:
    # docker reads YAML with go-yaml (v3 from docker 28, v2 before): no base-60 numbers,
    # '=' is text. PyYAML's YAML 1.1 made 12:30 the number 750, which render then wrote
    # into the service's env and labels (neither is swarmgpu's to change).
    text = VERSIONLESS.replace("    deploy:\n", "    environment:\n      AT: 12:30\n"
                               "      LIGHT: 'on'\n      EQ: =\n"
                               "      GB: 1:30.5\n    deploy:\n") \
        + "        backup-window: 1:30\n        'y': \"y\"\n"
    assert check_stack(text).errors == []
    out, _ = render_stack(text, "s", NODES, [], [], FACTS)
    svc = yaml.safe_load(out)["services"]["web"]
    assert svc["environment"]["AT"] == "12:30"
    assert svc["environment"]["LIGHT"] == "on" and svc["deploy"]["labels"]["y"] == "y"
    assert svc["environment"]["EQ"] == "="
    assert svc["environment"]["GB"] == "1:30.5"
    assert svc["deploy"]["labels"]["backup-window"] == "1:30"


@pytest.mark.parametrize(("line", "err"), [
    ("      E: yes\n", "the value at line 5: plain `yes` is text to docker 28+ and true to "
     "docker 27 and older: quote it, or write true"),
    ("      E: Off\n", "the value at line 5: plain `Off` is text to docker 28+ and false to "
     "docker 27 and older: quote it, or write false"),
    ("      n: x\n", "the key at line 5: plain `n` is text to docker 28+ and false to "
     "docker 27 and older: quote it"),
    ("      E: 0o-1_7\n", "the value at line 5: plain `0o-1_7` is the number -15 to docker "
     "28+ and text to docker 27 and older: quote it, or write -15"),
])
def test_a_plain_value_docker_27_and_28_read_apart_is_refused_naming_its_line(
        line: str, err: str) -> None:
    # docker 27 and older (go-yaml v2) read yes as true (refused in env, a label or a
    # command; true in read_only, where docker 28 refuses "yes"), 0o-17 as text, docker
    # 28 (v3) as "yes" and -15: render took docker 28's reading, which the other CLI
    # deploys otherwise or not at all.
    text = VERSIONLESS.replace("    deploy:\n", "    environment:\n" + line + "    deploy:\n")
    assert check_stack(text, where="s.yml").errors == ["s.yml: " + err]


@pytest.mark.parametrize("value", ["'yes'", '"0o-17"', "!!str on", "-0o17", "0o17", "1e3"])
def test_a_quoted_or_tagged_value_both_dockers_read_alike_is_taken(value: str) -> None:
    text = VERSIONLESS.replace("    deploy:\n", f"    environment:\n      E: {value}\n"
                               "    deploy:\n")
    assert check_stack(text).errors == []


def test_a_plain_yes_in_an_extension_field_is_taken_and_refused_where_an_alias_deploys_it(
        ) -> None:
    # docker ignores a top-level x- field (docker 20.10 and 28 deploy the same spec); a
    # value anchored there and used in a service is read where it lands.
    ext = "x-note: yes\nx-flags: &f [on]\n"
    assert check_stack(ext + VERSIONLESS).errors == []
    used = ext + VERSIONLESS.replace("    deploy:\n", "    command: *f\n    deploy:\n")
    (err,) = check_stack(used, where="s.yml").errors
    assert err.startswith("s.yml: the value at line 2: plain `on` is text"), err


def test_a_plain_timestamp_is_refused_naming_its_line() -> None:
    # docker 28 (go-yaml v3) gave the service Go's text of the time in docker's own zone
    # ("2001-12-14 21:59:43.1 -0500 EST" or "... -0500 -0500"), docker 27 the text as
    # written; render kept the text, which docker 28 alone would not have.
    text = VERSIONLESS.replace("    deploy:\n", "    environment:\n"
                               "      WHEN: 2001-12-14t21:59:43.10-05:00\n    deploy:\n")
    (err,) = check_stack(text, where="s.yml").errors
    assert err.startswith("s.yml: the value at line 5 ('2001-12-14t21:59:43.10-05:00') is a "
                          "timestamp"), err
    assert "quote it" in err
    quoted = text.replace("2001-12-14t21:59:43.10-05:00", "'2001-12-14t21:59:43.10-05:00'")
    assert check_stack(quoted).errors == []


def test_a_label_given_twice_in_list_form_is_refused() -> None:
    # In mapping form a key given twice is refused (yamlfile); the list form ("k=v")
    # kept the last one silently (docker/cli does too), so `- swarmgpu.gpus=1` then
    # `- swarmgpu.gpus=8` asked for 8 GPUs where a reader of the file sees 1.
    text = VERSIONLESS.replace('      labels:\n        swarmgpu.gpus: "1"\n',
                               "      labels:\n        - swarmgpu.gpus=1\n"
                               "        - team=a\n        - swarmgpu.gpus=8\n")
    (err,) = check_stack(text, where="s.yml").errors
    assert "services.web.deploy.labels" in err and "'swarmgpu.gpus'" in err, err
    assert "twice" in err
    once = text.replace("        - swarmgpu.gpus=8\n", "")
    assert check_stack(once).errors == []


def test_a_label_given_twice_in_list_form_is_an_error_with_tenants_too(tmp_path: Path) -> None:
    # With the config's tenants, the tenant check read the labels again and raised the
    # error out of check_stack: `render --check --config` stopped with a traceback.
    cfg = tmp_path / "cluster.yml"
    cfg.write_text("tenants:\n  team-a: {stacks: [\"team-a*\"], max_priority: 100}\n"
                   "  default: {max_priority: 0}\n")
    stack = tmp_path / "team-a-llm.yml"
    stack.write_text(VERSIONLESS.replace('      labels:\n        swarmgpu.gpus: "1"\n',
                                         "      labels:\n        - swarmgpu.gpus=1\n"
                                         "        - swarmgpu.gpus=8\n"))
    r = CliRunner().invoke(main, ["render", "--check", "--config", str(cfg), str(stack)])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), repr(r.exception)
    assert "given twice" in r.output, r.output


def test_a_key_a_later_merge_also_sets_is_refused() -> None:
    # go-yaml v2 (docker/cli) merges `<<` where it stands, so it overwrites the keys
    # above it; PyYAML keeps them: render wrote nginx:2, docker alone deploys nginx:1.
    text = ("x-base: &base\n  image: nginx:1\n  init: true\nservices:\n  web:\n"
            "    image: nginx:2\n    <<: *base\n")
    (err,) = check_stack(text, where="s.yml").errors
    assert "'image'" in err and "line 6" in err and "line 7" in err and "<<" in err, err
    first = ("x-base: &base\n  image: nginx:1\nservices:\n  web:\n"
             "    <<: *base\n    image: nginx:2\n")
    assert check_stack(first).errors == []
