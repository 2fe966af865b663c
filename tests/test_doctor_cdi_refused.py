"""A CDI spec CDI refuses for its content, beside one that names every GPU, is a WARN
naming the spec and the fix, as a spec CDI cannot read is (stop 80).

container-device-interface v1.1.0 pkg/cdi: ``ReadSpec`` fails for a spec that is not
valid YAML, has a key its strict decoding does not know, or that ``newSpec``'s
``validate`` refuses (a ``cdiVersion`` it does not know, a device whose container
edits are empty: "invalid device, empty device edits"); cache.go ``refresh`` records
the error for that path and loads the other specs. Before, the doctor passed the node
(``ok``) saying nothing of it; the empty edits it did not see at all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from swarmgpu.agent.doctor import Status, run_doctor

HEALTHY = Path(__file__).parent / "doctor_roots" / "healthy"
UA = "GPU-2a8c5b3e-9d1f-4c6a-8e7b-1f0d3c5a7b91"
UB = "GPU-7e4d2f1a-3b6c-4d8e-9a0f-5c1b7d3e9f24"
TOML = "etc/nvidia-container-runtime/config.toml"
EDITS = "    containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}\n"
GOOD = ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
        + "".join(f"  - name: \"{n}\"\n{EDITS}" for n in (UA, UB)))


def _root(tmp_path: Path) -> Path:
    """The healthy tree in cdi mode, /etc/cdi/nvidia.yaml naming both GPUs."""
    root = tmp_path / "root"
    shutil.copytree(HEALTHY, root, symlinks=True)
    toml = root / TOML
    toml.write_text(toml.read_text().replace('mode = "auto"', 'mode = "cdi"'))
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text(GOOD)
    return root


def _check(root: Path) -> dict[str, Any]:
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


def test_the_healthy_spec_alone_is_ok(tmp_path: Path) -> None:
    c = _check(_root(tmp_path))
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize(("text", "said"), [
    ("kind: [\n", "not valid YAML"),
    (GOOD.replace("kind:", "kinds: x\nkind:"), "'kinds'"),
    (GOOD.replace("0.5.0", "9.9.9"), "cdiVersion '9.9.9', which CDI does not know"),
    (GOOD.replace(EDITS, "    containerEdits: {}\n", 1), "no container edits"),
    (GOOD.replace(EDITS, "", 1), "no container edits"),
])
def test_a_spec_cdi_refuses_beside_a_good_one_is_a_warn(tmp_path: Path, text: str,
                                                        said: str) -> None:
    root = _root(tmp_path)
    (root / "etc/cdi/other.yaml").write_text(text)
    c = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert "/etc/cdi/other.yaml" in c["found"] and said in c["found"], c
    assert "/etc/cdi/other.yaml" in c["fix"], c
    assert "CDI refuses" in c["why"], c


def test_a_device_of_no_edits_is_refused_as_cdi_refuses_it(tmp_path: Path) -> None:
    # the only spec: its devices are never resolved, every GPU task fails
    root = _root(tmp_path)
    (root / "etc/cdi/nvidia.yaml").write_text(GOOD.replace(EDITS, "    containerEdits:\n"
                                                           "      env: []\n", 1))
    c = _check(root)
    assert c["status"] == str(Status.FAIL), c
    assert f"names device '{UA}', which has no container edits" in c["found"], c


def test_an_edit_of_the_spec_alone_leaves_a_device_of_none_refused(tmp_path: Path) -> None:
    # (Device.validate looks at the device's own edits; the spec's apply to every one)
    root = _root(tmp_path)
    text = GOOD.replace("devices:", "containerEdits: {env: [A=1]}\ndevices:")
    (root / "etc/cdi/nvidia.yaml").write_text(text.replace(EDITS, "", 1))
    assert _check(root)["status"] == str(Status.FAIL)


def test_a_yml_file_cdi_never_reads_is_no_refusal(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "etc/cdi/old.yml").write_text("kind: [\n")
    assert _check(root)["status"] == str(Status.OK)


def test_a_spec_not_utf8_beside_a_good_one_is_a_warn(tmp_path: Path) -> None:
    """(stop 80 read) CDI's go-yaml v2 stops at a byte not UTF-8 (ReadSpec fails; refresh
    loads the others): a refusal. Its error reads "... (CDI refuses the spec)", and the
    test for a refusal looked for the words at the very end, before the ")": ``ok``."""
    root = _root(tmp_path)
    (root / "etc/cdi/other.yaml").write_bytes(b"kind: nvidia.com/gpu\n# caf\xe9\n")
    c = _check(root)
    assert c["status"] == str(Status.WARN), c
    assert "/etc/cdi/other.yaml" in c["found"] and "CDI refuses the spec" in c["found"], c
    assert "/etc/cdi/other.yaml" in c["fix"], c


def test_a_utf16_spec_cdi_reads_is_no_refusal(tmp_path: Path) -> None:
    # (go-yaml reads UTF-16 with its byte order mark; the doctor does not: no refusal said)
    root = _root(tmp_path)
    (root / "etc/cdi/other.yaml").write_bytes(GOOD.encode("utf-16"))
    c = _check(root)
    assert "CDI refuses" not in c["why"], c
