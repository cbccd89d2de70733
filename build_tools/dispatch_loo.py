"""`python -m build_tools.dispatch_loo [--table PATH] [--cls KEY] [--worst N] [--rows | --model-only]
[--held-out FILE ... [--any-rules]] [--set NAME=VALUE] [--changes]`:
how well dispatch's lookup predicts the fastest instance on (N, K) columns (or M rows) it has not seen,
judged on a measured tuning table. No GPU.

Leave-one-column-out: for each problem class and each (N, K) column of the table, the column is removed
and every one of its grid points is looked up in the rest (runtime/tuning.py `TuningTable.lookup`: nearest
columns, log-M bracketing, the cost model's scaling, runtime/model.py), choosing among the instances the
point measured. A point scores (fastest measured time) / (measured time of the pick): 1.0 is a perfect
pick. Reported per class: the geomean and minimum over all points, and the worst columns.
With --rows, leave-one-row-out instead: every grid M but each column's first and last is removed in
turn (all columns' points at that M) and its points are looked up between the neighbouring M rows: the
judge of the log-M bracketing and of the model's scaling in M (e.g. a swap-AB tile whose M spills into
a second tile between two grid rows). This is the
offline judge for changes to the lookup or the cost model (docs/DISPATCH.md); the GPU judge remains
`python -m build_tools.tune evaluate` on held-out shapes. `--set NAME=VALUE` scores with one of
runtime/model.py's constants changed (how its fitted constants were chosen, e.g. `--rows --set
L2_BYTES_PER_S=9e12`); the last line is the geomean of the class geomeans, the figure such a fit compares.

With --held-out, --set and --changes, the report is instead the held-out picks that the new constants
change, each scored with the constants as they are and as set, and how many got better and worse: a
geomean moved by a few ten-thousandths can hide as many picks lost as gained.

With --model-only, the picks are runtime/model.py's alone (`model.best` over the instances a point or
shape timed, on the GPU's SM count), what `select()` falls back to on a GPU or class the table lacks;
nothing is left out, since the model reads no measured time: the judge of the fallback on the GPU that
was measured.

With --held-out FILE..., the judge is measured shapes off the grid instead: every (class, shape) of an
evaluate JSON (`python -m build_tools.tune evaluate --json`, whose verdicts record every instance's time
since session 20; plain or `.gz`, as the repository keeps its draws in docs/evals/) or of a bench JSON
(`python -m build_tools.bench --json`, every instance timed with --top), looked up in the table's rows
for the GPU it was measured on and scored among the instances timed there. So a change to the lookup or
the model is judged on past GPU draws, picks that the draw's own run did not make included, before a GPU
confirms it. A draw timed under launch rules other than the runtime's (runtime/launcher.py `LAUNCH_RULES`)
is left out, and named, unless --any-rules: its 1x1 instances' times are not what they are now.
Where the draw timed cuBLAS (evaluate verdicts), each class's line is followed by issue 9's figure for
the table as it is: the picks' / cuBLAS's time at M >= 256 (geomean), beside the fastest instance's, so a
table change (new columns, re-timed rows) is judged on the goal itself, pooled over the draws given.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from build_tools import bench, tune
from build_tools.tune_evaluate import CUBLAS_GOAL_M
from runtime import model
from runtime.gpus import GpuId
from runtime.launcher import LAUNCH_RULES
from runtime.spec import GemmSpec
from runtime.tuning import PDL_SUFFIX, TuningTable, is_grouped_key, read_document, shipped_path


@dataclass(frozen=True)
class PointScore:
    m: int
    n: int
    k: int
    score: float  # fastest measured / measured time of the lookup's pick
    picked: str
    fastest: str
    # A held-out pick with a walk override that the draw did not time (it timed its own pick's walk only):
    # scored at its instance's default walk, which may be slower or faster than the walk would run.
    walk_untimed: bool = False


def column_scores(doc: dict, gpu_key: str, cls: str) -> list[PointScore]:
    """Every grid point of class `cls` scored with its own column left out of the table."""
    points = doc["gpus"][gpu_key]["classes"][cls]
    out = []
    for column in sorted({(p["n"], p["k"]) for p in points}):
        left_out = [p for p in points if (p["n"], p["k"]) == column]
        out += _scores(doc, gpu_key, cls, [p for p in points if (p["n"], p["k"]) != column], left_out)
    return out


def row_scores(doc: dict, gpu_key: str, cls: str) -> list[PointScore]:
    """Every grid point of class `cls` strictly inside its column's M range, scored with all of the class's
    points at its M left out of the table (the lookup then brackets it between the neighbouring rows)."""
    points = doc["gpus"][gpu_key]["classes"][cls]
    ends: dict[tuple[int, int], tuple[int, int]] = {}
    for p in points:
        lo, hi = ends.get((p["n"], p["k"]), (p["m"], p["m"]))
        ends[p["n"], p["k"]] = (min(lo, p["m"]), max(hi, p["m"]))
    out = []
    for m in sorted({p["m"] for p in points}):
        inner = [p for p in points if p["m"] == m and ends[p["n"], p["k"]][0] < m < ends[p["n"], p["k"]][1]]
        if inner:
            out += _scores(doc, gpu_key, cls, [p for p in points if p["m"] != m], inner)
    return out


def default_walk_times(point: dict) -> dict[str, float]:
    """Instance id -> µs of every instance a table point measured, at its default walk: the judge scores
    instances, a pick with a walk override (build_tools/tune_walks.py) as its instance, as the held-out
    draws time them."""
    return {t[0]: t[3] for t in point["times"] if t[1] is None and t[2] is None}


def _scores(doc: dict, gpu_key: str, cls: str, kept: list, left_out: list) -> list[PointScore]:
    """The `left_out` points of class `cls` looked up in a table of the `kept` ones and scored, each among
    the instances it measured."""
    table = TuningTable.from_json(dict(doc, gpus={gpu_key: {"classes": {cls: kept}}}))
    gpu = GpuId.from_key(gpu_key)
    out = []
    for p in left_out:
        times = default_walk_times(p)
        pick = table.lookup(gpu, cls, p["m"], p["n"], p["k"], 1, set(times))
        out.append(_score(p["m"], p["n"], p["k"], times, pick.instance_id if pick else None))
    return out


def model_scores(doc: dict, gpu_key: str, cls: str) -> list[PointScore]:
    """Every grid point of class `cls` scored by the cost model's pick among the instances it measured."""
    sms = GpuId.from_key(gpu_key).sm_count
    return [
        _model_score(p["m"], p["n"], p["k"], 1, default_walk_times(p), sms)
        for p in doc["gpus"][gpu_key]["classes"][cls]
    ]


def _model_score(m: int, n: int, k: int, batch: int, times: dict[str, float], sms: int) -> PointScore:
    """The cost model's pick (runtime/model.py `best`, as `select()` falls back to it) among the
    instances of `times`, scored by them."""
    _, spec, _ = model.best([GemmSpec.parse(i) for i in times], m, n, k, batch, sms)
    return _score(m, n, k, times, spec.id)


def _score(
    m: int, n: int, k: int, times: dict[str, float], picked: str | None, picked_us: float | None = None
) -> PointScore:
    """A pick's instance id (None: the lookup had none) scored by the times measured at the problem;
    `picked_us`: the pick's own time where it differs from its instance's (a walk override measured)."""
    fastest = min(times, key=times.get)
    picked = picked or fastest
    got = picked_us or times.get(picked, max(times.values()))
    return PointScore(m, n, k, times[fastest] / got, picked, fastest)


@dataclass(frozen=True)
class HeldOutCase:
    """One measured (class, shape) off the grid on one GPU: every instance's time there, µs."""

    gpu: str  # the table's key for the GPU it ran on (`GpuId.key`)
    cls: str
    m: int
    n: int
    k: int
    times: dict[str, float]
    pdl: bool = False  # timed in PDL chains (`evaluate --pdl`): looked up in the class's PDL rows
    batch: int = 1
    # (instance id, raster_along_m, group_size) -> µs of a pick with a walk override that the draw timed:
    # its own `select()` pick, through `gemm()` in the finalists' rounds (`times` holds every instance at
    # its default walk only). A lookup that picks the same instance and walk is scored by it.
    walk_times: dict[tuple[str, bool, int], float] = field(default_factory=dict)
    # cuBLAS's time for the shape on the draw's scale (evaluate verdicts since session 20; None for a
    # bench JSON): with it a pick's score becomes the issue-9 figure, pick / cuBLAS (`vs_cublas`).
    cublas_us: float | None = None

    @property
    def fastest_us(self) -> float:
        return min(self.times.values())


def vs_cublas(case: HeldOutCase, score: PointScore) -> float:
    """cuBLAS's time / the pick's time at the case (the pick's time: the fastest instance's over the
    pick's score), what `evaluate` reports as gemm() / cuBLAS for the pick the draw itself made."""
    return case.cublas_us * score.score / case.fastest_us


def held_out_cases(doc: dict) -> list[HeldOutCase]:
    """The cases of an evaluate JSON (its verdicts that record `times`) or a bench JSON (per result, each
    tuned class of its dtypes: build_tools/tune.py `TUNED`, times as `table_point` reads a grid point),
    on the GPU its ``env`` names."""
    gpu = GpuId(doc["env"]["gpu"], doc["env"]["sms"]).key

    def case(
        cls: str, shape: bench.Shape, times: dict[str, float], pdl: bool = False, walks=None, cublas=None
    ) -> HeldOutCase:
        return HeldOutCase(gpu, cls, shape.m, shape.n, shape.k, times, pdl, shape.batch, walks or {}, cublas)

    if "verdicts" in doc:
        pdl = bool(doc.get("pdl"))
        return [
            case(
                v["cls"],
                bench.Shape.parse(v["shape"]),
                v["times"],
                pdl,
                verdict_walk_times(v),
                v.get("cublas_us"),
            )
            for v in doc["verdicts"]
            if v.get("times")
        ]
    cases = []
    for r in doc.get("results", ()):
        combo = bench.Combo(r["a_dtype"], r["b_dtype"], r["d_dtype"])
        shape = bench.Shape.parse(r["shape"])
        for cls, series in tune.TUNED.get(combo, ()):
            point = tune.table_point(shape, [x for x in r["runners"] if x["series"] == series])
            if point["times"]:
                cases.append(case(cls, shape, default_walk_times(point)))
    return cases


def verdict_walk_times(verdict: dict) -> dict[tuple[str, bool, int], float]:
    """An evaluate verdict's pick with a walk override (recorded since session 42) and its time: `gemm()`
    ran it in the finalists' full rounds, on the scale of `times`."""
    walk = verdict.get("walk")
    if not walk:
        return {}
    return {(verdict["selected"], bool(walk[0]), int(walk[1])): verdict["gemm_us"]}


def held_out_draws(files: list[Path], any_rules: bool = False) -> tuple[list[HeldOutCase], list[Path]]:
    """(the `held_out_cases` of ``files`` in order, each an evaluate or bench JSON, plain or `.gz`; the
    files left out): a draw timed under launch rules other than
    the runtime's (runtime/launcher.py `LAUNCH_RULES`, as the draw's env records them: build_tools/bench.py
    `launch_rules`) is left out unless ``any_rules``. Its times rank the instances as those rules ran
    them: launched as 1x1 clusters, the 1x1 instances ran up to 2x slower at large M (docs/PERF.md,
    session 45), so such a draw scores a table timed under today's rules as if its 1x1 picks were
    mistakes."""
    cases: list[HeldOutCase] = []
    left_out: list[Path] = []
    for f in files:
        doc = tune.read_json(f)
        if any_rules or bench.launch_rules(doc.get("env", {})) == LAUNCH_RULES:
            cases += held_out_cases(doc)
        else:
            left_out.append(f)
    return cases, left_out


def _print_left_out(left_out: list[Path]) -> None:
    if left_out:
        names = ", ".join(f.name for f in left_out)
        why = "timed under other launch rules (--any-rules takes them)"
        print(f"({len(left_out)} draws left out, {why}: {names})")


def held_out_scores(
    doc: dict, cases: list[HeldOutCase], model_only: bool = False
) -> list[tuple[HeldOutCase, PointScore]]:
    """Each case looked up in the table `doc`'s rows for its GPU (its PDL rows for a PDL case where they
    reach its M, as `select(pdl=True)` reads them) among the instances it timed, and scored like a left-out
    grid point: a pick with a walk override by the draw's time for it where the draw picked the same
    instance and walk (`HeldOutCase.walk_times`), else at its instance's default walk. A case on a GPU the
    table lacks reads the rows `select()` would (`TuningTable.stand_in`: a measured GPU with its SM count),
    or is left out where there are none. model_only: the cost model's pick instead (every case, whatever
    GPU: the model needs only its SM count)."""
    table = TuningTable.from_json(doc)
    out = []
    for c in cases:
        if model_only:
            out.append((c, _model_score(c.m, c.n, c.k, c.batch, c.times, GpuId.from_key(c.gpu).sm_count)))
            continue
        gpu, pdl_key = GpuId.from_key(c.gpu), c.cls + PDL_SUFFIX
        if table.stand_in(gpu) is None:
            continue
        key = pdl_key if c.pdl and table.covers(gpu, pdl_key, c.m * c.batch) else c.cls
        pick = table.lookup(gpu, key, c.m, c.n, c.k, c.batch, set(c.times))
        picked = pick.instance_id if pick else None
        walk_us = c.walk_times.get((picked, pick.raster_along_m, pick.group_size)) if pick else None
        score = _score(c.m, c.n, c.k, c.times, picked, walk_us)
        if pick and (pick.raster_along_m, pick.group_size) != (None, None) and walk_us is None:
            score = replace(score, walk_untimed=True)
        out.append((c, score))
    return out


def report_held_out(
    doc: dict, files: list[Path], worst: int = 3, model_only: bool = False, any_rules: bool = False
) -> dict[str, float]:
    """Print one line per GPU and class over the cases of `files` timed under the runtime's launch rules
    (all with ``any_rules``: `held_out_draws`) and the `worst` of each; {"GPU class": geomean}.
    model_only: score the cost model's picks instead of the table's."""
    cases, left_out = held_out_draws(files, any_rules)
    _print_left_out(left_out)
    scored = held_out_scores(doc, cases, model_only)
    groups: dict[str, list[tuple[HeldOutCase, PointScore]]] = {}
    for c, s in scored:
        groups.setdefault(f"{c.gpu} {c.cls}{PDL_SUFFIX if c.pdl else ''}", []).append((c, s))
    out = {}
    for name, pairs in sorted(groups.items()):
        scores = [s for _, s in pairs]
        out[name] = g = geomean(s.score for s in scores)
        low = min(s.score for s in scores)
        print(f"{name}: {len(scores)} held-out shapes, geomean {g:.3f}, min {low:.3f}")
        big = [(c, s) for c, s in pairs if c.cublas_us and c.m * c.batch >= CUBLAS_GOAL_M]
        if big:
            picks = geomean(vs_cublas(c, s) for c, s in big)
            best = geomean(c.cublas_us / c.fastest_us for c, _ in big)
            print(
                f"    at M >= {CUBLAS_GOAL_M} ({len(big)} shapes): these picks / cuBLAS {picks:.3f}, "
                f"the fastest shipped instance / cuBLAS {best:.3f}"
            )
        untimed = sum(s.walk_untimed for s in scores)
        if untimed:
            print(f"    ({untimed} picks with a walk the draws did not time: scored at their default walk)")
        for s in sorted(scores, key=lambda s: s.score)[:worst]:
            walk = " (its walk untimed)" if s.walk_untimed else ""
            print(f"    {s.score:.3f} at {s.m}x{s.n}x{s.k}: picked {s.picked}{walk}, fastest {s.fastest}")
    if len(scored) < len(cases):
        print(f"({len(cases) - len(scored)} shapes left out: measured on a GPU the table does not hold)")
    return out


def held_out_changes(
    doc: dict, cases: list[HeldOutCase], overrides: list[tuple[str, float]], model_only: bool = False
) -> list[tuple[HeldOutCase, PointScore, PointScore]]:
    """The cases whose pick the model constants `overrides` change: (case, its score with the constants as
    they are, its score with the overrides), in the order of `cases`. What a fitted constant's new value
    does, pick by pick: a change of the geomean by +0.0002 can be 14 picks gained and 18 lost
    (docs/DISPATCH.md, session 39)."""
    before = held_out_scores(doc, cases, model_only)
    with model_constants(overrides):
        after = held_out_scores(doc, cases, model_only)
    return [(c, b, a) for (c, b), (_, a) in zip(before, after, strict=True) if a.picked != b.picked]


def report_changes(
    doc: dict,
    files: list[Path],
    overrides: list[tuple[str, float]],
    model_only: bool,
    any_rules: bool = False,
) -> int:
    """Print the held-out picks of `files` (those timed under the runtime's launch rules, all with
    ``any_rules``) that `overrides` change and a summary; the number changed."""
    cases, left_out = held_out_draws(files, any_rules)
    _print_left_out(left_out)
    changed = held_out_changes(doc, cases, overrides, model_only)
    for c, b, a in changed:
        print(
            f"{c.gpu} {c.cls}{PDL_SUFFIX if c.pdl else ''} {c.m}x{c.n}x{c.k}: {b.score:.3f} -> {a.score:.3f} "
            f"({b.picked} -> {a.picked})"
        )
    better = sum(a.score > b.score for _, b, a in changed)
    worse = sum(a.score < b.score for _, b, a in changed)
    setting = ", ".join(f"{name}={value:g}" for name, value in overrides)
    print(f"{setting}: {len(changed)} of {len(cases)} picks change, {better} better, {worse} worse", end="")
    if changed:
        print(
            f"; over the changed picks {geomean(b.score for _, b, _ in changed):.3f} -> "
            f"{geomean(a.score for _, _, a in changed):.3f}",
            end="",
        )
    print()
    return len(changed)


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def report(
    doc: dict, classes: list[str] | None = None, worst: int = 3, rows: bool = False, model_only: bool = False
) -> dict[str, float]:
    """Print one line per (GPU, class) and the `worst` points; returns {class: geomean score}. rows: leave
    one M row out instead of one (N, K) column; model_only: score the cost model's picks at every point."""
    out = {}
    for gpu_key, entry in sorted(doc["gpus"].items()):
        for cls in sorted(entry["classes"]):
            if (classes and cls not in classes) or is_grouped_key(cls):
                continue  # grouped points are MoE layers, looked up by group size alone: no grid to leave out
            judge = model_scores if model_only else row_scores if rows else column_scores
            scores = judge(doc, gpu_key, cls)
            out[cls] = g = geomean(s.score for s in scores)
            low = min(s.score for s in scores)
            print(f"{gpu_key} {cls}: {len(scores)} points, geomean {g:.3f}, min {low:.3f}")
            for s in sorted(scores, key=lambda s: s.score)[:worst]:
                print(f"    {s.score:.3f} at {s.m}x{s.n}x{s.k}: picked {s.picked}, fastest {s.fastest}")
    return out


def model_override(text: str) -> tuple[str, float]:
    """`NAME=VALUE` for --set: NAME must be a numeric constant of runtime/model.py (upper case)."""
    name, sep, value = text.partition("=")
    current = getattr(model, name, None) if name.isupper() else None
    if not sep or isinstance(current, bool) or not isinstance(current, int | float):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=VALUE with NAME a numeric constant of runtime/model.py "
            "(e.g. L2_BYTES_PER_S=9e12)"
        )
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None


@contextlib.contextmanager
def model_constants(overrides: list[tuple[str, float]]):
    """runtime/model.py's constants set to `overrides` inside the block, restored after it."""
    saved = {name: getattr(model, name) for name, _ in overrides}
    try:
        for name, value in overrides:
            setattr(model, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(model, name, value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m build_tools.dispatch_loo", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--table", type=Path, default=Path(shipped_path()), help="a tuning table (default: the shipped one)"
    )
    ap.add_argument("--cls", action="append", help="only this class key (repeatable)")
    ap.add_argument("--worst", type=int, default=3, help="worst points listed per class")
    judge = ap.add_mutually_exclusive_group()
    judge.add_argument("--rows", action="store_true", help="leave one M row out instead of one (N, K) column")
    judge.add_argument(
        "--model-only",
        action="store_true",
        help="score the cost model's picks alone (select()'s fallback where the table has no rows)",
    )
    ap.add_argument(
        "--held-out",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="judge on these evaluate or bench JSONs (measured shapes off the grid) instead of leaving out",
    )
    ap.add_argument(
        "--any-rules",
        action="store_true",
        help="with --held-out: judge on draws timed under other launch rules too (left out by default)",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        type=model_override,
        default=[],
        metavar="NAME=VALUE",
        help="score with a runtime/model.py constant changed (repeatable), e.g. L2_BYTES_PER_S=9e12: how "
        "the model's fitted constants were chosen",
    )
    ap.add_argument(
        "--changes",
        action="store_true",
        help="with --held-out and --set: list the picks the changed constants change, each scored both ways, "
        "and how many got better and worse",
    )
    args = ap.parse_args(argv)
    if args.changes and not (args.held_out and args.overrides):
        ap.error("--changes needs --held-out FILE... and at least one --set NAME=VALUE")
    doc = read_document(args.table)
    if args.changes:
        report_changes(doc, args.held_out, args.overrides, args.model_only, args.any_rules)
        return 0
    with model_constants(args.overrides):
        if args.held_out:
            scores = report_held_out(doc, args.held_out, args.worst, args.model_only, args.any_rules)
            if not scores:
                print(
                    "dispatch_loo: no shape in these files records every instance's time (evaluate JSONs do "
                    "since session 20; bench JSONs with --top) under the runtime's launch rules (--any-rules "
                    "takes draws timed under others)",
                    file=sys.stderr,
                )
                return 2
        else:
            scores = report(doc, args.cls, args.worst, args.rows, args.model_only)
    if scores:
        print(f"all {len(scores)} classes: geomean of the class geomeans {geomean(scores.values()):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
