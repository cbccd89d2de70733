"""build_tools/launch_cost.py on the fake driver: its bare call is the very launch `launch` makes (same
config, function and parameter bytes), its timing loop interleaves and synchronizes, and its CLI loads."""

import subprocess
import sys
from pathlib import Path

from fake_kernels import IDS

import runtime
from build_tools import launch_cost

A, B, D = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000


def test_the_bare_call_repeats_the_launch_exactly(fake, rt):
    fake.param_sizes = tuple(p.size for p in rt.manifest.record(IDS[0]).params)
    s = fake.new_stream(fake.ctx(0))
    other = (A + 0x100_0000, B + 0x100_0000, D + 0x100_0000)
    cases = launch_cost.runtime_cases(runtime, IDS[0], (A, B, D), s, 256, 256, 64, other)
    cases["bare"]()
    cases["launch"]()
    first, bare, ours = fake.launches[0], fake.launches[-2], fake.launches[-1]
    for x in (bare, ours):
        assert x.config is first.config and x.function is first.function and x.values == first.values
    cases["launch, 2 pointer sets"]()
    cases["launch, 2 pointer sets"]()
    assert fake.launches[-2].values != first.values and fake.launches[-1].values == first.values


def test_measure_interleaves_chunks_and_syncs_between_them(fake, rt):
    calls, syncs = [], []
    cases = {"x": lambda: calls.append("x"), "y": lambda: calls.append("y")}
    samples = launch_cost.measure(
        cases, calls=30, chunk=10, sync=lambda: syncs.append(len(calls)), warmup_chunks=1
    )
    assert {k: len(v) for k, v in samples.items()} == {"x": 3, "y": 3}
    assert len(syncs) == 8 and all(n % 10 == 0 for n in syncs)  # a sync after every chunk
    assert calls[:10] == ["x"] * 10 and calls[10:20] == ["y"] * 10 and calls[20:30] == ["y"] * 10  # rotated
    lines, ratio = launch_cost.summary({"launch": [2.0, 3.0, 2.5], "bare": [1.0, 1.0, 1.0]})
    assert ratio == 2.5 and "launch / bare = 2.50 (ratio of medians), 2.50 (median of per-round" in lines[-1]


def test_on_the_fake_driver_launch_stays_near_the_bare_call(fake, rt, capsys):
    s = fake.new_stream(fake.ctx(0))
    fake.cuLaunchKernelEx = lambda cfg, fn, kp, extra: (0,)
    cases = launch_cost.runtime_cases(runtime, IDS[0], (A, B, D), s, 256, 256, 64)
    samples = launch_cost.measure(cases, calls=20000, chunk=200, sync=lambda: None)
    lines, _ = launch_cost.summary(samples)
    with capsys.disabled():
        print("\n" + "\n".join(lines) + "   (fake driver: a no-op cuLaunchKernelEx)")
    assert min(samples["launch"]) < 25  # µs; a loose guard for slow shared CI machines


def test_the_cli_loads_without_a_gpu():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "build_tools.launch_cost", "--help"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--instance" in out.stdout and "--calls" in out.stdout
