"""`python -m build_tools.wgmma_check ID [ID ...]`: does ptxas keep each instance's WGMMAs asynchronous?

When ptxas cannot prove that no other instruction touches a WGMMA accumulator while the WGMMA is in flight,
it silently makes every WGMMA of the kernel wait for completion (ptxas info C7514, "wgmma.mma_async
instructions are serialized", plus C7517 "warpgroup.wait is injected"). The cubin is still correct, only
much slower: a first version of the double-buffered fp8 promotion hit it through the loop-carried copies
of an in-flight accumulator and ran at 0.70x of cuBLAS instead of 0.97x. The DSL hides ptxas's messages,
so this tool recompiles the instances to PTX (CUTE_DSL_KEEP=ptx) and assembles that with the CUDA
toolkit's `ptxas -v` (from PATH or $CUDA_HOME/bin) to read them.

Exit status: 0 if no instance is serialized, 1 if one is, 2 if ptxas is missing or an id is bad.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SERIALIZED = ("C7514", "C7517")  # ptxas info codes of serialized WGMMAs / injected waits


def find_ptxas() -> str | None:
    """The CUDA toolkit's ptxas: PATH first, then $CUDA_HOME/bin."""
    found = shutil.which("ptxas")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(home, "bin", "ptxas") if home else None
    return str(candidate) if candidate and candidate.exists() else None


def serialization_messages(ptxas: str, ptx: Path) -> list[str]:
    """ptxas's serialization messages for one PTX file (empty: the WGMMAs stay asynchronous)."""
    done = subprocess.run(
        [ptxas, "-arch=sm_90a", "-v", str(ptx), "-o", os.devnull], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx.name}:\n{done.stderr[-2000:]}")
    log = (done.stdout + done.stderr).splitlines()
    return [line.strip() for line in log if any(code in line for code in SERIALIZED)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m build_tools.wgmma_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("ids", nargs="+", metavar="ID", help="instance ids (kernel_specs.yaml names)")
    args = parser.parse_args(argv)
    ptxas = find_ptxas()
    if ptxas is None:
        print("ptxas not found: put the CUDA toolkit's bin/ on PATH or set CUDA_HOME", file=sys.stderr)
        return 2

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from codegen.dsl import compile_instance, configure_environment
    from runtime.spec import GemmSpec, SpecError

    try:
        specs = [GemmSpec.parse(i) for i in args.ids]
    except SpecError as e:
        print(e, file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory(prefix="hgemm-wgmma-") as tmp:
        configure_environment(tmp)
        os.environ["CUTE_DSL_KEEP"] = "cubin,ptx"  # before the first `import cutlass` (compile_instance)
        for spec in specs:
            compile_instance(spec, Path(tmp) / spec.name())
            # Move the dump aside: dump names derive from dtypes, not tiles, so a later compile may reuse one.
            (dumped,) = Path(tmp).glob("*.ptx")
            ptx = dumped.rename(Path(tmp) / spec.name() / "kernel.ptx")
            messages = serialization_messages(ptxas, ptx)
            bad += bool(messages)
            print(f"{'SERIALIZED' if messages else 'ok':10s} {spec.name()}")
            for line in messages:
                print(f"    {line[:200]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
