"""The runtime's launch arguments, byte for byte against the DSL's own host code, for the `ci` profile.

For each `ci` instance and 50 random problems (extents, padded leading dimensions and batch strides,
pointers — C's too where the epilogue reads it —, alpha and beta, raster order, group size, number of
resident clusters), the DSL host code is run on the CPU against the stub CUDA runtime (codegen/oracle.py)
and its launch is compared with what `hgemm_sm90` builds from the manifest alone: every parameter's bytes
(TMA descriptors: their 64 meaningful bytes; the DSL leaves the rest uninitialized; float32 scalars byte
for byte, so both sides must round alike), the grid (manifest grid rule), block, cluster and shared memory.
"""

from __future__ import annotations

import random

import pytest

from codegen.contract import host_args
from codegen.oracle import build_oracle
from codegen.tensormap_decode import decode
from runtime import manifest as manifest_mod
from runtime import problem, scheduling, tensormap
from runtime.args import ParamPacker

pytestmark = pytest.mark.compiler
CASES = 50


def _random_problem(rng: random.Random, rec) -> dict:
    ops = problem.layouts(rec.spec)
    extents = {x: rng.choice([rng.randint(1, 64), rng.randint(1, 5000)]) for x in "mnk"}
    extents["ma"] = rng.choice([1, rng.randint(1, 64), rng.randint(1, 5000)])  # rows of a gathered A
    for op in ops:  # an extent some operand stores contiguously must be a 16-byte multiple (TMA)
        align = 16 // op.elem
        extents[op.contiguous] = -(-extents[op.contiguous] // align) * align
    m, n, k = extents["m"], extents["n"], extents["k"]
    batch = rng.choice([1, 1, 2, 3, 7])
    lds, batch_strides, ptrs = [], [], []
    for op in ops:  # a, b, d, then c if the instance reads it
        align = 16 // op.elem
        contiguous = extents[op.contiguous]
        ld = contiguous + align * rng.choice([0, 0, 1, rng.randint(0, 100)])
        lds.append(None if ld == contiguous and rng.random() < 0.5 else ld)
        packed = extents[op.other] * ld
        batch_strides.append(rng.choice([None, packed + align * rng.randint(0, 1000)]))
        ptrs.append(rng.randrange(0x10_0000_0000, 0x7FFF_0000_0000) // 16 * 16)

    def scale():  # float32-rounding cases too: the two sides must round alike
        return rng.choice([rng.uniform(-8, 8), rng.uniform(-1e-3, 1e-3), 0.0, -0.0, 1.0, 3.0e38, 0.1])

    return dict(
        ptrs=tuple(ptrs),
        m=m,
        n=n,
        k=k,
        batch=batch,
        lds=tuple(lds),
        batch_strides=tuple(batch_strides),
        alpha=scale(),
        beta=scale(),
        raster_along_m=rng.randint(0, 1),
        group_size=rng.randint(1, 16),
        prefetch_operand=rng.randint(0, 2),  # the plain walk's kernels (contract 6)
        max_active_clusters=rng.randint(1, 200),
        # Split-K instances: any count the runtime accepts (1 .. k-tiles), and a workspace address.
        k_splits=rng.randint(1, scheduling.k_tiles(k, rec.spec.tile[2])),
        workspace=rng.randrange(0x10_0000_0000, 0x7FFF_0000_0000) // 16 * 16,
        # Grouped instances: any group count, and a 4-byte aligned address of the row offsets.
        groups=rng.choice([1, 2, 8, 256, rng.randint(1, 5000)]),
        cu_seqlens_m=rng.randrange(0x10_0000_0000, 0x7FFF_0000_0000) // 4 * 4,
        # Gathering instances: the rows of the A given, and a 4-byte aligned address of the indices.
        a_rows=extents["ma"],
        a_idx=rng.randrange(0x10_0000_0000, 0x7FFF_0000_0000) // 4 * 4,
    )


@pytest.fixture(scope="module")
def kernels(ci_build, tmp_path_factory):
    specs, entries, out = ci_build
    man = manifest_mod.load(str(out / "manifest.json"))
    result = []
    for spec in specs:
        entry = entries[spec.name()]
        rec = man.record(spec.name())
        from codegen.cubin_info import parse_cubin

        kinfo = parse_cubin(entry.cubin.read_bytes()).kernel
        oracle = build_oracle(
            entry.host_object,
            tmp_path_factory.mktemp(spec.name()[:40]),
            header_path=entry.host_header,
            kernel=kinfo,
        )
        oracle.set_arg_sizes([p.size for p in sorted(kinfo.params, key=lambda p: p.ordinal)])
        result.append((spec, rec, oracle))
    return result


def test_ci_profile_has_every_kernel_parameter_explained(kernels):
    for spec, rec, _ in kernels:
        kinds = [p.kind for p in rec.params]
        # A grouped instance's D (and a gathered A in a 1x1 cluster, copied with cp.async) is a plain tensor
        # parameter, not a descriptor; a gathering pair's A is a descriptor of one-row boxes.
        copied_a = spec.gather_a and tuple(spec.cluster) == (1, 1)
        plain = ({"d"} if spec.varlen_m else set()) | ({"a"} if copied_a else set())
        if spec.gather_a and not copied_a:
            a_map = next(p.tensormap for p in rec.params if p.kind == "tensormap" and p.operand == "a")
            assert a_map.box == (128 * 8 // spec.a_dtype.bits, 1, 1) and a_map.dims[:2] == ("k", "ma"), a_map
            assert a_map.swizzle == "128B", a_map
        described = [op for op in spec.launch_operands if op not in plain]
        assert [p.operand for p in rec.params if p.kind == "tensormap"] == described, kinds
        assert {p.operand for p in rec.params if p.kind == "tensor"} == plain
        split = spec.k_split == "split"
        plain_walk = spec.varlen == "none"  # its kernel may load B early (contract 6: prefetch_operand)
        i32 = {
            "raster_along_m",
            "group_size",
            *(("k_splits",) if split else ()),
            *(("prefetch_operand",) if plain_walk else ()),
        }
        assert {p.name for p in rec.params if p.kind == "i32"} == i32
        # Split-K and stream-K take a workspace (stream-K without a split count).
        pointers = {"workspace"} if spec.k_split != "none" else {"cu_seqlens_m"} if spec.varlen_m else set()
        pointers |= {"cu_seqlens_k"} if spec.varlen_k else set()
        pointers |= {"a_idx"} if spec.gather_a else set()
        assert {p.name for p in rec.params if p.kind == "pointer"} == pointers
        assert {p.name for p in rec.params if p.kind == "f32"} == (
            {"alpha", "beta"} if spec.has_c else {"alpha"}
        )
        assert set(kinds) <= {"tensormap", "tensor", "shape", "i32", "f32", "pointer", "opaque"}
    assert any(spec.k_split == "split" for spec, _, _ in kernels), "the ci profile lacks a split-K instance"
    assert any(spec.varlen_m for spec, _, _ in kernels), "the ci profile lacks a grouped instance"
    assert any(spec.gather_a for spec, _, _ in kernels), "the ci profile lacks a gathering instance"
    assert any(spec.varlen_k for spec, _, _ in kernels), "the ci profile lacks a grouped-K instance"
    assert any(spec.varlen_m and spec.has_c for spec, _, _ in kernels), "no grouped instance with C"
    assert any(spec.varlen_k and spec.has_c for spec, _, _ in kernels), "no grouped-K instance with C"
    assert any(spec.varlen_k and spec.gather_a for spec, _, _ in kernels), "no grouped-K gathering instance"


@pytest.mark.parametrize("case_seed", [0])
def test_runtime_bytes_equal_the_dsl_host_code(kernels, case_seed):
    for spec, rec, oracle in kernels:
        rng = random.Random(f"{spec.name()}-{case_seed}")
        packer = ParamPacker(rec)
        ops = problem.layouts(rec.spec)
        for case in range(CASES):
            pr = _random_problem(rng, rec)
            groups = pr["groups"] if spec.varlen != "none" else None
            a_rows = pr["a_rows"] if spec.gather_a else None
            if spec.varlen != "none":
                pr["batch"] = 1
            values = problem.resolve(
                rec.id,
                ops,
                pr["m"],
                pr["n"],
                pr["k"],
                pr["batch"],
                pr["lds"],
                pr["batch_strides"],
                groups,
                a_rows,
            )
            values.update(zip([op.name for op in ops], pr["ptrs"]))
            for name in ("alpha", "beta", "raster_along_m", "group_size"):
                values[name] = pr[name]
            if spec.k_split == "split":
                values["k_splits"], values["workspace"] = pr["k_splits"], pr["workspace"]
            if spec.k_split == "stream":
                values["workspace"] = pr["workspace"]
            if spec.varlen == "none":
                values["prefetch_operand"] = pr["prefetch_operand"]
            if spec.varlen_m:
                values["cu_seqlens_m"] = pr["cu_seqlens_m"]
            if spec.varlen_k:
                values["cu_seqlens_k"] = pr["cu_seqlens_m"]
            if spec.gather_a:
                values["a_idx"] = pr["a_idx"]
            # The DSL's host entry: tensor structs (data, extents, the two non-unit strides), scalars, stream.
            want = oracle.call(
                host_args(
                    spec, {**values, "max_active_clusters": pr["max_active_clusters"], "stream": 0xABC0}
                )
            )

            ours = packer.pack(values)
            where = f"{spec.name()} case {case}: {pr}"
            assert len(want.args) == len(rec.params), where
            for index, (p, theirs) in enumerate(zip(rec.params, want.args)):
                mine = bytes(ours[p.offset : p.offset + p.size])
                if p.kind == "tensormap":
                    n = tensormap.MEANINGFUL_BYTES
                    assert mine[:n] == theirs[:n], (
                        f"{where}: descriptor {p.operand} differs:\n"
                        f"ours   {decode(mine)}\ntheirs {decode(theirs)}"
                    )
                elif p.kind == "tensor":  # the padding before the 8-byte aligned strides is not compared
                    extents_at, strides_at, _ = p.tensor_layout()
                    meaningful = extents_at + 4 * len(p.dims)
                    assert (mine[:meaningful], mine[strides_at:]) == (
                        theirs[:meaningful],
                        theirs[strides_at:],
                    ), f"{where}: tensor {p.operand} differs: {mine.hex()} != {theirs.hex()}"
                elif p.kind != "opaque":
                    assert mine == theirs, (
                        f"{where}: parameter {index} ({p.kind}) {mine.hex()} != {theirs.hex()}"
                    )
            _, _, total = scheduling.cluster_tiles(
                values["m"], values["n"], values["l"], *spec.problem_tile, *spec.problem_cluster
            )
            total *= values.get("k_splits", 1)
            if spec.k_split == "stream":  # up to STREAM_UNITS_PER_TILE clusters per tile
                total = scheduling.stream_work_units(total, scheduling.k_tiles(values["k"], spec.tile[2]))
            if spec.varlen_m:
                total = scheduling.grouped_cluster_tiles(
                    values["m"], values["n"], values["g"], *spec.problem_tile, *spec.problem_cluster
                )
            if spec.varlen_k:
                total = scheduling.cluster_tiles(
                    values["m"], values["n"], values["g"], *spec.problem_tile, *spec.problem_cluster
                )[2]
            grid = scheduling.persistent_grid(total, pr["max_active_clusters"], *rec.cluster[:2])
            assert want.grid == grid, where
            assert want.block == rec.block, where
            assert want.smem_bytes == rec.smem_bytes, where
            assert want.attributes["cluster_dimension"] == rec.cluster, where
