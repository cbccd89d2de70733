"""The oracle harness on a tiny TMA kernel of our own: the launch the DSL's host code makes, recorded.

The kernel's host function builds one TMA load atom for a bf16 (m, k, l) K-major tensor and launches
with a grid derived from the runtime extents, a 2x1x1 cluster, PDL and explicit dynamic shared memory, so
every field of the launch record depends on something the test controls.
"""

from __future__ import annotations

import ctypes
import shutil
import struct

import pytest

pytestmark = [
    pytest.mark.compiler,
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc) to link the oracle"),
]

TILE = (64, 64)  # (rows of m, elements of k) per TMA box
CLUSTER = (2, 1, 1)
BLOCK = 128
SMEM = 4096


def _prepare_dsl():
    """Environment for an sm_90a CPU cross-compile; must happen before cutlass is first imported."""
    # tests/conftest.py configured the DSL for sm_90a cross-compilation before any import of cutlass.
    return pytest.importorskip("cutlass")


cutlass = _prepare_dsl()
import cuda.bindings.driver as cuda
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import cute
from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

from codegen.cubin_info import parse_cubin
from codegen.oracle import OracleError, build_oracle, cubin_from_object, fatbin_cubins, tensor_struct


class TmaProbe:
    """Prefetches one TMA descriptor; takes the raw tensor and a scalar too, so their bytes can be checked."""

    @cute.jit
    def __call__(self, a: cute.Tensor, n_iter: cutlass.Int32, stream: cuda.CUstream):
        layout = cutlass.tensor_utils.LayoutEnum.from_tensor(a)
        atom = cute.nvgpu.warpgroup.make_smem_layout_atom(
            sm90_utils.get_smem_layout_atom(layout, a.element_type, TILE[1]), a.element_type
        )
        smem_layout = cute.tile_to_shape(atom, TILE, order=(0, 1))
        tma_atom, tma_tensor = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), a, smem_layout, TILE
        )
        m, _k, l = a.shape
        clusters_m = (m + TILE[0] * CLUSTER[0] - 1) // (TILE[0] * CLUSTER[0])
        self.kernel(tma_atom, tma_tensor, a, n_iter).launch(
            grid=[clusters_m * CLUSTER[0], 1, l],
            block=[BLOCK, 1, 1],
            cluster=list(CLUSTER),
            smem=SMEM,
            use_pdl=True,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, tma_atom: cute.CopyAtom, coords: cute.Tensor, a: cute.Tensor, n_iter: cutlass.Int32):
        cute.nvgpu.cpasync.prefetch_descriptor(tma_atom)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    out = tmp_path_factory.mktemp("tma_probe")
    m, k, l = (cute.sym_int32() for _ in range(3))
    ld, batch = cute.sym_int64(divisibility=8), cute.sym_int64(divisibility=8)
    a = make_fake_tensor(cutlass.BFloat16, (m, k, l), (ld, 1, batch), assumed_align=16)
    compiled = cute.compile(TmaProbe(), a, cutlass.Int32(1), make_fake_stream())
    compiled.export_to_c(file_path=str(out), file_name="probe", function_prefix="probe")
    cubin = compiled.__cubin__
    if not isinstance(cubin, bytes):  # CUTE_DSL_KEEP was not in effect when cutlass was imported
        cubin = cubin_from_object((out / "probe.o").read_bytes())
    kernel = parse_cubin(cubin).kernel
    oracle = build_oracle(out / "probe.o", out, kernel=kernel)
    return oracle, kernel, cubin


def _call(oracle, ptr, m, k, l, ld, batch, n_iter=7, stream=0x5A5A0000):
    a = tensor_struct(ptr, (m, k, l), (ld, batch))  # shapes int32, strides int64 (sym_int64)
    return oracle.call([a, cutlass_int(n_iter), ctypes.c_void_p(stream)])


def cutlass_int(v: int) -> ctypes.c_int32:
    return ctypes.c_int32(v)


def test_load_records_library_kernel_and_attributes(probe):
    oracle, kernel, cubin = probe
    rec = oracle.load_record
    assert rec.kernel_name == kernel.name
    assert fatbin_cubins(rec.code_image) == [cubin], "the code image must be a fatbin holding this cubin"
    # MaxSharedMemoryPerBlockOptin (232448 in the default device table) minus the static shared memory.
    assert rec.set_attributes() == {
        "max_dynamic_shared_size_bytes": 232448 - kernel.static_smem_bytes,
        "non_portable_cluster_size_allowed": 1,
    }


def test_launch_geometry_and_attributes(probe):
    oracle, _, _ = probe
    r = _call(oracle, 0x7F0000001000, m=1000, k=512, l=3, ld=512, batch=1000 * 512, stream=0x1234)
    assert r.grid == (16, 1, 3)  # ceil(1000 / 128) clusters of 2 CTAs, one z-slice per batch
    assert r.block == (BLOCK, 1, 1)
    assert r.smem_bytes == SMEM
    assert r.stream == 0x1234
    assert r.attributes["cluster_dimension"] == CLUSTER
    assert r.attributes["programmatic_stream_serialization"] == 1
    r2 = _call(oracle, 0x7F0000001000, m=129, k=64, l=1, ld=64, batch=129 * 64)
    assert r2.grid == (4, 1, 1)


def test_argument_sizes_follow_kparam_info(probe):
    oracle, kernel, _ = probe
    r = _call(oracle, 0x7F0000001000, m=256, k=128, l=2, ld=128, batch=256 * 128)
    assert [len(a) for a in r.args] == [p.size for p in kernel.params]
    # tma descriptor, its coordinate tensor's (m, k, l), the raw tensor struct, the scalar
    assert [p.size for p in kernel.params] == [128, 12, 40, 4]
    assert kernel.params[0].offset % 64 == 0x30 % 64  # 64-aligned in absolute cbank address 0x210 + off
    assert (kernel.param_cbank_offset + kernel.params[0].offset) % 64 == 0


def test_controlled_arguments_land_at_expected_bytes(probe):
    oracle, _, _ = probe
    ptr, m, k, l, ld, batch = 0x7F12_3456_7880, 300, 192, 5, 200, 300 * 200 + 16
    r = _call(oracle, ptr, m, k, l, ld, batch, n_iter=-42)
    desc, coords, raw, n_iter = r.args
    assert struct.unpack_from("<Q", desc, 0)[0] == ptr  # 16-byte aligned: the address is stored as is
    assert coords == struct.pack("<3i", m, k, l)
    # {void *data; int32 shapes[3]; (4 pad) int64 strides[2]}: the padding bytes are not compared.
    assert struct.unpack_from("<Q3i", raw, 0) == (ptr, m, k, l)
    assert struct.unpack_from("<2q", raw, 24) == (ld, batch)
    assert n_iter == struct.pack("<i", -42)
    packed = r.packed([p.offset for p in probe[1].params], probe[1].param_bytes)
    assert packed[0x30:0x38] == struct.pack("<Q", ptr)


def test_host_code_error_is_raised(probe, tmp_path):
    oracle, kernel, _ = probe
    # A device that lacks the attribute the loader queries (MaxSharedMemoryPerBlockOptin): the host code
    # returns cudaErrorInvalidValue from the stub and the harness must raise, naming the call.
    with pytest.raises(
        OracleError, match=r"cuda_load_to_device returned cudaError 1 .*cudaDeviceGetAttribute"
    ):
        build_oracle(
            oracle.lib_path.with_name("probe.o"), tmp_path, kernel=kernel, device_attributes={97: None}
        )
