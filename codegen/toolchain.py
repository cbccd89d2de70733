"""The toolchain fingerprint: what, besides the spec, determines a cubin and its launch contract.

Every compiled instance is cached under a key made of its canonical spec and this stamp (STYLE P8), and
the stamp is written into the manifest. The DSL version is pinned exactly (pyproject.toml's
build-system.requires says the same; tests/unit/test_toolchain.py holds the two together) because the
launch contract — parameter order, TMA descriptor encoding, grid rule — is captured from that DSL's host
code and may change with it.
"""

from __future__ import annotations

import hashlib
import sys
from importlib import metadata
from pathlib import Path

PINNED_DSL_VERSION = "4.8.1"

_CODEGEN_DIR = Path(__file__).resolve().parent
# Sources whose change must invalidate every cached cubin / contract.
KERNEL_SOURCES = (
    "kernels/gemm_sm90.py",
    "kernels/tile_scheduler.py",
    "dsl.py",
    "validity.py",
    "contract.py",
    "oracle.py",
    "oracle_stub.c",
)


class ToolchainError(RuntimeError):
    pass


def _dist_versions() -> dict[str, str]:
    wanted = ("nvidia-cutlass-dsl", "cuda-python", "cuda-bindings")
    out = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(wanted):
            out[name] = dist.version
    return dict(sorted(out.items()))


def source_sha256() -> str:
    h = hashlib.sha256()
    for rel in KERNEL_SOURCES:
        path = _CODEGEN_DIR / rel
        h.update(rel.encode())
        h.update(path.read_bytes() if path.exists() else b"<missing>")
    return h.hexdigest()


def toolchain_stamp() -> dict[str, str]:
    dists = _dist_versions()
    return {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "dists": ";".join(f"{k}=={v}" for k, v in dists.items()),
        "src_sha256": source_sha256(),
    }


def check_pinned_dsl() -> str:
    """Refuse to build with another DSL than the one the contract was captured with."""
    try:
        found = metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        raise ToolchainError(
            f"nvidia-cutlass-dsl is not installed; install nvidia-cutlass-dsl=={PINNED_DSL_VERSION}"
        ) from None
    if found != PINNED_DSL_VERSION:
        raise ToolchainError(
            f"nvidia-cutlass-dsl {found} is installed but this tree's launch contract is pinned to "
            f"{PINNED_DSL_VERSION}; install nvidia-cutlass-dsl=={PINNED_DSL_VERSION}, or bump "
            "PINNED_DSL_VERSION (and pyproject.toml) after re-running the CPU oracle tests"
        )
    return found
