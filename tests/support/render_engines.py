"""Stack files and docker/cli's compose schema, for render's engine checks.

First written in tests/test_render_engines.py."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "swarmgpu" / "manager" / "commands" / "schema" / "config_schema_v3.8.json"
EXAMPLES = sorted((ROOT / "stacks" / "examples").rglob("*.yml"))
VALIDATOR = jsonschema.Draft4Validator(json.loads(SCHEMA.read_text()))

VERSIONLESS = """\
services:
  web:
    image: nginx:1.27
    deploy:
      replicas: 2
      labels:
        swarmgpu.gpus: "1"
"""
GPUS_ALL = """\
services:
  trainer:
    image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime
    command: ["sleep", "infinity"]
    gpus: all
"""
GPUS_2 = """\
version: "3.8"
services:
  llm:
    image: vllm/vllm-openai:v0.6.3
    gpus: 2
    deploy:
      labels:
        swarmgpu.topology: nvlink
"""
# The stacks of "what it must show": the examples, a versionless one, gpus all and 2.
STACKS = {p.stem: p.read_text() for p in EXAMPLES} | {
    "versionless": VERSIONLESS, "gpus-all": GPUS_ALL, "gpus-two": GPUS_2}


def schema_errors(doc: object) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in VALIDATOR.iter_errors(doc)]


# 506 bytes: nine levels of nine references, 9^9 (387 million) strings once expanded.
BOMB = ('services: &a ["lol0123456789","lol0123456789","lol0123456789","lol0123456789",'
        '"lol0123456789","lol0123456789","lol0123456789","lol0123456789","lol0123456789"]\n'
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
        "x-pad: 01234567890123456789012345678901234567890123456789012345678\n")
