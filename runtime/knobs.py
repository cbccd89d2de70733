"""Every environment knob of the runtime, in one typed place.

Each variable name appears literally below so ``grep HGEMM_`` finds all of them. The environment is read
once, when the process's ``Runtime`` is first needed (runtime/state.py; not at import, so a malformed
value fails at the first call that needs it, with a ``KnobError`` naming the variable, instead of breaking
``import hgemm_sm90``); tests build ``Knobs`` directly.

- ``HGEMM_KERNEL_DIR``: read ``manifest.json`` and the cubins from this folder instead of the package's
  ``kernels/`` folder (for a fresh build output, or kernels shipped separately).
- ``HGEMM_VERIFY_SHA256``: 1 (default) / 0. Verify each cubin's sha256 against the manifest when it is
  first read; costs about a millisecond per MB of cubin, once per load.
- ``HGEMM_LOG_LEVEL``: debug / info / warning (default) / error / critical, for the ``hgemm_sm90`` logger.
- ``HGEMM_CHECK_POINTERS``: auto (default) / always / never. Before each launch, ask the driver which
  device every operand lives on and refuse one the stream's device cannot access (``DeviceMismatchError``).
  ``auto`` checks when more than one device is visible — the only case where a pointer can belong to
  another GPU — and skips the ~1 µs-per-operand driver query on single-GPU processes.
- ``HGEMM_ALLOW_PEER_POINTERS``: 0 (default) / 1. Accept operands on another device that can access this
  one as a peer. The driver cannot tell whether peer access is *enabled*, so this is the caller's promise
  (``cuCtxEnablePeerAccess`` / ``torch`` did it); launching on peer memory without it faults.
- ``HGEMM_NUM_SMS``: unset (default: the whole GPU) / a positive count. Every persistent grid holds at
  most this many CTAs, rounded down to whole clusters (one cluster at least), so with one CTA per SM it
  leaves the other SMs to kernels that run beside it (communication overlapped with GEMMs, as DeepGEMM's
  ``set_num_sms``), or makes the H200 stand for a Hopper board with fewer SMs. ``select()`` and
  ``gemm()`` then plan for a GPU of that many SMs: the tuning table's rows are for whole GPUs, so unless
  it holds a GPU of that SM count the cost model decides (docs/DISPATCH.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import KnobError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_LEVELS = ("debug", "info", "warning", "error", "critical")
_POINTER_CHECKS = ("auto", "always", "never")


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise KnobError(name, raw, "one of " + "/".join(_TRUE + _FALSE))


def _path(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return os.path.abspath(os.path.expanduser(raw)) if raw else None


def _level(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in _LEVELS:
        raise KnobError(name, raw, "one of " + "/".join(_LEVELS))
    return raw


def _count(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdecimal() or int(raw) < 1:  # isdigit() would pass "²", which int() refuses
        raise KnobError(name, raw, "a positive whole number, or unset")
    return int(raw)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise KnobError(name, raw, "one of " + "/".join(choices))
    return raw


@dataclass(frozen=True)
class Knobs:
    """The runtime's configuration; build one with ``from_env`` (tests pass their own mapping)."""

    kernel_dir: str | None = None
    verify_sha256: bool = True
    log_level: str = "warning"
    log_level_set: bool = False  # True when HGEMM_LOG_LEVEL was given explicitly
    check_pointers: str = "auto"
    allow_peer_pointers: bool = False
    num_sms: int | None = None  # None: the whole GPU

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Knobs:
        env = os.environ if env is None else env
        return cls(
            kernel_dir=_path(env, "HGEMM_KERNEL_DIR"),
            verify_sha256=_bool(env, "HGEMM_VERIFY_SHA256", True),
            log_level=_level(env, "HGEMM_LOG_LEVEL", "warning"),
            log_level_set=bool(env.get("HGEMM_LOG_LEVEL", "").strip()),
            check_pointers=_choice(env, "HGEMM_CHECK_POINTERS", _POINTER_CHECKS, "auto"),
            allow_peer_pointers=_bool(env, "HGEMM_ALLOW_PEER_POINTERS", False),
            num_sms=_count(env, "HGEMM_NUM_SMS"),
        )


def make_logger(knobs: Knobs):
    """The ``hgemm_sm90`` logger, levelled by HGEMM_LOG_LEVEL.

    A library normally leaves handlers to the application; but when the user explicitly asked for a
    level through the environment and the application configured nothing, we attach a stderr handler,
    or the request would be silently ignored below WARNING.
    """
    import logging  # lazily: not needed by import hgemm_sm90

    log = logging.getLogger("hgemm_sm90")
    log.setLevel(knobs.log_level.upper())
    if knobs.log_level_set and not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[hgemm_sm90 %(levelname)s] %(message)s"))
        log.addHandler(handler)
    return log
