"""``toolkit.cdi-spec`` reads the runtime's spec dirs as CDI's cache scans them
(container-device-interface pkg/cdi spec-dirs.go ``scanSpecDirs``, spec.go): it stops at
a spec dir it cannot list, refuses a spec of no devices, and reads the first YAML document
of a spec file alone. Pure: a copy of the healthy fixture tree in a tmp dir, its
config.toml and spec files changed."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from support.denied import deny_listing
from support.fifo import make_fifo, read_within, swapped_after_stat

from swarmgpu.agent.doctor import Status, read, run_doctor
from swarmgpu.agent.doctor.cdifile import not_regular

HEALTHY = Path(__file__).parent / "doctor_roots" / "healthy"
UA = "GPU-2a8c5b3e-9d1f-4c6a-8e7b-1f0d3c5a7b91"
UB = "GPU-7e4d2f1a-3b6c-4d8e-9a0f-5c1b7d3e9f24"
TOML = "etc/nvidia-container-runtime/config.toml"
# (CDI refuses a device of no edits: "invalid device, empty device edits")
EDITS = "containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}"
THREE_DIRS = 'spec-dirs = ["/etc/cdi", "/srv/cdi", "/var/run/cdi"]'


def _root(tmp_path: Path, spec_dirs: str = "") -> Path:
    """The healthy tree in cdi mode, its spec dirs ``spec_dirs`` where given."""
    root = tmp_path / "root"
    shutil.copytree(HEALTHY, root, symlinks=True)
    toml = root / TOML
    text = toml.read_text().replace('mode = "auto"', 'mode = "cdi"')
    if spec_dirs:
        text = text.replace('spec-dirs = ["/etc/cdi", "/var/run/cdi"]', spec_dirs)
    toml.write_text(text)
    return root


def _doc(names: list[str]) -> str:
    devices = "".join(f"  - name: \"{n}\"\n    {EDITS}\n" for n in names)
    return f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{devices}"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _check(root: Path) -> dict[str, Any]:
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


def test_a_spec_dir_that_is_a_file_is_skipped_as_cdis_scan_skips_it(
        tmp_path: Path) -> None:
    # CDI's filepath.Walk (every release to v1.1.0) calls a file given as a spec dir
    # with no error and reads on: the doctor failed the node, saying its scan stopped
    root = _root(tmp_path)
    _write(root, "etc/cdi", "not a directory\n")
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA, UB]))
    c = _check(root)
    assert c["status"] == str(Status.OK), c
    assert c["found"].startswith("mode cdi; /var/run/cdi/nvidia.yaml names each GPU "
                                 "advertised"), c


NEXT = "CDI's next release (its main branch, unreleased after v1.1.0)"


def test_a_spec_dir_cdis_next_release_stops_at_is_noted_where_a_spec_is_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CDI's main lists a spec dir with os.ReadDir and stops its scan at one that is a
    # file or that root may not list: the spec in the later dir, which the runtime
    # reads today, would be lost to a toolkit vendoring it. Status as today's CDI says
    root = _root(tmp_path, THREE_DIRS)
    _write(root, "etc/cdi", "not a directory\n")
    (root / "srv/cdi").mkdir(parents=True)
    deny_listing(monkeypatch, "srv/cdi", euid=0)
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA, UB]))
    c = _check(root)
    assert c["status"] == str(Status.OK), c
    assert c["found"] == (
        f"mode cdi; /var/run/cdi/nvidia.yaml names each GPU advertised ({NEXT} stops its "
        "scan at /etc/cdi, which is not a directory: /srv/cdi, /var/run/cdi never read, "
        "/var/run/cdi/nvidia.yaml with them)"), c


def test_a_spec_dir_cdis_next_release_stops_at_is_not_noted_where_nothing_is_lost(
        tmp_path: Path) -> None:
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]))
    _write(root, "var/run/cdi", "")
    c = _check(root)
    assert c["found"] == "mode cdi; /etc/cdi/nvidia.yaml names each GPU advertised", c


def test_a_spec_dir_cdi_cannot_look_up_stops_the_scan_of_the_later_dirs(
        tmp_path: Path) -> None:
    # (/srv a file: Walk's Lstat of /srv/cdi fails, not as absent, and ends the scan)
    root = _root(tmp_path, THREE_DIRS)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]))
    _write(root, "srv", "")
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA]))
    c = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert "(/srv/cdi cannot be looked up (not a directory): CDI stops its scan" \
        in c["found"], c
    assert "/var/run/cdi never read, /var/run/cdi/nvidia.yaml with them)" in c["found"], c
    assert c["fix"].startswith("Make /srv/cdi a path the runtime can look up"), c


def test_the_last_spec_dir_a_file_hides_no_later_dir(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]))
    _write(root, "var/run/cdi", "")
    c = _check(root)
    assert c["status"] == str(Status.OK), c
    assert c["found"] == "mode cdi; /etc/cdi/nvidia.yaml names each GPU advertised", c


def test_a_spec_dir_root_may_not_list_is_skipped_and_the_scan_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # denied to root too (an LSM, a root-squashed mount): Walk's call for the dir gets
    # the error, and CDI's scan returns nil for the dir itself: no stop
    deny_listing(monkeypatch, "etc/cdi", euid=0)
    root = _root(tmp_path)
    (root / "etc/cdi").mkdir()
    c = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert "/etc/cdi cannot be listed (permission denied): CDI reads no spec there" \
        in c["found"], c
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA, UB]))
    assert _check(root)["status"] == str(Status.OK)


def test_a_spec_dir_that_is_a_symlink_is_never_read(tmp_path: Path) -> None:
    # Walk looks the dir up with Lstat and never follows a link: the doctor followed it,
    # found the spec and passed, while the runtime resolves none of the GPUs
    root = _root(tmp_path)
    _write(root, "opt/cdi/nvidia.yaml", _doc([UA, UB]))
    (root / "etc/cdi").symlink_to("/opt/cdi")
    c = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert "/etc/cdi is a symlink, which CDI's scan does not follow" in c["found"], c
    assert f"{NEXT} follows it" in c["found"], c


@pytest.mark.parametrize("devices", ["devices: []\n", "devices:\n", ""])
def test_a_spec_of_no_devices_cdi_refuses_is_named(tmp_path: Path, devices: str) -> None:
    # the doctor took it, naming only the GPUs it lacked; CDI: "invalid spec, no devices"
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n{devices}")
    c = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert ("/etc/cdi/nvidia.yaml names no device (CDI refuses the whole spec)"
            in c["found"]), c


@pytest.mark.parametrize("rest", ["---\n", "---\nkind: [\n", "...\n---\n- a\n"])
def test_a_second_document_is_left_unread_as_cdi_leaves_it(tmp_path: Path,
                                                            rest: str) -> None:
    # the doctor refused the file ("a second document"); CDI reads the first alone
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]) + rest)
    c = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert c["found"] == ("mode cdi; /etc/cdi/nvidia.yaml names each GPU advertised "
                          "(/etc/cdi/nvidia.yaml has a second YAML document (---), which "
                          "CDI never reads (it reads the first alone))"), c
    assert c["fix"] == "Remove what CDI leaves unread from /etc/cdi/nvidia.yaml.", c


def test_a_device_in_a_second_document_is_not_resolved(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA]) + "---\n" + _doc([UB]))
    c = _check(root)
    assert c["status"] == str(Status.FAIL) and UB in c["found"], c
    assert "has a second YAML document" in c["found"], c


def test_an_annotation_key_kubernetes_refuses_is_taken_as_cdis_cache_takes_it(
        tmp_path: Path) -> None:
    # CDI's ValidateSpecAnnotations looks at a map[string]any alone; pkg/cdi hands it
    # the spec's map[string]string, so the runtime's cache checks no key
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]).replace("0.5.0", "0.6.0").replace(
        "kind:", "annotations: {\"-bad key/x/y\": v}\nkind:").replace(
        "    containerEdits", "    annotations: {\"_\": v}\n    containerEdits"))
    c = _check(root)
    assert c["status"] == str(Status.OK), c


def test_dockerds_spec_dirs_past_one_its_scan_stops_at_are_not_counted(
        tmp_path: Path) -> None:
    # dockerd's details named /var/run/cdi's spec as one it reads: its CDI's scan stops
    # at /opt/x/cdi (a file on the way: not looked up), as the runtime's does
    root = _root(tmp_path)
    _write(root, "opt/x", "a file\n")
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA, UB]))
    fixture = root / ".swarmgpu-fixture/docker-info.json"
    info = json.loads(fixture.read_text())
    fixture.write_text(json.dumps({**info, "CDISpecDirs": ["/opt/x/cdi", "/var/run/cdi"]}))
    (line,) = _check(root)["details"]
    assert "nvidia.com/gpu in /var/run/cdi/nvidia.yaml" not in line, line
    assert "no nvidia.com/gpu spec there" in line, line
    assert "its scan stops at /opt/x/cdi, which cannot be looked up (not a directory): " \
           "/var/run/cdi never read" in line, line


def test_a_spec_that_is_not_utf8_is_refused_as_cdis_yaml_reader_refuses_it(
        tmp_path: Path) -> None:
    # go-yaml v2 (CDI's reader) stops at a byte that is no UTF-8 ("invalid leading UTF-8
    # octet"), and CDI refuses the spec: the doctor read it with U+FFFD in its place
    root = _root(tmp_path)
    path = root / "etc/cdi/nvidia.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"# caf\xe9\n" + _doc([UA, UB]).encode())
    c = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert "/etc/cdi/nvidia.yaml is not UTF-8 text (byte 0xe9 at offset 5); save it as " \
           "UTF-8 (CDI refuses the spec)" in c["found"], c


def test_a_spec_that_is_a_symlink_to_nothing_is_named_so(tmp_path: Path) -> None:
    # (CDI cannot read it and refuses it; the doctor said it names no kind)
    root = _root(tmp_path)
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").symlink_to("/opt/gone.yaml")
    c = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert "/etc/cdi/nvidia.yaml cannot be read: it is gone, or a symlink to nothing " \
           "(CDI refuses it)" in c["found"], c


def test_a_spec_that_is_a_symlink_to_a_spec_is_read(tmp_path: Path) -> None:
    # (Walk reads a link to a file as a spec: os.ReadFile follows it)
    root = _root(tmp_path)
    _write(root, "opt/nvidia.yaml", _doc([UA, UB]))
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").symlink_to("../../opt/nvidia.yaml")
    assert _check(root)["status"] == str(Status.OK)


def test_a_utf16_spec_is_named_one_cdi_reads_and_the_doctor_does_not(
        tmp_path: Path) -> None:
    root = _root(tmp_path)
    path = root / "etc/cdi/nvidia.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(_doc([UA, UB]).encode("utf-16"))
    c = _check(root)
    assert "UTF-16 text (its byte order mark)" in c["found"], c
    assert "(CDI reads it, the doctor does not)" in c["found"], c


def test_a_spec_past_the_size_the_doctor_reads_is_named_the_doctors_bound(
        tmp_path: Path) -> None:
    # "is larger than 1 MiB" read as a fault of the spec, which CDI reads whatever its size
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", "#" + "x" * (1 << 20) + "\n" + _doc([UA, UB]))
    c = _check(root)
    assert "/etc/cdi/nvidia.yaml is larger than 1 MiB, the most the doctor reads of a " \
           "spec file" in c["found"], c


def _never_opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every open of a FIFO for a read, as os.open or open() gets it, recorded and
    refused (a regression fails here, never blocks); an O_PATH open (a walk) passes."""
    opened: list[str] = []
    os_open, builtin_open = os.open, builtins.open

    def fifo(path: Any, dir_fd: int | None = None) -> bool:
        try:
            return stat.S_ISFIFO(os.stat(path, dir_fd=dir_fd).st_mode)
        except (OSError, TypeError, ValueError):
            return False

    def guarded_os(path: Any, flags: int, *args: Any, dir_fd: int | None = None,
                   **kw: Any) -> int:
        if not flags & os.O_PATH and fifo(path, dir_fd):
            opened.append(str(path))
            raise AssertionError(f"opened the FIFO {path}")
        return os_open(path, flags, *args, dir_fd=dir_fd, **kw)

    def guarded(file: Any, *args: Any, **kw: Any) -> Any:
        if fifo(file):
            opened.append(str(file))
            raise AssertionError(f"opened the FIFO {file}")
        return builtin_open(file, *args, **kw)

    monkeypatch.setattr(os, "open", guarded_os)
    monkeypatch.setattr(builtins, "open", guarded)
    return opened


@pytest.mark.parametrize("link", [False, True])
def test_a_spec_that_is_a_fifo_fails_the_node_and_is_never_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: bool) -> None:
    # CDI's os.ReadFile of a FIFO waits for a writer for ever: the runtime hangs starting
    # each GPU task. The doctor opened it (non-blocking) and, a spec in a later dir
    # naming each GPU, passed the node
    root = _root(tmp_path)
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA, UB]))
    (root / "etc/cdi").mkdir(parents=True)
    if link:
        (root / "opt").mkdir()
        fifo = make_fifo(root / "opt/pipe")
        (root / "etc/cdi/pipe.yaml").symlink_to("/opt/pipe")
    else:
        fifo = make_fifo(root / "etc/cdi/pipe.yaml")
    opened = _never_opened(monkeypatch)
    c = read_within(lambda: _check(root), fifo)
    assert not opened, opened
    assert c["status"] == str(Status.FAIL), c
    said = "/etc/cdi/pipe.yaml is a FIFO (a named pipe)" + (", by a symlink" if link else "")
    assert said in c["found"], c
    assert "Remove /etc/cdi/pipe.yaml" in c["fix"], c


def test_a_spec_that_is_a_socket_is_skipped_as_cdi_skips_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CDI's open of a socket fails (ENXIO): it records the error, loads the other specs
    root = _root(tmp_path)
    _write(root, "var/run/cdi/nvidia.yaml", _doc([UA, UB]))
    (root / "etc/cdi").mkdir(parents=True)
    monkeypatch.chdir(root / "etc/cdi")  # (a socket's path: 107 bytes at most)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("sock.yaml")
        c = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert "/etc/cdi/sock.yaml is a socket, not a spec: CDI's read of it fails and it " \
           "skips it" in c["found"], c
    assert "Remove /etc/cdi/sock.yaml" in c["fix"], c


@pytest.mark.parametrize("euid", [0, 1000])
def test_a_spec_that_cannot_be_read_is_skipped_as_cdi_skips_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, euid: int) -> None:
    # CDI's refresh (cache.go) records a spec's read error and loads the other specs;
    # the toolkit logs it and injects from those: the doctor passed the node, silent
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]))
    _write(root, "etc/cdi/other.yaml", _doc(["x"]))
    head = read.read_head

    def denied(name: str, limit: int, *, dir_fd: int | None = None) -> bytes:
        if name == "other.yaml":
            raise PermissionError(13, "Permission denied")
        return head(name, limit, dir_fd=dir_fd)

    monkeypatch.setattr(read, "read_head", denied)
    monkeypatch.setattr(read.os, "geteuid", lambda: euid)
    c = _check(root)
    assert c["status"] == str(Status.WARN), c
    said = ("cannot be read: permission denied (run the doctor as root, as the runtime "
            "reads it)" if euid else "cannot be read (permission denied), even by root: "
            "CDI skips it")
    assert f"/etc/cdi/other.yaml {said}" in c["found"], c


def test_a_spec_that_is_a_device_is_named_one_whose_read_may_never_end() -> None:
    # (a link to /dev/zero under a spec dir: CDI reads it whole, for ever; looked at by
    # stat alone, this machine's /dev/null stands in: a test cannot make a device)
    spec = not_regular("/", "/dev/null")
    assert spec is not None and spec.hangs, spec
    assert spec.error == ("is a character device, not a spec: the runtime's read of it may "
                          "never end (a device is read to its end)"), spec


def test_a_spec_that_is_a_symlink_to_nothing_beside_a_spec_is_skipped_as_cdi_skips_it(
        tmp_path: Path) -> None:
    # (CDI's read fails, not as a stop: the error recorded, the other specs loaded)
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]))
    (root / "etc/cdi/old.yaml").symlink_to("/opt/gone.yaml")
    c = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert "/etc/cdi/old.yaml cannot be read: it is gone, or a symlink to nothing" \
        in c["found"], c


def test_a_spec_swapped_for_a_fifo_after_its_stat_is_named_never_waited_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A regular file when stat looked (``not_regular``), a FIFO by the open: the open is
    # non-blocking and the opened file's fstat refuses it, so the doctor never waits on
    # it, and names it: a FIFO there now hangs the runtime's read as one stat saw does,
    # a fail (a warn before, as a read that fails: test_doctor_cdi_engine_links.py).
    root = _root(tmp_path)
    _write(root, "etc/cdi/nvidia.yaml", _doc([UA, UB]))
    _write(root, "etc/cdi/swap.yaml", _doc(["x"]))
    fifo = swapped_after_stat(monkeypatch, root, "/etc/cdi/swap.yaml")
    c = read_within(lambda: _check(root), fifo)
    assert isinstance(c, dict), c
    assert c["status"] == str(Status.FAIL), c
    assert ("/etc/cdi/swap.yaml is a FIFO (a named pipe) (replaced while the doctor read "
            "it), not a spec: the runtime's read of it waits for a writer, for ever"
            in c["found"]), c
