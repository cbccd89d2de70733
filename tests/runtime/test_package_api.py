"""The package's lazily imported API (runtime/__init__.py `_API`: name -> the submodule defining it).

A submodule must not be named like the function it defines: importing it (`import hgemm_sm90.<module>`,
which torch_ops or a user may do) makes Python set the package attribute of that name to the module,
so `hgemm_sm90.<function>` would then be the module (seen with `grouped_gemm`, 2026-12-01)."""

from __future__ import annotations

import importlib
import types

import runtime


def test_no_api_name_is_also_a_module_name():
    assert not set(runtime._API) & set(runtime._API.values())


def test_importing_every_api_module_leaves_the_api_callable():
    for module in set(runtime._API.values()):
        importlib.import_module(f"runtime.{module}")
    for name in runtime._API:
        value = getattr(runtime, name)
        assert not isinstance(value, types.ModuleType), name
        assert callable(value), name
