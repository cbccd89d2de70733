"""build_tools/bench.py `instance_calls` (shared by bench/tune and l2_probe) without a GPU: one launch per
buffer set with the set's pointers, C with beta 1 only where a set has C, the launch options passed on, and
one zeroed workspace shared by all the calls when (and only when) the problem needs one."""

from types import SimpleNamespace

from build_tools.bench import instance_calls


class Buf:
    def __init__(self, ptr: int):
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


class FakeTorch:
    uint8 = "uint8"

    def __init__(self):
        self.zeroed = []

    def zeros(self, n, dtype, device):
        assert (dtype, device) == ("uint8", "cuda")
        self.zeroed.append(n)
        return Buf(9000 + len(self.zeroed))


def fake_hg(ws_bytes: int):
    launches = []
    hg = SimpleNamespace(
        workspace_bytes=lambda iid, **size: ws_bytes,
        launch=lambda iid, ptrs, stream, **kw: launches.append((iid, ptrs, stream, kw)),
    )
    return hg, launches


SIZE = {"m": 8, "n": 16, "k": 32, "batch": 1}
INST = SimpleNamespace(id="sm90_x")


def test_one_launch_per_set_with_its_pointers_and_options():
    torch, (hg, launches) = FakeTorch(), fake_hg(0)
    sets = [(Buf(1), Buf(2), Buf(3), None), (Buf(11), Buf(12), Buf(13), Buf(14))]
    calls, workspace = instance_calls(torch, hg, INST, sets, SIZE, 77, pdl=True)
    assert workspace is None and torch.zeroed == []
    for call in calls:
        call()
    assert launches == [
        ("sm90_x", (1, 2, 3), 77, {**SIZE, "pdl": True}),
        ("sm90_x", (11, 12, 13), 77, {**SIZE, "c": 14, "beta": 1.0, "pdl": True}),
    ]


def test_a_needed_workspace_is_zeroed_once_and_shared():
    torch, (hg, launches) = FakeTorch(), fake_hg(4096)
    sets = [(Buf(1), Buf(2), Buf(3), None)] * 3
    calls, workspace = instance_calls(torch, hg, INST, sets, SIZE, 0, raster_along_m=1, group_size=3)
    for call in calls:
        call()
    assert torch.zeroed == [4096] and workspace.data_ptr() == 9001
    assert [kw["workspace"] for *_, kw in launches] == [9001] * 3
    assert all(kw["raster_along_m"] == 1 and kw["group_size"] == 3 for *_, kw in launches)
