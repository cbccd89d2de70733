"""Read the launch-relevant facts out of an NVIDIA cubin, with the standard library only.

Why: the launch contract (docs/CONTRACT.md) must come from the compiled artifact itself, not from what we
believe the DSL emitted: the kernel symbol, the exact parameter layout the driver will copy into constant
bank 0, the register count, the static shared memory, the CUDA API version the cubin needs. No NVIDIA tool
(cuobjdump, nvdisasm) is available at wheel-build time, so this module parses the ELF directly.

Layout facts (measured on cubins from nvidia-cutlass-dsl 4.8.1 / CUDA 12.9 ptxas for sm_90a, 2026-11-29):
- ELF64 little-endian, e_machine 190 (EM_CUDA), EI_OSABI 0x33, EI_ABIVERSION 7, e_version 0x81 (= the CUDA
  API version 12.9, the same value as EIATTR_CUDA_API_VERSION), e_flags 0x005a0d5a.
- e_flags with EI_ABIVERSION < 8 (LLVM's "V1" layout): bits 0-7 real SM (0x5a = 90), bit 8 texmode unified,
  bit 10 64-bit addressing, bit 11 EF_CUDA_ACCELERATORS_V1 (the "a" in sm_90a), bits 16-23 virtual SM.
  EI_ABIVERSION >= 8 (CUDA 13 cubins, per LLVM's ELF.h) moves the SM to bits 8-15 and "a" to bit 3.
- `.nv.info` (global) holds per-symbol records whose payload starts with a u32 symbol index:
  EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE (and EIATTR_MAX_STACK_SIZE when present).
- `.nv.info.<kernel>` holds the kernel's own records: EIATTR_CUDA_API_VERSION (0x81 here: it sits in the
  per-kernel section on these cubins, not in the global one), EIATTR_KPARAM_INFO per parameter,
  EIATTR_PARAM_CBANK, EIATTR_CBANK_PARAM_SIZE, EIATTR_REQNTID, EIATTR_MAXREG_COUNT, ...
- Local memory: no `.nv.local.<kernel>` section appeared even for a kernel with a dynamically indexed
  64-float register array; ptxas put it on the stack instead: EIATTR_FRAME_SIZE = EIATTR_MIN_STACK_SIZE =
  272 bytes per thread (0 for kernels without local memory). Spill bytes are not separated from other local
  data in the cubin (ptxas reports them only in its log, CUTE_DSL_COMPILER_OPT="remarks{ptx}").
- The register count is NOT in the top byte of the `.text.<kernel>` section's sh_info on these cubins
  (sh_info is just the symbol index, e.g. 0x7); it is EIATTR_REGCOUNT (168 for the spike's warp-specialized
  GEMM, 4 for a kernel that only prefetches a descriptor). sh_info >> 24 is kept as a fallback for older
  cubins that do store it there.
- Record framing: byte 0 format, byte 1 attribute, then EIFMT_NVAL(1)/BVAL(2)/HVAL(3) carry an inline
  u16 value (4-byte record; HVAL is a value, not a size: MAXREG_COUNT=0xff, CBANK_PARAM_SIZE=0xbc and
  NUM_MBARRIERS=8 were read this way and the walk ends exactly at the section end), EIFMT_SVAL(4) a u16
  payload size followed by that many bytes. Unknown attributes are skipped by their format.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CubinFormatError",
    "CubinInfo",
    "KernelInfo",
    "KernelParam",
    "NvInfoRecord",
    "parse_cubin",
    "read_cubin",
]


class CubinFormatError(ValueError):
    """The bytes are not a well-formed 64-bit NVIDIA cubin (or use a record layout this parser rejects)."""


EM_CUDA = 190
ELFOSABI_CUDA = (0x33, 0x41)  # 0x33 on every cubin seen here; 0x41 is LLVM's ELFOSABI_CUDA_V2 (not seen)
SHT_SYMTAB, SHT_NOBITS = 2, 8
STT_FUNC, STB_GLOBAL = 2, 1

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4

# Attribute codes: the public enumeration (cuobjdump's names, in enum order) as collected by open parsers.
# `_kernel_info` interprets a handful; the rest stay raw `NvInfoRecord`s (their names help debugging).
# fmt: off
_EIATTR_NAMES = (
    "ERROR", "PAD", "IMAGE_SLOT", "JUMPTABLE_RELOCS", "CTAIDZ_USED", "MAX_THREADS", "IMAGE_OFFSET",
    "IMAGE_SIZE", "TEXTURE_NORMALIZED", "SAMPLER_INIT", "PARAM_CBANK", "SMEM_PARAM_OFFSETS",
    "CBANK_PARAM_OFFSETS", "SYNC_STACK", "TEXID_SAMPID_MAP", "EXTERNS", "REQNTID", "FRAME_SIZE",
    "MIN_STACK_SIZE", "SAMPLER_FORCE_UNNORMALIZED", "BINDLESS_IMAGE_OFFSETS", "BINDLESS_TEXTURE_BANK",
    "BINDLESS_SURFACE_BANK", "KPARAM_INFO", "SMEM_PARAM_SIZE", "CBANK_PARAM_SIZE", "QUERY_NUMATTRIB",
    "MAXREG_COUNT", "EXIT_INSTR_OFFSETS", "S2RCTAID_INSTR_OFFSETS", "CRS_STACK_SIZE", "NEED_CNP_WRAPPER",
    "NEED_CNP_PATCH", "EXPLICIT_CACHING", "ISTYPEP_USED", "MAX_STACK_SIZE", "SUQ_USED",
    "LD_CACHEMOD_INSTR_OFFSETS", "LOAD_CACHE_REQUEST", "ATOM_SYS_INSTR_OFFSETS",
    "COOP_GROUP_INSTR_OFFSETS", "COOP_GROUP_MAX_REGIDS", "SW1850030_WAR", "WMMA_USED",
    "HAS_PRE_V10_OBJECT", "ATOMF16_EMUL_INSTR_OFFSETS", "ATOM16_EMUL_INSTR_REG_MAP", "REGCOUNT",
    "SW2393858_WAR", "INT_WARP_WIDE_INSTR_OFFSETS", "SHARED_SCRATCH", "STATISTICS",
    "INDIRECT_BRANCH_TARGETS", "SW2861232_WAR", "SW_WAR", "CUDA_API_VERSION", "NUM_MBARRIERS",
    "MBARRIER_INSTR_OFFSETS", "COROUTINE_RESUME_ID_OFFSETS", "SAM_REGION_STACK_SIZE",
    "PER_REG_TARGET_PERF_STATS", "CTA_PER_CLUSTER", "EXPLICIT_CLUSTER", "MAX_CLUSTER_RANK",
    "INSTR_REG_MAP", "RESERVED_SMEM_USED", "RESERVED_SMEM_0_SIZE", "UCODE_SECTION_DATA",
    "UNUSED_LOAD_BYTE_OFFSET", "KPARAM_INFO_V2", "SYSCALL_OFFSETS", "SW_WAR_MEMBAR_SYS_INSTR_OFFSETS",
    "GRAPHICS_GLOBAL_CBANK", "SHADER_TYPE", "VRC_CTA_INIT_COUNT", "TOOLS_PATCH_FUNC", "NUM_BARRIERS",
    "TEXMODE_INDEPENDENT", "PERF_STATISTICS", "AT_ENTRY_FRAGMENTS", "SPARSE_MMA_MASK", "TCGEN05_1CTA_USED",
    "TCGEN05_2CTA_USED", "GEN_ERRBAR_AT_EXIT", "REG_RECONFIG",
)
# fmt: on
EIATTR = {name: code for code, name in enumerate(_EIATTR_NAMES)}
assert EIATTR["KPARAM_INFO"] == 0x17 and EIATTR["REGCOUNT"] == 0x2F and EIATTR["CUDA_API_VERSION"] == 0x37
assert EIATTR["KPARAM_INFO_V2"] == 0x45 and EIATTR["REG_RECONFIG"] == 0x54


@dataclass(frozen=True, slots=True)
class NvInfoRecord:
    """One `.nv.info*` record. `value` is the inline u16 for NVAL/BVAL/HVAL, `payload` the SVAL bytes."""

    attr: int
    fmt: int
    value: int | None = None
    payload: bytes = b""

    @property
    def name(self) -> str:
        return "EIATTR_" + (
            _EIATTR_NAMES[self.attr] if self.attr < len(_EIATTR_NAMES) else f"0x{self.attr:02x}"
        )


@dataclass(frozen=True, slots=True)
class KernelParam:
    """One kernel parameter as EIATTR_KPARAM_INFO declares it.

    `offset` is relative to the start of the parameter block (the cuLaunchKernel argument buffer), whose
    absolute position in constant bank 0 is `KernelInfo.param_cbank_offset` (0x210 on sm_90a). 128-byte
    CUtensorMap parameters are 64-byte aligned in *absolute* cbank addresses: the first one sits at block
    offset 0x30 (0x210 + 0x30 = 0x240), so the block starts with 48 bytes of padding.
    """

    ordinal: int
    offset: int
    size: int
    log_alignment: int = 0  # "pointee's log alignment" in cuobjdump's words; 0 on every DSL param seen
    space: int = 0
    cbank: int = 0x1F
    is_cbank: bool = True


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """The launch-relevant facts of one kernel entry."""

    name: str
    params: tuple[KernelParam, ...]
    param_bytes: int  # EIATTR_CBANK_PARAM_SIZE, else PARAM_CBANK's size, else max(offset + size)
    param_cbank_offset: int | None  # where the parameter block starts in constant bank 0
    registers: int  # EIATTR_REGCOUNT (per thread)
    max_registers: int | None  # EIATTR_MAXREG_COUNT: the cap ptxas compiled under (0xff = none given)
    reqntid: tuple[int, int, int] | None  # EIATTR_REQNTID: the block shape the kernel was compiled for
    static_smem_bytes: int  # size of `.nv.shared.<kernel>` (NOBITS), 0 if absent
    local_bytes: int  # size of `.nv.local.<kernel>` if present, else EIATTR_FRAME_SIZE
    frame_size: int  # EIATTR_FRAME_SIZE: per-thread stack frame (local memory incl. spill slots)
    cuda_api_version: int | None  # EIATTR_CUDA_API_VERSION of this kernel's section
    records: tuple[NvInfoRecord, ...] = field(repr=False, default=())


@dataclass(frozen=True, slots=True)
class CubinInfo:
    """Everything `parse_cubin` reads from one cubin."""

    sm: int
    arch_specific: bool  # the "a" variant (sm_90a)
    abi_version: int
    e_flags: int
    e_version: int
    cuda_api_version: int  # max EIATTR_CUDA_API_VERSION over the cubin (falls back to e_version)
    entries: tuple[str, ...]  # global STT_FUNC symbols, in symbol-table order
    kernels: tuple[KernelInfo, ...]

    @property
    def arch(self) -> str:
        return f"sm_{self.sm}" + ("a" if self.arch_specific else "")

    @property
    def min_driver_version(self) -> int:
        """cuDriverGetVersion() encoding of the CUDA API version: 0x81 = 129 -> 12.9 -> 12090."""
        major, minor = divmod(self.cuda_api_version, 10)
        return major * 1000 + minor * 10

    @property
    def kernel(self) -> KernelInfo:
        """The single kernel of a one-kernel cubin (what every DSL compile here produces)."""
        if len(self.kernels) != 1:
            raise CubinFormatError(
                f"expected exactly one kernel entry, found {[k.name for k in self.kernels]}"
            )
        return self.kernels[0]


# ELF64 structures (little endian).
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


def read_cubin(path: str | Path) -> CubinInfo:
    return parse_cubin(Path(path).read_bytes())


def parse_cubin(data: bytes) -> CubinInfo:
    """Parse a cubin image. Raises CubinFormatError for anything that is not a 64-bit NVIDIA cubin."""
    data = bytes(data)
    if len(data) < _EHDR.size or data[:4] != b"\x7fELF":
        raise CubinFormatError("not an ELF file (missing \\x7fELF magic)")
    if data[4] != 2 or data[5] != 1:
        raise CubinFormatError(f"not a 64-bit little-endian ELF (EI_CLASS={data[4]}, EI_DATA={data[5]})")
    (
        ident,
        _etype,
        machine,
        e_version,
        _entry,
        _phoff,
        shoff,
        e_flags,
        _ehsize,
        _,
        _,
        shentsize,
        shnum,
        shstrndx,
    ) = _EHDR.unpack_from(data)
    if machine != EM_CUDA:
        raise CubinFormatError(f"ELF e_machine is {machine}, not EM_CUDA (190): not an NVIDIA cubin")
    if ident[7] not in ELFOSABI_CUDA:
        raise CubinFormatError(f"EI_OSABI 0x{ident[7]:02x} is not a CUDA OSABI")
    if shentsize != _SHDR.size or shnum == 0 or shstrndx >= shnum:
        raise CubinFormatError(
            f"bad section header table (entsize {shentsize}, count {shnum}, strndx {shstrndx})"
        )
    _check_range(data, shoff, shnum * shentsize, "section header table")
    sections = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    shstr = _section_bytes(data, sections[shstrndx], "shstrtab")
    names = [_cstr(shstr, s[0]) for s in sections]
    by_name = {n: i for i, n in enumerate(names)}

    abi_version = ident[8]
    if abi_version >= 8:
        sm, arch_specific = (e_flags >> 8) & 0xFF, bool(e_flags & 0x8)
    else:
        sm, arch_specific = e_flags & 0xFF, bool(e_flags & 0x800)

    symbols = _symbols(data, sections, names)
    entries = tuple(name for name, stype, bind, _shndx in symbols if stype == STT_FUNC and bind == STB_GLOBAL)

    # Global .nv.info: per-symbol records keyed by symbol index.
    per_symbol: dict[int, dict[int, int]] = {}
    api_versions = []
    if ".nv.info" in by_name:
        for rec in _records(_section_bytes(data, sections[by_name[".nv.info"]], ".nv.info"), ".nv.info"):
            if rec.attr == EIATTR["CUDA_API_VERSION"]:
                api_versions.append(_u32(rec, 0))
            elif rec.fmt == EIFMT_SVAL and len(rec.payload) == 8:
                sym_index, value = struct.unpack_from("<II", rec.payload)
                per_symbol.setdefault(sym_index, {})[rec.attr] = value

    kernels = []
    for name in entries:
        sym_index = next(i for i, s in enumerate(symbols) if s[0] == name)
        kernel = _kernel_info(data, sections, by_name, name, per_symbol.get(sym_index, {}))
        if kernel.cuda_api_version is not None:
            api_versions.append(kernel.cuda_api_version)
        kernels.append(kernel)

    return CubinInfo(
        sm=sm,
        arch_specific=arch_specific,
        abi_version=abi_version,
        e_flags=e_flags,
        e_version=e_version,
        cuda_api_version=max(api_versions) if api_versions else e_version,
        entries=entries,
        kernels=tuple(kernels),
    )


def _kernel_info(data, sections, by_name, name, global_attrs: dict[int, int]) -> KernelInfo:
    text_name = f".text.{name}"
    if text_name not in by_name:
        raise CubinFormatError(f"kernel {name}: no {text_name} section")
    text = sections[by_name[text_name]]
    info_name = f".nv.info.{name}"
    records = ()
    if info_name in by_name:
        records = tuple(_records(_section_bytes(data, sections[by_name[info_name]], info_name), info_name))

    params, api_version, param_cbank, cbank_param_size = [], None, None, None
    reqntid = max_registers = None
    for rec in records:
        a = rec.attr
        if a == EIATTR["KPARAM_INFO"]:
            params.append(_kparam(rec, name))
        elif a == EIATTR["KPARAM_INFO_V2"]:
            params.append(_kparam_v2(rec, name))
        elif a == EIATTR["CUDA_API_VERSION"]:
            api_version = _u32(rec, 0)
        elif a == EIATTR["PARAM_CBANK"]:
            # u32 symbol index of .nv.constant0.<kernel>, u16 block offset in the bank, u16 block size.
            _need(rec, 8, name)
            _sym, off, size = struct.unpack_from("<IHH", rec.payload)
            param_cbank = (off, size)
        elif a == EIATTR["CBANK_PARAM_SIZE"]:
            cbank_param_size = rec.value
        elif a == EIATTR["REQNTID"]:
            reqntid = _dim3(rec, name)
        elif a == EIATTR["MAXREG_COUNT"]:
            max_registers = rec.value

    params.sort(key=lambda p: p.ordinal)
    if [p.ordinal for p in params] != list(range(len(params))):
        raise CubinFormatError(
            f"kernel {name}: KPARAM ordinals are not 0..n-1: {[p.ordinal for p in params]}"
        )
    end = max((p.offset + p.size for p in params), default=0)
    param_bytes = (
        cbank_param_size if cbank_param_size is not None else (param_cbank[1] if param_cbank else end)
    )
    if param_bytes < end:
        raise CubinFormatError(f"kernel {name}: parameter block {param_bytes} B < last parameter end {end} B")

    registers = global_attrs.get(EIATTR["REGCOUNT"], text[7] >> 24)
    frame = global_attrs.get(EIATTR["FRAME_SIZE"], 0)
    local_name = f".nv.local.{name}"
    local_bytes = sections[by_name[local_name]][5] if local_name in by_name else frame
    shared_name = f".nv.shared.{name}"
    static_smem = sections[by_name[shared_name]][5] if shared_name in by_name else 0

    return KernelInfo(
        name=name,
        params=tuple(params),
        param_bytes=param_bytes,
        param_cbank_offset=param_cbank[0] if param_cbank else None,
        registers=registers,
        max_registers=max_registers,
        reqntid=reqntid,
        static_smem_bytes=static_smem,
        local_bytes=local_bytes,
        frame_size=frame,
        cuda_api_version=api_version,
        records=records,
    )


def _kparam(rec: NvInfoRecord, kernel: str) -> KernelParam:
    # EIATTR_KPARAM_INFO payload, 12 bytes, little endian:
    #   bytes 0-3   u32 index (0 on every record seen)
    #   bytes 4-5   u16 ordinal
    #   bytes 6-7   u16 offset in the parameter block
    #   bytes 8-11  u32 packed: bits 0-7 log2 alignment of the pointee, bits 8-11 space, bits 12-16 cbank,
    #               bit 17 set when the parameter is NOT in a constant bank, bits 18-31 size in bytes.
    # Measured: a CUtensorMap reads `00 f0 01 02` = 0x0201f000 -> size 0x0201f000 >> 18 = 128, cbank 0x1f;
    # an i32x3 shape reads 0x0031f000 -> 12; an i32 0x0011f000 -> 4; an empty struct 0x0005f000 -> 1.
    # Seen as u16s this is "attrs 0xf000, size field = 4*size + 1", the +1 being cbank's top bit.
    _need(rec, 12, kernel)
    _index, ordinal, offset, packed = struct.unpack_from("<IHHI", rec.payload)
    return KernelParam(
        ordinal=ordinal,
        offset=offset,
        size=packed >> 18,
        log_alignment=packed & 0xFF,
        space=(packed >> 8) & 0xF,
        cbank=(packed >> 12) & 0x1F,
        is_cbank=not (packed >> 17) & 1,
    )


def _kparam_v2(rec: NvInfoRecord, kernel: str) -> KernelParam:
    # EIATTR_KPARAM_INFO_V2 (large-parameter kernels, CUDA 12.x+): u32 index, u16 ordinal, u16 offset,
    # u16 size, u16 attributes. Taken from public notes; not yet seen on a DSL cubin.
    _need(rec, 12, kernel)
    _index, ordinal, offset, size, _attrs = struct.unpack_from("<IHHHH", rec.payload)
    return KernelParam(ordinal=ordinal, offset=offset, size=size)


def _records(blob: bytes, where: str):
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 4:
            raise CubinFormatError(f"{where}: truncated record header at +{pos}")
        fmt, attr, half = blob[pos], blob[pos + 1], struct.unpack_from("<H", blob, pos + 2)[0]
        if fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            yield NvInfoRecord(attr=attr, fmt=fmt, value=half)
            pos += 4
        elif fmt == EIFMT_SVAL:
            end = pos + 4 + half
            if end > len(blob):
                raise CubinFormatError(f"{where}: record 0x{attr:02x} at +{pos} runs past the section end")
            yield NvInfoRecord(attr=attr, fmt=fmt, payload=blob[pos + 4 : end])
            pos = end
        else:
            raise CubinFormatError(f"{where}: unknown record format {fmt} at +{pos} (attr 0x{attr:02x})")


def _symbols(data, sections, names) -> list[tuple[str, int, int, int]]:
    """(name, st_type, st_bind, st_shndx) for every symbol of the (single) SYMTAB section."""
    tabs = [s for s in sections if s[1] == SHT_SYMTAB]
    if not tabs:
        raise CubinFormatError("no symbol table")
    symtab = tabs[0]
    if symtab[6] >= len(sections):
        raise CubinFormatError("symbol table links to a missing string table")
    strtab = _section_bytes(data, sections[symtab[6]], "strtab")
    blob = _section_bytes(data, symtab, "symtab")
    out = []
    for off in range(0, len(blob) - _SYM.size + 1, _SYM.size):
        st_name, st_info, _other, shndx, _value, _size = _SYM.unpack_from(blob, off)
        out.append((_cstr(strtab, st_name), st_info & 0xF, st_info >> 4, shndx))
    return out


def _section_bytes(data: bytes, shdr, what: str) -> bytes:
    if shdr[1] == SHT_NOBITS:
        return b""
    _check_range(data, shdr[4], shdr[5], what)
    return data[shdr[4] : shdr[4] + shdr[5]]


def _check_range(data: bytes, off: int, size: int, what: str) -> None:
    if off + size > len(data):
        raise CubinFormatError(
            f"{what} [{off}, {off + size}) lies beyond the end of the {len(data)}-byte file"
        )


def _cstr(blob: bytes, off: int) -> str:
    if off >= len(blob) and off:
        raise CubinFormatError(f"string offset {off} beyond its table")
    end = blob.find(b"\0", off)
    return blob[off : end if end >= 0 else len(blob)].decode("utf-8", "replace")


def _need(rec: NvInfoRecord, size: int, kernel: str) -> None:
    if rec.fmt != EIFMT_SVAL or len(rec.payload) != size:
        raise CubinFormatError(
            f"kernel {kernel}: {rec.name} has {len(rec.payload)} payload bytes, expected {size}"
        )


def _u32(rec: NvInfoRecord, index: int) -> int:
    if rec.fmt != EIFMT_SVAL:
        return rec.value or 0
    if len(rec.payload) < 4 * (index + 1):
        raise CubinFormatError(f"{rec.name}: payload too short")
    return struct.unpack_from("<I", rec.payload, 4 * index)[0]


def _dim3(rec: NvInfoRecord, kernel: str) -> tuple[int, int, int]:
    _need(rec, 12, kernel)
    return struct.unpack_from("<III", rec.payload)
