"""``toolkit.cdi-spec``: in the toolkit's ``cdi`` mode the NVIDIA runtime resolves the
GPUs Swarm hands a task against the CDI specs in its spec dirs, which ``nvidia-ctk cdi
generate`` writes: with none, or one naming a GPU by index only or generated before a
GPU changed, the task's container fails to start. dockerd's own CDI spec dirs (``docker
info`` ``CDISpecDirs``) are shown. Pure: a copy of the healthy fixture tree in a tmp
dir, its config.toml, spec files and docker info changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.denied import deny_listing
from support.yaml_parser import yaml_parser

from swarmgpu.agent.doctor import Status, run_doctor
from swarmgpu.agent.doctor.view import MAX_ENGINE_CDI_DIRS

HEALTHY = Path(__file__).parent / "doctor_roots" / "healthy"
UA = "GPU-2a8c5b3e-9d1f-4c6a-8e7b-1f0d3c5a7b91"
UB = "GPU-7e4d2f1a-3b6c-4d8e-9a0f-5c1b7d3e9f24"
TOML = "etc/nvidia-container-runtime/config.toml"
# (CDI refuses a device of no edits: "invalid device, empty device edits")
EDITS = "containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}"


def _root(tmp_path: Path, mode: str = "cdi", spec_dirs: str = "") -> Path:
    root = tmp_path / "root"
    shutil.copytree(HEALTHY, root, symlinks=True)
    toml = root / TOML
    text = toml.read_text().replace('mode = "auto"', f'mode = "{mode}"')
    if spec_dirs:
        text = text.replace('spec-dirs = ["/etc/cdi", "/var/run/cdi"]', spec_dirs)
    toml.write_text(text)
    return root


def _spec(root: Path, rel: str, names: list[str], kind: str = "nvidia.com/gpu") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    devices = "".join(f"  - name: \"{n}\"\n    {EDITS}\n" for n in names)
    path.write_text(f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n{devices}")


def _raw_spec(root: Path, *devices: str, head: str = "kind: nvidia.com/gpu\ndevices:",
              version: str = "0.5.0") -> None:
    """The spec etc/cdi/nvidia.yaml of cdiVersion ``version``, its ``head`` and each of
    ``devices`` written as given: YAML that ``_spec``, quoting each name, cannot write."""
    path = root / "etc/cdi/nvidia.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(f"cdiVersion: {version}\n{head}\n"
                    + "".join(f"  - {_edited(d)}\n" for d in devices))


def _edited(device: str) -> str:
    """``device`` given a device node where it names no container edits (CDI refuses a
    device of none)."""
    if "containeredits" in device.lower():
        return device
    if device.startswith("{") and device.endswith("}"):
        return f"{{{EDITS}, {device[1:]}" if device != "{}" else f"{{{EDITS}}}"
    return f"{device}\n    {EDITS}"


def _bounded_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: int) -> Path:
    """``_root`` whose doctor reads at most ``bound`` spec files of a dir."""
    from swarmgpu.agent.doctor import read
    monkeypatch.setattr(read, "MAX_CDI_SPECS", bound, raising=False)
    return _root(tmp_path)


def _other_specs(root: Path, ext: str) -> None:
    """Three one-device specs of other vendors' kinds, etc/cdi/a0.EXT to a2.EXT (named
    before nvidia's)."""
    for n in range(3):
        _spec(root, f"etc/cdi/a{n}.{ext}", ["x"], kind=f"vendor.com/c{n}")


def _check(root: Path, info: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    if info is not None:
        fixture = root / ".swarmgpu-fixture/docker-info.json"
        fixture.write_text(json.dumps({**json.loads(fixture.read_text()), **info}))
    out, code = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c, code


def _text_spec_check(tmp_path: Path, text: str) -> dict[str, Any]:
    """The check of a root whose etc/cdi/nvidia.yaml is ``text``."""
    root = _root(tmp_path)
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text(text)
    return _check(root)[0]


def test_outside_cdi_mode_no_spec_is_needed_and_dockerds_dirs_are_shown(
        tmp_path: Path) -> None:
    root = _root(tmp_path, mode="auto")  # toolkit 1.19.1: auto is jit-cdi
    c, code = _check(root)
    assert c["status"] == str(Status.OK) and c["found"].startswith("mode jit-cdi"), c
    assert code == 0 and "no CDI spec dirs" in c["details"][0], c
    _spec(root, "var/run/cdi/nvidia.yaml", ["0", UA])
    c, _ = _check(root, {"CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]})
    assert "nvidia.com/gpu in /var/run/cdi/nvidia.yaml" in c["details"][0], c


def test_cdi_mode_without_a_spec_fails_naming_the_generate_command(tmp_path: Path) -> None:
    c, code = _check(_root(tmp_path))
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "no nvidia.com/gpu CDI spec in /etc/cdi, /var/run/cdi" in c["found"], c
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in c["fix"], c


@pytest.mark.parametrize("rel", ["etc/cdi/nvidia.yaml", "var/run/cdi/nvidia.json"])
def test_cdi_mode_with_a_spec_naming_each_gpu_passes(tmp_path: Path, rel: str) -> None:
    root = _root(tmp_path)
    _spec(root, rel, ["0", "1", UA, UB, "all"])
    c, code = _check(root)
    assert c["status"] == str(Status.OK) and code == 0, c
    assert c["found"] == f"mode cdi; /{rel} names each GPU advertised", c


def test_a_spec_naming_gpus_by_index_only_fails_naming_the_uuids(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yaml", ["0", "1", "all"])
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL) and UA in c["found"] and UB in c["found"], c
    assert "--device-name-strategy=uuid" in c["fix"], c


def test_a_spec_of_a_replaced_gpu_fails_naming_the_new_one(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yaml", ["0", "1", UA, "GPU-0ld"])
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL) and UB in c["found"], c
    assert UA not in c["found"], c


def test_a_spec_only_in_dockerds_dirs_is_not_the_runtimes(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _spec(root, "opt/cdi/nvidia.yaml", [UA, UB])
    c, _ = _check(root, {"CDISpecDirs": ["/opt/cdi"]})
    assert c["status"] == str(Status.FAIL) and "/etc/cdi, /var/run/cdi" in c["found"], c
    assert "nvidia.com/gpu in /opt/cdi/nvidia.yaml" in c["details"][0], c


def test_the_toolkits_own_spec_dirs_are_read(tmp_path: Path) -> None:
    root = _root(tmp_path, spec_dirs='spec-dirs = ["/srv/cdi"]')
    _spec(root, "srv/cdi/gpus.yaml", [UA, UB])
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("text", ["kind: [", "devices: []\n", "- a\n", "\x00"])
def test_a_spec_not_read_is_named(tmp_path: Path, text: str) -> None:
    c = _text_spec_check(tmp_path, text)
    assert c["status"] == str(Status.FAIL) and "/etc/cdi/nvidia.yaml" in c["found"], c


def test_a_spec_of_another_kind_is_not_the_gpus(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _spec(root, "etc/cdi/other.yaml", [UA, UB], kind="vendor.com/fpga")
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL) and "no nvidia.com/gpu" in c["found"], c


def test_cdi_spec_dirs_of_another_type_fail_this_check_naming_it(tmp_path: Path) -> None:
    c, code = _check(_root(tmp_path, mode="auto"), {"CDISpecDirs": "/etc/cdi"})
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "docker info's CDISpecDirs is str" in c["found"], c


def test_a_yml_spec_is_not_one_the_runtime_reads(tmp_path: Path) -> None:
    # CDI's spec-dir scan reads `*.json` and `*.yaml` alone (container-device-interface
    # pkg/cdi/spec-dirs.go): a spec named `.yml` is never read, so GPU tasks still fail
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yml", [UA, UB])
    c, code = _check(root)
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "no nvidia.com/gpu CDI spec" in c["found"], c
    assert "/etc/cdi/nvidia.yml is named .yml" in c["found"], c


@pytest.mark.parametrize("listed", [f"NVIDIA-GPU={UB}", [[f"NVIDIA-GPU={UB}"]]])
def test_dockerds_gpus_not_read_fail_the_toolkit_checks_that_read_them(
        tmp_path: Path, listed: Any) -> None:
    # daemon.json lists none (set by --node-generic-resource flags): the GPUs Swarm hands
    # out are dockerd's; not read, they passed as "none advertised" (the spec names UA only)
    root = _root(tmp_path)
    daemon = root / "etc/docker/daemon.json"
    daemon.write_text(json.dumps({k: v for k, v in json.loads(daemon.read_text()).items()
                                  if k != "node-generic-resources"}))
    _spec(root, "etc/cdi/nvidia.yaml", [UA])
    _check(root, {"GenericResources": listed})  # (the fixture's docker info written)
    out, code = run_doctor(str(root), as_json=True)
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    for cid in ("toolkit.cdi-spec", "toolkit.swarm-resource", "resources.generic"):
        assert checks[cid]["status"] == str(Status.FAIL), checks[cid]
        assert "docker info's GenericResources" in checks[cid]["found"], checks[cid]
        assert "proxy in front of the engine" in checks[cid]["fix"], checks[cid]
    assert code == 1


def test_dockerds_many_cdi_spec_dirs_are_shown_and_read_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a proxy's answer may list 20,000 dirs: each was looked in, and the details line
    # named them all (169 KB of JSON)
    from swarmgpu.agent.doctor import read
    looked: list[str] = []
    lstat = read.lstat_in_root  # (each dir is looked up first)
    monkeypatch.setattr(read, "lstat_in_root",
                        lambda root, rel: looked.append(rel) or lstat(root, rel))
    root = _root(tmp_path, mode="auto")
    c, _ = _check(root, {"CDISpecDirs": [f"/d{i}" for i in range(20_000)]})
    (line,) = c["details"]
    assert len(line) < 2000 and "and 19992 more, not read" in line, line[:300]
    engines = [rel for rel in looked if rel.startswith("d")]
    assert engines == [f"d{i}" for i in range(MAX_ENGINE_CDI_DIRS)], looked


def test_an_empty_spec_dirs_list_reads_the_default_dirs(tmp_path: Path) -> None:
    # CDI's WithSpecDirs given no dir uses /etc/cdi and /var/run/cdi, as the runtime's
    # cdi.New(WithSpecDirs(spec-dirs...)) then does: it read none, and failed
    root = _root(tmp_path, spec_dirs="spec-dirs = []")
    _spec(root, "etc/cdi/nvidia.yaml", [UA, UB])
    c, code = _check(root)
    assert c["status"] == str(Status.OK) and code == 0, c


def test_the_runtimes_automatic_kind_needs_no_spec_file(tmp_path: Path) -> None:
    # devices of vendor runtime.nvidia.com, class gpu get a spec made at run time
    # (the toolkit's filterAutomaticDevices): no spec file is read for them
    root = _root(tmp_path)
    toml = root / TOML
    toml.write_text(toml.read_text().replace('default-kind = "nvidia.com/gpu"',
                                             'default-kind = "runtime.nvidia.com/gpu"'))
    c, code = _check(root)
    assert c["status"] == str(Status.OK) and "runtime.nvidia.com/gpu" in c["found"], c
    assert code == 0, c


def test_a_gpu_two_specs_of_one_dir_name_is_resolved_by_neither(tmp_path: Path) -> None:
    # CDI's cache drops a device two specs of one spec dir (the same priority) define:
    # "conflicting device"; a spec generated again as .json beside the .yaml did so
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yaml", [UA, UB])
    _spec(root, "etc/cdi/nvidia.json", [UB])
    c, code = _check(root)
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert UB in c["found"] and UA not in c["found"], c
    assert "/etc/cdi/nvidia.json" in c["found"] and "/etc/cdi/nvidia.yaml" in c["found"], c


def test_a_later_spec_dir_overrides_an_earlier_ones_device(tmp_path: Path) -> None:
    # (a higher priority, not a conflict: /var/run/cdi after /etc/cdi)
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yaml", [UA, UB])
    _spec(root, "var/run/cdi/nvidia.yaml", [UA, UB])
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


def test_a_spec_naming_a_device_twice_is_not_read(tmp_path: Path) -> None:
    # CDI refuses the whole spec: "invalid spec, multiple device"
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yaml", [UA, UB, UA])
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL) and "names device" in c["found"], c


def test_a_spec_dir_the_doctor_cannot_list_is_named_not_taken_for_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # run as a user, not root: the runtime (root) reads the dir; "no spec" and the
    # generate fix were wrong
    deny_listing(monkeypatch, "etc/cdi", euid=1000)
    root = _root(tmp_path)
    _spec(root, "etc/cdi/nvidia.yaml", [UA, UB])
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert "/etc/cdi cannot be listed: permission denied" in c["found"], c
    assert "as root" in c["found"], c


def test_spec_files_are_parsed_up_to_a_bound_in_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a root's 64 spec files of 1 MiB each (an untrusted image under --root) took some
    # 20 s each to parse: the doctor ran for most of an hour
    from swarmgpu.agent.doctor import read
    parsed: list[int] = []
    parse = read.parse_first_yaml
    monkeypatch.setattr(read, "parse_first_yaml",
                        lambda text, *a, **k: parsed.append(len(text)) or parse(text, *a, **k))
    monkeypatch.setattr(read, "MAX_CDI_BYTES", 2000, raising=False)
    root = _root(tmp_path)
    for n in range(5):
        _spec(root, f"etc/cdi/s{n}.yaml", [UA, UB, "x" * 800])
    c, _ = _check(root)
    assert 0 < sum(parsed) <= 2000, parsed
    assert "s0.yaml" in c["found"], c  # (the first read, each named by it)


@pytest.mark.parametrize(("spec", "status"), [("nvidia", Status.FAIL), ("0", Status.WARN)])
def test_spec_files_past_the_bound_of_a_dir_are_said_with_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, status: Status) -> None:
    # the doctor reads the first MAX_CDI_SPECS files of a dir by name: those after were
    # dropped unsaid, and "no spec" (its generate fix) or an OK was all it said
    root = _bounded_root(tmp_path, monkeypatch, 3)
    _other_specs(root, "yaml")
    _spec(root, f"etc/cdi/{spec}.yaml", [UA, UB])
    _spec(root, "etc/cdi/z.yaml", ["y"], kind="vendor.com/z")
    c, _ = _check(root)
    assert c["status"] == str(status), c
    assert "/etc/cdi: the doctor read 3 of 5 spec files, 2 left unread" in c["found"], c
    assert "out of /etc/cdi" in c["fix"], c


@pytest.mark.parametrize(("name", "said"), [
    ("0", "0"), ("true", "true"), ("07", "7"),
    ("yes", "true"), ("Y", "true"), ("off", "false"), ("NO", "false")])
def test_an_unquoted_scalar_device_name_is_read_as_cdi_reads_it(
        tmp_path: Path, name: str, said: str) -> None:
    # CDI's sigs.k8s.io/yaml turns a number or boolean bound for a string field into its
    # text (`name: 0` is device "0"), and reads with go-yaml v2, to which a plain `yes`,
    # `on`, `y` is a boolean, its name then "true": the doctor dropped the number, read
    # the word (go-yaml v3's reading), and missed the spec naming the device twice,
    # which CDI refuses whole
    root = _root(tmp_path)
    _raw_spec(root, f"name: {name}", f"name: \"{said}\"", f"name: {UA}", f"name: {UB}")
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert f"names device '{said}' twice" in c["found"], c


@pytest.mark.parametrize("device", ["{}", "{name: null}", "{name: [a]}", "{name: {a: 1}}"])
def test_a_device_of_no_name_cdi_refuses_is_named(tmp_path: Path, device: str) -> None:
    # a device without a name, or one not text, makes CDI refuse the whole spec ("empty
    # device name", "cannot unmarshal"): the doctor dropped the device and passed
    root = _root(tmp_path)
    _raw_spec(root, device, f"name: {UA}", f"name: {UB}")
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert "/etc/cdi/nvidia.yaml" in c["found"] and "CDI refuses" in c["found"], c


@pytest.mark.parametrize("name", ["'yes'", "0o-17"])
def test_a_device_name_go_yaml_v2_reads_as_text_is_that_text(tmp_path: Path,
                                                             name: str) -> None:
    # quoted, `yes` is text to every reader; `0o-17` is text to go-yaml v2 (v3 reads the
    # number -15, a name CDI refuses): beside "true", no name is given twice
    root = _root(tmp_path)
    _raw_spec(root, f"name: {name}", "name: \"true\"", f"name: {UA}", f"name: {UB}")
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize(("kind", "devices", "name"), [("Kind", "Devices", "Name"),
                                                       ("KIND", "devices", "NAME")])
def test_a_spec_whose_keys_are_capitalised_is_read_as_cdi_reads_it(
        tmp_path: Path, kind: str, devices: str, name: str) -> None:
    # CDI decodes its YAML as JSON into its struct (sigs.k8s.io/yaml), whose keys match
    # whatever their case: the runtime resolves these GPUs, the doctor read no kind
    root = _root(tmp_path)
    _raw_spec(root, f"{name}: {UA}", f"{name}: {UB}", head=f"{kind}: nvidia.com/gpu\n{devices}:")
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


def test_of_two_spellings_of_a_key_the_one_cdi_keeps_is_read(tmp_path: Path) -> None:
    # sigs.k8s.io/yaml writes the keys sorted (capitals first), and the last that
    # matches a field is kept: `name`, not `Name`
    root = _root(tmp_path)
    _raw_spec(root, f"{{name: {UA}, Name: x}}", f"{{Name: y, name: {UB}}}")
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


def test_yml_files_do_not_count_toward_a_dirs_spec_file_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CDI reads *.json and *.yaml alone: three .yml files took the bound's three places
    # and the spec the runtime reads was left unread ("no spec", the generate fix)
    root = _bounded_root(tmp_path, monkeypatch, 3)
    _other_specs(root, "yml")
    _spec(root, "etc/cdi/nvidia.yaml", [UA, UB])
    c, code = _check(root)
    assert c["status"] == str(Status.OK) and code == 0, c
    assert "left unread" not in c["found"], c


@pytest.mark.parametrize(("name", "said"), [
    ("1.0", "names device '1' twice"), ("1e3", "names device '1000' twice"),
    ("-2.50", "'-2.5'"), ("1e6", "'1e+06'"), (".inf", "'+Inf'")])
def test_a_float_device_name_is_read_as_cdis_text_of_it(tmp_path: Path, name: str,
                                                        said: str) -> None:
    # sigs.k8s.io/yaml gives a float bound for CDI's string field Go's text of it as a
    # float32 (strconv.FormatFloat 'g', -1, 32): `1.0` is device "1", so beside "1" the
    # spec names it twice, and `1e6` is "1e+06", no valid device name: CDI refuses both
    # specs whole. The doctor read a float as no name and passed them
    root = _root(tmp_path)
    _raw_spec(root, f"name: {name}", "name: \"1\"", "name: \"1000\"", f"name: {UA}",
              f"name: {UB}")
    c, code = _check(root)
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "/etc/cdi/nvidia.yaml" in c["found"] and said in c["found"], c


@pytest.mark.parametrize("name", ["2.5", "123456.0", "3.14159265358979", "0.1e-4"])
def test_a_float_device_name_cdi_takes_is_no_fault(tmp_path: Path, name: str) -> None:
    # ("2.5", "123456", "3.1415927" and "1e-05": valid device names, each named once)
    root = _root(tmp_path)
    _raw_spec(root, f"name: {name}", "name: \"2.50\"", f"name: {UA}", f"name: {UB}")
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("name", ["\"-15\"", "\"gpu 0\"", "\"GPU-0/1\"", "\"a.\"", "\"é\""])
def test_a_device_name_cdi_refuses_is_named(tmp_path: Path, name: str) -> None:
    # CDI's ValidateDeviceName: letters, digits, `_-.:`, a letter or digit first and
    # last; any other name makes it refuse the whole spec, and the doctor passed it
    root = _root(tmp_path)
    _raw_spec(root, f"name: {name}", f"name: {UA}", f"name: {UB}")
    c, code = _check(root)
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "/etc/cdi/nvidia.yaml" in c["found"] and "not a valid CDI device name" in c["found"], c


def _annotated_check(tmp_path: Path, keys: str) -> dict[str, Any]:
    """The check of nvidia's two-GPU spec whose annotations are the flow mapping of
    ``keys`` (its cdiVersion 0.6.0: annotations since)."""
    root = _root(tmp_path)
    _raw_spec(root, f"name: {UA}", f"name: {UB}",
              head=f"kind: nvidia.com/gpu\nannotations: {{{keys}}}\ndevices:",
              version="0.6.0")
    return _check(root)[0]


@pytest.mark.parametrize("keys", ["1: a, '1': b", "1: a, 1.0: b", "true: a, 1: b",
                                  "true: a, 'true': b"])
def test_keys_go_yaml_v2_reads_apart_are_two_keys(tmp_path: Path, keys: str) -> None:
    # CDI's strict decoding (go-yaml v2 UnmarshalStrict) refuses a key set twice in one
    # mapping as Go compares them: of one type and value; the number 1, the text "1" and
    # the float 1.0 are three keys, which sigs.k8s.io/yaml then writes as one JSON key.
    # The doctor compared them as Python does (1 == 1.0 == True) and failed the spec
    c = _annotated_check(tmp_path, keys)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("keys", ["y: a, yes: b", "1: a, 01: b", "1.0: a, 1.00: b",
                                  "~: a, null: b", "a: a, 'a': b"])
def test_keys_go_yaml_v2_reads_as_one_are_refused(tmp_path: Path, keys: str) -> None:
    # ("key true already set in map": CDI refuses the whole spec)
    c = _annotated_check(tmp_path, keys)
    assert c["status"] == str(Status.FAIL) and "/etc/cdi/nvidia.yaml" in c["found"], c


def _without_docker_info(root: Path, **keys: Any) -> None:
    """The doctor run with no docker info (dockerd down, or another node's root), its
    daemon.json given ``keys`` (``cdi_spec_dirs`` is cdi-spec-dirs)."""
    (root / ".swarmgpu-fixture/docker-info.json").unlink()
    path = root / "etc/docker/daemon.json"
    data = json.loads(path.read_text())
    data.update({k.replace("_", "-"): v for k, v in keys.items()})
    path.write_text(json.dumps(data))


def test_without_docker_info_dockerds_dirs_are_read_from_daemon_json(
        tmp_path: Path) -> None:
    # dockerd takes its CDI spec dirs from daemon.json's cdi-spec-dirs: with no docker
    # info the doctor neither read nor showed them
    root = _root(tmp_path, mode="auto")
    _spec(root, "opt/cdi/nvidia.yaml", [UA, UB])
    _without_docker_info(root, cdi_spec_dirs=["/opt/cdi"])
    c, _ = _check(root)
    (line,) = c["details"]
    assert "dockerd reads CDI specs from /opt/cdi as daemon.json sets" in line, line
    assert "nvidia.com/gpu in /opt/cdi/nvidia.yaml" in line, line


def test_without_docker_info_dockerds_default_dirs_are_shown(tmp_path: Path) -> None:
    # (no cdi-spec-dirs: dockerd's defaults, /etc/cdi and /var/run/cdi)
    root = _root(tmp_path, mode="auto")
    _spec(root, "var/run/cdi/nvidia.yaml", [UA, UB])
    _without_docker_info(root)
    c, _ = _check(root)
    (line,) = c["details"]
    assert "from /etc/cdi, /var/run/cdi as daemon.json sets" in line, line
    assert "nvidia.com/gpu in /var/run/cdi/nvidia.yaml" in line, line


def test_without_docker_info_a_null_cdi_spec_dirs_is_dockerds_defaults(
        tmp_path: Path) -> None:
    # dockerd reads "cdi-spec-dirs": null as not set (a nil list: its defaults); the
    # doctor said daemon.json left it no CDI spec dir, and read none
    root = _root(tmp_path, mode="auto")
    _spec(root, "var/run/cdi/nvidia.yaml", [UA, UB])
    _without_docker_info(root, cdi_spec_dirs=None)
    c, _ = _check(root)
    (line,) = c["details"]
    assert "from /etc/cdi, /var/run/cdi as daemon.json sets" in line, line
    assert "nvidia.com/gpu in /var/run/cdi/nvidia.yaml" in line, line


@pytest.mark.parametrize("keys", [{"features": {"cdi": False}}, {"cdi_spec_dirs": [""]}])
def test_without_docker_info_dockerds_cdi_turned_off_reads_no_dir(
        tmp_path: Path, keys: dict[str, Any]) -> None:
    # (dockerd clears its spec dirs for features.cdi false, or cdi-spec-dirs [""])
    root = _root(tmp_path, mode="auto")
    _without_docker_info(root, **keys)
    c, _ = _check(root)
    (line,) = c["details"]
    assert line.startswith("daemon.json leaves dockerd no CDI spec dir"), line


@pytest.mark.parametrize(("head", "device"), [
    ("kind: nvidia.com/gpu\ncontainerEdit: {}\ndevices:", f"name: {UB}"),
    ("kind: nvidia.com/gpu\ndevices:", f"{{name: {UB}, containerEdit: {{}}}}"),
    ("kind: nvidia.com/gpu\ndevices:", f"{{name: {UB}, 1: x}}")])
def test_a_key_cdis_spec_does_not_know_refuses_the_spec(tmp_path: Path, head: str,
                                                        device: str) -> None:
    # CDI decodes strictly (sigs.k8s.io/yaml UnmarshalStrict: DisallowUnknownFields): a
    # key its Spec or Device does not know, a typo, makes it refuse the whole spec, and
    # the doctor passed it
    root = _root(tmp_path)
    _raw_spec(root, f"name: {UA}", device, head=head)
    c, code = _check(root)
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "/etc/cdi/nvidia.yaml" in c["found"] and "does not know" in c["found"], c


def test_the_keys_cdis_spec_knows_are_read_whatever_their_case(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _raw_spec(root, f"{{name: {UA}, Annotations: {{a: b}}, containeredits: {{env: [A=1]}}}}",
              f"name: {UB}", head="CDIVERSION: 0.6.0\nkind: nvidia.com/gpu\n"
              "annotations: {a: b}\nContainerEdits: {}\ndevices:", version="0.6.0")
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


def test_a_tab_after_a_key_is_read_as_cdis_yaml_reads_it(tmp_path: Path) -> None:
    # go-yaml v2, a port of libyaml, takes a tab after `key:`; PyYAML's scanner refused
    # it and the doctor named a spec the runtime reads unread (libyaml reads it now)
    root = _root(tmp_path)
    _raw_spec(root, f"name:\t{UA}", f"name:\t{UB}", head="kind:\tnvidia.com/gpu\ndevices:")
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


def test_a_directory_named_like_a_spec_is_skipped_as_cdi_skips_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CDI's scan skips a directory whatever its name (spec-dirs.go: entry.IsDir()): the
    # doctor named /etc/cdi/old.yaml/ a spec it could not read, and counted it toward
    # the dir's bound, leaving the real spec unread
    root = _bounded_root(tmp_path, monkeypatch, 2)
    (root / "etc/cdi/a.yaml").mkdir(parents=True)
    (root / "etc/cdi/b.json").mkdir()
    c, _ = _check(root)
    assert c["found"] == "mode cdi and no nvidia.com/gpu CDI spec in /etc/cdi, /var/run/cdi", c
    _spec(root, "etc/cdi/c.yaml", [UA, UB])
    c, _ = _check(root)
    assert c["status"] == str(Status.OK) and "unread" not in c["found"], c


def test_a_link_to_a_directory_and_a_hidden_spec_are_read_as_cdi_reads_them(
        tmp_path: Path) -> None:
    # (a link is no directory to Go's ReadDir: CDI reads it, and fails, and skips it,
    # loading the other specs: a warning; a name that starts with a dot is read as any
    # other)
    root = _root(tmp_path)
    (root / "etc/cdi/sub").mkdir(parents=True)
    (root / "etc/cdi/link.yaml").symlink_to("sub")
    c, _ = _check(root)
    assert "/etc/cdi/link.yaml is a directory, by a symlink, not a spec" in c["found"], c
    _spec(root, "etc/cdi/.nvidia.yaml", [UA, UB])
    c, _ = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert c["found"].startswith("mode cdi; /etc/cdi/.nvidia.yaml names each GPU"), c


@pytest.mark.parametrize(("version", "device", "said"), [
    ("0.2.5", "name: gpu0", "has cdiVersion '0.2.5', which CDI does not know"),
    ("~", "name: gpu0", "has cdiVersion '', which CDI does not know"),
    ("0.2.0", "name: gpu0", "but CDI reads specs of 0.3.0 or later"),
    ("0.4.0", "name: '0'", "its device name that starts with a digit needs 0.5.0"),
    ("v0.5.0", "{name: gpu0, annotations: {a: b}}", "its annotations needs 0.6.0"),
    ("0.6.0", "{name: gpu0, containerEdits: {additionalGids: [44]}}",
     "its additionalGids needs 0.7.0"),
    ("1.0.0", "{name: gpu0, containerEdits: {netDevices: [{name: e, hostInterfaceName: f}]}}",
     "its netDevices needs 1.1.0")])
def test_a_cdi_version_cdi_refuses_refuses_the_spec(tmp_path: Path, version: str,
                                                    device: str, said: str) -> None:
    # CDI's ValidateVersion refuses a version it does not know, and one below what the
    # spec's content needs (a device name starting with a digit: 0.5.0): the runtime
    # resolves none of its devices, and the doctor passed it
    root = _root(tmp_path)
    _raw_spec(root, device, f"name: {UA}", f"name: {UB}", version=version)
    c, code = _check(root)
    assert c["status"] == str(Status.FAIL) and code == 1, c
    assert "/etc/cdi/nvidia.yaml has cdiVersion" in c["found"], c
    assert said in c["found"] and "set cdiVersion: " in c["found"], c


@pytest.mark.parametrize(("kind", "said"), [
    ("nvidia.com", "has kind 'nvidia.com', not vendor/class"),
    ("/gpu", "has kind '/gpu', not vendor/class"),
    ("1nvidia.com/gpu", "whose vendor '1nvidia.com' CDI refuses: use letters"),
    ("nvidia.com/gpu_", "whose class 'gpu_' CDI refuses"),
    ("nvidia.com/g/pu", "whose class 'g/pu' CDI refuses")])
def test_a_kind_cdi_refuses_is_named(tmp_path: Path, kind: str, said: str) -> None:
    # CDI's ValidateVendorName and ValidateClassName: vendor/class, a letter first
    root = _root(tmp_path)
    _raw_spec(root, f"name: {UA}", head=f"kind: '{kind}'\ndevices:", version="0.6.0")
    c, _ = _check(root)
    assert f"/etc/cdi/nvidia.yaml has kind '{kind}'" in c["found"] and said in c["found"], c


@pytest.mark.parametrize(("version", "device"), [
    ("v0.3.0", "name: gpu0"), ("0.5.0", "name: '0'"), ("1.1.0", "name: gpu0"),
    ("0.4.0", "{name: gpu0, annotations: ~, containerEdits: {mounts: [{hostPath: a, "
              "containerPath: b, type: bind}]}}")])
def test_a_cdi_version_cdi_takes_is_no_fault(tmp_path: Path, version: str,
                                             device: str) -> None:
    root = _root(tmp_path)
    _raw_spec(root, device, f"name: {UA}", f"name: {UB}", version=version)
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize(("text", "said"), [
    ("kind: [\n", "at line 2, column 1: did not find expected node content (while parsing "
                  "a flow node)"),
    ("kind: a\n  b: c\n", "at line 2, column 4: mapping values are not allowed"),
    ("kind: 'a\n", "at line 2, column 1: found unexpected end of stream (while scanning a "
                   "quoted scalar from line 1, column 7)"),
    ("kind: a\ndevices:\n\t- name: x\n", "at line 3, column 1: a tab where YAML wants "
                                         "spaces (as indentation); write spaces"),
    ("kind: a\n\x07", "at line 2, column 1: the character #x0007 is not allowed")])
def test_a_broken_specs_yaml_error_names_the_line_and_column_on_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, libyaml: bool, text: str,
        said: str) -> None:
    # with libyaml's parser (CDI's specs) the message lost its line:column snippet and
    # read otherwise than PyYAML's, over lines, the file named twice
    yaml_parser(monkeypatch, libyaml)
    c = _text_spec_check(tmp_path, text)
    found = c["found"]
    assert "(/etc/cdi/nvidia.yaml not valid YAML at line " in found and "\n" not in found, c
    if libyaml or "tab" in said or "#x" in said:  # (PyYAML words some problems its way)
        assert said in found, c
    else:
        assert said.split(":")[0] in found, c


@pytest.mark.parametrize(("head", "device", "said"), [
    ("containerEdits: {deviceNode: []}", "name: gpu0", "'deviceNode' in containerEdits"),
    ("containerEdits: {}", "{name: gpu0, containerEdits: {mounts: [{hostPath: a, "
     "containerPath: b, option: [ro]}]}}", "'option' in device 1's containerEdits mounts"),
    ("containerEdits: {hooks: [{hookName: a, path: b, arg: [c]}]}", "name: gpu0",
     "'arg' in containerEdits hooks"),
    ("containerEdits: {intelRdt: {closID: a, l3Cache: b}}", "name: gpu0",
     "'l3Cache' in containerEdits intelRdt")])
def test_a_key_cdis_container_edits_do_not_know_refuses_the_spec(
        tmp_path: Path, head: str, device: str, said: str) -> None:
    # CDI's strict decoding refuses an unknown key in containerEdits and in its parts as
    # in the spec, whatever the spec's cdiVersion (it knows its newest struct's keys):
    # the doctor looked at none of them
    root = _root(tmp_path)
    _raw_spec(root, device, f"name: {UA}", f"name: {UB}", version="0.7.0",
              head=f"kind: nvidia.com/gpu\n{head}\ndevices:")
    c, _ = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert f"/etc/cdi/nvidia.yaml has the key {said}" in c["found"], c


@pytest.mark.parametrize("version", ["0.5.0", "0.8.0", "1.1.0"])
def test_a_spec_as_nvidia_ctk_writes_it_is_read(tmp_path: Path, version: str) -> None:
    # (every part of containerEdits the toolkit writes: none refused as unknown)
    root = _root(tmp_path)
    node = "{path: /dev/nvidia0, hostPath: /dev/nvidia0, major: 195, minor: 0, type: c, " \
           "permissions: rw, fileMode: 438, uid: 0, gid: 0}"
    _raw_spec(root, f"{{name: {UA}, containerEdits: {{deviceNodes: [{node}]}}}}",
              f"name: {UB}", version=version, head=(
                  "kind: nvidia.com/gpu\ncontainerEdits:\n  env: [A=1]\n"
                  "  hooks: [{hookName: createContainer, path: /usr/bin/nvidia-cdi-hook, "
                  "args: [nvidia-cdi-hook, update-ldcache], env: [B=2], timeout: 5}]\n"
                  "  mounts: [{hostPath: /a, containerPath: /a, options: [ro, bind], "
                  "type: bind}]\ndevices:"))
    c, _ = _check(root)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize(("text", "said"), [
    ("kind: a\n  b: c\n", "at line 2, column 4: mapping values are not allowed in this "
                         "context; the line: '  b: c'"),
    ("kind: a\n" + "x" * 5000 + " y: [\n",
     "; the line: '..." + "x" * 43 + " y: [" + "'"),
    ("kind: a\ndevices: {a: b: c, " + "d: e, " * 1000 + "}\n",
     "; the line: 'devices: {a: b: c, d: e, d: e, d: e, d: e, d: e,...'"),
    ("kind: a\n\x07", "(\"\\x07\"); the line: '\\x07'")])
def test_a_broken_specs_yaml_error_shows_its_line_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, libyaml: bool, text: str,
        said: str) -> None:
    # the stack reader's YAML errors show the line at fault; a CDI spec's named its line
    # and column alone, the operator left to count columns in a generated file
    yaml_parser(monkeypatch, libyaml)
    c = _text_spec_check(tmp_path, text)
    if libyaml or "x07" in said:  # (PyYAML's words and columns differ a little)
        assert said in c["found"], c
    else:
        assert "; the line: '" in c["found"], c
    assert len(c["found"]) < 400 and "\n" not in c["found"], c


def test_a_directory_named_yml_is_not_named_a_spec_to_rename(tmp_path: Path) -> None:
    # CDI's scan skips a directory whatever its name: the doctor told the operator to
    # rename the directory /etc/cdi/old.yml/ to .yaml, as if it were a spec CDI skips
    root = _root(tmp_path)
    (root / "etc/cdi/old.yml").mkdir(parents=True)
    c, _ = _check(root)
    assert c["found"] == "mode cdi and no nvidia.com/gpu CDI spec in /etc/cdi, /var/run/cdi", c
