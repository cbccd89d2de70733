"""Taking a kernel directory built elsewhere (`--kernels-from DIR`, or HGEMM_KERNELS_FROM=DIR under pip).

The last job of a sharded CI build has the merged kernel directory (codegen/shards.py) and must turn it
into a wheel without compiling again. CMakeLists.txt always runs `python -m codegen.build`; with this
option that build adopts DIR instead of compiling, but only if DIR is exactly what it would have built:
a manifest of the requested profile, with this environment's toolchain stamp (so the same commit, DSL
and Python), listing exactly the instances the profile selects, each cubin matching its record's size
and sha256. Anything else is a one-line error, never a wheel of other kernels. The directory is written
through the same writer as a compiled build (codegen/output.py), so the wheel's bytes are those of an
unsharded build.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from runtime.contract import Manifest

from .output import MANIFEST, write_kernel_files


class PrebuiltError(ValueError):
    """DIR is not the build asked for; one line naming the fix."""


def _first_difference(a: Mapping, b: Mapping) -> str:
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"{key}: {a.get(key)!r} there, {b.get(key)!r} here"
    return "none"


def adopt_kernel_dir(
    src: Path, out: Path, profile: str, selection: Sequence[str], toolchain: Mapping[str, str]
) -> Manifest:
    """Check that `src` is the build of `selection` (the ids `profile` selects) with `toolchain`, then
    write it to `out` as this build's kernel directory. PrebuiltError otherwise."""
    path = Path(src) / MANIFEST
    try:
        manifest = Manifest.from_json(json.loads(path.read_text()), path=str(path))
    except FileNotFoundError:
        raise PrebuiltError(
            f"--kernels-from {src}: no {MANIFEST} there; point it at the output of "
            "`python -m codegen.build merge` (or of a whole build)"
        ) from None
    except Exception as exc:  # noqa: BLE001  (unreadable or invalid manifest: one line, where)
        raise PrebuiltError(
            f"--kernels-from {src}: unreadable {MANIFEST} ({' '.join(str(exc).split())})"
        ) from None
    if manifest.profile != profile:
        raise PrebuiltError(
            f"--kernels-from {src} is a build of profile {manifest.profile!r}, not {profile!r}; "
            "set HGEMM_PROFILE to match, or rebuild the shards with this profile"
        )
    if dict(manifest.toolchain) != dict(toolchain):
        differs = _first_difference(manifest.toolchain, toolchain)
        raise PrebuiltError(
            f"--kernels-from {src} was built with another toolchain ({differs}); "
            "build it from this commit in this environment"
        )
    if sorted(manifest.instances) != sorted(selection):
        missing = sorted(set(selection) - set(manifest.instances))
        extra = sorted(set(manifest.instances) - set(selection))
        raise PrebuiltError(
            f"--kernels-from {src} holds other instances than profile {profile!r} selects "
            f"({len(missing)} missing, {len(extra)} extra); rebuild it from this kernel_specs.yaml"
        )
    cubins = {}
    for name, record in manifest.instances.items():
        try:
            data = (Path(src) / record.cubin).read_bytes()
        except OSError as exc:
            raise PrebuiltError(
                f"--kernels-from {src}: cannot read {record.cubin} ({exc.strerror or exc})"
            ) from None
        if len(data) != record.cubin_bytes or hashlib.sha256(data).hexdigest() != record.sha256:
            raise PrebuiltError(
                f"--kernels-from {src}: {record.cubin} does not match its record (size or sha256)"
            )
        cubins[name] = data
    return write_kernel_files(Path(out), cubins, manifest.instances, profile, manifest.toolchain)
