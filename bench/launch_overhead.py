"""Host cost of one launch on this machine: what a prefill layer's ~50 Triton launches and ~20
torch ops cost the host (session 24; round 132a measured 6-12 ms of host per prefill layer).

    python bench/launch_overhead.py [--calls 2000]

Rows (µs of host time per call, best of 3 loops of --calls calls, the GPU synchronized only
after each loop; the kernels do nothing measurable on the GPU, so the host is what is timed):

* torch ``add_`` on a small tensor, ``torch.empty``, a pinned host-to-device copy;
* a trivial Triton kernel through ``JITFunction[grid](...)`` (Triton's full launch path:
  argument binding, specialization of every argument, cache key) with 3 and with 14
  arguments;
* the same compiled kernels through ``CompiledKernel[grid](...)``, the launcher alone (what a
  launch cache keyed by our own argument classes would pay).

The reference figure is the GPU's own time per activity: a 1K prompt's prefill layer runs ~160
activities in ~6 ms of GPU time (~37 µs each, round 132a), so a host path slower than that per
activity makes the step host-bound.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc  # noqa: E402


@triton.jit
def _nop3(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)


@triton.jit
def _nop14(x_ptr, y_ptr, z_ptr, a, b, c, d, e, f, g, stride_a, stride_b, BLOCK: tl.constexpr,
           FLAG: tl.constexpr):
    i = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + i, mask=i < a)
    if FLAG:
        v = v + (b + c + d + e + f + g + stride_a + stride_b)
    tl.store(y_ptr + i, v, mask=i < a)
    tl.store(z_ptr + i, v, mask=i < a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    dev = torch.device("cuda")
    x = torch.zeros(1024, device=dev)
    y, z = torch.zeros_like(x), torch.zeros_like(x)
    host = torch.zeros(1024).pin_memory()
    args3 = (x, 1000)
    args14 = (x, y, z, 1000, 3, 5, 7, 9, 11, 13, 1024, 64)
    k3 = _nop3[(1,)](*args3, BLOCK=1024)
    k14 = _nop14[(1,)](*args14, BLOCK=1024, FLAG=True)
    run3, run14 = k3[(1, 1, 1)], k14[(1, 1, 1)]
    # the compiled runner takes every argument, constexprs included, in signature order
    rows = [
        ("torch add_ (small tensor)", lambda: x.add_(1.0)),
        ("torch.empty (4 KB)", lambda: torch.empty(1024, device=dev)),
        ("pinned host->device copy (4 KB)", lambda: y.copy_(host, non_blocking=True)),
        ("Triton JITFunction[grid], 3 args", lambda: _nop3[(1,)](*args3, BLOCK=1024)),
        ("Triton JITFunction[grid], 14 args",
         lambda: _nop14[(1,)](*args14, BLOCK=1024, FLAG=True)),
        ("Triton CompiledKernel[grid], 3 args", lambda: run3(*args3, 1024)),
        ("Triton CompiledKernel[grid], 14 args", lambda: run14(*args14, 1024, True)),
    ]
    print(f"## launch overhead — {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}; {args.calls} calls per loop, best of 3")
    print("reference: a 1K prompt's prefill layer, ~37 µs of GPU time per activity (round 132a)")
    print("\n| call | host µs per call |\n|---|---:|")
    for name, fn in rows:
        print(f"| {name} | {bc.host_us_per_call(fn, args.calls):.1f} |")


if __name__ == "__main__":
    main()
