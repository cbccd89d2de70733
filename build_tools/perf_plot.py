"""`python -m build_tools.perf_plot BENCH.json OUT.png`: ours / cuBLAS per shape from a bench JSON, as a PNG.

One series per dtype comparison (e.g. bf16 -> bf16, fp16 -> fp16, e4m3 x e4m3 -> bf16 with promoted and
with fast accumulation), the shapes along x in the order they were run, with reference lines at 1.0
(parity) and 0.95 (the floor docs/PERF.md holds 8192^3 to). Shapes timed by CUDA-graph replay are marked
on the axis ("*").
`build_tools.bench --plot` calls `plot` directly. Needs matplotlib (not a dependency of anything shipped).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def series_points(doc: dict) -> tuple[list[str], dict[str, dict[str, float]], set[str]]:
    """(shapes in run order, {series label: {shape: ratio}}, shapes timed by graph replay)."""
    shapes: list[str] = []
    points: dict[str, dict[str, float]] = {}
    graph: set[str] = set()
    for res in doc["results"]:
        if res["shape"] not in shapes:
            shapes.append(res["shape"])
        if res.get("timing") == "graph":
            graph.add(res["shape"])
        for s in res["series"]:
            if s.get("ratio"):
                points.setdefault(s["label"], {})[res["shape"]] = s["ratio"]
    return shapes, points, graph


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes, points, graph = series_points(doc)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(shapes) + 3), 5.0))
    xs = range(len(shapes))
    markers = "osD^v<>p"
    for j, (label, by_shape) in enumerate(points.items()):
        x = [i for i, s in enumerate(shapes) if s in by_shape]
        ax.plot(
            x, [by_shape[shapes[i]] for i in x], marker=markers[j % len(markers)], linewidth=1.2, label=label
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.95, color="red", linewidth=0.8, linestyle="--", label="0.95 (floor)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([s + ("*" if s in graph else "") for s in shapes], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("ours / cuBLAS (TFLOP/s ratio)")
    env = doc.get("env", {})
    ax.set_title(
        f"hgemm-sm90 vs cuBLAS, {env.get('gpu', '?')} ({str(env.get('date', ''))[:10]}); "
        "* = timed by CUDA-graph replay",
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    doc = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    plot(doc, Path(argv[1]))
    print(f"plot: {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
