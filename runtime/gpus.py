"""Which GPU a choice is made for: its name as the driver reports it and its SM count.

The tuning table (runtime/tuning.py) is keyed by both: two boards that share a name can differ in SM count
(an H100 PCIe has 114 SMs, an H100 SXM 132), and wave quantization, the largest effect on which tile wins,
follows the SM count. ``select(gpu="H200")`` plans for a machine without that GPU through `KNOWN`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class GpuId:
    """A GPU model as far as dispatch cares: the driver's name for it and its SM count."""

    name: str
    sm_count: int

    @property
    def key(self) -> str:
        """``"<name>/<sm_count>"``: how the tuning table names a GPU."""
        return f"{self.name}/{self.sm_count}"

    @classmethod
    def from_key(cls, key: str) -> GpuId:
        """The GPU a table key (`key`) names."""
        name, sms = key.rsplit("/", 1)
        return cls(name, int(sms))


# Hopper (compute capability 9.0) boards: short name -> what cuDeviceGetName and the SM-count attribute
# report. From NVIDIA's product pages / datasheets; the H200 row was also read on our machine (2026-11-30).
KNOWN: dict[str, GpuId] = {
    "H200": GpuId("NVIDIA H200", 132),
    "H200 NVL": GpuId("NVIDIA H200 NVL", 132),
    "H100": GpuId("NVIDIA H100 80GB HBM3", 132),
    "H100 SXM": GpuId("NVIDIA H100 80GB HBM3", 132),
    "H100 PCIe": GpuId("NVIDIA H100 PCIe", 114),
    "H100 NVL": GpuId("NVIDIA H100 NVL", 132),
    "GH200": GpuId("NVIDIA GH200 480GB", 132),
    "H800": GpuId("NVIDIA H800", 132),
    "H20": GpuId("NVIDIA H20", 78),
}


def named(gpu: str) -> GpuId:
    """The GPU called ``gpu``: a short name from `KNOWN` (case-insensitive) or a driver name in it;
    ``InvalidArgumentError`` listing the known names otherwise."""
    if isinstance(gpu, str):
        wanted = gpu.strip().lower()
        for short, ident in KNOWN.items():
            if wanted in (short.lower(), ident.name.lower()):
                return ident
    raise InvalidArgumentError(
        f"unknown GPU {gpu!r}",
        f"pass one of {', '.join(map(repr, KNOWN))}, or device=<ordinal> to plan for a GPU of this machine",
    )


def of_device(runtime, device: int | None) -> GpuId:
    """The GPU of CUDA device ``device`` (None: the device of the calling thread's current context)."""
    devices = runtime.devices
    if device is None:
        device = devices.context_device(devices.current_context())
    elif type(device) is not int or not 0 <= device < devices.device_count():
        raise InvalidArgumentError(
            f"device {device!r} is not a CUDA device ordinal of this process "
            f"({devices.device_count()} visible)",
            "pass an int in range(device_count), or None for the current device",
        )
    info = devices.check_device(device)
    return GpuId(info.name, info.sm_count)
