"""`python -m build_tools.regen`: rewrite every committed file derived from kernel_specs.yaml, or inspect it.

Why: generated files that live in git (today docs/INSTANCES.md) drift the moment someone edits the spec and
forgets to regenerate. `--check` (run in CI) fails with a unified diff when that happens. Writes happen
only when content changes and are byte-stable, so rerunning is a no-op.

Modes (one at a time):
  (none)          rewrite the derived files that changed
  --check         exit 1 and print a unified diff if any derived file is stale
  --list          print the instance ids of --profile (default: default), filtered by --kernels globs
  --explain ID    print one instance's spec, rule-by-rule validity, accumulator registers, SmemPlan and
                  built launch contract; exit 1 (saying why) if no profile ships ID

The first two also report, on stderr, what each group drops (`drop_report`): per group, a line per reason
(a codegen.validity rule or an exclude entry) with a count and an example id; with -v every dropped id
with its reason. A group or profile that yields no instance, and a group in no profile, get a warning.
A group listed twice in one profile is an error (codegen.matrix).

Exit codes: 0 ok; 1 stale files (--check), an id no profile ships (--explain) or an unreadable manifest;
2 bad arguments or an invalid kernel_specs.yaml.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

from codegen.matrix import Drop, Expansion, GroupExpansion, Matrix, MatrixError, load_matrix
from codegen.validity import (
    RULES,
    SMEM_CAPACITY_BYTES,
    ab_budget_bytes,
    ab_stage_bytes,
    bookkeeping_bytes,
    c_smem_bytes,
    check_rules,
    epi_smem_bytes,
    epilogue_tile,
    register_plan,
    smem_plan,
)
from runtime.errors import CorruptArtifactError
from runtime.spec import GemmSpec, SpecError

REPO_ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = REPO_ROOT / "codegen" / "templates"
DEFAULT_MANIFEST = Path("build/kernels/manifest.json")  # relative to --root


@dataclass(frozen=True)
class RegenArgs:
    """Field names are argparse's `dest`s: `RegenArgs(**vars(ns))` keeps them in sync."""

    spec: Path
    root: Path | None
    check: bool
    list: bool
    explain: str | None
    profile: str | None
    kernels: list[str] | None
    manifest: Path | None
    verbose: bool

    @property
    def out_root(self) -> Path:
        return self.root if self.root is not None else self.spec.resolve().parent


# --- derived files -------------------------------------------------------------------------------------


def derived_files(matrix: Matrix) -> dict[Path, str]:
    """Every committed file generated from the matrix: path relative to the repo root -> exact content.

    Add new generated files here (and only here); `--check` and the writer pick them up automatically.
    """
    return {Path("docs/INSTANCES.md"): render_instances_md(matrix)}


def render_instances_md(matrix: Matrix) -> str:
    profiles = []
    for pname in matrix.profile_names:
        exp = matrix.expand(pname, allow_empty=True)  # an empty profile is a warning (drop_report)
        prof = matrix.profiles[pname]
        by_reason: dict[str, list[str]] = {}
        for spec, reason in exp.dropped:
            by_reason.setdefault(reason, []).append(spec.name())
        # One table per group (in the profile's order), each instance under the first group that ships it:
        # one 250-row table is unreadable, and the groups are the matrix's own structure.
        by_group: dict[str, list[dict[str, str]]] = {g: [] for g in prof.groups}
        for s in exp.specs:
            by_group[exp.group_of[s.name()]].append(_row(s))
        profiles.append(
            {
                "name": pname,
                "n": len(exp.specs),
                "group_names": list(prof.groups),
                "groups": [{"name": g, "rows": rows} for g, rows in by_group.items() if rows],
                "kernels": [f"`{k}`" for k in prof.kernels],
                "dropped": sorted(by_reason.items()),
                "n_dropped": len(exp.dropped),
            }
        )
    source = matrix.source.name if matrix.source is not None else "kernel_specs.yaml"
    text = _jinja().get_template("instances.md.j2").render(source=source, profiles=profiles)
    return text.rstrip("\n") + "\n"


def _row(s: GemmSpec) -> dict[str, str]:
    plan = smem_plan(s.kernel_spec())
    # 16-bit inputs always accumulate exactly in fp32; the fast/promoted choice is fp8's.
    accum = ("fast" if s.fp8_fast_accum else "promoted") if s.a_dtype.is_float8 else "fp32"
    return {
        "id": s.name(),
        "a": str(s.a_dtype),
        "b": str(s.b_dtype),
        "d": str(s.d_dtype),
        "majors": f"{s.a_major} {s.b_major} {s.d_major}",
        "c": f"{s.c_dtype} {s.c_major}" if s.has_c else "–",
        "accum": accum,
        "tile": "×".join(map(str, s.tile)),
        "cluster": "×".join(map(str, s.cluster)),
        "schedule": f"{s.schedule}, swap-AB" if s.swap_ab else str(s.schedule),
        "stages": f"{plan.ab_stages}, {plan.epi_stages}, {plan.c_stages}",
    }


def _jinja() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def tuning_table_strays(matrix: Matrix, root: Path) -> list[str]:
    """Instance ids the shipped tuning table (runtime/tuning.json) names but the default profile, what the
    wheel ships, does not: dispatch would skip them silently, so the table is stale."""
    path = root / "runtime" / "tuning.json"
    if not path.exists():
        return []
    from runtime import tuning  # only here: the rest of regen never reads the table

    shipped = set(matrix.expand("default").names())
    return sorted(tuning.load(str(path)).instance_ids() - shipped)


def regen(matrix: Matrix, root: Path, check: bool) -> list[Path]:
    """Write (or with `check`, diff) the derived files under `root`. Returns the stale paths (relative)."""
    stale = []
    for rel, new in derived_files(matrix).items():
        path = root / rel
        old = path.read_bytes().decode("utf-8") if path.exists() else ""
        if old == new:
            continue
        stale.append(rel)
        if check:
            diff = difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
            )
            sys.stdout.writelines(diff)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(new.encode("utf-8"))
            os.replace(tmp, path)  # atomic: a reader never sees half a file
            print(f"wrote {rel}")
    return stale


# --- what the expansion drops ------------------------------------------------------------------------


def drop_report(matrix: Matrix, verbose: bool = False) -> tuple[list[str], list[str]]:
    """What each group drops, and the warnings: (report lines, warning lines), deterministic.

    Groups in file order; per group the reasons in codegen.validity's rule order, then exclude entries in
    file order, each with its count and its first id (or, `verbose`, every dropped id, sorted, with its
    reason). The reasons are the ones the expansion recorded (codegen.matrix.Drop), not re-derived here.
    """
    groups = {g: matrix.expand_group(g) for g in matrix.groups}
    lines = [
        f"dropped combinations by group ({_source(matrix)}; reasons from codegen/validity.py rules and "
        f"exclude entries{'' if verbose else '; -v lists every id'}):"
    ]
    for g in groups.values():
        lines += _group_drop_lines(g, verbose)

    warnings = []
    for g in groups.values():
        if not g.specs:
            warnings.append(
                f"warning: group {g.name} yields no instance: all {g.n_combinations} combination(s) are "
                "dropped"
            )
    used = {g for prof in matrix.profiles.values() for g in prof.groups}
    for g in groups:
        if g not in used:
            warnings.append(f"warning: group {g} is in no profile: nothing ships its instances")
    for pname, prof in matrix.profiles.items():
        if not matrix.expand(pname, allow_empty=True).specs:
            warnings.append(f"warning: profile {pname} yields no instance (groups: {', '.join(prof.groups)})")
    return lines, warnings


def _group_drop_lines(g: GroupExpansion, verbose: bool) -> list[str]:
    head = f"  {g.name}: {g.n_combinations} combination(s), {len(g.specs)} kept, {len(g.dropped)} dropped"
    if not g.dropped:
        return [head]
    if verbose:
        return [head] + [f"    {d.spec.name()}: {_drop_text(d)}" for d in g.dropped]  # sorted by id
    by_rule: dict[str, list[Drop]] = {}
    for d in g.dropped:
        by_rule.setdefault(d.rule, []).append(d)
    order = {name: i for i, (name, _) in enumerate(RULES)}
    lines = [head]
    # validity rules in their order, then exclude entries in file order (groups.g.exclude[i], by i)
    for rule in sorted(by_rule, key=lambda r: (order.get(r, len(order)), _exclude_index(r))):
        drops = by_rule[rule]
        first = drops[0]  # the smallest id: g.dropped is sorted
        if first.excluded:
            lines.append(f"    {first.reason}: {len(drops)}, e.g. {first.spec.name()}")
        else:
            lines.append(f"    rule {rule}: {len(drops)}, e.g. {first.spec.name()}: {first.reason}")
    return lines


def _drop_text(d: Drop) -> str:
    return d.reason if d.excluded else f"rule {d.rule}: {d.reason}"


def _exclude_index(rule: str) -> int:
    return int(rule.rsplit("[", 1)[1].rstrip("]")) if rule.endswith("]") else -1


# --- --explain -----------------------------------------------------------------------------------------


def explain(matrix: Matrix, instance_id: str, manifest: Path | None, manifest_given: bool) -> int:
    expansions = {p: matrix.expand(p, allow_empty=True) for p in matrix.profile_names}
    groups = [matrix.expand_group(g) for g in matrix.groups]
    known = sorted({s.name() for g in groups for s in _all_specs(g)})
    try:
        spec = GemmSpec.parse(instance_id)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        _suggest(instance_id, known)
        return 1

    out = [f"instance {instance_id}"]
    shipped_in = [p for p, e in expansions.items() if spec in e.specs]
    out.append(f"  shipped in profiles: {', '.join(shipped_in) or '(none)'}")
    for p, e in expansions.items():
        for s, reason in e.dropped:
            if s == spec:
                out.append(f"  dropped from profile {p}: {reason}")
    verdicts = _group_verdicts(matrix, expansions, groups, spec)
    out += [f"  group {g}: {verdict}" for g, verdict in verdicts]
    out.append("spec:")
    out += [
        f"  {k}: {json.dumps(v) if v is None or isinstance(v, bool) else v}"
        for k, v in spec.to_json().items()
    ]
    out.append("validity rules (codegen/validity.py, in order):")
    out += [
        f"  {'pass' if r is None else 'FAIL'}  {name}{'' if r is None else ': ' + r}"
        for name, r in check_rules(spec)
    ]
    out += _register_lines(spec)
    out += _smem_lines(spec)
    print("\n".join(out))

    if not shipped_in:
        why = "; ".join(f"group {g}: {v}" for g, v in verdicts) or "no group's product contains it"
        print(f"\nerror: {instance_id} is not in any profile of {_source(matrix)}: {why}", file=sys.stderr)
        if not verdicts:
            _suggest(instance_id, known)
        return 1
    return _print_manifest_record(instance_id, manifest, manifest_given)


def _group_verdicts(
    matrix: Matrix, expansions: dict[str, Expansion], groups: list[GroupExpansion], spec: GemmSpec
) -> list[tuple[str, str]]:
    """(group, what it does with `spec`) for each group whose product contains it, in file order."""
    verdicts = []
    for g in groups:
        drop = next((d for d in g.dropped if d.spec == spec), None)
        if drop is not None:
            verdicts.append((g.name, f"dropped: {_drop_text(drop)}"))
        elif spec in g.specs:
            profiles = [p for p, prof in matrix.profiles.items() if g.name in prof.groups]
            filtered = [p for p in profiles if spec not in expansions[p].specs]
            if not profiles:
                verdicts.append((g.name, "kept, but the group is in no profile"))
            elif filtered:
                verdicts.append((g.name, f"kept; left out by the kernels: list of {', '.join(filtered)}"))
            else:
                verdicts.append((g.name, "kept"))
    return verdicts


def _all_specs(g: GroupExpansion) -> list[GemmSpec]:
    return g.specs + [d.spec for d in g.dropped]


def _register_lines(spec: GemmSpec) -> list[str]:
    spec = spec.kernel_spec()  # a swap-AB instance's kernel is its transposed problem's
    plan = register_plan(spec)
    split = (
        f"registers: {plan.consumer_wgs} consumer warpgroup(s) x {plan.consumer_regs} per thread, producer "
        f"{plan.producer_regs} (setmaxnreg)"
    )
    line = f"accumulator: {plan.acc_regs} fp32 registers per consumer thread"
    if plan.k_acc_buffers:
        line += f" + {plan.k_acc_buffers} k-tile buffer(s) (fp8 promoted accumulation) = {plan.acc_total}"
    return [split, f"{line} (limit {plan.acc_limit}; codegen.validity.acc_registers)"]


def _smem_lines(spec: GemmSpec) -> list[str]:
    spec = spec.kernel_spec()
    m, n, k = spec.tile
    em, en = epilogue_tile(spec)
    plan = smem_plan(spec)
    stage, epi_bytes, c_bytes = ab_stage_bytes(spec), epi_smem_bytes(spec), c_smem_bytes(spec)
    c_term = f" - {c_bytes} (C)" if spec.has_c else ""
    c_line = (
        f"  C epilogue: {em}x{en} {spec.c_dtype} tile x {plan.c_stages} stages = {c_bytes} B"
        if spec.has_c
        else "  C epilogue: none (no C operand)"
    )
    kept = "barriers" if spec.k_split == "none" else "barriers, split-K arrival word"
    budget = (
        f"  A/B budget: {SMEM_CAPACITY_BYTES} - {bookkeeping_bytes(spec)} ({kept}) - {epi_bytes} (D)"
        f"{c_term} = {ab_budget_bytes(spec)} B"
    )
    result = (
        f"  -> SmemPlan(ab_stages={plan.ab_stages}, epi_stages={plan.epi_stages}, c_stages={plan.c_stages})"
        f"; A/B ring {plan.ab_stages * stage} B"
    )
    return [
        "shared memory plan (codegen.validity.smem_plan, imported by the kernel):",
        f"  A/B stage: {m}x{k} {spec.a_dtype} + {n}x{k} {spec.b_dtype} = {stage} B",
        f"  D epilogue: {em}x{en} {spec.d_dtype} tile x {plan.epi_stages} stages = {epi_bytes} B",
        c_line,
        budget,
        result,
    ]


def _print_manifest_record(instance_id: str, manifest: Path | None, manifest_given: bool) -> int:
    if manifest is None or not manifest.exists():
        if manifest_given:
            print(f"error: no manifest at {manifest}", file=sys.stderr)
            return 1
        print(
            f"launch contract: no built manifest at {DEFAULT_MANIFEST}; build it with "
            f"`python -m codegen.build --kernels {instance_id}` (any profile that ships the instance) or "
            "pass --manifest PATH"
        )
        return 0
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        record = data["instances"].get(instance_id)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"error: cannot read manifest {manifest}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if record is None:
        print(
            f"launch contract: {manifest} (profile {data.get('profile', '?')}) "
            f"has no record for {instance_id}"
        )
        return 0
    print(f"launch contract ({manifest}):")
    print(json.dumps(record, indent=2, sort_keys=True))
    return 0


def _suggest(instance_id: str, known: list[str]) -> None:
    close = difflib.get_close_matches(instance_id, known, n=5, cutoff=0.6)
    if close:
        print("closest known ids:", file=sys.stderr)
        for c in close:
            print(f"  {c}", file=sys.stderr)


def _source(matrix: Matrix) -> str:
    return matrix.source.name if matrix.source is not None else "the spec"


# --- command line --------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m build_tools.regen",
        description="Regenerate (or check, list, explain) what derives from kernel_specs.yaml.",
    )
    p.add_argument("--spec", type=Path, default=REPO_ROOT / "kernel_specs.yaml", help="the matrix file")
    p.add_argument(
        "--root", type=Path, default=None, help="where derived files live (default: the spec's folder)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff if a derived file is stale")
    mode.add_argument("--list", action="store_true", help="print the instance ids of --profile")
    mode.add_argument("--explain", metavar="ID", help="explain one instance id")
    p.add_argument("--profile", default=None, help="profile for --list (default: default)")
    p.add_argument("--kernels", nargs="+", metavar="GLOB", help="id globs filtering --list")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every dropped combination with its reason (default: a summary per group and reason)",
    )
    p.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help=f"built manifest for --explain (default: {DEFAULT_MANIFEST})",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = RegenArgs(**vars(parser.parse_args(argv)))
    if (args.profile is not None or args.kernels) and not args.list:
        parser.error(
            "--profile and --kernels select what --list prints; derived files always cover every profile"
        )
    if args.manifest is not None and args.explain is None:
        parser.error("--manifest is only read by --explain")
    if args.verbose and (args.list or args.explain is not None):
        parser.error("-v/--verbose lists dropped combinations in a regen or --check run")
    try:
        matrix = load_matrix(args.spec)
        if args.list:
            exp = matrix.expand(args.profile or "default", only_globs=args.kernels or ())
            print("\n".join(exp.names()))
            return 0
        if args.explain is not None:
            given = args.manifest is not None
            manifest = args.manifest if given else args.out_root / DEFAULT_MANIFEST
            return explain(matrix, args.explain, manifest, given)
        report, warnings = drop_report(matrix, verbose=args.verbose)
        print("\n".join(report + warnings), file=sys.stderr)
        stale = regen(matrix, args.out_root, check=args.check)
        unshipped = tuning_table_strays(matrix, args.out_root)
    except (MatrixError, SpecError, OSError, CorruptArtifactError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if unshipped:
        print(
            f"error: runtime/tuning.json names {len(unshipped)} instance(s) the default profile no longer "
            f"ships ({', '.join(unshipped[:3])}{', ...' if len(unshipped) > 3 else ''}); re-run "
            "python -m build_tools.tune on a GPU (docs/DISPATCH.md) or restore the instances",
            file=sys.stderr,
        )
        return 1
    if args.check and stale:
        print(
            f"error: stale derived file(s): {', '.join(map(str, stale))}; run python -m build_tools.regen",
            file=sys.stderr,
        )
        return 1
    if not stale:
        print("derived files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
