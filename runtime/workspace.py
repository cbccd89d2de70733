"""The split-K and stream-K workspaces that `gemm()` owns, so that its callers never see one (`launch()`
takes the caller's own, like cuBLASLt).

One zeroed device allocation of `CAPACITY` bytes per stream (and, for the default streams, per context),
made on the first split-K call on that stream and kept for the life of the process: a kernel in flight,
or a CUDA graph captured with its address, may use it at any later time, so it is never freed or moved.
It is zeroed with cuMemsetD32Async on the stream itself, so the first kernel finds its arrival counters
at 0 (every split-K launch leaves them at 0 again, codegen/kernels/epilogue.py `_reduce_parts`). Split-K
launches on one stream run one after another, so one workspace serves them all.

While a stream is being captured into a CUDA graph no workspace is created for it (allocating is illegal
then in the global capture mode, and a memset would be captured instead of run): a call that needs one
gets None and runs its instance with k_splits=1 (no workspace; correct, but other bits than the split
launch) until the stream has one. Warm a stream up outside capture (as torch's graph capture asks anyway)
to capture split-K launches. A problem whose default split needs more than `CAPACITY` (none of the shipped
instances does: the default split count keeps one wave of units, runtime/scheduling.py) likewise runs
with k_splits=1; a stream-K instance without a workspace runs every tile whole.
"""

from __future__ import annotations

import threading

from .device import DEFAULT_STREAMS
from .driver import check, handle

# Bytes: the largest shipped need, a stream-K 128 x 256 tile's two fp32 partials per SM (33 MiB,
# runtime/scheduling.py `stream_workspace_bytes`), with room to spare; split-K's default split keeps one
# wave of 128 x 128 partials (8.4 MiB). cuBLAS keeps a workspace of this order per stream on Hopper too.
CAPACITY = 36 << 20

_lock = threading.Lock()


class Workspaces:
    """The workspaces of one runtime, by stream (and context, for the default streams)."""

    def __init__(self, runtime):
        self._rt = runtime
        self._by_stream: dict = {}

    def get(self, stream: int, nbytes: int) -> int | None:
        """The address of this stream's workspace if it holds `nbytes`, else None (see the module
        docstring: too big, or the stream is being captured before it has one)."""
        key = stream if stream not in DEFAULT_STREAMS else (stream, self._rt.devices.current_context())
        ptr = self._by_stream.get(key)
        if ptr is None:
            if nbytes > CAPACITY:
                return None
            ptr = self._create(key, stream)
        return ptr if nbytes <= CAPACITY else None

    def _create(self, key, stream: int) -> int | None:
        rt = self._rt
        cu = rt.cu
        status = check(cu.cuStreamIsCapturing(stream), "cuStreamIsCapturing")
        if status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return None
        with _lock:
            ptr = self._by_stream.get(key)
            if ptr is None:
                with rt.devices.pushed(rt.devices.stream_context(stream)):
                    ptr = handle(check(cu.cuMemAlloc(CAPACITY), "cuMemAlloc"))
                    check(cu.cuMemsetD32Async(ptr, 0, CAPACITY // 4, stream), "cuMemsetD32Async")
                self._by_stream[key] = ptr
        return ptr
