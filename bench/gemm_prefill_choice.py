"""Which FP8-weight GEMM is faster for prefill on this GPU: FP8 x FP8 with per-32 promotion,
or the Q8_32-rounded activations in bf16 against the weight decoded to bf16 in the kernel?

    TRITON_INTERPRET=0 python bench/gemm_prefill_choice.py [--rows 64 1024 4096 8192]

Both compute ``linear_quant_act`` (the model's FP8 projections: ``x`` rounded to Q8_32, then a
GEMM against the 32x32-tile FP8 weight) with exact products — e4m3 x 2^k values are exact in
bf16 — and fp32 accumulation, so they differ from the fp64 reference only by fp32 summation
order:

  fp8_promote   ``kernels/triton/gemm_fp8.py``: FP8 wgmma per 32-wide K block, scaled into the
                fp32 accumulator (the registered ``linear_quant_act``)
  bf16_decode   ``quant_act.fake_quant_fp8_block32`` + ``kernels/triton/linear.py``: bf16 wgmma,
                the FP8 weight decoded to bf16 in registers

``--bf16-configs BMxBNxBK:stages:warps,...``: instead, the bf16_decode path's tilings at these
row counts (``linear.linear_config`` replaced for the call; GROUP_M 8), ms and TFLOP/s per shape
and summed over the shapes, with each output's rel. difference to the first config's; an entry
``wm:BOxBTxBK:stages:warps`` runs ``linear_decode`` instead (the decoded weight on the MMA's M
side, token tiles of BT rows: the decode kernel at prefill sizes).

Shapes: the V4.1-Flash slice's FP8 projections (wq_a, wq_b, wkv, wo_b, the shared expert's w1/w3
and w2, the indexer's wq_b). Prints time, TFLOP/s against the bf16 and fp8 rates measured here,
the relative error of each against the fp64 reference, and the winner per row count. Not a
test: the choice it reports is made in ``kernels/triton`` only after a run on the target GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402

# (name, in_features, out_features) of the slice's FP8 projections
SHAPES = [("wq_a", 5120, 1024), ("wq_b", 1024, 32768), ("wkv", 5120, 512),
          ("wo_b", 8192, 5120), ("shared w1/w3", 5120, 2304), ("shared w2", 2304, 5120),
          ("indexer wq_b", 1024, 8192)]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 1024, 4096, 8192])
    ap.add_argument("--bf16-configs", default=None,
                    help="BMxBNxBK:stages:warps,... : sweep the bf16_decode tilings instead")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    from deepinfer.kernels.reference import linear as ref_linear
    from deepinfer.kernels.triton import gemm_fp8, linear, quant_act

    roof = bc.roofline()
    ceil = roof.measure_ceilings()
    print(f"versions {bc.versions()}")
    print(f"ceilings: bf16 {ceil['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s, fp8 "
          f"{ceil['fp8_flops_per_s'] / 1e12:.0f} TFLOP/s")
    g = torch.Generator(device="cuda").manual_seed(3)
    if args.bf16_configs:
        return sweep_bf16(args.bf16_configs.split(","), args.rows, roof, g)
    print("\n| shape | rows | fp8_promote ms | TFLOP/s | rel err | bf16_decode ms | TFLOP/s "
          "| rel err | faster |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, k, n in SHAPES:
        w = gemm_fp8.pack_fp8_weight(torch.randn(n, k, generator=g, device="cuda") * 0.02)
        for m in args.rows:
            x = torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16)
            ref = ref_linear.linear_quant_act(x, w) if m * n <= (1 << 26) else None
            a = gemm_fp8.linear_quant_act(x, w)
            b = linear.linear(quant_act.fake_quant_fp8_block32(x), w)
            t_a = roof.median_ms(lambda: gemm_fp8.linear_quant_act(x, w))  # noqa: B023
            t_b = roof.median_ms(lambda: linear.linear(quant_act.fake_quant_fp8_block32(x), w))  # noqa: B023
            flops = 2.0 * m * n * k
            err_a = "-" if ref is None else f"{_rel_err(a, ref):.1e}"
            err_b = "-" if ref is None else f"{_rel_err(b, ref):.1e}"
            print(f"| {name} | {m} | {t_a:.3f} | {flops / t_a / 1e9:.0f} | {err_a} | "
                  f"{t_b:.3f} | {flops / t_b / 1e9:.0f} | {err_b} | "
                  f"{'fp8_promote' if t_a <= t_b else 'bf16_decode'} |")
    return 0


def parse_config(text: str) -> dict:
    """``BMxBNxBK:stages:warps`` -> a ``linear_config`` dict, or ``wm:BOxBTxBK:stages:warps``
    -> a ``linear_decode`` config (marked "wm"); exits naming the bad value."""
    try:
        if text.startswith("wm:"):
            _, tile, stages, warps = text.split(":")
            bo, bt, bk = (int(v) for v in tile.split("x"))
            return dict(wm=True, BO=bo, BT=bt, BK=bk, num_warps=int(warps),
                        num_stages=int(stages), waves=1)
        tile, stages, warps = text.split(":")
        bm, bn, bk = (int(v) for v in tile.split("x"))
        return dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=int(warps),
                    num_stages=int(stages))
    except ValueError:
        sys.exit(f"gemm_prefill_choice: bad --bf16-configs entry {text!r}: expected "
                 "BMxBNxBK:stages:warps (e.g. 128x128x64:3:8) or wm:BOxBTxBK:stages:warps "
                 "(e.g. wm:64x256x32:4:4)")


def sweep_bf16(texts: list[str], rows: list[int], roof, g: torch.Generator) -> int:
    """The bf16_decode path under each tiling; prints per-shape and summed figures."""
    from deepinfer.kernels.triton import gemm_fp8, linear, linear_decode, quant_act

    configs = [(t, parse_config(t)) for t in texts]
    base = linear.linear_config
    totals: dict[tuple[int, str], list[float]] = {}
    print("\n| shape | rows | config | ms | TFLOP/s | rel diff vs first |")
    print("|---|---:|---|---:|---:|---:|")
    for name, k, n in SHAPES:
        w = gemm_fp8.pack_fp8_weight(torch.randn(n, k, generator=g, device="cuda") * 0.02)
        for m in rows:
            xq = quant_act.fake_quant_fp8_block32(
                torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16))
            first = None
            for text, cfg in configs:
                linear.linear_config = lambda *a, cfg=cfg, **kw: dict(cfg)
                if cfg.get("wm"):  # the weight on the MMA's M side, token tiles of BT rows
                    wm_cfg = {key: v for key, v in cfg.items() if key != "wm"}

                    def call(wm_cfg=wm_cfg, xq=xq, w=w, m=m, n=n):
                        return linear_decode.linear_decode(xq[:, None, :], w, n,
                                                           config=wm_cfg).view(m, n)
                else:
                    def call(xq=xq, w=w):
                        return linear.linear(xq, w)
                try:
                    out = call()
                    ms = roof.median_ms(call)
                except Exception as e:  # noqa: BLE001 - a tiling that does not compile is a row
                    print(f"| {name} | {m} | {text} | failed: {type(e).__name__} | | |")
                    continue
                finally:
                    linear.linear_config = base
                first = out if first is None else first
                diff = float((out.float() - first.float()).norm() / first.float().norm())
                flops = 2.0 * m * n * k
                acc = totals.setdefault((m, text), [0.0, 0.0, 0])
                acc[0] += ms
                acc[1] += flops
                acc[2] += 1
                print(f"| {name} | {m} | {text} | {ms:.3f} | {flops / ms / 1e9:.0f} | "
                      f"{diff:.1e} |", flush=True)
    print("\nAll shapes, one call each (configs that ran on every shape)")
    print("| rows | config | ms | TFLOP/s |\n|---:|---|---:|---:|")
    for (m, text), (ms, flops, count) in sorted(totals.items(),
                                                key=lambda t: (t[0][0], t[1][0])):
        if count == len(SHAPES):
            print(f"| {m} | {text} | {ms:.3f} | {flops / ms / 1e9:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
