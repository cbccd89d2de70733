"""Bad input from users, on the fake kernels (no compiler needed): each raises an HgemmError naming the
problem and the fix before anything is launched, whether or not an equal-looking call was cached first."""

import pytest
from fake_kernels import IDS

import runtime

A, B, D = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000
GOOD = dict(ptrs=(A, B, D), stream=0, m=128, n=256, k=64)


def _launch(**kw):
    args = dict(GOOD, **kw)
    runtime.launch(IDS[0], args.pop("ptrs"), args.pop("stream"), **args)


def _refused(fake, match, **kw):
    before = fake.count("cuLaunchKernelEx")
    with pytest.raises(runtime.HgemmError, match=match) as err:
        _launch(**kw)
    assert "Fix:" in str(err.value) and fake.count("cuLaunchKernelEx") == before
    return err.value


@pytest.mark.parametrize("bad", [12345, None, ["x"], {"id": 1}, b"sm90"], ids=repr)
def test_a_non_string_instance_id_is_an_invalid_argument(fake, rt, bad):
    _launch()  # something cached, so the cached path is tried first
    with pytest.raises(runtime.InvalidArgumentError, match="not a string") as err:
        runtime.launch(bad, (A, B, D), 0, m=128, n=256, k=64)
    assert "hgemm_sm90.instances()" in err.value.fix and fake.count("cuLaunchKernelEx") == 1


# (a valid value that gets cached, an equal-hashing value the rules refuse, the error): 128.0 == 128 and
# True == 1 are equal dict keys, so a cache keyed on values alone would take the second for the first.
CONFUSED = [
    (dict(m=128), dict(m=128.0), "m=128.0 is not an integer"),
    (dict(n=256), dict(n=256.0), "n=256.0 is not an integer"),
    (dict(m=1), dict(m=True), "m=True is not an integer"),
    (dict(batch=1), dict(batch=True), "batch=True is not an integer"),
    (dict(batch=1), dict(batch=1.0), "batch=1.0 is not an integer"),
    (dict(group_size=1), dict(group_size=True), "group_size=True"),
    (dict(lda=64), dict(lda=64.0), "lda=64.0 is not an integer"),
    (dict(batch=2, batch_stride_d=2**16), dict(batch=2, batch_stride_d=65536.0), "batch_stride_d=65536.0"),
    (dict(raster_along_m=1), dict(raster_along_m=1.0), "raster_along_m=1.0"),
    (dict(pdl=True), dict(pdl=1), "pdl=1"),
    (dict(pdl=True, b_ready=True), dict(pdl=True, b_ready=1), "b_ready=1"),
    (dict(stream=1), dict(stream=True), "cannot use bool True as a CUDA stream"),
    (dict(ptrs=(A, B, D)), dict(ptrs=(float(A), B, D)), "pointer a=.* is not an int"),
    (dict(alpha=1.0), dict(alpha=True), "alpha=True is not a real number"),
]


@pytest.mark.parametrize(("good", "bad", "message"), CONFUSED, ids=[c[2][:24] for c in CONFUSED])
def test_equal_looking_values_are_refused_also_after_the_valid_one(fake, rt, good, bad, message):
    _refused(fake, message, **bad)  # first call: the full rules
    _launch(**good)
    assert fake.count("cuLaunchKernelEx") == 1
    _refused(fake, message, **bad)  # same key as the cached launch: still refused


def test_bool_raster_and_numpy_like_ints_are_taken(fake, rt):
    class Index:  # an integer-like scalar (numpy.int64 behaves so): converted, never cached as such
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    _launch(raster_along_m=True)
    _launch(raster_along_m=1)
    _launch(m=Index(128), group_size=2)
    _launch(m=128, group_size=2)
    assert fake.count("cuLaunchKernelEx") == 4
    assert len(rt.plans[IDS[0]].entries) == 2  # raster 1 / True share one entry, group 2 another


def test_a_negative_pointer_is_printed_as_a_negative_number(fake, rt):
    err = _refused(fake, "is negative", ptrs=(-16, B, D))
    assert "a=-0x10 is negative" in str(err) and "0x-" not in str(err)


@pytest.mark.parametrize(
    "ptrs,message",
    [
        ((A, B), "three device pointers"),
        (None, "three device pointers"),
        ((A, B, 0), "pointer d is null"),
        ((A, B, D + 8), "not a 16-byte"),
        ((A, B, 2**57), "below 2[*][*]57"),
        ((A, "b", D), "not an int"),
    ],
)
def test_bad_pointers(fake, rt, ptrs, message):
    _launch()
    _refused(fake, message, ptrs=ptrs)


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(alpha=float("nan")), "alpha=nan is not a finite float32"),
        (dict(alpha="1"), "alpha='1' is not a real number"),
        (dict(beta=0.5), "beta=0.5 given, but this instance does not read a C"),
        (dict(c=A + 2**20), "c given, but this instance does not read a C"),
        (dict(stream=-1), "unsigned 64-bit"),
        (dict(stream=None), "not a stream"),
    ],
)
def test_bad_scales_c_and_streams(fake, rt, kw, message):
    _launch()
    _refused(fake, message, **kw)


def test_alpha_as_int_is_taken_and_rounded_like_a_float(fake, rt):
    import struct

    rec = rt.manifest.record(IDS[0])
    fake.param_sizes = tuple(p.size for p in rec.params)
    _launch(alpha=2)  # first call
    _launch(alpha=0.1)  # cached
    _launch(alpha=3)  # cached shape, an int scale: converted on the way
    index = [p.name for p in rec.params].index("alpha")
    assert [x.values[index] for x in fake.launches] == [struct.pack("<f", v) for v in (2.0, 0.1, 3.0)]
