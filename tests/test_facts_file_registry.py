"""FileSource (strict facts files) and open_source (spec -> source)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.fake_pynvml.builder import build_layout
from support.paths import FIXTURES as FIXTURES_DIR

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.file import FileSource
from swarmgpu.agent.facts.gfd import GfdSource
from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.facts.registry import open_source
from swarmgpu.agent.facts.topo import TopoSource
from swarmgpu.core.model import MAX_GPU_MEMORY_MIB, MAX_STR_LEN, NodeFacts

FIX = FIXTURES_DIR
TOPO = FIX / "topology/topo_dgx_a100_nv12.txt"


def _facts_dict() -> dict[str, object]:
    src = TopoSource(TOPO, hostname="dgx-1", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    return src.read().to_dict()


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_file_round_trip(fmt: str, tmp_path: Path) -> None:
    data = _facts_dict()
    p = tmp_path / f"facts.{fmt}"
    p.write_text(json.dumps(data) if fmt == "json" else yaml.safe_dump(data))
    facts = FileSource(p).read()
    assert facts.hostname == "dgx-1"
    assert len(facts.gpus) == 8 and facts.link(0, 7) == "NV12"


def test_file_typo_names_file_and_field(tmp_path: Path) -> None:
    data = _facts_dict()
    data["gpus"][0]["memory_mb"] = 5  # type: ignore[index]
    p = tmp_path / "node.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(SourceError, match=r"node\.yaml.*gpus\[0\].*memory_mb"):
        FileSource(p).read()


def test_file_wrong_type_names_field(tmp_path: Path) -> None:
    data = _facts_dict()
    data["gpus"][1]["memory_mib"] = "80GB"  # type: ignore[index]
    p = tmp_path / "node.json"
    p.write_text(json.dumps(data))
    with pytest.raises(SourceError, match=r"node\.json.*gpus\[1\]\.memory_mib"):
        FileSource(p).read()


def test_file_with_one_gpu_index_twice_is_refused(tmp_path: Path) -> None:
    # Two GPUs answering to index 3: a MIG choice or a hot-spot note naming GPU 3 would
    # mean either (before: read as two GPUs 3).
    data = _facts_dict()
    data["gpus"][5]["index"] = 3  # type: ignore[index]
    p = tmp_path / "node.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(SourceError, match=r"node\.yaml.*index 3 .*gpus\[3\] and gpus\[5\]"):
        FileSource(p).read()


def test_file_not_yaml_or_missing(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text("gpus: [\n")
    with pytest.raises(SourceError, match="not valid JSON/YAML"):
        FileSource(p).read()
    with pytest.raises(SourceError, match="cannot read"):
        FileSource(tmp_path / "none.yaml").read()


def test_file_hostname_filled_in(tmp_path: Path) -> None:
    p = tmp_path / "f.yaml"
    p.write_text(yaml.safe_dump({"gpus": []}))
    assert open_source(f"file:{p}", hostname="me").read().hostname == "me"


def test_open_source_kinds(tmp_path: Path) -> None:
    assert isinstance(open_source("nvml", hostname="h"), NvmlSource)
    assert isinstance(open_source("gfd:/x", hostname="h"), GfdSource)
    assert isinstance(open_source("file:/x"), FileSource)
    src = open_source(f"topo:{TOPO}", hostname="h", product="P", memory_mib=10)
    assert isinstance(src, TopoSource) and src.spec == f"topo:{TOPO}"
    assert len(src.read().gpus) == 8


@pytest.mark.parametrize("spec", ["nvidia", "foo:/x", "nvml:x", "", "gfd"])
def test_unknown_spec(spec: str) -> None:
    with pytest.raises(SourceError, match="accepted kinds: nvml, gfd:PATH, file:PATH, topo:PATH"):
        open_source(spec)


def test_topo_needs_product_and_memory() -> None:
    with pytest.raises(SourceError, match="--product NAME --memory-mib N"):
        open_source(f"topo:{TOPO}")
    with pytest.raises(SourceError, match="--product NAME --memory-mib N"):
        open_source(f"topo:{TOPO}", product="P")
    with pytest.raises(SourceError, match="needs a path"):
        open_source("topo:")


def test_open_source_nvml_injected(tmp_path: Path) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    facts = open_source("nvml", hostname="hgx", nvml_module=b.nvml).read()
    assert facts.hostname == "hgx" and len(facts.gpus) == 8 and facts.source == "nvml"


def test_schema_doc_example_parses() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "facts-schema.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    from swarmgpu.core.model import NodeFacts

    facts = NodeFacts.from_dict(yaml.safe_load(block), where="docs example")
    assert len(facts.gpus) == 2 and facts.link(0, 1) == "NV18"
    assert facts.gpus[0].mig_devices[0].profile == "3g.40gb"


def test_facts_prints_hostile_names_escaped(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from swarmgpu.cli import main

    data = _facts_dict()
    data["node"]["hostname"] = "dgx\x1b[2K\r1"  # type: ignore[index]
    data["gpus"][0]["product"] = "A100\x1b]0;owned\x07\u202e"  # type: ignore[index]
    p = tmp_path / "facts.json"
    p.write_text(json.dumps(data))
    res = CliRunner().invoke(main, ["facts", "--source", f"file:{p}"])
    assert res.exit_code == 0, res.output
    assert not any(c in res.output for c in "\x1b\r\x07\u202e"), res.output
    assert r"host dgx\x1b[2K\r1 " in res.output, res.output
    assert r"A100\x1b]0;owned\x07\u202e" in res.output, res.output


def test_node_config_prints_a_hostile_hostname_escaped(tmp_path: Path) -> None:
    # The fragments' comment named the file's hostname raw: ESC [2J cleared the terminal
    # the operator copies daemon.json from.
    from click.testing import CliRunner

    from swarmgpu.cli import main

    data = _facts_dict()
    data["node"]["hostname"] = "dgx\x1b[2J\r\u202e1"  # type: ignore[index]
    p = tmp_path / "facts.json"
    p.write_text(json.dumps(data))
    res = CliRunner().invoke(main, ["node-config", "--source", f"file:{p}"])
    assert res.exit_code == 0, res.output
    assert not any(c in res.output for c in "\x1b\r\u202e"), res.output
    assert r"for dgx\x1b[2J\r\u202e1" in res.output, res.output
    assert '"node-generic-resources": [' in res.output  # the fragments as they were


@pytest.mark.parametrize(("option", "kw"), [
    ("--memory-mib", {"memory_mib": 2**53}),
    ("--memory-mib", {"memory_mib": MAX_GPU_MEMORY_MIB + 1}),
    ("--product", {"product": "P" * (MAX_STR_LEN + 1)}),
    ("--hostname", {"hostname": "h" * (MAX_STR_LEN + 1)}),
])
@pytest.mark.parametrize("kind", ["topo", "gfd"])
def test_an_option_the_daemon_would_refuse_is_refused_at_open(
        kind: str, option: str, kw: dict[str, object]) -> None:
    """Before: the facts were printed and served, and the daemon refused the node's whole
    facts, naming facts.gpus[0].memory_mib (or .product, node.hostname), not the option."""
    given: dict[str, object] = {"hostname": "h", "product": "P", "memory_mib": 10, **kw}
    with pytest.raises(SourceError, match=f"{option} .*(at most|below)"):
        open_source(f"{kind}:{TOPO}", **given)  # type: ignore[arg-type]


def test_options_at_the_daemons_bounds_are_served_and_accepted() -> None:
    src = open_source(f"topo:{TOPO}", hostname="h" * MAX_STR_LEN, product="P" * MAX_STR_LEN,
                      memory_mib=MAX_GPU_MEMORY_MIB)
    facts = NodeFacts.from_dict(src.read().to_dict())  # as the daemon reads them
    assert facts.gpus[0].memory_mib == MAX_GPU_MEMORY_MIB
