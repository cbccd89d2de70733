"""Launch a loaded kernel through ``cuLaunchKernelEx``, with as little Python per call as possible.

A launch needs a ``CUlaunchConfig`` (grid, block, dynamic shared memory, stream, and the cluster-dimension
attribute) and ``kernelParams``, a ``void**`` whose i-th entry points at parameter i inside the packed
parameter buffer (each parameter at its manifest offset). Building the config costs ~3 µs in cuda-bindings
and the pointer array ~1.2 µs (CPU dev box, 2026-11-29), as much as the launch itself, so both are cached
on the ``LoadedKernel``. Measured on the H200 host (2026-11-29, tiny kernel, 20k launches, driver 580):
raw ``cuLaunchKernelEx`` with prebuilt arguments 4.8-5.0 µs per call, ``launch_raw`` 5.9-6.6 µs
(cuda-bindings 12.9.10 / 13.3.1). Caches:
- configs per (grid, stream, flags): the persistent grid is the same for all large problems;
- pointer arrays per buffer address (and offsets, if the caller passes its own): the array's content is
  a pure function of that key, so an entry stays correct even if the buffer that first had the address
  is gone and another buffer took it.
Cached objects are never mutated after they are published, so any number of threads may launch with
them at once; the dicts are bounded by being cleared when full. The driver copies the parameter values
at launch (also into a graph node under capture), so the buffer may be reused as soon as this returns.
Nothing here allocates device memory, synchronizes or copies host<->device: launches can be captured.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from .driver import result_name
from .errors import CudaDriverError, InvalidArgumentError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~10 ms)
if TYPE_CHECKING:
    from .loader import LoadedKernel
    from .manifest import InstanceRecord

_CONFIGS_PER_KERNEL = 64
_POINTER_ARRAYS_PER_KERNEL = 256
_MAX_GRID = (2**31 - 1, 65535, 65535)
_cast, _addressof, _c_void_p, _Array = ctypes.cast, ctypes.addressof, ctypes.c_void_p, ctypes.Array
_char_from_buffer = ctypes.c_char.from_buffer


def build_config(cu, record: InstanceRecord, grid: tuple[int, int, int], stream: int,
                 programmatic_serialization: bool = False):
    """A new ``CUlaunchConfig`` for ``record`` on ``grid`` and ``stream`` (an int handle)."""
    attrs = []
    cluster = cu.CUlaunchAttribute()
    cluster.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    dim = cluster.value.clusterDim
    dim.x, dim.y, dim.z = record.cluster
    attrs.append(cluster)
    if programmatic_serialization:
        # Lets this kernel start before its stream predecessor finishes; only correct for a kernel
        # that waits on it (griddepcontrol.wait), hence opt-in per launch.
        pss = cu.CUlaunchAttribute()
        pss.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        pss.value.programmaticStreamSerializationAllowed = 1
        attrs.append(pss)
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = record.block
    cfg.sharedMemBytes = record.smem_bytes
    cfg.hStream = stream
    cfg.attrs = attrs  # the binding copies the list into the C struct
    cfg.numAttrs = len(attrs)
    return cfg


def _new_config(loaded: LoadedKernel, key: tuple):
    grid, stream, pss = key
    rec = loaded.record
    if (len(grid) != 3
            or any(type(g) is not int or not 1 <= g <= hi for g, hi in zip(grid, _MAX_GRID, strict=True))
            or any(g % c for g, c in zip(grid, rec.cluster, strict=True))):
        raise InvalidArgumentError(
            f"grid {grid!r} is not a launchable grid for cluster {rec.cluster}",
            "pass 3 positive ints (x < 2**31, y and z <= 65535), each a multiple of the cluster dim; "
            "compute it with the manifest's grid rule", rec.id)
    if type(stream) is not int or stream < 0:
        raise InvalidArgumentError(f"stream {stream!r} is not an int handle",
                                   "normalize it with hgemm_sm90.stream.stream_handle()", rec.id)
    cfg = build_config(loaded.cu, rec, grid, stream, pss)
    if len(loaded.configs) >= _CONFIGS_PER_KERNEL:
        loaded.configs.clear()
    loaded.configs[key] = cfg
    return cfg


def _new_pointer_array(loaded: LoadedKernel, key, base: int, offsets: tuple):
    rec = loaded.record
    if offsets != rec.param_offsets:
        raise InvalidArgumentError(f"parameter offsets {list(offsets)} differ from the manifest's "
                                   f"{list(rec.param_offsets)}",
                                   "pass record.param_offsets (or None)", rec.id)
    arr = (_c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
    entry = (_addressof(arr), arr)  # the array rides along: whoever holds the entry keeps it alive
    if len(loaded.pointer_arrays) >= _POINTER_ARRAYS_PER_KERNEL:
        loaded.pointer_arrays.clear()
    loaded.pointer_arrays[key] = entry
    return entry


def launch_raw(loaded: LoadedKernel, grid: tuple[int, int, int], stream: int,
               params: bytes | bytearray, param_offsets: Sequence[int] | None = None, *,
               programmatic_serialization: bool = False) -> None:
    """Launch ``loaded`` on ``grid`` in ``stream`` (an int handle, see ``stream.stream_handle``).

    ``params`` is the packed parameter buffer (bytes, bytearray or a ctypes array) of exactly
    ``record.param_bytes`` bytes with each parameter at its manifest offset; ``param_offsets`` are those
    offsets (None: the record's). Raises ``InvalidArgumentError`` for a malformed grid/stream/buffer and
    ``CudaDriverError`` (with the instance id) if the driver rejects the launch.
    """
    if type(grid) is not tuple:
        grid = tuple(grid)
    key = (grid, stream, programmatic_serialization)
    cfg = loaded.configs.get(key)
    if cfg is None:
        cfg = _new_config(loaded, key)

    rec = loaded.record
    kind = type(params)
    if kind is bytearray:
        size = len(params)
        # A 1-char view pins the bytearray (no resize while it lives) and yields its address.
        holder = _char_from_buffer(params) if size else params
        base = _addressof(holder) if size else 0
    elif kind is bytes:
        size, holder = len(params), params  # `holder` keeps the memory alive through the call
        base = _cast(params, _c_void_p).value or 0
    elif isinstance(params, _Array):
        size, holder, base = ctypes.sizeof(params), params, _addressof(params)
    else:
        raise InvalidArgumentError(f"parameter buffer of type {kind.__name__}",
                                   "pack the parameters into bytes, a bytearray or a ctypes array", rec.id)
    if size != rec.param_bytes:
        raise InvalidArgumentError(f"parameter buffer is {size} bytes, the kernel takes {rec.param_bytes}",
                                   "pack exactly record.param_bytes bytes", rec.id)
    if param_offsets is None or param_offsets is rec.param_offsets:
        pkey, offsets = base, rec.param_offsets  # the common case: a cheap int key
    else:
        offsets = param_offsets if type(param_offsets) is tuple else tuple(param_offsets)
        pkey = (base, offsets)
    entry = loaded.pointer_arrays.get(pkey)
    if entry is None:
        entry = _new_pointer_array(loaded, pkey, base, offsets)

    err = loaded.cu.cuLaunchKernelEx(cfg, loaded.function, entry[0], 0)[0]
    del holder  # the launch has copied the parameter values
    if err:
        raise CudaDriverError("cuLaunchKernelEx", result_name(err), rec.id, int(err))
