"""The operator's config read as mistyped input: each mistake is an error naming the key
and the fix at `config check`, never a crash or a stall of the daemon later."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from swarmgpu.core.config import load_config_report
from swarmgpu.core.yamlfile import parse_yaml


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.yml"
    path.write_text(text)
    return load_config_report(path, env={})[1]


@pytest.mark.parametrize(("text", "says"), [
    ("agents:\n  url_template: 'https://{addr}:{prot}'\n",
     "agents.url_template: {prot} is not a placeholder; use {addr}, {hostname}, {port}"),
    ("agents:\n  url_template: 'https://{addr}:{port'\n",
     "agents.url_template: 'https://{addr}:{port' is not a template"),
    ("agents:\n  url_template: 'https://{addr.__class__}:{port}'\n",
     "agents.url_template: {addr.__class__} is not a placeholder"),
    ("rebalance:\n  metrics_url_template: 'http://{addr}:{port}/metrics'\n",
     "rebalance.metrics_url_template: {port} is not a placeholder; use {addr}, {hostname}"),
    ("rebalance:\n  metrics_url_template: 'http://{addr}}/metrics'\n",
     "rebalance.metrics_url_template: 'http://{addr}}/metrics' is not a template"),
])
def test_a_url_template_fills_only_its_placeholders(tmp_path: Path, text: str,
                                                    says: str) -> None:
    errors = _errors(tmp_path, text)
    assert any(says in e for e in errors), errors


def test_a_url_template_with_braces_doubled_is_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, "agents:\n  url_template: 'https://{addr}:{port}/{{x}}'\n") == []


@pytest.mark.parametrize("key", ["sync:\n  interval_s", "agents:\n  timeout_s",
                                 "agents:\n  watch_s", "rebalance:\n  cooldown_s",
                                 "health:\n  clean_window_s"])
def test_a_duration_past_a_week_is_refused(tmp_path: Path, key: str) -> None:
    """1.0e+12 seconds overflowed the scheduler and the sockets' timeouts at start."""
    errors = _errors(tmp_path, f"{key}: 1.0e+12\n")
    name = key.replace(":\n  ", ".")
    assert errors == [f"{tmp_path / 'c.yml'}:2: {name}: 1e+12 seconds is more than a week "
                      "(604800); a duration is a number of seconds, e.g. 30"], errors


def test_a_week_is_still_a_duration(tmp_path: Path) -> None:
    assert _errors(tmp_path, "rebalance:\n  cooldown_s: 604800\n") == []


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "[::1]:65536", "h:" + "9" * 5000])
def test_http_listen_needs_a_tcp_port(tmp_path: Path, listen: str) -> None:
    """99999 passed and the daemon died binding it (OverflowError)."""
    errors = _errors(tmp_path, f"http:\n  listen: '{listen}'\n")
    port = listen.rpartition(":")[2]
    assert errors == [f"{tmp_path / 'c.yml'}:2: http.listen: {port} is not a TCP port "
                      "(0-65535); use HOST:PORT, e.g. 127.0.0.1:9402"], errors


def test_http_listen_with_a_digit_int_cannot_read_is_an_error(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "http:\n  listen: 'h:\u00b2'\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: http.listen: 'h:\u00b2'; use HOST:PORT, "
                      "e.g. 127.0.0.1:9402"], errors


@pytest.mark.parametrize("prefix", ["com.docker.", "com.", "io.docker.gpu.", "org.dockerproject."])
def test_a_prefix_in_dockers_reserved_label_namespaces_is_refused(tmp_path: Path,
                                                                   prefix: str) -> None:
    """With com.docker. (or com.) every stack's com.docker.stack.namespace read as an
    unknown request key, and the proxy stripped it from services as swarmgpu's own."""
    errors = _errors(tmp_path, f"sync:\n  prefix: {prefix}\n")
    assert len(errors) == 1 and f"sync.prefix: {prefix!r} overlaps " in errors[0], errors
    assert "reserved by Docker (com.docker.*, io.docker.*, org.dockerproject.*)" in errors[0]


@pytest.mark.parametrize(("classes", "says"), [
    ("gold=10,gold=20", "'gold' is given twice (10 and 20); keep one"),
    ("Gold=10,gold=20", "'gold' is given twice (10 and 20); keep one"),
    ("100=5", "'100' is a number: swarmgpu.priority=100 reads as priority 100, never "
              "this class; name it with a letter"),
    ("urgent=5000000", "'urgent=5000000' is out of range; a priority is -999999 to 999999"),
    ("low=-1000000", "'low=-1000000' is out of range; a priority is -999999 to 999999"),
])
def test_priority_classes_are_unambiguous_and_in_range(tmp_path: Path, classes: str,
                                                       says: str) -> None:
    """A class given twice kept the last silently; a class named 100 could never be asked
    for; a value past a label's range was refused later as a tenant's max_priority."""
    errors = _errors(tmp_path, f"preemption:\n  priority_classes: '{classes}'\n")
    assert len(errors) == 1 and says in errors[0], errors
    assert errors[0].startswith(f"{tmp_path / 'c.yml'}:2: preemption.priority_classes: ")


def test_a_negative_priority_class_is_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, "preemption:\n  priority_classes: 'batch=0,scavenger=-10'\n") == []


@pytest.mark.parametrize(("text", "says"), [
    ("queues:\n  research: {max: 1}\n  Research: {max: 2}\n",
     "queues.Research: the same name as queues.research but for case; a label's "
     "swarmgpu.queue=research or =Research would pick one by a typo: rename one"),
    ("tenants:\n  team-a: {stacks: [a]}\n  Team-A: {stacks: [b]}\n",
     "tenants.Team-A: the same name as tenants.team-a but for case"),
    ("queues:\n  Team-a: {max: 1}\ntenants:\n  team-a: {stacks: [a], max: 2, queues: [Team-a]}\n",
     "tenants.team-a: guaranteed/max make a queue named team-a, but queues.Team-a differs "
     "from it only in case"),
    ("tenants:\n  Default: {max_priority: 5}\n",
     "tenants.Default: the same name as default, which takes every service no other "
     "tenant matches, but for case; write default"),
])
def test_names_apart_only_by_case_are_refused(tmp_path: Path, text: str, says: str) -> None:
    errors = _errors(tmp_path, text)
    assert any(says in e for e in errors), errors


def test_an_unknown_key_of_a_queue_is_named_at_its_line_with_the_near_miss(
        tmp_path: Path) -> None:
    errors = _errors(tmp_path, "queues:\n  a:\n    max: 4\n    guaranted: 1\n")
    assert errors == [f"{tmp_path / 'c.yml'}:4: queues.a.guaranted: unknown key; did you "
                      "mean 'guaranteed'? (known: guaranteed, max)"], errors


@pytest.mark.parametrize(("value", "says"), [
    ("'30'", "expected a number, got '30' (a string); remove the quotes"),
    ("10m", "expected a number, got '10m' (a string); the key is in seconds (its name ends "
            "in _s): write 600"),
    ("1.5h", "the key is in seconds (its name ends in _s): write 5400"),
    ("500ms", "the key is in seconds (its name ends in _s): write 0.5"),
    ("10s", "the key is in seconds (its name ends in _s): write 10"),
    ("1e999", "expected a number, got 1e999: a number out of range (past a double's "
              "\u00b11.8e308); write one in range (defaults: swarmgpu config "
              "show-defaults)"),
    ("inf", "expected a number, got 'inf' (a string)"),
])
def test_a_number_yaml_read_as_text_gets_the_fix(tmp_path: Path, value: str, says: str) -> None:
    """10m got no fix at all (1e3, told 'remove the quotes' of quotes it has none of, is
    the number 1000 now, as docker's reader reads it)."""
    errors = _errors(tmp_path, f"sync:\n  interval_s: {value}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: sync.interval_s: {says}"] or \
        (len(errors) == 1 and errors[0].endswith(says)), errors


@pytest.mark.parametrize(("key", "value", "past"), [
    ("sync.interval_s", "1e400", "past a double's \u00b11.8e308"),
    ("sync.interval_s", "-1_000e400", "past a double's \u00b11.8e308"),
    ("agents.port", "1e400", "past a double's \u00b11.8e308"),
    ("agents.port", "0x1FFFFFFFFFFFFFFFFF", "past 64 bits, \u00b19.2e18"),
])
def test_a_number_past_its_range_is_named_so_not_a_string(
        tmp_path: Path, key: str, value: str, past: str) -> None:
    """1e400 (YAML, as Go's reader, takes it as text only for its size) was refused as
    "got '1e400' (a string)": the writer wrote a number, and was told of quotes."""
    section, name = key.split(".")
    errors = _errors(tmp_path, f"{section}:\n  {name}: {value}\n")
    kind = "a whole number" if name == "port" else "a number"
    assert errors == [f"{tmp_path / 'c.yml'}:2: {key}: expected {kind}, got {value}: a number "
                      f"out of range ({past}); write one in range (defaults: swarmgpu config "
                      "show-defaults)"], errors
    env = "SWARMGPU_SYNC_INTERVAL_S"
    _, got = load_config_report(None, env={env: "1e400"})
    assert got == [f"{env}: sync.interval_s: expected a number, got 1e400: a number out of "
                   "range (past a double's \u00b11.8e308); write one in range (defaults: "
                   "swarmgpu config show-defaults)"], got


def test_guarantees_no_cluster_could_honour_are_refused_with_their_sum(tmp_path: Path) -> None:
    """Each queue below the bound of one, together 1.8 million GPUs: a typo (900000 for
    9), which preemption would then honour as a reclaim no cluster could meet."""
    errors = _errors(tmp_path, "queues:\n  a: {guaranteed: 900000}\n  b: {guaranteed: 900000}\n"
                     "tenants:\n  t: {stacks: [t], queues: [a, b], guaranteed: 2}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:1: queues: the guarantees sum to 1800002 GPUs, "
                      "more than any cluster has (1000000); a queue's guaranteed is GPUs, "
                      "e.g. 8"], errors


@pytest.mark.parametrize("value", ["-1000000", "1000000", "1000000000000000000"])
def test_preemptible_below_is_a_priority_a_label_could_give(tmp_path: Path, value: str) -> None:
    """-5 or 1e20 passed: every service (or none) was preemptible by a number no label can
    carry (swarmgpu.priority is -999999 to 999999)."""
    errors = _errors(tmp_path, f"preemption:\n  preemptible_below: {value}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: preemption.preemptible_below: {value} is out "
                      "of range; a priority is -999999 to 999999 (default 100)"], errors


def test_a_negative_preemptible_below_in_range_is_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, "preemption:\n  preemptible_below: -999999\n") == []


@pytest.mark.parametrize("value", ["0", "-1", "1000", "65535", "67108865"])
def test_max_response_bytes_holds_a_real_answer_and_no_more(tmp_path: Path, value: str) -> None:
    """0 passed, and every agent then failed 'sent more than 0 bytes'; an 8-GPU node's
    facts are about 7 KiB (tests/fixtures' layouts), so 64 KiB is the least."""
    errors = _errors(tmp_path, f"agents:\n  max_response_bytes: {value}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: agents.max_response_bytes: {value} is out of "
                      "range; use 65536 (64 KiB, about nine times an 8-GPU node's facts) to "
                      "67108864 (64 MiB; default 4194304)"], errors


@pytest.mark.parametrize("value", ["65536", "67108864"])
def test_max_response_bytes_at_its_bounds_is_fine(tmp_path: Path, value: str) -> None:
    assert _errors(tmp_path, f"agents:\n  max_response_bytes: {value}\n") == []


_BLANK = ("Docker's own label rule refuses a blank in a key (docker service create --label; "
          "only docker node update checks none), and no Swarm constraint can name the node "
          "label (node.labels.KEY takes letters, digits, '-', '_', '.')")


@pytest.mark.parametrize(("label", "why"), [
    ("", "it is empty"),
    ("zone=a", "it has '=': docker node update --label-add splits KEY=VALUE at the first '='"),
    ("a b", f"it has a blank (' '): {_BLANK}"),
    (" zone", f"it has a blank (' '): {_BLANK}"),
    ("zone\t", f"it has a blank ('\\t'): {_BLANK}"),
    ("zone\n", f"it has a blank ('\\n'): {_BLANK}"),
    ("zone\u00a0", f"it has a blank ('\\xa0'): {_BLANK}"),
    ("\u200bzone", "it has an invisible character (U+200B), which no one could see in "
                   "docker node inspect"),
])
def test_a_zone_label_is_a_key_a_node_can_carry_visibly(tmp_path: Path, label: str,
                                                        why: str) -> None:
    """'a b' passed: a label no one meant, every node in no zone and zone-prefer/zone-avoid
    silently did nothing; 'zone=a' no `docker node update --label-add` can set. docker
    node update itself takes 'a b' (it checks no key): the error says why it is refused
    (it listed the rule, not the reason)."""
    errors = _errors(tmp_path, f"placement:\n  zone_label: {json.dumps(label)}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: placement.zone_label: {label!r} is not a node "
                      f"label key: {why}; e.g. topology.zone"], errors


@pytest.mark.parametrize("label", ["topology.kubernetes.io/zone",
                                   "failure-domain.beta.kubernetes.io/zone", "z", "Zone",
                                   "zöne", "nvidia.com/gpu.zone"])
def test_a_zone_label_is_only_read_so_any_node_label_key_is_fine(tmp_path: Path,
                                                                 label: str) -> None:
    """topology.kubernetes.io/zone was refused by swarmkit's constraint-key rule ('/'), yet
    swarmgpu only reads the zone from node labels and never names it in a constraint."""
    assert _errors(tmp_path, f"placement:\n  zone_label: {json.dumps(label)}\n") == []


def test_a_zone_label_under_the_sync_prefix_is_refused(tmp_path: Path) -> None:
    """swarmgpu.zone passed: label sync owns every node label under its prefix and removed
    the operator's zone from every node it synced (swarmgpu only reads the zone)."""
    errors = _errors(tmp_path, "placement:\n  zone_label: swarmgpu.zone\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: placement.zone_label: 'swarmgpu.zone' is "
                      "under sync.prefix 'swarmgpu.', whose node labels label sync owns: it "
                      "would remove the zone from every node; pick a key outside the prefix, "
                      "e.g. topology.zone"], errors
    other = "sync:\n  prefix: gpu.\nplacement:\n  zone_label: swarmgpu.zone\n"
    assert _errors(tmp_path, other) == []


@pytest.mark.parametrize("kind", ["a b", "GPU=1", "GPU,MIG", " NVIDIA-GPU", 'a"b', "gpu\u00e9"])
def test_a_generic_resource_kind_is_one_dockerd_can_advertise(tmp_path: Path, kind: str) -> None:
    """'a b' passed: whole-GPU services reserved a kind no node's node-generic-resources
    names cleanly (dockerd splits KIND=VALUE at '=' and trims it; its flag is a CSV list),
    and its DOCKER_RESOURCE_ variable had a space in its name."""
    errors = _errors(tmp_path, f"placement:\n  generic_resource_kind: {kind!r}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: placement.generic_resource_kind: {kind!r} is "
                      "not a kind dockerd's node-generic-resources can name (KIND=VALUE): "
                      "letters, digits, '-', '_', '.', '/', first a letter or digit; e.g. "
                      "NVIDIA-GPU, as the nodes advertise it"], errors


@pytest.mark.parametrize(("key", "value"), [("zone_label", "topology.zone"),
                                            ("zone_label", "_rack-3.row"),
                                            ("generic_resource_kind", "NVIDIA-GPU"),
                                            ("generic_resource_kind", "nvidia.com/gpu"),
                                            ("generic_resource_kind", "gpu")])
def test_real_zone_labels_and_resource_kinds_are_fine(tmp_path: Path, key: str,
                                                      value: str) -> None:
    grants = "  grants: mounts\n" if key == "generic_resource_kind" else ""
    assert _errors(tmp_path, f"placement:\n  {key}: {value}\n{grants}") == []


def test_a_generic_resource_kind_under_grants_as_env_is_refused(tmp_path: Path) -> None:
    """It passed: placement reserved NVIDIA-GPU, Swarm appended
    DOCKER_RESOURCE_NVIDIA-GPU=<its own pick> to each task's env, and the toolkit read that
    instead of placement's NVIDIA_VISIBLE_DEVICES (swarm-resource names it, as node-config
    sets and doctor requires): a container could use GPUs the ledger gives another."""
    errors = _errors(tmp_path, "placement:\n  generic_resource_kind: NVIDIA-GPU\n")
    assert len(errors) == 1 and "placement.generic_resource_kind" in errors[0], errors
    assert "DOCKER_RESOURCE_NVIDIA-GPU" in errors[0] and "grants: mounts" in errors[0]
    assert _errors(tmp_path, "placement:\n  generic_resource_kind: NVIDIA-GPU\n"
                             "  grants: env\n") == errors


WHOLE_BOUNDS = [
    ("agents", "parallel", 256, "threads fetching agents at once"),
    ("placement", "workload_window", 10_000_000, "tasks"),
    ("health", "max_backoff", 1000, "times health.clean_window_s"),
    ("health", "evacuations_per_cycle", 1000, "moves"),
    ("health", "evacuations_per_hour", 10_000, "moves"),
    ("preemption", "max_per_hour", 10_000, "services stopped"),
    ("rebalance", "min_samples", 10_000, "samples"),
    ("rebalance", "max_moves_per_cycle", 1000, "moves"),
    ("rebalance", "max_moves_per_node", 1000, "moves"),
    ("rebalance.defrag", "max_moves", 100, "moves in one plan"),
    ("rebalance.fragmentation", "moves_per_hour", 10_000, "moves"),
]


def _nested(section: str, key: str, value: int) -> str:
    parts = section.split(".")
    return "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parts)) \
        + f"{'  ' * len(parts)}{key}: {value}\n"


@pytest.mark.parametrize(("section", "key", "most", "what"), WHOLE_BOUNDS)
def test_a_whole_number_key_has_an_upper_bound(tmp_path: Path, section: str, key: str,
                                               most: int, what: str) -> None:
    """1000000000000000000 passed each: agents.parallel is a thread count (as many
    threads as nodes), the others budgets and windows no cluster needs that large."""
    errors = _errors(tmp_path, _nested(section, key, 10**18))
    line = section.count(".") + 2
    assert errors == [f"{tmp_path / 'c.yml'}:{line}: {section}.{key}: 1000000000000000000 "
                      f"is out of range; at most {most} ({what})"], errors
    assert _errors(tmp_path, _nested(section, key, most)) == []


# Plain scalars as docker 28's reader (go-yaml v3.0.1, resolve.go) reads them: its word
# table (true/false only: y, yes, on are text, as docker 28 reads them; v2, docker 27 and
# older, read them as booleans), then Go's strconv.ParseInt/ParseUint(text less every
# '_', base 0) as int, then its yamlStyleFloat pattern through strconv.ParseFloat (out of
# range: text), then its 0b and 0o fallbacks, and '.' first through ParseFloat. PyYAML's
# YAML 1.1 reads the first rows as text (or 0X1F, 0o17 and 08 as text, y/n as booleans).
# tests/test_yaml_as_docker_reads.py checks the rows against the docker CLI itself.
GO_PLAIN = [
    ("1e3", 1000.0), ("1E3", 1000.0), ("-2.5e-3", -0.0025), (".5", 0.5), ("+.5", 0.5),
    ("-.5", -0.5), (".5e3", 500.0), ("1.e3", 1000.0), ("1.0e3", 1000.0), ("1e+3", 1000.0),
    ("08", 8.0), ("019", 19.0), ("0_8", 8.0), ("0x1F", 31), ("0X1F", 31), ("-0x1F", -31),
    ("0o17", 15), ("0O17", 15), ("017", 15), ("-017", -15), ("0b101", 5), ("0B1", 1),
    ("0b-101", -5), ("+1", 1), ("-0", 0), ("1_000", 1000), ("-_1", -1), ("1_", 1),
    ("1_000.5", 1000.5), ("1.", 1.0), ("9223372036854775807", 2**63 - 1),
    ("18446744073709551615", 2**64 - 1), ("18446744073709551616", 1.8446744073709552e19),
    ("-9223372036854775809", -9.223372036854776e18), ("1e-999", 0.0),
    ("0o-17", -15), ("true", True), ("False", False), ("TRUE", True),
    ("y", "y"), ("Y", "Y"), ("n", "n"), ("N", "N"), ("yes", "yes"), ("Off", "Off"),
    ("~", None), ("null", None), ("NULL", None),
    ("1e999", "1e999"), ("0x", "0x"), ("0b2", "0b2"),
    ("0x1FFFFFFFFFFFFFFFFF", "0x1FFFFFFFFFFFFFFFFF"),
    ("+.nan", "+.nan"), ("inf", "inf"), ("+inf", "+inf"), ("Infinity", "Infinity"),
    ("1:30", "1:30"), ("12:30:01", "12:30:01"), ("2001-12-14", "2001-12-14"), ("=", "="),
    (".", "."), (".e3", ".e3"), ("1.5.5", "1.5.5"), ("0xG", "0xG"), ("1e", "1e"),
    ("_1", "_1"), ("yES", "yES"), ("0b_", "0b_"),
]


@pytest.mark.parametrize(("text", "value"), GO_PLAIN)
def test_a_plain_scalar_is_read_as_docker_reads_it(text: str, value: object) -> None:
    got = parse_yaml(f"v: {text}\n", "t", ValueError)["v"]
    assert type(got) is type(value) and got == value, (text, got)


@pytest.mark.parametrize(("text", "value"), [(".inf", math.inf), ("+.Inf", math.inf),
                                             ("-.INF", -math.inf)])
def test_infinities_are_read_as_docker_reads_them(text: str, value: float) -> None:
    assert parse_yaml(f"v: {text}\n", "t", ValueError)["v"] == value


@pytest.mark.parametrize("text", [".nan", ".NaN", ".NAN"])
def test_nan_is_read_as_docker_reads_it(text: str) -> None:
    got = parse_yaml(f"v: {text}\n", "t", ValueError)["v"]
    assert isinstance(got, float) and math.isnan(got)


@pytest.mark.parametrize(("text", "value"), [("'1e3'", "1e3"), ('"0o17"', "0o17"),
                                             ("'y'", "y"), ("!!str 08", "08"),
                                             ("!!float 1", 1.0), ("!!int 0X1F", 31),
                                             ("!!bool True", True)])
def test_a_quoted_or_tagged_scalar_keeps_its_meaning(text: str, value: object) -> None:
    got = parse_yaml(f"v: {text}\n", "t", ValueError)["v"]
    assert type(got) is type(value) and got == value, (text, got)


@pytest.mark.parametrize("text", ["!!int 08", "!!int 1.5", "!!float abc", "!!int abc",
                                  "!!bool y", "!!bool yes", "!!bool tRUE"])
def test_a_tag_its_text_cannot_be_is_an_error_at_its_line(text: str) -> None:
    with pytest.raises(ValueError, match="cannot be read as !!"):
        parse_yaml(f"a: 1\nv: {text}\n", "t", ValueError)


@pytest.mark.parametrize(("text", "value"), [("yes", True), ("on", True), ("Y", True),
                                             ("no", False), ("OFF", False), ("'n'", False),
                                             ("false", False)])
def test_a_yaml_1_1_boolean_word_sets_a_boolean_key(tmp_path: Path, text: str,
                                                    value: bool) -> None:
    """go-yaml v3 reads `yes` as text, and takes it (quoted or not) where the field is a
    boolean (decode.go): the config does the same, as docker's typed fields do not."""
    path = tmp_path / "c.yml"
    path.write_text(f"sync:\n  allow_disruptive: {text}\n")
    cfg, errors = load_config_report(path, env={})
    assert errors == [] and cfg.sync.allow_disruptive is value


def test_an_exponent_in_the_config_is_the_number_docker_and_go_yaml_read(
        tmp_path: Path) -> None:
    """sync.interval_s: 1e3 was refused as text (YAML 1.1's exponent needs a '.' and a
    sign), where docker's reader and any YAML 1.2 reader read 1000."""
    path = tmp_path / "c.yml"
    path.write_text("sync:\n  interval_s: 1e3\n")
    cfg, errors = load_config_report(path, env={})
    assert errors == [] and cfg.sync.interval_s == 1000.0


def test_a_whole_number_written_with_an_exponent_gets_its_digits(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "agents:\n  parallel: 1e2\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: agents.parallel: expected a whole number, got "
                      "100.0 (a number with a fraction); write 100"], errors


def test_a_whole_number_past_1e16_written_with_an_exponent_is_not_said_to_have_a_fraction(
        tmp_path: Path) -> None:
    # (Python shows such a float as 1e+16: "a number with a fraction" named none there)
    errors = _errors(tmp_path, "agents:\n  parallel: 1e16\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: agents.parallel: expected a whole number, got "
                      "1e+16 (a number in exponent form); write 10000000000000000"], errors


def test_five_thousand_digits_are_text_as_docker_reads_them_and_not_echoed(
        tmp_path: Path) -> None:
    """go-yaml reads an integer past 64 bits as a float, and one past a double as text;
    int() raised on 5,000 digits (Python's limit is 4,300) while resolving it."""
    errors = _errors(tmp_path, f"sync:\n  interval_s: {'1' * 5000}\n")
    assert len(errors) == 1 and len(errors[0]) < 300, errors
    assert errors[0].startswith(f"{tmp_path / 'c.yml'}:2: sync.interval_s: expected a "
                                "number, got 111"), errors
    assert "... [5000 characters]: a number out of range" in errors[0], errors


@pytest.mark.parametrize(("text", "says"), [
    ('rebalance:\n  policies: "health,\\u00a0spread"\n', "rebalance.policies: unknown"),
    ('http:\n  trusted_proxies: "\\u00a010.0.0.5"\n', "http.trusted_proxies: '\\xa010.0.0.5'"),
    ('placement:\n  ungranted_exempt: "a*,\\u3000swarmgpu_agent"\n',
     "placement.ungranted_exempt: '\\u3000swarmgpu_agent' has characters that are not "
     "printable ASCII (U+3000 at 1)"),
])
def test_a_comma_list_item_with_a_unicode_blank_around_it_is_refused(
        tmp_path: Path, text: str, says: str) -> None:
    """A comma list's items were trimmed by str.strip(), which takes NBSP and U+3000,
    where the rest of the config trims ASCII blanks only."""
    errors = _errors(tmp_path, text)
    assert len(errors) == 1 and says in errors[0], errors


def test_a_comma_list_with_ascii_blanks_around_its_items_is_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, 'rebalance:\n  policies: " health ,\\tspread"\nhttp:\n'
                             '  trusted_proxies: "10.0.0.5 , 10.0.0.6"\nplacement:\n'
                             '  ungranted_exempt: " a*, swarmgpu_agent "\n') == []


@pytest.mark.parametrize("key", ["guaranteed", "max"])
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_tenants_own_queue_of_no_finite_size_is_an_error_not_a_crash(
        tmp_path: Path, key: str, value: str) -> None:
    """``.nan`` passed both bounds (NaN compares false) and round() raised a ValueError
    out of `config check` and the daemon's start, located nowhere."""
    errors = _errors(tmp_path, f"tenants:\n  team-a: {{stacks: [a], {key}: {value}}}\n")
    assert any(e.endswith(f"tenants.team-a.{key}: expected a number of GPUs from 0 to "
                          f"1000000, got {value.removeprefix('.').replace('-.', '-')}")
               for e in errors), errors


def test_a_tenants_own_queue_has_a_queues_bounds(tmp_path: Path) -> None:
    """A queue's guaranteed and max are 0 to 1,000,000 GPUs, in queues: or a tenant's."""
    big = "{stacks: [a], guaranteed: 1000000, max: 1000000}"
    assert _errors(tmp_path, f"tenants:\n  team-a: {big}\n") == []
    assert _errors(tmp_path, "queues:\n  q: {guaranteed: 1000000, max: 1000000}\n") == []


@pytest.mark.parametrize(("text", "says"), [
    ("queues: 5\n", "queues: expected a mapping of queue -> {guaranteed, max}, got 5"),
    ("queues: [research]\n", "queues: expected a mapping of queue -> {guaranteed, max}"),
    ("queues: research\n", "queues: expected a mapping of queue -> {guaranteed, max}"),
])
def test_queues_that_are_not_a_mapping_are_an_error_not_a_crash(
        tmp_path: Path, text: str, says: str) -> None:
    errors = _errors(tmp_path, text + "tenants:\n  team-a: {stacks: [a]}\n")
    assert any(says in e for e in errors), errors


@pytest.mark.parametrize("section", ["queues", "tenants"])
def test_a_section_with_its_entries_commented_out_is_empty(tmp_path: Path,
                                                           section: str) -> None:
    """``queues:`` with every queue commented out is YAML's null: no queues, as an empty
    ``tenants:`` is no tenants and ``agents:`` the defaults (it raised AttributeError)."""
    assert _errors(tmp_path, f"{section}:\n#  research: {{max: 4}}\n") == []


@pytest.mark.parametrize("glob", ["team-[z-a]*", "[!-._0-9A-Za-z]*", "a[9-0]"])
def test_a_glob_with_a_set_no_name_character_is_in_is_refused(tmp_path: Path,
                                                              glob: str) -> None:
    """``[z-a]`` (a range written backwards) matches nothing: the tenant took no
    service, silently, and its stacks fell to ``default``."""
    errors = _errors(tmp_path, f"tenants:\n  team-a: {{stacks: ['{glob}']}}\n")
    assert any(f"tenants.team-a.stacks: {glob!r} has a set" in e for e in errors), errors


def test_a_glob_whose_sets_each_match_a_name_character_is_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, "tenants:\n  team-a: {stacks: ['team-[a-c]*', 'x[!a]', "
                             "'[Z-a]y']}\n") == []


@pytest.mark.parametrize(("key", "shown"), [("\ufeff\ufeffagents", "'\\ufeffagents'"),
                                             ("agents\u200b", "'agents\\u200b'"),
                                             ("dry\u00a0run", "'dry\\xa0run'")])
def test_an_unknown_key_with_an_invisible_character_is_shown_escaped(
        tmp_path: Path, key: str, shown: str) -> None:
    # A second byte order mark (two editors' saves), a zero-width space or a no-break
    # space pasted from a web page: "agents: unknown key; did you mean 'agents'?" named
    # no difference the operator could see.
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"{key}: {{}}\n", encoding="utf-8")
    errors = load_config_report(cfg, env={})[1]
    assert any(f"unknown key, written {shown}: it holds a character that does not show"
               in e for e in errors), errors


def test_an_integer_past_64_bits_is_not_said_to_be_in_exponent_form(tmp_path: Path) -> None:
    # go-yaml (and so swarmgpu) reads a plain integer past int64 as a float: the message
    # said "got 1e+26 (a number in exponent form)" of a number written without one.
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  parallel: 99999999999999999999999999\n")
    errors = load_config_report(cfg, env={})[1]
    assert any("agents.parallel: expected a whole number, got 1e+26 (a number past a "
               "64-bit integer, read as a float)" in e for e in errors), errors
