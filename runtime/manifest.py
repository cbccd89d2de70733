"""Find, read and check the installed kernels: ``manifest.json`` (validated by runtime/contract.py into
immutable records) and the cubins it names.

``load`` reads and validates a manifest (every spec at once, each record's launch contract on its first
lookup: runtime/contract.py `LazyRecords`; the process's ``Runtime`` reads its own lazily, from
``kernel_dir``, runtime/state.py); ``read_cubin`` checks a cubin's size, ELF magic and (optionally) sha256
against its record before it is loaded.
"""

from __future__ import annotations

import os

from .contract import InstanceRecord, Manifest
from .errors import CorruptArtifactError

MANIFEST_NAME = "manifest.json"


def kernel_dir(knobs) -> str:
    """Where manifest.json and the cubins are read from: HGEMM_KERNEL_DIR, else <package>/kernels."""
    return knobs.kernel_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")


def _read(path: str, what: str, instance: str | None = None) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CorruptArtifactError(f"{what} is missing", path, instance=instance) from None
    except OSError as e:
        raise CorruptArtifactError(
            f"{what} cannot be read ({e.strerror})",
            path,
            instance=instance,
            fix="make the file readable by this process",
        ) from e


def load(path: str) -> Manifest:
    """Read and validate the manifest file at ``path``."""
    path = os.path.abspath(path)
    raw = _read(path, MANIFEST_NAME)
    import json  # only when a manifest is actually read

    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise CorruptArtifactError(f"manifest is not valid JSON: {e}", path) from e
    return Manifest.from_json(doc, path)


def read_cubin(record: InstanceRecord, verify: bool) -> bytes:
    """The cubin of ``record``, checked for size, ELF magic and (when ``verify``: the HGEMM_VERIFY_SHA256
    knob) its sha256; ``CorruptArtifactError`` on any mismatch."""
    path = record.cubin_path
    data = _read(path, f"cubin {record.cubin}", record.id)
    if len(data) != record.cubin_bytes:
        raise CorruptArtifactError(
            f"cubin is {len(data)} bytes but the manifest says {record.cubin_bytes}", path, instance=record.id
        )
    if not data.startswith(b"\x7fELF"):
        raise CorruptArtifactError("cubin is not an ELF file", path, instance=record.id)
    if verify:
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        if digest != record.sha256:
            raise CorruptArtifactError(
                f"cubin sha256 is {digest} but the manifest says {record.sha256}", path, instance=record.id
            )
    return data
