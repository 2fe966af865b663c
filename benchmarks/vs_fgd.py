"""swarmgpu against FGD on every workload we have: one command for the tables in
docs/simulate.md ("Against FGD on every workload").

    .venv/bin/python benchmarks/vs_fgd.py --out /tmp/vsfgd                  # place only
    .venv/bin/python benchmarks/vs_fgd.py --out /tmp/vsfgd-m2 --moves 2 --seeds 42-43
    .venv/bin/python benchmarks/vs_fgd.py --out /tmp/vsfgd --only default,x-sharebig
    .venv/bin/python benchmarks/vs_fgd.py --out /tmp/vsfgd-x --extra --moves 2 --seeds 45

The workloads: the five bundled openb traces; `swarmgpu simulate-derive`'s variants
(its twelve defaults, gpushare20, gpuspec33 and cpu200, derivation seed 42), four
made with derivation seed 7 (`<name>s7`: the same rules, other draws) and five heavier
ones with seed 11 (`cpu350s11`, `cpu500s11`, `gpushare90s11`, `gpuspec45s11`,
`multigpu60s11`); our own rules that
`simulate-derive` does not make (`benchmarks/derive_own.py`, the `x-*` ones). With
--extra, stop 56's set instead: nine levels none of those use (derivation seed 101,
`<name>s101`) and derive_own's CPU-bimodal spreads (`b-*`). Each is
replayed by the command users run, `swarmgpu simulate ... --policy swarmgpu,fgd --bound
off --json` (with `--rebalance-moves M` for --moves), and its JSON kept under --out: a
rerun skips the workloads whose JSON is there, so a long run can be stopped and taken
up again. Then one row per workload: GPU allocation % at 100% and 130% arrived, mean over
the seeds, the difference, and the least difference of one seed; last, every workload
whose mean, or one of whose seeds, is below FGD. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks")]

import derive_own  # noqa: E402

from swarmgpu.sim.traces import NAMES, OPENB  # noqa: E402
from swarmgpu.sim.variants import DEFAULT_VARIANTS, read_rows, write_rows  # noqa: E402

# the command users run, from the environment this runs in
SWARMGPU = [str(Path(sys.executable).with_name("swarmgpu"))]
DERIVED = (*DEFAULT_VARIANTS, "gpushare20", "gpuspec33", "cpu200")
HELD_OUT = ("gpuspec35", "gpushare70", "cpu200", "cpu250")  # derivation seed 7
# derivation seed 11: heavier than any above (cpu350 and cpu500 ask more CPU than the
# cluster has; multigpu60 puts 60% of the GPU request in multi-GPU pods)
HEAVIER = ("cpu350", "cpu500", "gpushare90", "gpuspec45", "multigpu60")
# --extra (stop 56): levels no table above uses, derivation seed 101, for a sweep with
# moves on seeds no rule was measured on; with derive_own's CPU-bimodal spreads (b-*)
FRESH = ("gpushare55", "gpushare75", "multigpu35", "multigpu45", "gpuspec15", "gpuspec25",
         "cpu075", "cpu175", "cpu300")


def workloads(out: Path, extra: bool = False) -> dict[str, list[str]]:
    """Each workload's name and its trace options for `swarmgpu simulate`, the derived
    pod lists written under ``out`` first (once: an existing file is kept). ``extra``:
    stop 56's set (``FRESH`` and the b-* spreads) instead."""
    got: dict[str, list[str]] = {} if extra else {w: ["--trace", w] for w in NAMES}
    var = out / "variants"

    def derive(names: tuple[str, ...], seed: int, suffix: str) -> None:
        todo = [n for n in names if not (var / f"openb_pod_list_{n}{suffix}.csv").exists()]
        if todo:
            tmp = out / f"derive-{seed}"
            subprocess.run([*SWARMGPU, "simulate-derive", "--out", str(tmp), "--seed", str(seed),
                            *(a for n in todo for a in ("--variant", n))],
                           check=True, stdout=subprocess.DEVNULL)
            var.mkdir(parents=True, exist_ok=True)
            for n in todo:
                (tmp / f"openb_pod_list_{n}.csv").replace(var / f"openb_pod_list_{n}{suffix}.csv")
            shutil.rmtree(tmp)
        for n in names:
            got[n + suffix] = ["--pods", str(var / f"openb_pod_list_{n}{suffix}.csv")]

    header, rows = read_rows(OPENB / "openb_pod_list_default.csv")
    own = derive_own.workloads
    if extra:
        derive(FRESH, 101, "s101")
        own = derive_own.bimodal_spreads
    else:
        derive(DERIVED, 42, "")
        derive(HELD_OUT, 7, "s7")
        derive(HEAVIER, 11, "s11")
    for name, new in own(rows).items():
        path = var / f"openb_pod_list_{name}.csv"
        if not path.exists():
            write_rows(path, header, new)
        got[name] = ["--pods", str(path)]
    return got


def replay(out: Path, name: str, trace: list[str], seeds: str, moves: float) -> dict[str, Any]:
    path = out / f"{name}.json"
    if not path.exists():
        cmd = [*SWARMGPU, "simulate", *trace, "--policy", "swarmgpu,fgd", "--seeds", seeds,
               "--bound", "off", "--json", "--no-progress"]
        if moves:
            cmd += ["--rebalance-moves", f"{moves:g}"]
        print(f"{name}: swarmgpu {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        path.with_suffix(".part").write_text(done.stdout)
        path.with_suffix(".part").replace(path)  # whole or absent: a rerun takes it up
    got: dict[str, Any] = json.loads(path.read_text())["policies"]
    return got


def row(name: str, pol: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The table's row and what in it is below FGD."""
    s, f = pol["swarmgpu"], pol["fgd"]
    cells, below = [name, ",".join(map(str, s["seeds"]))], []
    for level in ("100", "130"):
        a, b = s["alloc_pct_at"][level], f["alloc_pct_at"][level]
        worst = min((s["by_seed"][k]["alloc_pct_at"][level]
                     - f["by_seed"][k]["alloc_pct_at"][level], k) for k in s["by_seed"])
        cells += [f"{a:.2f}", f"{b:.2f}", f"{a - b:+.2f}", f"{worst[0]:+.2f} ({worst[1]})"]
        if a < b:
            below.append(f"{name} mean @{level}%: {a:.2f} < {b:.2f}")
        if worst[0] < 0:
            below.append(f"{name} seed {worst[1]} @{level}%: {worst[0]:+.2f}")
    cells.append(f"{s.get('moves', 0):g} / {f.get('moves', 0):g}")
    return cells, below


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for pod lists and JSON")
    ap.add_argument("--seeds", default="42-43", help="as `swarmgpu simulate --seeds`")
    ap.add_argument("--moves", type=float, default=0.0, help="--rebalance-moves (per 100)")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--extra", action="store_true",
                    help="stop 56's set: seed-101 derivations and CPU-bimodal spreads")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    every = workloads(args.out, args.extra)
    names = [n for n in args.only.split(",") if n] or list(every)
    unknown = sorted(set(names) - set(every))
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(every)}")
    head = ["workload", "seeds", "swarmgpu @100%", "fgd", "diff", "worst seed",
            "swarmgpu @130%", "fgd", "diff", "worst seed", "moves (swarmgpu / fgd)"]
    rows, below = [], []
    for n in names:
        cells, low = row(n, replay(args.out, n, every[n], args.seeds, args.moves))
        rows.append(cells)
        below += low
    print(f"swarmgpu against fgd, seeds {args.seeds}, {args.moves:g} moves per 100 pods")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    print("below fgd: " + ("; ".join(below) if below else "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
