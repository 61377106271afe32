"""What a kernel boundary costs the GPU, and how much of it programmatic dependent launch
(PDL: ``launch_pdl=True`` with ``griddepcontrol.wait`` / ``launch_dependents`` in the kernel)
hides: a chain of dependent launches of one small memory-bound kernel, queued behind a GPU
spin (so the host's pace is not timed), with and without PDL.

    TRITON_INTERPRET=0 python bench/pdl_probe.py [--launches 400] [--sizes-mb 2,16,64]
    python bench/pdl_probe.py --smoke        # CPU interpreter: the kernel's values only

Per size: µs per launch with and without PDL (CUDA events around the chain), the copy's HBM
floor (read + write at the device-to-device copy rate measured in the same run), and the
boundary cost: µs per launch minus the floor. The 4K prefill runs ~450 kernels, so a saving
of s µs a boundary is ~0.45 s ms a prompt. The chain alternates two buffers, so every launch
reads what the one before it wrote (a real dependence).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BLOCK = 4096


@triton.jit
def _step_kernel(x_ptr, y_ptr, n, PDL: tl.constexpr, BLOCK: tl.constexpr):
    """y = x * 0.5 + 1 (fp32): with PDL, wait for the previous grid first and let the next
    one launch at once."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * 0.5 + 1.0, mask=m)


def chain(a: torch.Tensor, b: torch.Tensor, launches: int, pdl: bool) -> None:
    n = a.numel()
    grid = (triton.cdiv(n, BLOCK),)
    extra = {"launch_pdl": True} if pdl else {}
    for i in range(launches):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        _step_kernel[grid](src, dst, n, PDL=pdl, BLOCK=BLOCK, num_warps=8, **extra)


def expected(x: torch.Tensor, launches: int) -> torch.Tensor:
    y = x.clone()
    for _ in range(launches):
        y = y * 0.5 + 1.0
    return y


def _sizes(text: str) -> list[float]:
    """--sizes-mb: positive MB values, comma-separated (argparse reports a ValueError)."""
    sizes = [float(v) for v in text.split(",")]
    if any(v <= 0 for v in sizes):
        raise ValueError(text)
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", type=int, default=400)
    ap.add_argument("--sizes-mb", default="2,16,64", type=_sizes,
                    help="comma-separated buffer sizes in MB")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.launches < 1 or args.repeats < 1:
        ap.error(f"--launches and --repeats: expected >= 1, got {args.launches} and "
                 f"{args.repeats}")
    if args.smoke:
        x = torch.randn(3 * BLOCK + 5)
        a, b = x.clone(), torch.empty_like(x)
        chain(a, b, 4, False)
        ok = torch.allclose(a, expected(x, 4))
        print(f"smoke: 4 launches equal the torch chain: {ok}")
        return 0 if ok else 1
    from prefill import gpu_hold
    from roofline import measure_ceilings

    copy_bps = measure_ceilings()["hbm_bytes_per_s"]
    print(f"{torch.cuda.get_device_name()}: copy {copy_bps / 1e12:.2f} TB/s, "
          f"{args.launches} launches a chain, median of {args.repeats}")
    print("| MB a buffer | PDL | µs a launch | floor µs | boundary µs | values |")
    print("|---:|---|---:|---:|---:|---|")
    for mb in args.sizes_mb:
        n = int(mb * 2**20) // 4
        x = torch.randn(n, device="cuda")
        want = expected(x, args.launches)
        floor_us = 2 * n * 4 / copy_bps * 1e6
        for pdl in (False, True, False, True):
            times = []
            ok = True
            for _ in range(args.repeats + 1):
                a, b = x.clone(), torch.empty_like(x)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                gpu_hold(max(5.0, args.launches * 0.05))  # the host enqueues behind a spin
                start.record()
                chain(a, b, args.launches, pdl)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3 / args.launches)
                out = a if args.launches % 2 == 0 else b
                ok = ok and torch.allclose(out, want)
            us = sorted(times[1:])[len(times[1:]) // 2]
            print(f"| {mb:g} | {'on' if pdl else 'off'} | {us:.2f} | {floor_us:.2f} | "
                  f"{us - floor_us:.2f} | {'equal' if ok else 'DIFFER'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
