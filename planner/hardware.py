"""The hardware table: planning numbers per device kind (static data, never read from a machine).

Numbers are per GPU (per process for ``cpu``) and are what the planner budgets with, not what a
benchmark measured. ``memory_bytes`` is the memory one process can allocate (the nominal HBM size
less what the driver and the CUDA context keep), because that is what the cache budget is cut
from. Bandwidths and peak rates are the vendor's dense (no sparsity) figures for the SXM parts.

``cpu`` uses fixed planning values (16 GiB, 0.1 TB/s, 0.5 TFLOP/s) so that a plan compiled on any
machine is the same plan: the planner never inspects the machine it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEVICE_KINDS", "HARDWARE", "GIB", "HardwareSpec", "hardware_spec"]

GIB = 1024**3
TERA = 1e12


@dataclass(frozen=True)
class HardwareSpec:
    """Planning numbers of one device kind."""

    name: str
    nominal_memory_bytes: int  # the marketed HBM size (decimal GB for GPUs)
    memory_bytes: int  # what one process can allocate: the budget the planner uses
    hbm_bytes_per_s: float  # peak memory bandwidth
    bf16_flops_per_s: float  # dense bf16 tensor-core peak
    fp8_flops_per_s: float  # dense fp8 tensor-core peak
    sm_arch: int  # compute capability x10: 90 Hopper, 100 Blackwell, 0 CPU
    num_sms: int  # streaming multiprocessors (0 for CPU)


HARDWARE: dict[str, HardwareSpec] = {
    "cpu": HardwareSpec("cpu", 16 * GIB, 16 * GIB, 0.1 * TERA, 0.5 * TERA, 0.5 * TERA, 0, 0),
    # H100 SXM5: 80 GB HBM3, 3.35 TB/s, 989 / 1979 TFLOP/s dense; 132 SMs.
    "h100": HardwareSpec("h100", 80 * 10**9, 79 * GIB, 3.35 * TERA, 989 * TERA, 1979 * TERA,
                         90, 132),
    # H200 SXM: 141 GB HBM3e, 4.8 TB/s, same compute as the H100; 132 SMs.
    "h200": HardwareSpec("h200", 141 * 10**9, 139 * GIB, 4.8 * TERA, 989 * TERA, 1979 * TERA,
                         90, 132),
    # H20: 96 GB HBM3, 4.0 TB/s, 148 / 296 TFLOP/s dense; 78 SMs.
    "h20": HardwareSpec("h20", 96 * 10**9, 95 * GIB, 4.0 * TERA, 148 * TERA, 296 * TERA, 90, 78),
    # B200: ~180 GB HBM3e, 8 TB/s, 2250 / 4500 TFLOP/s dense; 148 SMs.
    "b200": HardwareSpec("b200", 180 * 10**9, 178 * GIB, 8.0 * TERA, 2250 * TERA, 4500 * TERA,
                         100, 148),
}

# Every value ``hardware.device`` accepts; ``custom`` takes all numbers from the topology.
DEVICE_KINDS = (*HARDWARE, "custom")


def hardware_spec(device: str) -> HardwareSpec:
    """The table row of ``device`` (one of ``HARDWARE``); KeyError names the allowed kinds."""
    try:
        return HARDWARE[device]
    except KeyError:
        raise KeyError(f"unknown device {device!r}; expected one of {', '.join(HARDWARE)}") \
            from None
