"""`python -m build_tools.grouped_table RESULTS.json [...] [--table PATH] [--gpu-key KEY]`: write the grouped
(varlen M) points of the tuning table from `python -m build_tools.bench_moe --json` runs. No GPU.

bench_moe times every shipped grouped instance of a class on whole mixture-of-experts layers (one launch
over all the layer's groups; with --gather, every gathering instance too). Each (layer, dtype class)
becomes one point of that class's key (e.g. ``bf16_bf16_bf16_kkn_varlenm``, or ``..._varlenm_gathera``):
``m`` is the layer's average rows per group (rounded up, as `select_grouped` computes it), ``n`` and ``k``
one group's, ``times`` every instance the run timed that the default profile ships (kernel_specs.yaml; a
trial build's extra instances are dropped, so regen's check of the table still holds), and ``kernels``
the stamp of the cubins and launch rules they were timed with (runtime/tuning.py `kernels_digest`), where
the runs recorded them (bench_moe does since session 45) and agree. The classes the
runs measured replace that GPU's points of those classes, and their record in ``measured["grouped"]``;
every other class and GPU is kept. `select_grouped` reads them (runtime/tuning.py
`TuningTable.lookup_grouped`).

The GPU key is the runs' own (bench_moe records ``gpu_key``, name/SM count, as the tuner keys its table);
--gpu-key gives it for runs that did not record it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def shipped_ids(spec_file: Path = REPO / "kernel_specs.yaml") -> set[str]:
    """The instance ids the default profile (the wheel) ships."""
    from codegen.matrix import load_matrix

    return {s.id for s in load_matrix(spec_file).expand("default").specs}


def points_of(results: list[dict], shipped: set[str]) -> dict[str, list[dict]]:
    """Class key -> table points (runtime/tuning.py `Point` JSON) from bench_moe's results (forward runs,
    and --gather runs, which time every gathering instance too); a layer timed by several runs is one
    point, at the geometric mean of each instance's times."""
    from build_tools.tune import geomean
    from runtime.dispatch import ProblemClass
    from runtime.spec import GemmSpec

    # Repeated runs of one layer (say two rounds of the same command) make one point, each instance at the
    # geometric mean of its times: a layer listed twice would weigh twice in `lookup_grouped`.
    timings: dict[tuple[str, int, int, int], dict[str, list[float]]] = {}
    # Per layer, what its results were timed with: (launch rules, instance id, cubin sha256) triples, with
    # None for a result that recorded none (bench_moe before session 45).
    provenance: dict[tuple[str, int, int, int], set] = {}
    for r in results:
        timed = {iid: us for iid, us in r.get("us", {}).items() if iid in shipped and us > 0}
        if not timed or "experts" not in r:
            continue  # e.g. a weight-gradient run: no per-layer timing of the class's instances
        keys = {ProblemClass.of(GemmSpec.parse(iid)).key for iid in timed}
        if len(keys) != 1:
            raise SystemExit(f"grouped_table: {r['problem']} times several classes: {sorted(keys)}")
        layer_key = (keys.pop(), math.ceil(r["rows"] / r["experts"]), r["n"], r["k"])
        layer = timings.setdefault(layer_key, {})
        for iid, us in timed.items():
            layer.setdefault(iid, []).append(us)
        cubins, rules = r.get("cubins") or {}, r.get("launch_rules")
        provenance.setdefault(layer_key, set()).update(
            (rules, iid, cubins.get(iid)) if rules and cubins.get(iid) else None for iid in timed
        )
    out: dict[str, list[dict]] = {}
    for layer_key, per_instance in timings.items():
        key, m, n, k = layer_key
        times = sorted(((iid, geomean(v)) for iid, v in per_instance.items()), key=lambda item: item[1])
        stamp = _stamp(provenance[layer_key])
        out.setdefault(key, []).append(
            {
                "m": m,
                "n": n,
                "k": k,
                "cublas_us": None,
                "finalists": len(times),
                **({"kernels": stamp} if stamp else {}),
                "times": [[iid, None, None, round(us, 3)] for iid, us in times],
            }
        )
    return out


def _stamp(provenance: set) -> str | None:
    """A layer's `kernels_digest` from its results' (rules, instance id, cubin sha256) triples; None where
    one of them recorded none, or the results disagree (two launch rules, or two cubins of an instance):
    such a point cannot say what it was timed with, and `doctor` counts it as such."""
    from runtime.tuning import kernels_digest

    if None in provenance:
        return None
    rules = {r for r, _, _ in provenance}
    hashes = {iid: sha for _, iid, sha in provenance}
    if len(rules) != 1 or len(hashes) != len(provenance):
        return None
    return kernels_digest(hashes.keys(), hashes, rules.pop())


def merge(table: dict, gpu_key: str, classes: dict[str, list[dict]], measured: dict) -> dict:
    """``table`` with ``gpu_key``'s points of ``classes`` replaced (the GPU added if new), and each of
    those classes' run record (``measured["grouped"][class key]``) set to ``measured``."""
    entry = table.setdefault("gpus", {}).setdefault(gpu_key, {"measured": {}, "classes": {}})
    records = entry.setdefault("measured", {}).setdefault("grouped", {})
    for key, points in classes.items():  # new classes go last: a rewrite moves no other class in the file
        # Ordered as TuningTable.to_json writes them, so that the file round-trips.
        entry["classes"][key] = sorted(points, key=lambda p: (p["n"], p["k"], p["m"]))
        records[key] = measured
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m build_tools.grouped_table", description=__doc__.split("\n")[0]
    )
    ap.add_argument("results", nargs="+", type=Path, help="bench_moe --json files (forward or --gather runs)")
    ap.add_argument("--table", type=Path, default=REPO / "runtime" / "tuning.json")
    ap.add_argument("--gpu-key", default=None, help="e.g. 'NVIDIA H200/132' (default: the runs' own)")
    args = ap.parse_args(argv)
    from runtime.tuning import read_document, write_document

    runs = [json.loads(p.read_text(encoding="utf-8")) for p in args.results]
    keys = {args.gpu_key or run.get("gpu_key") for run in runs}
    if None in keys or len(keys) != 1:
        raise SystemExit(f"grouped_table: the runs name GPU keys {sorted(map(str, keys))}; pass --gpu-key")
    classes = points_of([r for run in runs for r in run["results"]], shipped_ids())
    if not classes:
        raise SystemExit("grouped_table: no bench_moe results with instance times in these files")
    measured = {
        "date": max(run.get("date", "") for run in runs),
        "command": "python -m build_tools.bench_moe (" + ", ".join(p.name for p in args.results) + ")",
        "torch": sorted({run.get("torch", "") for run in runs}),
    }
    table = merge(read_document(args.table), keys.pop(), classes, measured)
    write_document(args.table, table)
    for key, pts in sorted(classes.items()):
        sizes = sorted(p["m"] for p in pts)
        print(f"{key}: {len(pts)} points, groups of {sizes[0]}-{sizes[-1]} rows on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
