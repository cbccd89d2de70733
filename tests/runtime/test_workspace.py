"""`gemm()`'s split-K workspaces (runtime/workspace.py) against a stub driver: one zeroed allocation per
stream (and per context for the default streams), made once, zeroed on that stream, never while the stream
is being captured, and never handed out for more than it holds."""

from __future__ import annotations

import contextlib
import types

from runtime import workspace
from runtime.workspace import CAPACITY, Workspaces

NONE, ACTIVE = "none", "active"


class StubDriver:
    CUstreamCaptureStatus = types.SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=NONE)

    def __init__(self):
        self.capturing: set[int] = set()
        self.allocs: list[int] = []
        self.memsets: list[tuple] = []

    def cuStreamIsCapturing(self, stream):
        return 0, ACTIVE if stream in self.capturing else NONE

    def cuMemAlloc(self, nbytes):
        self.allocs.append(nbytes)
        return 0, 0x7000_0000_0000 + 0x1000_0000 * len(self.allocs)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        self.memsets.append((ptr, value, count, stream))
        return (0,)


class StubRuntime:
    def __init__(self):
        self.cu = StubDriver()
        self.context = 0xC0
        rt = self
        self.devices = types.SimpleNamespace(
            current_context=lambda: rt.context,
            stream_context=lambda s: rt.context if s in (0, 1, 2) else 0xC1,
            pushed=lambda ctx: contextlib.nullcontext(rt.cu),
        )


def _stub(monkeypatch):
    monkeypatch.setattr(workspace, "check", lambda result, call: result[1] if len(result) > 1 else None)
    monkeypatch.setattr(workspace, "handle", lambda obj: obj)
    rt = StubRuntime()
    return rt, Workspaces(rt)


def test_one_zeroed_workspace_per_stream_made_once(monkeypatch):
    rt, ws = _stub(monkeypatch)
    a = ws.get(0x5000, 1024)
    assert a is not None and ws.get(0x5000, CAPACITY) == a  # reused, also for a bigger need within capacity
    assert rt.cu.allocs == [CAPACITY] and rt.cu.memsets == [(a, 0, CAPACITY // 4, 0x5000)]
    b = ws.get(0x6000, 1024)
    assert b not in (None, a) and len(rt.cu.allocs) == 2  # another stream: its own


def test_default_streams_are_per_context(monkeypatch):
    rt, ws = _stub(monkeypatch)
    first = ws.get(0, 64)
    rt.context = 0xC2  # another context current on this thread: the legacy stream means another queue
    assert ws.get(0, 64) != first and len(rt.cu.allocs) == 2


def test_none_while_capturing_or_too_big(monkeypatch):
    rt, ws = _stub(monkeypatch)
    rt.cu.capturing.add(0x5000)
    assert ws.get(0x5000, 64) is None and rt.cu.allocs == []  # no allocation inside a capture
    rt.cu.capturing.clear()
    assert ws.get(0x5000, CAPACITY + 1) is None and rt.cu.allocs == []
    made = ws.get(0x5000, 64)
    rt.cu.capturing.add(0x5000)
    assert ws.get(0x5000, 64) == made  # made before the capture: the graph records its address
    assert ws.get(0x5000, CAPACITY + 1) is None
