"""The operator's config read as mistyped input: each mistake is an error naming the key
and the fix at `config check`, never a crash or a stall of the daemon later."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.core.config import load_config_report


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
    ("1e3", "expected a number, got '1e3' (a string); YAML reads 1e3 as text (an exponent "
            "needs a '.' and a sign): write 1000 or 1.0e+3"),
    ("'30'", "expected a number, got '30' (a string); remove the quotes"),
    ("10m", "expected a number, got '10m' (a string); the key is in seconds (its name ends "
            "in _s): write 600"),
    ("1.5h", "the key is in seconds (its name ends in _s): write 5400"),
    ("500ms", "the key is in seconds (its name ends in _s): write 0.5"),
    ("10s", "the key is in seconds (its name ends in _s): write 10"),
])
def test_a_number_yaml_read_as_text_gets_the_fix(tmp_path: Path, value: str, says: str) -> None:
    """'remove the quotes' was said of 1e3, which has none; 10m got no fix at all."""
    errors = _errors(tmp_path, f"sync:\n  interval_s: {value}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: sync.interval_s: {says}"] or \
        (len(errors) == 1 and errors[0].endswith(says)), errors


def test_guarantees_no_cluster_could_honour_are_refused_with_their_sum(tmp_path: Path) -> None:
    """Each queue below the bound of one, together 1.8 million GPUs: a typo (900000 for
    9), which preemption would then honour as a reclaim no cluster could meet."""
    errors = _errors(tmp_path, "queues:\n  a: {guaranteed: 900000}\n  b: {guaranteed: 900000}\n"
                     "tenants:\n  t: {stacks: [t], queues: [a, b], guaranteed: 2}\n")
    assert errors == [f"{tmp_path / 'c.yml'}:1: queues: the guarantees sum to 1800002 GPUs, "
                      "more than any cluster has (1000000); a queue's guaranteed is GPUs, "
                      "e.g. 8"], errors


@pytest.mark.parametrize("value", ["-1000000", "1000000", "100000000000000000000"])
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


@pytest.mark.parametrize("label", ["a b", "zone=a", "", "z", "topology.zone/x", "zöne"])
def test_a_zone_label_is_a_node_label_key_swarm_constraints_can_name(tmp_path: Path,
                                                                   label: str) -> None:
    """'a b' passed: no node carries such a label (docker's CLI refuses one with a space),
    so every node was in no zone and zone-prefer/zone-avoid silently did nothing."""
    errors = _errors(tmp_path, f"placement:\n  zone_label: '{label}'\n")
    assert errors == [f"{tmp_path / 'c.yml'}:2: placement.zone_label: {label!r} is not a node "
                      "label key a Swarm constraint can name: letters, digits, '-', '_', '.', "
                      "first a letter or '_', at least 2 characters; e.g. topology.zone"], errors


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
    assert _errors(tmp_path, f"placement:\n  {key}: {value}\n") == []


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
    """100000000000000000000 passed each: agents.parallel is a thread count (as many
    threads as nodes), the others budgets and windows no cluster needs that large."""
    errors = _errors(tmp_path, _nested(section, key, 10**20))
    line = section.count(".") + 2
    assert errors == [f"{tmp_path / 'c.yml'}:{line}: {section}.{key}: 100000000000000000000 "
                      f"is out of range; at most {most} ({what})"], errors
    assert _errors(tmp_path, _nested(section, key, most)) == []
