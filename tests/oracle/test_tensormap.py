"""runtime.tensormap against the DSL: the Python encoding is byte-equal to the descriptor the DSL's own host
code builds (run on the CPU through the oracle), for many random pointers, extents and strides per
configuration (dtype x operand major x swizzle x load/store/multicast x rank).

Only the first 64 bytes are compared with the oracle: the DSL's host code writes those and leaves bytes
64-127 of its stack buffer uninitialized (measured: they hold stack garbage in the oracle); the Python
encoder writes zeros there, which is also checked.

The encoder-only tests at the top need neither the DSL nor a C compiler.
"""

import ctypes
import random
import shutil
import struct
from dataclasses import dataclass

import pytest

from codegen.tensormap_decode import decode
from runtime.errors import InvalidArgumentError
from runtime.spec import DType
from runtime.tensormap import TensorMapTemplate, make_template, patch_address


def encode_tiled(dtype, global_address, dims, strides_bytes, box, element_strides=None, **options) -> bytes:
    """The whole descriptor, with the meaning of cuTensorMapEncodeTiled's parameters."""
    return make_template(DType(dtype), dims, strides_bytes, box, element_strides, **options).with_address(
        global_address
    )


# ---------------------------------------------------------------------------------------------------------
# Encoder-only tests

# The A descriptor of the spike GEMM (/tmp/spike/ref.py: bf16 K-major, 128x64 k-tile, SW128), as the DSL's
# host code built it for M, N, K, L = 1000, 2040, 512, 3 and A at 0x7f0000000000 (first 64 bytes).
SPIKE_A = bytes.fromhex(
    "00000000007f0000226524004000000000fa0000000000000000000000000000"
    "ff010000e70300000200000000000000000000000000003f7f00000000000000"
)
# Its D (store) descriptor: 128x32 epilogue tile, SW64, D at 0x7f0001000000, ldd = 2040.
SPIKE_D_PREFIX = bytes.fromhex("00000001007f000022452400ff00000018e4030000000000")


def test_reproduces_measured_spike_descriptors():
    a = encode_tiled("bf16", 0x7F0000000000, (512, 1000, 3), (1024, 1024000), (64, 128, 1), swizzle="128B")
    assert a[:64] == SPIKE_A and a[64:] == bytes(64)
    d = encode_tiled("bf16", 0x7F0001000000, (2040, 1000, 3), (4080, 4080000), (32, 128, 1), swizzle="64B")
    assert d.startswith(SPIKE_D_PREFIX)


def test_decode_inverts_encode():
    args = {
        "dtype": "fp16",
        "dims": (4096, 77, 5, 3),
        "strides_bytes": (8192 + 16, (1 << 38) + 32, 1 << 39),
        "box": (64, 32, 1, 1),
        "swizzle": "128B",
    }
    desc = encode_tiled(global_address=0x1234_5678_9AB0, **args)
    got = decode(desc)
    assert got["global_address"] == 0x1234_5678_9AB0 and got["format_code"] == DType.fp16.tma_format
    assert got["rank"] == 4
    assert (got["dims"], got["strides_bytes"], got["box"], got["swizzle"]) == (
        args["dims"],
        args["strides_bytes"],
        args["box"],
        args["swizzle"],
    )
    assert got["span_flag"] and got["unknown_bits"] == {} and got["tail_zero"]


def test_template_patches_only_the_address():
    t = make_template(DType.bf16, (512, 1000, 3), (1024, 1024000), (64, 128, 1), swizzle="128B")
    assert isinstance(t, TensorMapTemplate) and t.image[:8] == bytes(8)
    buf = bytearray(b"\xee" * 400)
    buf[0x40:0xC0] = t.image
    patch_address(buf, 0x40, 0x7F0000000000)
    assert bytes(buf[0x40:0x80]) == SPIKE_A and buf[:0x40] == b"\xee" * 0x40 and buf[0xC0:] == b"\xee" * 0xD0
    patch_address(buf, 0x40, 0x7F00ABCDEF00)
    assert bytes(buf[0x48:0xC0]) == t.image[8:]
    assert bytes(buf[0x40:0xC0]) == t.with_address(0x7F00ABCDEF00)


def test_span_flag_threshold():
    # bit 21 of bytes 8-11: set iff dims[0]*elem + sum((dims[i]-1)*strides[i-1]) >= 128 KiB
    below = encode_tiled("bf16", 0, (65528, 1), (131072,), (64, 1), swizzle="128B")
    at = encode_tiled("bf16", 0, (65536, 1), (131072,), (64, 1), swizzle="128B")
    assert not decode(below)["span_flag"] and decode(at)["span_flag"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"global_address": 0x1008}, "not 16-byte aligned"),
        ({"global_address": 1 << 57}, "beyond 2\\*\\*57"),
        ({"strides_bytes": (1000, 1024000)}, "multiple of 16"),
        ({"strides_bytes": (1 << 40, 1 << 41)}, "below 2\\*\\*40"),
        ({"box": (64, 257, 1)}, "outside 1..256"),
        ({"box": (4, 128, 1)}, "not a multiple of 16"),
        ({"box": (128, 128, 1)}, "exceeds the 128B swizzle span"),
        ({"dims": (0, 1000, 3)}, "outside 1..2\\*\\*32"),
        ({"element_strides": (1, 2, 1)}, "element strides"),
        ({"l2_promotion": "256B"}, "l2_promotion='256B'"),
        ({"oob_fill": "nan_request_zero_fma"}, "oob_fill"),
        ({"interleave": "32B"}, "interleave"),
        ({"swizzle": "16B"}, "not a TMA swizzle mode"),
        ({"strides_bytes": (1024,)}, "needs 2 strides"),
    ],
)
def test_invalid_parameters_raise(kwargs, message):
    args = {
        "dtype": "bf16",
        "global_address": 0x7F0000000000,
        "dims": (512, 1000, 3),
        "strides_bytes": (1024, 1024000),
        "box": (64, 128, 1),
        "swizzle": "128B",
    }
    with pytest.raises(InvalidArgumentError, match=message):
        encode_tiled(**{**args, **kwargs})


# ---------------------------------------------------------------------------------------------------------
# Against the DSL, through the oracle


def _prepare_dsl():
    """Environment for an sm_90a CPU cross-compile (must precede the first `import cutlass`)."""
    # tests/conftest.py configured the DSL for sm_90a cross-compilation before any import of cutlass.
    try:
        import cutlass
    except ImportError:
        return None
    return cutlass


cutlass = _prepare_dsl()
requires_oracle = pytest.mark.skipif(
    cutlass is None or shutil.which("cc") is None,
    reason="needs nvidia-cutlass-dsl and a C compiler (cc) for the oracle",
)

if cutlass is not None:
    import cuda.bindings.driver as cuda
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass import cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    class TmaDescriptorProbe:
        """Builds one TMA atom for `a` and launches a kernel that only prefetches its descriptor.

        `tile` covers modes 0 and 1 of `a` (rows, cols); higher modes get box 1. The shared memory layout
        comes from get_smem_layout_atom (its swizzle follows the tile's contiguous width), or is a plain
        unswizzled layout when `plain`."""

        def __init__(self, tile, op: str, plain: bool, internal_type=None):
            self.tile, self.op, self.plain, self.internal_type = tile, op, plain, internal_type

        @cute.jit
        def __call__(self, a: cute.Tensor, stream: cuda.CUstream):
            if cutlass.const_expr(self.plain):  # unswizzled, mode 1 contiguous (K-major configs only)
                smem = cute.make_layout(self.tile, stride=(self.tile[1], 1) if len(self.tile) == 2 else (1,))
            else:
                layout = cutlass.tensor_utils.LayoutEnum.from_tensor(a)
                k_major = layout.sm90_mma_major_mode() == cute.nvgpu.OperandMajorMode.K
                major = self.tile[1] if k_major else self.tile[0]
                atom = cute.nvgpu.warpgroup.make_smem_layout_atom(
                    sm90_utils.get_smem_layout_atom(layout, a.element_type, major), a.element_type
                )
                smem = cute.tile_to_shape(atom, self.tile, order=(0, 1) if k_major else (1, 0))
            if cutlass.const_expr(self.op == "store"):
                tma_atom, tma_tensor = cute.nvgpu.cpasync.make_tiled_tma_atom(
                    cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
                    a,
                    smem,
                    self.tile,
                    internal_type=self.internal_type,
                )
            elif cutlass.const_expr(self.op == "multicast"):
                tma_atom, tma_tensor = cute.nvgpu.cpasync.make_tiled_tma_atom(
                    cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp(), a, smem, self.tile, num_multicast=2
                )
            else:
                tma_atom, tma_tensor = cute.nvgpu.cpasync.make_tiled_tma_atom(
                    cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(),
                    a,
                    smem,
                    self.tile,
                    internal_type=self.internal_type,
                )
            self.kernel(tma_atom, tma_tensor).launch(grid=[1, 1, 1], block=[128, 1, 1], stream=stream)

        @cute.kernel
        def kernel(self, tma_atom: cute.CopyAtom, coords: cute.Tensor):
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom)


@dataclass(frozen=True)
class Config:
    name: str
    dsl_dtype: str  # attribute of `cutlass`
    dtype: str  # a runtime.spec.DType
    major: str  # "k": mode 1 is contiguous (stride 1); "mn": mode 0 is
    tile: tuple  # (rows, cols) for modes 0 and 1, or (n,) for rank 1
    swizzle: str  # what the DSL is expected to pick
    box01: tuple  # the expected TMA box of the first (contiguous) and second descriptor dims
    op: str = "load"
    rank: int = 3
    plain: bool = False
    internal_type: str | None = None

    @property
    def elem_bytes(self) -> int:
        return DType(self.dtype).bytes


CONFIGS = [
    Config("bf16_k_sw128", "BFloat16", "bf16", "k", (128, 64), "128B", (64, 128)),
    Config("bf16_k_sw64", "BFloat16", "bf16", "k", (64, 32), "64B", (32, 64)),
    Config("bf16_k_sw32", "BFloat16", "bf16", "k", (64, 16), "32B", (16, 64)),
    Config("bf16_k_interleaved_atom", "BFloat16", "bf16", "k", (64, 8), "none", (8, 64)),
    Config("bf16_k_wide_tile", "BFloat16", "bf16", "k", (64, 128), "128B", (64, 64)),  # 2 boxes per tile
    Config("bf16_mn_sw128", "BFloat16", "bf16", "mn", (64, 64), "128B", (64, 64)),
    Config("bf16_mn_wide_tile", "BFloat16", "bf16", "mn", (128, 64), "128B", (64, 64)),
    Config("bf16_k_multicast2", "BFloat16", "bf16", "k", (128, 64), "128B", (64, 64), op="multicast"),
    Config("fp16_k_sw128_store", "Float16", "fp16", "k", (128, 64), "128B", (64, 128), op="store"),
    Config("fp16_mn_sw64_store", "Float16", "fp16", "mn", (32, 64), "64B", (32, 64), op="store"),
    Config("fp32_k_sw128", "Float32", "fp32", "k", (64, 32), "128B", (32, 64)),
    Config("fp32_mn_sw32_store", "Float32", "fp32", "mn", (8, 32), "32B", (8, 32), op="store"),
    Config("e4m3_k_sw128", "Float8E4M3FN", "e4m3", "k", (128, 128), "128B", (128, 128)),
    Config("e5m2_k_sw64", "Float8E5M2", "e5m2", "k", (64, 64), "64B", (64, 64)),
    Config("bf16_k_plain", "BFloat16", "bf16", "k", (16, 32), "none", (32, 16), plain=True),
    Config("bf16_rank1_plain", "BFloat16", "bf16", "k", (256,), "none", (256,), rank=1, plain=True),
    Config("bf16_rank2", "BFloat16", "bf16", "k", (128, 64), "128B", (64, 128), rank=2),
    Config("bf16_rank4", "BFloat16", "bf16", "k", (128, 64), "128B", (64, 128), rank=4),
    Config("fp16_rank5_mn", "Float16", "fp16", "mn", (64, 64), "128B", (64, 64), rank=5),
]
CASES_PER_CONFIG = 60


@pytest.fixture(scope="module")
def oracles(tmp_path_factory):
    from codegen.cubin_info import parse_cubin
    from codegen.oracle import build_oracle, cubin_from_object

    built = {}

    def get(cfg: Config):
        if cfg.name not in built:
            out = tmp_path_factory.mktemp(cfg.name)
            dt = getattr(cutlass, cfg.dsl_dtype)
            shape = tuple(cute.sym_int32() for _ in range(cfg.rank))
            div = 16 // cfg.elem_bytes
            if cfg.rank == 1:
                stride = (1,)
            else:
                s = [cute.sym_int64(divisibility=div) for _ in range(cfg.rank - 1)]
                stride = (s[0], 1, *s[1:]) if cfg.major == "k" else (1, *s)
            a = make_fake_tensor(dt, shape, stride, assumed_align=16)
            internal = getattr(cutlass, cfg.internal_type) if cfg.internal_type else None
            probe = TmaDescriptorProbe(cfg.tile, cfg.op, cfg.plain, internal)
            compiled = cute.compile(probe, a, make_fake_stream())
            compiled.export_to_c(file_path=str(out), file_name="probe", function_prefix="probe")
            cubin = compiled.__cubin__
            if not isinstance(cubin, bytes):
                cubin = cubin_from_object((out / "probe.o").read_bytes())
            kernel = parse_cubin(cubin).kernel
            assert kernel.params[0].size == 128
            built[cfg.name] = build_oracle(out / "probe.o", out, kernel=kernel)
        return built[cfg.name]

    return get


def _random_case(rng: random.Random, cfg: Config):
    """(address, shape per tensor mode, stride per tensor mode in elements), byte strides below 2**40."""
    while True:
        case = _draw_case(rng, cfg)
        if all(s * cfg.elem_bytes < 1 << 40 for s in case[2]):
            return case


def _draw_case(rng: random.Random, cfg: Config):
    eb, align = cfg.elem_bytes, max(1, 16 // cfg.elem_bytes)
    address = rng.randrange(1 << 12, 1 << 52) * 16
    shape = [rng.choice([1, 2, 3, rng.randrange(1, 300), rng.randrange(1, 70000)]) for _ in range(2)]
    shape += [rng.randrange(1, 40) for _ in range(cfg.rank - 2)]
    shape = shape[: cfg.rank]
    order = _order(cfg)
    stride = [0] * cfg.rank
    stride[order[0]] = 1
    extent = shape[order[0]]
    for mode in order[1:]:
        pad = rng.choice([0, 0, rng.randrange(0, 64), rng.randrange(0, 1 << 20)])
        if rng.random() < 0.1:  # exercise bits 36-39 of byte strides
            pad += rng.randrange(1 << 36, 1 << 39) // eb
        stride[mode] = -(-(extent + pad) // align) * align
        extent = stride[mode] * shape[mode]
    return address, shape, stride


def _boundary_cases(cfg: Config):
    """Extents around the 128 KiB span threshold of dword-2 bit 21."""
    eb, align = cfg.elem_bytes, max(1, 16 // cfg.elem_bytes)
    cases = []
    for delta in (-16, 0, 16):
        contiguous = (131072 + delta) // eb
        shape = [1] * cfg.rank
        shape[_order(cfg)[0]] = contiguous
        stride = [1] * cfg.rank
        for mode in _order(cfg)[1:]:
            stride[mode] = -(-contiguous // align) * align
        cases.append((0x7F0000000000, shape, stride))
    return cases


def _order(cfg: Config):
    """Tensor modes in descriptor-dimension order: the contiguous mode first."""
    if cfg.rank == 1:
        return [0]
    first = [1, 0] if cfg.major == "k" else [0, 1]
    return first + list(range(2, cfg.rank))


def _expected(cfg: Config, address, shape, stride) -> bytes:
    order = _order(cfg)
    box = cfg.box01 + (1,) * (cfg.rank - len(cfg.box01))
    return encode_tiled(
        cfg.dtype,
        address,
        tuple(shape[m] for m in order),
        tuple(stride[m] * cfg.elem_bytes for m in order[1:]),
        box,
        swizzle=cfg.swizzle,
    )


@pytest.mark.compiler
@requires_oracle
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_encoding_matches_dsl(cfg, oracles):
    oracle = oracles(cfg)
    rng = random.Random(f"tensormap-{cfg.name}")
    cases = [_random_case(rng, cfg) for _ in range(CASES_PER_CONFIG)] + _boundary_cases(cfg)
    flags = set()
    for address, shape, stride in cases:
        order = _order(cfg)
        dynamic_strides = [stride[m] for m in range(cfg.rank) if m != order[0]]
        arg = _tensor_arg(address, shape, dynamic_strides)
        record = oracle.call([arg, ctypes.c_void_p(0)])
        got = record.args[0][:64]
        want = _expected(cfg, address, shape, stride)
        assert got == want[:64], (
            f"{cfg.name} address=0x{address:x} shape={shape} stride={stride}\n"
            f" dsl    {got.hex(' ', 4)}\n python {want[:64].hex(' ', 4)}\n dsl decoded: {decode(got)}"
        )
        assert want[64:] == bytes(64)
        flags.add(decode(got)["span_flag"])
    assert flags == {True, False}, "the cases must cover both sides of the span threshold"


def _tensor_arg(address, shape, strides):
    from codegen.oracle import tensor_struct

    return tensor_struct(address, shape, strides)  # int32 shapes, int64 strides (sym_int64)


@pytest.mark.compiler
@requires_oracle
@pytest.mark.parametrize(
    "cfg", [c for c in CONFIGS if c.name in ("bf16_k_sw128", "fp16_rank5_mn")], ids=lambda c: c.name
)
def test_coordinate_tensor_carries_the_extents(cfg, oracles):
    """The parameter after each descriptor is the TMA coordinate tensor's shape: the int32 extents of the
    tensor in its own mode order (not descriptor order)."""
    address, shape, stride = _random_case(random.Random(7), cfg)
    order = _order(cfg)
    record = oracles(cfg).call(
        [
            _tensor_arg(address, shape, [stride[m] for m in range(cfg.rank) if m != order[0]]),
            ctypes.c_void_p(0),
        ]
    )
    assert record.args[1] == struct.pack(f"<{cfg.rank}i", *shape)
