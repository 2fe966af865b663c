"""The package as pip builds it: the LICENSE it declares is in the repo and the wheel,
SPDX metadata and classifiers, and extras that match what the code imports."""

from __future__ import annotations

import ast
import email
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
# Distribution name -> the module it provides, where they differ.
MODULE_OF = {"nvidia-ml-py": "pynvml", "pyyaml": "yaml", "prometheus-client": "prometheus_client"}


def _dist(req: str) -> str:
    name = req.split(";")[0]
    for sep in "<>=!~[ ":
        name = name.split(sep)[0]
    return name.strip().lower()


def _imported_top_modules() -> set[str]:
    """Every top-level module any swarmgpu module imports, lazy imports included."""
    out: set[str] = set()
    for path in (REPO / "swarmgpu").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return out


def test_license_file_is_the_apache_2_text_declared() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer
    assert PROJECT["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    assert PROJECT["license-files"] == ["LICENSE"]
    # PEP 639: no License :: classifier beside an SPDX expression.
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    assert "Programming Language :: Python :: 3.11" in PROJECT["classifiers"]
    assert "!LICENSE" in (REPO / ".dockerignore").read_text().split()


def test_every_dependency_and_extra_is_imported() -> None:
    imported = _imported_top_modules()
    for req in PROJECT["dependencies"] + PROJECT["optional-dependencies"]["sim"]:
        dist = _dist(req)
        assert MODULE_OF.get(dist, dist) in imported, f"{dist} is never imported"
    assert "numpy" not in imported  # so no extra asks for it
    assert not any(_dist(r) == "numpy" for extra in PROJECT["optional-dependencies"].values()
                   for r in extra)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "-w", str(out), str(REPO)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("swarmgpu-*.whl")
    return whl


def test_wheel_ships_the_license_and_its_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (lic,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(lic) == (REPO / "LICENSE").read_bytes()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(z.read(meta_name))
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert set(meta.get_all("Classifier") or []) == set(PROJECT["classifiers"])
    assert "Provides-Extra" in meta and "numpy" not in str(meta.get_all("Requires-Dist"))


def _dockerfile_runtime() -> tuple[dict[str, str], dict[str, str]]:
    """(ARG defaults, LABELs) of the Dockerfile's runtime stage."""
    text = (REPO / "Dockerfile").read_text()
    runtime = text[text.rindex("\nFROM "):].replace("\\\n", " ")
    args = dict(re.findall(r"^ARG (\w+)=(.*)$", runtime, re.M))
    labels = dict(re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', runtime))
    return args, labels


def test_project_urls_and_oci_labels_agree() -> None:
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Source", "Documentation", "Issues"}
    args, labels = _dockerfile_runtime()
    filled = {k: re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), v)
              for k, v in labels.items()}
    p = "org.opencontainers.image."
    assert filled[p + "title"] == PROJECT["name"]
    assert filled[p + "description"] == PROJECT["description"]
    assert filled[p + "version"] == PROJECT["version"]
    assert filled[p + "licenses"] == PROJECT["license"]
    assert filled[p + "source"] == urls["Source"]
    assert {p + k for k in ("url", "documentation", "revision")} <= set(labels)
    build = (REPO / "scripts" / "build-image.sh").read_text()
    for arg in ("VERSION", "SOURCE", "REVISION"):
        assert f'--build-arg "{arg}=${arg}"' in build, arg


def test_wheel_carries_the_project_urls(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        (meta_name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(z.read(meta_name))
    got = {u.split(", ", 1)[0]: u.split(", ", 1)[1] for u in meta.get_all("Project-URL") or []}
    assert {k.lower(): v for k, v in got.items()} == {
        k.lower(): v for k, v in PROJECT["urls"].items()}
