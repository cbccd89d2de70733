"""The oracle: run the CuTe DSL's own exported host code on a CPU against a recording CUDA stub.

Why: the runtime re-implements, in pure Python, what the DSL's host code does before a launch (TMA
descriptors, shape vectors, grid, cluster, dynamic shared memory). The DSL's host code is the reference;
this harness runs it without a GPU (docs/ARCHITECTURE.md, "The oracle") so tests can hold the runtime to it
byte for byte.

How: `compiled.export_to_c(dir, name, prefix)` writes `<name>.o` (the host code, with the fatbin embedded)
and `<name>.h`. `build_oracle` links the `.o` with `oracle_stub.c` into a shared library, loads it with
ctypes, and runs the module init/load functions the header's `<prefix>_Kernel_Module_Load` would run.
`Oracle.call` then calls `_mlir_<prefix>__mlir_ciface_<function>(void **args, int32_t nargs)` exactly as
the header's `cute_dsl_<prefix>_wrapper` does: one pointer per host argument (a tensor struct, a scalar,
the stream) plus a pointer to an int32 return-code slot, last.

Measured on nvidia-cutlass-dsl 4.8.1 (2026-11-29):
- The exported object references exactly the eight `_cuda*`/`_cu*` shims that oracle_stub.c defines.
- Loading queries cudaDevAttrMaxSharedMemoryPerBlockOptin (97) and CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES (1),
  then sets cudaFuncAttributeMaxDynamicSharedMemorySize (8) to their difference and
  cudaFuncAttributeNonPortableClusterSizeAllowed (14) to 1, via cudaKernelSetAttributeForDevice.
- The header's tensor struct declares `int64_t dynamic_strides[]` whenever the fake tensor was made with
  `make_fake_tensor`, but the compiled code reads the strides at the width of their `SymInt` (32 by
  default): with `cute.SymInt()` strides the real layout is `{void*; int32 shapes[n]; int32 strides[m]}`.
  `tensor_struct` therefore takes the stride width explicitly; declare strides with `cute.sym_int64` to
  make the header right.
- The exported object is built for the compiling CPU's ISA (it uses BMI2/AVX instructions).
"""

from __future__ import annotations

import ctypes
import re
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .toolchain import c_compiler

STUB_SOURCE = Path(__file__).with_name("oracle_stub.c")

# Keep in sync with oracle_stub.c.
_MAX_ARGS, _MAX_ARG_BYTES, _MAX_ATTRS, _MAX_LAUNCHES, _MAX_CALLS, _NAME_BYTES = 64, 8192, 32, 4, 64, 1024

# cudaDeviceAttr id -> value the host code sees. H100-SXM / H200 figures; tests override what they probe.
DEFAULT_DEVICE_ATTRIBUTES = {
    1: 1024,  # MaxThreadsPerBlock
    2: 1024,  # MaxBlockDimX
    3: 1024,  # MaxBlockDimY
    4: 64,  # MaxBlockDimZ
    5: 2**31 - 1,  # MaxGridDimX
    6: 65535,  # MaxGridDimY
    7: 65535,  # MaxGridDimZ
    8: 49152,  # MaxSharedMemoryPerBlock
    10: 32,  # WarpSize
    12: 65536,  # MaxRegistersPerBlock
    16: 132,  # MultiProcessorCount
    75: 9,  # ComputeCapabilityMajor
    76: 0,  # ComputeCapabilityMinor
    81: 233472,  # MaxSharedMemoryPerMultiprocessor
    82: 65536,  # MaxRegistersPerMultiprocessor
    97: 232448,  # MaxSharedMemoryPerBlockOptin
}
# CUfunction_attribute id -> value, for cuKernelGetAttribute. `build_oracle(kernel=...)` fills these in.
CU_FUNC_ATTRIBUTE = {
    "max_threads_per_block": 0,
    "shared_size_bytes": 1,
    "const_size_bytes": 2,
    "local_size_bytes": 3,
    "num_regs": 4,
}
# cudaFuncAttribute ids the DSL sets.
FUNC_ATTRIBUTE_NAMES = {
    8: "max_dynamic_shared_size_bytes",
    9: "preferred_shared_memory_carveout",
    14: "non_portable_cluster_size_allowed",
}
# cudaLaunchAttributeID (CUDA 12.x runtime API).
LAUNCH_ATTRIBUTE_NAMES = {
    1: "access_policy_window",
    2: "cooperative",
    3: "synchronization_policy",
    4: "cluster_dimension",
    5: "cluster_scheduling_policy_preference",
    6: "programmatic_stream_serialization",
    7: "programmatic_event",
    8: "priority",
    9: "mem_sync_domain_map",
    10: "mem_sync_domain",
}
_CALL_KINDS = {
    1: "cudaFuncSetAttribute",
    2: "cudaKernelSetAttributeForDevice",
    3: "cuKernelGetAttribute",
    4: "cudaDeviceGetAttribute",
}


class OracleError(RuntimeError):
    """The DSL host code returned an error, or the stub could not record what it did."""


class _Launch(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("dynamic_smem_bytes", ctypes.c_uint64),
        ("stream", ctypes.c_uint64),
        ("func", ctypes.c_uint64),
        ("num_attrs", ctypes.c_uint),
        ("attr_id", ctypes.c_int * _MAX_ATTRS),
        ("attr_val", (ctypes.c_ubyte * 64) * _MAX_ATTRS),
        ("num_args", ctypes.c_uint),
        ("arg_offset", ctypes.c_uint * _MAX_ARGS),
        ("arg_size", ctypes.c_uint * _MAX_ARGS),
        ("arg_bytes", ctypes.c_ubyte * _MAX_ARG_BYTES),
    ]


class _Call(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("attr", ctypes.c_int),
        ("value", ctypes.c_int),
        ("device", ctypes.c_int),
        ("handle", ctypes.c_uint64),
    ]


class _State(ctypes.Structure):
    _fields_ = [
        ("current_device", ctypes.c_int),
        ("num_arg_sizes", ctypes.c_int),
        ("arg_sizes", ctypes.c_uint * _MAX_ARGS),
        ("num_device_attrs", ctypes.c_int),
        ("device_attr_id", ctypes.c_int * _MAX_CALLS),
        ("device_attr_value", ctypes.c_int * _MAX_CALLS),
        ("num_kernel_attrs", ctypes.c_int),
        ("kernel_attr_id", ctypes.c_int * _MAX_CALLS),
        ("kernel_attr_value", ctypes.c_int * _MAX_CALLS),
        ("code_image", ctypes.c_uint64),
        ("num_jit_options", ctypes.c_uint),
        ("num_library_options", ctypes.c_uint),
        ("library_loads", ctypes.c_int),
        ("kernel_name", ctypes.c_char * _NAME_BYTES),
        ("kernel_lookups", ctypes.c_int),
        ("num_calls", ctypes.c_int),
        ("calls", _Call * _MAX_CALLS),
        ("num_launches", ctypes.c_int),
        ("launches", _Launch * _MAX_LAUNCHES),
        ("overflow", ctypes.c_int),
        ("error", ctypes.c_char * 256),
    ]


@dataclass(frozen=True)
class AttributeCall:
    """One attribute call the host code made: set on the kernel, or a device/kernel query."""

    api: str
    attr: int
    value: int
    device: int  # -1 for cudaFuncSetAttribute, which has no device argument

    @property
    def name(self) -> str:
        if self.api in ("cudaFuncSetAttribute", "cudaKernelSetAttributeForDevice"):
            return FUNC_ATTRIBUTE_NAMES.get(self.attr, f"func_attr_{self.attr}")
        return str(self.attr)


@dataclass(frozen=True)
class LoadRecord:
    """What module init + load did: the code image handed to cudaLibraryLoadData, the kernel looked up."""

    code_image: bytes  # the fatbin, read back through the pointer the host code passed
    kernel_name: str
    calls: tuple[AttributeCall, ...]

    def set_attributes(self) -> dict[str, int]:
        return {
            c.name: c.value for c in self.calls if c.api.endswith(("SetAttribute", "SetAttributeForDevice"))
        }


@dataclass(frozen=True)
class LaunchRecord:
    """One cudaLaunchKernelEx as the DSL host code made it."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    stream: int
    attributes: dict[str, object]  # by LAUNCH_ATTRIBUTE_NAMES; cluster_dimension is (x, y, z), others int
    raw_attributes: tuple[tuple[int, bytes], ...]
    args: list[bytes]  # one per kernel parameter, sized by the arg-size table
    calls: tuple[AttributeCall, ...] = field(default=())  # attribute calls made during this call

    def packed(self, offsets: list[int], total: int) -> bytes:
        """The parameter block the driver would build: each argument at its KPARAM offset, zero padding."""
        buf = bytearray(total)
        for off, arg in zip(offsets, self.args, strict=True):
            buf[off : off + len(arg)] = arg
        return bytes(buf)


@dataclass(frozen=True)
class HeaderInfo:
    prefix: str
    entry: str  # `_mlir_<prefix>__mlir_ciface_<function>`
    wrapper_params: tuple[str, ...]  # the C parameter declarations of `cute_dsl_<prefix>_wrapper`


def parse_header(text: str) -> HeaderInfo:
    """Read the prefix, the packed entry symbol and the wrapper signature from an export_to_c header."""
    init = re.search(r"void _mlir_(\w+)_cuda_init\(void \*\*\);", text)
    entry = re.search(r"void (_mlir_\w+__mlir_ciface_\w+)\(void \*\*args, int32_t num_args\);", text)
    wrapper = re.search(r"static inline int32_t cute_dsl_\w+_wrapper\(([^)]*)\)", text)
    if not (init and entry and wrapper):
        raise OracleError("not a CuTe DSL export_to_c header (init, entry or wrapper declaration missing)")
    params = tuple(p.strip() for p in wrapper.group(1).split(","))
    return HeaderInfo(prefix=init.group(1), entry=entry.group(1), wrapper_params=params[1:])  # drop module


_TENSOR_TYPES: dict[tuple, type] = {}


def tensor_struct(data: int, shapes=(), strides=(), *, shape_type=ctypes.c_int32, stride_type=ctypes.c_int64):
    """The host entry's tensor argument: `{void *data; <shape_type> shapes[n]; <stride_type> strides[m]}`.

    Only the dynamic modes appear, in mode order (e.g. shapes (m, k, l), strides (lda, batch) for a K-major
    rank-3 tensor whose unit stride is static). C layout rules apply (padding before a 64-bit array).
    """
    key = (len(shapes), shape_type, len(strides), stride_type)
    if key not in _TENSOR_TYPES:
        fields = [("data", ctypes.c_void_p)]
        if shapes:
            fields.append(("dynamic_shapes", shape_type * len(shapes)))
        if strides:
            fields.append(("dynamic_strides", stride_type * len(strides)))
        _TENSOR_TYPES[key] = type("TensorArg", (ctypes.Structure,), {"_fields_": fields})
    t = _TENSOR_TYPES[key]()
    t.data = data
    if shapes:
        t.dynamic_shapes[:] = list(shapes)
    if strides:
        t.dynamic_strides[:] = list(strides)
    return t


class Oracle:
    """A loaded host object. `call` runs the entry once and returns the launch it made."""

    def __init__(self, lib: ctypes.CDLL, header: HeaderInfo, lib_path: Path):
        self._lib, self.header, self.lib_path = lib, header, lib_path
        lib.stub_state.restype = ctypes.POINTER(_State)
        lib.stub_state_size.restype = ctypes.c_size_t
        if lib.stub_state_size() != ctypes.sizeof(_State):
            raise OracleError(
                f"stub state layout mismatch: C {lib.stub_state_size()} B, ctypes {ctypes.sizeof(_State)} B"
            )
        lib.stub_launch_attribute_size.restype = ctypes.c_size_t
        lib.stub_launch_config_size.restype = ctypes.c_size_t
        # cudaLaunchAttribute is 72 bytes, cudaLaunchConfig_t 56 bytes on LP64 (CUDA 12.x headers).
        sizes = (lib.stub_launch_attribute_size(), lib.stub_launch_config_size())
        if sizes != (72, 56):
            raise OracleError(f"stub's CUDA launch structs are {sizes} bytes, expected (72, 56)")
        self._state = lib.stub_state().contents
        lib.stub_reset()
        self._entry = getattr(lib, header.entry)
        self._entry.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32]
        self._entry.restype = None
        self.load_record: LoadRecord | None = None

    # ---- inputs -------------------------------------------------------------------------------------
    def set_device_attributes(self, attrs: dict[int, int]) -> None:
        s = self._state
        s.num_device_attrs = len(attrs)
        for i, (k, v) in enumerate(sorted(attrs.items())):
            s.device_attr_id[i], s.device_attr_value[i] = k, v

    def set_kernel_attributes(self, attrs: dict[int, int]) -> None:
        s = self._state
        s.num_kernel_attrs = len(attrs)
        for i, (k, v) in enumerate(sorted(attrs.items())):
            s.kernel_attr_id[i], s.kernel_attr_value[i] = k, v

    def set_arg_sizes(self, sizes: list[int]) -> None:
        """Sizes of the kernel's parameters in ordinal order (from cubin_info's KPARAM list)."""
        if len(sizes) > _MAX_ARGS or sum(sizes) > _MAX_ARG_BYTES:
            raise OracleError(f"{len(sizes)} params / {sum(sizes)} B exceed the stub's tables")
        self._state.num_arg_sizes = len(sizes)
        for i, n in enumerate(sizes):
            self._state.arg_sizes[i] = n

    # ---- running ------------------------------------------------------------------------------------
    def load(self, device: int = 0) -> LoadRecord:
        """`<prefix>_cuda_init` then `<prefix>_cuda_load_to_device(device)`, as the header's loader does."""
        prefix = self.header.prefix
        library = ctypes.c_void_p()
        library_ptr = ctypes.pointer(library)
        ret = ctypes.c_int32(0)
        init_args = (ctypes.c_void_p * 2)(ctypes.addressof(library_ptr), ctypes.addressof(ret))
        self._begin()
        getattr(self._lib, f"_mlir_{prefix}_cuda_init")(init_args)
        self._check(ret.value, "cuda_init")
        dev = ctypes.c_int32(device)
        load_args = (ctypes.c_void_p * 3)(
            ctypes.addressof(library_ptr), ctypes.addressof(dev), ctypes.addressof(ret)
        )
        getattr(self._lib, f"_mlir_{prefix}_cuda_load_to_device")(load_args)
        self._check(ret.value, "cuda_load_to_device")
        s = self._state
        self.load_record = LoadRecord(
            code_image=_read_fatbin(s.code_image),
            kernel_name=s.kernel_name.decode(),
            calls=self._calls(),
        )
        return self.load_record

    def call(self, args: list) -> LaunchRecord:
        """Run the host entry with ctypes objects (tensor structs, scalars, a c_void_p stream)."""
        if self.load_record is None:
            raise OracleError("call load() first (build_oracle does)")
        ret = ctypes.c_int32(0)
        ptrs = (ctypes.c_void_p * (len(args) + 1))(
            *[ctypes.addressof(a) for a in args], ctypes.addressof(ret)
        )
        self._begin()
        self._entry(ptrs, len(args) + 1)
        self._check(ret.value, "host entry")
        s = self._state
        if s.num_launches != 1:
            raise OracleError(f"expected one launch, the host code made {s.num_launches}")
        return self._launch(s.launches[0])

    # ---- helpers ------------------------------------------------------------------------------------
    def _begin(self) -> None:
        s = self._state
        s.num_calls = s.num_launches = s.overflow = 0
        s.error = b""

    def _check(self, ret: int, what: str) -> None:
        s = self._state
        if s.overflow:
            raise OracleError(f"{what}: a stub table overflowed; the record would be incomplete")
        if ret != 0:
            detail = s.error.decode() or "no stub error recorded"
            queried = [(c.api, c.attr) for c in self._calls()]
            raise OracleError(f"{what} returned cudaError {ret} ({detail}); calls so far: {queried}")

    def _calls(self) -> tuple[AttributeCall, ...]:
        s = self._state
        return tuple(
            AttributeCall(api=_CALL_KINDS[c.kind], attr=c.attr, value=c.value, device=c.device)
            for c in s.calls[: s.num_calls]
        )

    def _launch(self, ln: _Launch) -> LaunchRecord:
        raw = tuple((ln.attr_id[i], bytes(ln.attr_val[i])) for i in range(ln.num_attrs))
        attributes: dict[str, object] = {}
        for attr_id, val in raw:
            name = LAUNCH_ATTRIBUTE_NAMES.get(attr_id, f"id_{attr_id}")
            attributes[name] = (
                struct.unpack_from("<III", val) if attr_id == 4 else struct.unpack_from("<i", val)[0]
            )
        arg_bytes = bytes(ln.arg_bytes)
        args = [arg_bytes[ln.arg_offset[i] : ln.arg_offset[i] + ln.arg_size[i]] for i in range(ln.num_args)]
        return LaunchRecord(
            grid=tuple(ln.grid),
            block=tuple(ln.block),
            smem_bytes=ln.dynamic_smem_bytes,
            stream=ln.stream,
            attributes=attributes,
            raw_attributes=raw,
            args=args,
            calls=self._calls(),
        )


def build_oracle(
    obj_path,
    workdir,
    *,
    header_path=None,
    kernel=None,
    device_attributes=None,
    kernel_attributes=None,
    device: int = 0,
    cc: str | None = None,  # default: codegen.toolchain.c_compiler() ($CC, else cc)
) -> Oracle:
    """Link `obj_path` (from export_to_c) with the stub, load it and run the module loader.

    `kernel` (a `codegen.cubin_info.KernelInfo` of the same compile) supplies the argument sizes and the
    function attributes the loader queries (static shared memory, registers, local memory).
    """
    obj_path, workdir = Path(obj_path), Path(workdir)
    header = parse_header(Path(header_path or obj_path.with_suffix(".h")).read_text())
    workdir.mkdir(parents=True, exist_ok=True)
    lib_path = workdir / f"oracle_{obj_path.stem}.so"
    cmd = [
        *([cc] if cc else c_compiler()),
        "-shared",
        "-fPIC",
        "-O1",
        "-Wl,-Bsymbolic",
        "-Wl,--no-undefined",
        "-o",
        str(lib_path),
        str(STUB_SOURCE),
        str(obj_path),
    ]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise OracleError(f"linking the oracle failed: {' '.join(cmd)}\n{done.stderr}")
    oracle = Oracle(ctypes.CDLL(str(lib_path)), header, lib_path)
    oracle._state.current_device = device
    devattrs = {**DEFAULT_DEVICE_ATTRIBUTES, **(device_attributes or {})}
    oracle.set_device_attributes(
        {k: v for k, v in devattrs.items() if v is not None}
    )  # None: attribute absent
    kattrs = {
        CU_FUNC_ATTRIBUTE["max_threads_per_block"]: 1024,
        CU_FUNC_ATTRIBUTE["shared_size_bytes"]: 0,
        CU_FUNC_ATTRIBUTE["const_size_bytes"]: 0,
        CU_FUNC_ATTRIBUTE["local_size_bytes"]: 0,
    }
    if kernel is not None:
        kattrs[CU_FUNC_ATTRIBUTE["shared_size_bytes"]] = kernel.static_smem_bytes
        kattrs[CU_FUNC_ATTRIBUTE["local_size_bytes"]] = kernel.local_bytes
        kattrs[CU_FUNC_ATTRIBUTE["num_regs"]] = kernel.registers
        oracle.set_arg_sizes([p.size for p in kernel.params])
    oracle.set_kernel_attributes({**kattrs, **(kernel_attributes or {})})
    oracle.load(device)
    return oracle


def _read_fatbin(address: int) -> bytes:
    """Copy the fatbin at `address`: a 16-byte header (u32 magic 0xBA55ED50, u16 version, u16 header size,
    u64 size of what follows)."""
    if not address:
        return b""
    magic, _version, header_size, body = struct.unpack("<IHHQ", ctypes.string_at(address, 16))
    if magic != 0xBA55ED50:
        raise OracleError(f"code image at 0x{address:x} is not a fatbin (magic 0x{magic:08x})")
    return ctypes.string_at(address, header_size + body)


def fatbin_cubins(image: bytes) -> list[bytes]:
    """The ELF images inside a fatbin: each entry is {u16 kind, u16 version, u32 header size, u64 payload
    size, ...}; the cubin starts at the first `\\x7fELF` of an entry's payload (measured with
    nvidia-cutlass-dsl 4.8.1, 2026-11-29) and ends at the ELF's furthest table or section."""
    _magic, _version, header_size, body = struct.unpack_from("<IHHQ", image)
    out, pos, end = [], header_size, header_size + body
    while pos + 16 <= end:
        _kind, _ver, entry_header, payload = struct.unpack_from("<HHIQ", image, pos)
        blob = image[pos + entry_header : pos + entry_header + payload]
        start = blob.find(b"\x7fELF")
        if start >= 0:
            out.append(blob[start : start + _elf_extent(blob[start:])])
        pos += entry_header + payload
    return out


def _elf_extent(elf: bytes) -> int:
    h = struct.unpack_from("<16sHHIQQQIHHHHHH", elf)
    phoff, shoff, phentsize, phnum, shentsize, shnum = h[5], h[6], h[9], h[10], h[11], h[12]
    extent = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        sh = struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
        if sh[1] != 8:  # SHT_NOBITS occupies no file space
            extent = max(extent, sh[4] + sh[5])
    return extent


def cubin_from_object(obj: bytes) -> bytes:
    """The cubin inside an export_to_c object: its embedded fatbin holds one cubin (measured with
    nvidia-cutlass-dsl 4.8.1, 2026-11-29).

    For when `compiled.__cubin__` is unavailable (CUTE_DSL_KEEP is read once, when cutlass is imported;
    `__cubin__` is then None, or a path string if CUTE_DSL_DUMP_DIR does not exist)."""
    pos = obj.find(struct.pack("<I", 0xBA55ED50))
    while pos >= 0:
        _magic, version, header_size, body = struct.unpack_from("<IHHQ", obj, pos)
        if version == 1 and header_size == 16 and pos + 16 + body <= len(obj):
            cubins = fatbin_cubins(obj[pos : pos + 16 + body])
            if len(cubins) == 1:
                return cubins[0]
        pos = obj.find(struct.pack("<I", 0xBA55ED50), pos + 4)
    raise OracleError("no fatbin with exactly one cubin in the object")
