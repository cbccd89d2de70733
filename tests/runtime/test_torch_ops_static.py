"""hgemm_sm90.torch_ops without torch: importing it stays torch-free, register() fails with a typed error
where torch is missing, the implementations' signatures match the schemas given to torch.library, and
the shape/dtype rules that the fake and the real implementations share.

Why on the CPU: the ops themselves only run on the GPU tier (tests/gpu/test_torch_ops.py), but a schema
that disagrees with its Python implementation, or a shape rule that is wrong, would only show there, on
a machine that is rarely at hand; these tests catch both here.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import torch_ops
from runtime.errors import HgemmError, InvalidArgumentError

REPO = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict:
    """Run ``code`` (which prints one JSON line) in a fresh interpreter that imports the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n{code}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_does_not_import_torch():
    # With site-packages: where torch is installed, a stray import would load it.
    result = _run("import json, runtime.torch_ops\nprint(json.dumps({'torch': 'torch' in sys.modules}))")
    assert result == {"torch": False}


def test_register_without_torch_is_a_typed_error_and_can_be_retried():
    # sys.modules["torch"] = None makes `import torch` raise ImportError, as on a machine without torch.
    result = _run(
        "import json\n"
        "sys.modules['torch'] = None\n"
        "from runtime import torch_ops\n"
        "from runtime.errors import MissingDependencyError\n"
        "errors = []\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        torch_ops.register()\n"
        "    except MissingDependencyError as e:\n"
        "        errors.append(str(e))\n"
        "print(json.dumps({'errors': errors, 'ops': torch_ops._ops is None}))"
    )
    assert len(result["errors"]) == 2, "a failed register() must not leave a half-registered state"
    assert "needs torch" in result["errors"][0] and "Fix:" in result["errors"][0]
    assert result["ops"] is True


# --- schemas against the implementations ---------------------------------------------------------------


def parse_schema(schema: str) -> tuple[list[tuple[str, object, bool]], str]:
    """([(name, default or inspect.Parameter.empty, keyword-only)], return type) of a schema string like
    ``(Tensor a, *, float beta=1.0) -> Tensor``."""
    assert schema.startswith("(") and ") -> " in schema, schema
    args, ret = schema[1:].split(") -> ")
    out, kw_only = [], False
    for item in args.split(", "):
        if item == "*":
            kw_only = True
            continue
        typ, _, rest = item.partition(" ")
        name, eq, default = rest.partition("=")
        if not eq:
            value = inspect.Parameter.empty
        elif default == "None":
            value = None
        elif default in ("True", "False"):
            value = default == "True"
        else:
            value = float(default) if typ == "float" else default
        out.append((name, value, kw_only))
    return out, ret


def signature_args(fn) -> list[tuple[str, object, bool]]:
    return [
        (p.name, p.default, p.kind is inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(fn).parameters.values()
    ]


def test_every_op_has_a_schema_and_both_implementations():
    ops = {"gemm", "mm", "addmm", "bmm", "gemm_out", "grouped_mm"}
    assert set(torch_ops.SCHEMAS) == set(torch_ops.IMPLS) == ops


@pytest.mark.parametrize(
    ("a", "b", "offs", "a_idx", "out"),
    [
        ((700, 512), (8, 512, 264), (9,), None, (700, 264)),  # groups of rows
        ((300, 512), (8, 512, 264), (9,), (600,), (600, 264)),  # gathered rows: len(a_idx) of them
        ((264, 1000), (1000, 520), (5,), None, (4, 264, 520)),  # groups of K: one result per group
        ((264, 300), (600, 520), (7,), (600,), (6, 264, 520)),  # gathered K: b's K is len(a_idx)
    ],
)
def test_grouped_mm_output_shapes(a, b, offs, a_idx, out):
    assert torch_ops.grouped_shape(a, b, offs, a_idx) == out


@pytest.mark.parametrize(
    ("a", "b", "offs", "a_idx", "message"),
    [
        ((700, 512), (8, 264, 512), (9,), None, "have different K"),  # (G, N, K) weights not transposed
        ((8, 700, 512), (8, 512, 264), (9,), None, "pass a 2-D a"),
        ((264, 1000), (999, 520), (5,), None, "have different K"),
        ((264, 300), (600, 520), (7,), (599,), "have different K"),
        ((700, 512), (8, 512, 264), (3, 3), None, "1-D offs"),
    ],
)
def test_grouped_mm_refuses_bad_shapes(a, b, offs, a_idx, message):
    with pytest.raises(torch_ops.InvalidArgumentError, match=message):
        torch_ops.grouped_shape(a, b, offs, a_idx)


@pytest.mark.parametrize("name", sorted(torch_ops.SCHEMAS))
def test_implementations_match_the_schema(name):
    """The dispatcher calls the implementations with the schema's arguments (keyword-only ones by
    keyword): names, order, defaults and keyword-only markers must agree, for the real and the fake."""
    args, _ = parse_schema(torch_ops.SCHEMAS[name])
    real, fake = torch_ops.IMPLS[name]
    for fn in (real, fake):
        got = signature_args(fn)
        assert [a[0] for a in got] == [a[0] for a in args], fn.__name__
        for (pname, pdefault, pkw), (_, sdefault, skw) in zip(got, args):
            assert pkw == skw, f"{fn.__name__}: {pname} keyword-only {pkw}, schema says {skw}"
            if sdefault is inspect.Parameter.empty:
                assert pdefault is inspect.Parameter.empty, f"{fn.__name__}: {pname} has a default"
            else:
                assert pdefault == sdefault and type(pdefault) is type(sdefault), (
                    f"{fn.__name__}: {pname}={pdefault!r}, schema default {sdefault!r}"
                )


def test_the_requested_schemas():
    """The spellings users write: gemm's positional form, addmm's torch.addmm convention, the mutating
    variant's alias annotation and no return."""
    schemas = torch_ops.SCHEMAS
    assert schemas["gemm"].startswith(
        "(Tensor a, Tensor b, Tensor? c=None, float alpha=1.0, float beta=0.0, bool fp8_fast_accum=False, "
        "ScalarType? out_dtype=None, bool fp16_accum=False, bool pdl=False, bool b_ready=False)"
    )
    assert schemas["addmm"].startswith("(Tensor c, Tensor a, Tensor b, *, float beta=1.0, float alpha=1.0")
    assert schemas["mm"].startswith("(Tensor a, Tensor b, *") and schemas["bmm"].startswith(
        "(Tensor a, Tensor b, *"
    )
    assert "Tensor(a!) out" in schemas["gemm_out"] and schemas["gemm_out"].endswith("-> ()")
    for name in ("gemm", "mm", "addmm", "bmm"):
        assert schemas[name].endswith("-> Tensor") and "(a!)" not in schemas[name]
    for name in ("gemm", "mm", "addmm", "bmm", "gemm_out"):  # fp16 accumulation: the same on every GEMM op
        assert "bool fp16_accum=False" in schemas[name], name
        assert "bool pdl=False, bool b_ready=False" in schemas[name], name  # PDL chains, as gemm()
    assert schemas["grouped_mm"].startswith("(Tensor a, Tensor b, Tensor offs, Tensor? a_idx=None, *")


# --- the shared shape and dtype rules -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "op", "out"),
    [
        ((64, 32), (32, 16), "gemm", (64, 16)),
        ((64, 32), (32, 16), "mm", (64, 16)),
        ((64, 32), (32, 16), "addmm", (64, 16)),
        ((3, 64, 32), (3, 32, 16), "bmm", (3, 64, 16)),
        ((3, 64, 32), (32, 16), "gemm", (3, 64, 16)),  # 2-D b: folded into M
        ((64, 32), (3, 32, 16), "gemm", (3, 64, 16)),
        ((2, 1, 64, 32), (5, 32, 16), "gemm", (2, 5, 64, 16)),  # broadcast batch
        ((1, 8), (8, 1), "gemm", (1, 1)),
        ((0, 32), (32, 16), "gemm", (0, 16)),
        ((64, 0), (0, 16), "gemm", (64, 16)),
    ],
)
def test_matmul_shape(a, b, op, out):
    assert torch_ops.matmul_shape(a, b, op) == out


@pytest.mark.parametrize(
    ("a", "b", "op", "words"),
    [
        ((64, 32), (16, 16), "gemm", "K = 32"),
        ((32,), (32, 16), "gemm", "at least 2"),
        ((3, 64, 32), (3, 32, 16), "mm", "2-D"),
        ((64, 32), (32, 16), "bmm", "3-D"),
        ((3, 64, 32), (4, 32, 16), "bmm", "batch sizes"),
        ((3, 64, 32), (4, 32, 16), "gemm", "do not broadcast"),
    ],
)
def test_matmul_shape_errors(a, b, op, words):
    with pytest.raises(InvalidArgumentError, match=words) as e:
        torch_ops.matmul_shape(a, b, op)
    assert isinstance(e.value, HgemmError) and e.value.fix


class FakeDtype:
    """What torch.<dtype> looks like to dtype_name: its str."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


def test_dtype_name():
    assert torch_ops.dtype_name(FakeDtype("float8_e4m3fn")) == "float8_e4m3fn"


@pytest.mark.parametrize(
    ("a", "b", "out_dtype", "want"),
    [
        ("bfloat16", "bfloat16", None, "bfloat16"),
        ("float16", "float16", None, "float16"),
        ("float8_e4m3fn", "float8_e4m3fn", None, "bfloat16"),  # fp8 inputs: bf16 by default
        ("float8_e5m2", "float8_e4m3fn", None, "bfloat16"),
        ("bfloat16", "bfloat16", "float32", "float32"),
        ("float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn"),
        ("float8_e4m3fn", "float8_e4m3fn", "float8_e5m2", "float8_e5m2"),
    ],
)
def test_output_dtype(a, b, out_dtype, want):
    assert torch_ops.output_dtype_name(a, b, out_dtype) == want


@pytest.mark.parametrize(
    ("a", "b", "out_dtype", "words"),
    [
        ("float32", "float32", None, "a has dtype torch.float32"),
        ("bfloat16", "int8", None, "b has dtype torch.int8"),
        ("bfloat16", "bfloat16", "float64", "out_dtype has dtype torch.float64"),
    ],
)
def test_output_dtype_errors(a, b, out_dtype, words):
    with pytest.raises(InvalidArgumentError, match=words):
        torch_ops.output_dtype_name(a, b, out_dtype)


@pytest.mark.parametrize("c", [(64, 16), (16,), (1, 16), (64, 1), (1,), ()])
def test_c_broadcasts_to_the_output(c):
    torch_ops.check_c(c, (64, 16), 1.0)
    torch_ops.check_c((3, *c) if len(c) == 2 else c, (3, 64, 16), 0.5)


@pytest.mark.parametrize("c", [(32, 16), (64, 8), (2, 64, 16), (17,)])
def test_c_that_does_not_broadcast(c):
    with pytest.raises(InvalidArgumentError, match="does not broadcast"):
        torch_ops.check_c(c, (64, 16), 1.0)


def test_beta_needs_c():
    torch_ops.check_c(None, (64, 16), 0.0)
    with pytest.raises(InvalidArgumentError, match="without c"):
        torch_ops.check_c(None, (64, 16), 0.5)
