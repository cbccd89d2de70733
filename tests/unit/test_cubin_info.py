"""codegen.cubin_info: on a cubin the DSL compiles during the test, and on hand-built ELF images.

The DSL kernel is defined inside its fixture (no `from __future__ import annotations` here: the DSL
evaluates the annotations) so that the hand-built-image tests run without the DSL installed.
The hand-built images pin the record framing and the KPARAM_INFO bit packing independently of the DSL,
and exercise the error paths (not an ELF, not 64-bit, not CUDA, unknown record format, truncation).
"""

import struct
import sys
from pathlib import Path

import pytest

from codegen.cubin_info import EIATTR, CubinFormatError, parse_cubin

# ---------------------------------------------------------------------------------------------------------
# A minimal cubin writer: just the sections the parser reads.


def _rec_sval(attr: int, payload: bytes) -> bytes:
    return struct.pack("<BBH", 4, attr, len(payload)) + payload


def _rec_inline(fmt: int, attr: int, value: int) -> bytes:
    return struct.pack("<BBH", fmt, attr, value)


def _kparam(ordinal: int, offset: int, size: int) -> bytes:
    # cbank 0x1f in bits 12-16, size in bits 18-31 (what ptxas writes for constant-bank parameters)
    return _rec_sval(
        EIATTR["KPARAM_INFO"], struct.pack("<IHHI", 0, ordinal, offset, (size << 18) | (0x1F << 12))
    )


def make_cubin(
    kernel="k",
    info=b"",
    global_info=None,
    e_flags=0x005A0D5A,
    abi=7,
    machine=190,
    ei_class=2,
    smem=0,
    text_info=1,
) -> bytes:
    """An ELF64 with .shstrtab, .strtab, .symtab (one global FUNC), .nv.info, .nv.info.<k>, .text.<k> and
    optionally .nv.shared.<k>."""
    if global_info is None:
        global_info = _rec_sval(EIATTR["REGCOUNT"], struct.pack("<II", 1, 40))
    names = [
        b"",
        b".shstrtab",
        b".strtab",
        b".symtab",
        b".nv.info",
        b".nv.info." + kernel.encode(),
        b".text." + kernel.encode(),
    ] + ([b".nv.shared." + kernel.encode()] if smem else [])
    shstr = b"\0".join(names) + b"\0"
    name_off = [shstr.index(n + b"\0") if n else 0 for n in names]
    strtab = b"\0" + kernel.encode() + b"\0"
    symtab = bytes(24) + struct.pack("<IBBHQQ", 1, (1 << 4) | 2, 0x10, 6, 0, 16)  # GLOBAL FUNC in .text
    text = bytes(16)
    blobs = [b"", shstr, strtab, symtab, global_info, info, text] + ([b""] if smem else [])
    types = [0, 3, 3, 2, 0x70000000, 0x70000000, 1] + ([8] if smem else [])
    body, offsets = bytearray(), []
    for b in blobs:
        offsets.append(64 + len(body))
        body += b
    shoff = 64 + len(body)
    shdrs = b""
    for i, b in enumerate(blobs):
        link = 2 if types[i] == 2 else (3 if types[i] == 0x70000000 else 0)
        info_field = text_info if names[i].startswith(b".text") else 0
        size = smem if types[i] == 8 else len(b)
        shdrs += struct.pack(
            "<IIQQQQIIQQ",
            name_off[i],
            types[i],
            0,
            0,
            offsets[i],
            size,
            link,
            info_field,
            1,
            24 if types[i] == 2 else 0,
        )
    ident = b"\x7fELF" + bytes([ei_class, 1, 1, 0x33, abi]) + bytes(7)
    ehdr = struct.pack(
        "<16sHHIQQQIHHHHHH", ident, 2, machine, 0x81, 0, 0, shoff, e_flags, 64, 56, 0, 64, len(blobs), 1
    )
    return ehdr + bytes(body) + shdrs


def test_kparam_packing_and_param_block():
    info = (
        _rec_sval(EIATTR["CUDA_API_VERSION"], struct.pack("<I", 0x81))
        + _kparam(1, 0xB0, 12)
        + _kparam(0, 0x30, 128)
        + _kparam(2, 0xBC, 1)
        + _rec_inline(3, EIATTR["CBANK_PARAM_SIZE"], 0xC0)
        + _rec_sval(EIATTR["PARAM_CBANK"], struct.pack("<IHH", 7, 0x210, 0xC0))
        + _rec_sval(EIATTR["REQNTID"], struct.pack("<3I", 384, 1, 1))
    )
    c = parse_cubin(make_cubin(info=info))
    k = c.kernel
    assert [(p.ordinal, p.offset, p.size, p.cbank, p.is_cbank) for p in k.params] == [
        (0, 0x30, 128, 0x1F, True),
        (1, 0xB0, 12, 0x1F, True),
        (2, 0xBC, 1, 0x1F, True),
    ]
    assert (k.param_bytes, k.param_cbank_offset, k.reqntid, k.registers) == (0xC0, 0x210, (384, 1, 1), 40)
    assert (c.arch, c.cuda_api_version, c.min_driver_version) == ("sm_90a", 129, 12090)


def test_measured_kparam_payloads():
    # Payload words copied from a DSL cubin (TMA descriptor, i32x3 shape, i32, empty struct).
    for packed, size in ((0x0201F000, 128), (0x0031F000, 12), (0x0011F000, 4), (0x0005F000, 1)):
        rec = _rec_sval(EIATTR["KPARAM_INFO"], struct.pack("<IHHI", 0, 0, 0, packed))
        assert parse_cubin(make_cubin(info=rec)).kernel.params[0].size == size


def test_unknown_records_are_skipped_by_format():
    info = (
        _rec_inline(1, 0x7E, 0)
        + _rec_inline(2, 0x7D, 0xAB)
        + _rec_inline(3, 0x7C, 0xFFFF)
        + _rec_sval(0x7B, bytes(range(20)))
        + _rec_sval(0x7A, b"")
        + _kparam(0, 0, 8)
    )
    k = parse_cubin(make_cubin(info=info)).kernel
    assert [(p.offset, p.size) for p in k.params] == [(0, 8)]
    assert [r.attr for r in k.records] == [0x7E, 0x7D, 0x7C, 0x7B, 0x7A, EIATTR["KPARAM_INFO"]]


def test_arch_from_e_flags():
    assert parse_cubin(make_cubin(e_flags=0x005A055A)).arch == "sm_90"  # no EF_CUDA_ACCELERATORS_V1
    assert parse_cubin(make_cubin(e_flags=0x06006408, abi=8)).arch == "sm_100a"  # ABI v8 layout
    assert parse_cubin(make_cubin(smem=1024)).kernel.static_smem_bytes == 1024


def test_register_fallback_to_sh_info():
    c = parse_cubin(make_cubin(global_info=b"", text_info=(96 << 24) | 1))
    assert c.kernel.registers == 96


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"not an elf at all" * 8, "not an ELF"),
        (make_cubin(ei_class=1), "64-bit"),
        (make_cubin(machine=62), "EM_CUDA"),
        (make_cubin(info=b"\x05\x17\x00\x00"), "unknown record format 5"),
        (make_cubin(info=_rec_sval(0x17, bytes(12))[:-4]), "runs past the section end"),
        (make_cubin(info=_rec_sval(0x17, bytes(8))), "KPARAM_INFO has 8 payload bytes"),
        (make_cubin(info=_kparam(1, 0, 4)), "ordinals are not 0..n-1"),
        (make_cubin()[:200], "beyond the end"),
    ],
)
def test_malformed_inputs_raise(blob, message):
    with pytest.raises(CubinFormatError, match=message):
        parse_cubin(blob)


def test_host_executable_is_rejected():
    with pytest.raises(CubinFormatError, match="EM_CUDA"):
        parse_cubin(Path(sys.executable).resolve().read_bytes()[: 1 << 20])


# ---------------------------------------------------------------------------------------------------------
# A cubin from the real DSL, compiled for sm_90a on this CPU.


def _dsl():
    # tests/conftest.py configured the DSL for sm_90a cross-compilation before any import of cutlass.
    return pytest.importorskip("cutlass")


@pytest.fixture(scope="module")
def dsl_cubin(tmp_path_factory):
    """(cubin bytes, kernel name the DSL reports) for a 64-thread elementwise kernel."""
    cutlass = _dsl()
    import cuda.bindings.driver as cuda
    from cutlass import cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    @cute.kernel
    def scale(x: cute.Tensor, alpha: cutlass.Float32, n: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * 64 + tidx
        if i < n:
            x[i] = x[i] * alpha

    @cute.jit
    def host(x: cute.Tensor, alpha: cutlass.Float32, n: cutlass.Int32, stream: cuda.CUstream):
        scale(x, alpha, n).launch(grid=[(n + 63) // 64, 1, 1], block=[64, 1, 1], stream=stream)

    x = make_fake_tensor(cutlass.Float32, (cute.sym_int32(),), (1,), assumed_align=16)
    compiled = cute.compile(host, x, cutlass.Float32(1.0), cutlass.Int32(1), make_fake_stream())
    cubin = compiled.__cubin__
    if not isinstance(cubin, bytes):  # CUTE_DSL_KEEP was not in effect when cutlass was first imported
        out = tmp_path_factory.mktemp("scale")
        compiled.export_to_c(file_path=str(out), file_name="scale", function_prefix="scale")
        from codegen.oracle import cubin_from_object

        cubin = cubin_from_object((out / "scale.o").read_bytes())
    (name,) = compiled.kernel_info
    return cubin, name


@pytest.mark.compiler
def test_dsl_cubin(dsl_cubin):
    cubin, name = dsl_cubin
    info = parse_cubin(cubin)
    assert info.arch == "sm_90a" and info.abi_version == 7
    assert info.entries == (name,)
    k = info.kernel
    assert k.name == name
    # {float *data; int32 n} padded to 16 bytes, then the two 4-byte scalars, back to back.
    assert [(p.ordinal, p.offset, p.size) for p in k.params] == [(0, 0, 16), (1, 16, 4), (2, 20, 4)]
    assert k.param_bytes == 24 and k.param_cbank_offset == 0x210
    assert k.reqntid == (64, 1, 1)
    assert 0 < k.registers <= 32 and k.max_registers == 255
    assert (k.static_smem_bytes, k.frame_size, k.local_bytes) == (0, 0, 0)
    # CUDA 12.9 ptxas in nvidia-cutlass-dsl 4.8.1; the ELF header's e_version carries the same number.
    assert info.cuda_api_version == info.e_version == k.cuda_api_version >= 0x80
    major, minor = divmod(info.cuda_api_version, 10)
    assert info.min_driver_version == major * 1000 + minor * 10
