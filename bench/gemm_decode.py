"""Decode-sized FP8 projections: launch configs of ``gemm_fp8.gemm_q8`` against the HBM roofline.

    TRITON_INTERPRET=0 python bench/gemm_decode.py [--rows 1 8 64] [--variants V,V,...]
    python bench/gemm_decode.py --smoke          # CPU interpreter, small shapes (CI)

At decode the model's FP8 projections (wq_a, wq_b, wkv, wo_b, the shared expert, the indexer's
wq_b) read each weight once for a few rows: the time floor is the weight bytes over the HBM
bandwidth measured in the same run (device-to-device copy). Each variant is timed as a CUDA graph
of ``--reps`` back-to-back launches (the decode step replays graphs, so launch latency is not
part of a kernel's cost), activations quantized once outside the graph.

Variant syntax: ``BMxBNxBK:stages:warps:split`` (split 0 = gemm_q8's own choice: ``choose_split_k``
up to 64 rows; ``wN``: ``split_k_for_waves`` with N waves of programs, per shape), ``default``
(``gemm_config``), ``bf16[:wN]`` (the registered prefill path: Q8_32-rounded x in bf16 against
the weight decoded in registers, ``linear.linear``; ``:wN`` as above on its 128x128 tiles;
``bf16:BMxBNxBK:stages:warps:wN`` on those tiles instead), or
``wm[:BOxBK[xBT]:stages:warps:wN]`` (``linear_decode``: the decoded weight on the MMA's M side,
rows on N in token tiles of BT; ``decode_config``'s tiles, or these), or
``gl[:WG:BT[:BK]:STAGES:wN[:first]]`` (``linear_wide``, Gluon: WG warpgroups of 64 weight rows
share one TMA-fed token tile of BT, ``first``: a step's wgmmas issued before its TMA refill;
``wide_config``'s launch, or this; ``gl:wN``:
``wide_config``'s launch with split-K for N waves at every row count, the rule before
batch-invariant prefill), or
``glf`` / ``gl0`` (``wide_config``'s launch with ``MMA_FIRST`` on / off),
``dq[:BMxBNxBK:stages:warps]`` (the weight dequantized to bf16 once, outside the timing —
the same values —, then ``linear``'s bf16-weight path: ``_linear_kernel``'s ``tl.dot`` with
both operands in shared memory, on ``linear_config``'s tiles or these) ``cublas``
(torch.matmul on that bf16 weight: a reference of what a shared-memory-operand bf16 GEMM
reaches at the shape, never an engine path) or ``ss[:BMxBNxBK:STAGES]`` (``linear_ss`` on that
bf16 weight: both operands in shared memory, a producer warp; ``CONFIG``'s tile or this).
The 16-byte-store variant ``glv``, the persistent ``glp`` / ``glps`` and two A fragments per
warpgroup (``:rREP``) were removed in sessions 35 / 36 (no gain, rounds 172 / 174 / 177;
their code is at 59cb884 / bf68298), the warp-specialized ``glws:BT:BK:STAGES:wN``
(``linear_wide_ws``) in session 42 (slower at 64-256 rows, round 69a, and at 4,096, round
177; code at ad9ad7b).
Prints µs per call, GB/s, η = roofline / time (roofline: the larger of weight bytes / HBM copy
rate and FLOPs / the bf16 matmul rate, both measured in the same run: at 256 rows the FLOPs
bound), and the relative difference to the default's output (same products, fp32 sums in
another order).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (name, in_features, out_features) of the slice's FP8 projections (bench/gemm_prefill_choice.py)
SHAPES = [("wq_a", 5120, 1024), ("wq_b", 1024, 32768), ("wkv", 5120, 512),
          ("wo_b", 8192, 5120), ("shared w1/w3", 5120, 2304), ("shared w2", 2304, 5120),
          ("indexer wq_b", 1024, 8192)]
SMOKE_SHAPES = [("small", 256, 192)]
DEFAULT_VARIANTS = ("default,bf16,64x64x128:6:4:0,64x32x128:6:4:0,64x128x128:4:4:0,"
                    "64x64x128:4:4:0,64x64x256:4:4:0,64x64x128:6:4:1,64x64x128:6:4:4,"
                    "64x64x128:6:4:8,16x64x128:6:4:0,16x128x128:4:4:0")


def parse_variant(text: str) -> dict | str:
    """``BMxBNxBK:stages:warps:split`` -> gemm_q8 config (+ "split"), or the name itself."""
    if text in ("default", "bf16", "wm", "gl", "dq", "cublas", "ss"):
        return text
    try:
        if text.startswith("ss:"):  # linear_ss on BMxBNxBK:STAGES
            _, tile, stages = text.split(":")
            bm, bn, bk = (int(v) for v in tile.split("x"))
            return dict(ss=True, config=dict(BM=bm, BN=bn, BK=bk, STAGES=int(stages)))
        if text.startswith("dq:"):  # the dequantized bf16 weight on BMxBNxBK:stages:warps
            _, tile, stages, warps = text.split(":")
            bm, bn, bk = (int(v) for v in tile.split("x"))
            return dict(dq=True, config=dict(BM=bm, BN=bn, BK=bk, GROUP_M=8,
                                             num_warps=int(warps), num_stages=int(stages)))
        if text in ("glf", "gl0"):  # wide_config's launch, MMA_FIRST on / off
            return dict(gl=True, MMA_FIRST=text == "glf")
        if text.startswith("gl:w") and text.count(":") == 1:  # wide_config, split by waves
            return dict(gl=True, split_waves=float(text[len("gl:w"):]))
        if text.startswith("gl:"):  # linear_wide: WG:BT[:BK]:STAGES:wN[:first]
            fields = text.split(":")[1:]
            first = fields[-1] == "first"
            if first:
                fields.pop()
            if len(fields) == 4:
                fields.insert(2, "32")
            wg, bt, bk, stages, waves = fields
            return dict(gl=True, WG=int(wg), BT=int(bt), BK=int(bk), STAGES=int(stages),
                        waves=float(waves[1:]), MMA_FIRST=first)
        if text.startswith("wm:"):  # linear_decode: BOxBK[xBT]:stages:warps:wN
            _, tile, stages, warps, waves = text.split(":")
            bo, bk, *bt = (int(v) for v in tile.split("x"))
            return dict(wm=True, BO=bo, BK=bk, num_stages=int(stages), num_warps=int(warps),
                        waves=float(waves[1:]), **({"BT": bt[0]} if bt else {}))
        if text.startswith("bf16:w"):
            return dict(bf16=True, waves=float(text[len("bf16:w"):]))
        if text.startswith("bf16:"):  # linear's rows-on-M tiles: BMxBNxBK:stages:warps:wN
            _, tile, stages, warps, waves = text.split(":")
            bm, bn, bk = (int(v) for v in tile.split("x"))
            return dict(bf16=True, waves=float(waves[1:]),
                        config=dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=int(warps),
                                    num_stages=int(stages)))
        tile, stages, warps, split = text.split(":")
        bm, bn, bk = (int(v) for v in tile.split("x"))
        waves = float(split[1:]) if split.startswith("w") else None
        return dict(BM=bm, BN=bn, BK=bk, GROUP_M=1, num_warps=int(warps),
                    num_stages=int(stages), split=0 if waves else int(split), waves=waves)
    except ValueError:
        sys.exit(f"gemm_decode: bad variant {text!r}: expected BMxBNxBK:stages:warps:split "
                 "(split an int or wN), 'default', 'bf16[:wN]', "
                 "'bf16:BMxBNxBK:stages:warps:wN', "
                 "'gl[:WG:BT[:BK]:STAGES:wN[:first]]', 'gl:wN', "
                 "'glf', 'gl0', 'dq[:BMxBNxBK:stages:warps]', 'cublas', 'ss[:BMxBNxBK:STAGES]' or "
                 "'wm[:BOxBK[xBT]:stages:warps:wN]'")


def make_call(variant: dict | str, x: torch.Tensor, w):
    """A no-argument callable running one variant on (x, w); inputs prepared here, once."""
    import triton

    from deepinfer.kernels.triton import gemm_fp8, linear, quant_act

    m, k = x.shape
    n = w.codes.shape[0]
    if variant in ("dq", "cublas", "ss") or isinstance(variant, dict) and (
            variant.get("dq") or variant.get("ss")):
        xr = quant_act.fake_quant_fp8_block32(x)
        wdq = w.dequantize()  # (n, k) bf16, the same values
        if variant == "ss" or isinstance(variant, dict) and variant.get("ss"):
            from deepinfer.kernels.triton import linear_ss

            cfg = None if variant == "ss" else variant["config"]
            if not linear_ss.accepts(xr[:, None, :], wdq, n, cfg):
                cfg = {**(cfg or {}), "BN": 128}  # O not whole 256-row tiles
            return lambda: linear_ss.linear_ss(xr[:, None, :], wdq, n, cfg).view(m, n)
        if variant == "cublas":
            return lambda: torch.matmul(xr, wdq.t())
        if variant == "dq":
            return lambda: linear.linear(xr, wdq)
        return lambda: linear._launch(xr[:, None, :], wdq, n,
                                      config=variant["config"]).view(m, n)
    if variant == "gl" or isinstance(variant, dict) and variant.get("gl"):
        from deepinfer.kernels.triton import linear_wide

        xr = quant_act.fake_quant_fp8_block32(x)[:, None, :]
        if isinstance(variant, dict) and "split_waves" in variant:  # at any row count
            cfg = linear_wide.wide_config(m, n)
            programs = n // (64 * cfg["WG"]) * triton.cdiv(m, cfg["BT"])
            split = gemm_fp8.split_k_for_waves(programs, k, cfg["BK"], variant["split_waves"],
                                               linear_wide.NUM_SMS)
            return lambda: linear_wide.linear_wide(xr, w, n, split_k=split).view(m, n)
        cfg = None if variant == "gl" else {key: v for key, v in variant.items() if key != "gl"}
        if cfg is not None and "WG" not in cfg:  # glf / gl0: wide_config's launch, that order
            cfg = {**linear_wide.wide_config(m, n), **cfg}
        return lambda: linear_wide.linear_wide(xr, w, n, config=cfg).view(m, n)
    if variant == "wm" or isinstance(variant, dict) and variant.get("wm"):
        from deepinfer.kernels.triton import linear_decode

        xr = quant_act.fake_quant_fp8_block32(x)[:, None, :]
        cfg = None if variant == "wm" else {key: v for key, v in variant.items() if key != "wm"}
        return lambda: linear_decode.linear_decode(xr, w, n, config=cfg).view(m, n)
    if variant == "bf16" or isinstance(variant, dict) and variant.get("bf16"):
        xr = quant_act.fake_quant_fp8_block32(x)
        split = None
        if variant != "bf16":  # linear's >64-row tile (128x128, BK=64) or the variant's
            cfg = {**linear.linear_config(m, 1, True), **variant.get("config", {})}
            tiles = triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"])
            split = gemm_fp8.split_k_for_waves(tiles, k, cfg["BK"], variant["waves"])
            if "config" in variant:
                return lambda: linear._launch(xr[:, None, :], w, n, split_k=split,
                                              config=variant["config"]).view(m, n)
        return lambda: linear.linear(xr, w, split_k=split)
    codes, scale = quant_act.quant_q8_32(x)
    if variant == "default":
        return lambda: gemm_fp8.gemm_q8(codes, scale, w, x.dtype)
    cfg = {key: v for key, v in variant.items() if key not in ("split", "waves")}
    split = variant["split"] or None
    if variant["waves"]:
        tiles = triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"])
        split = gemm_fp8.split_k_for_waves(tiles, k, cfg["BK"], variant["waves"])
    return lambda: gemm_fp8.gemm_q8(codes, scale, w, x.dtype, split_k=split, config=cfg)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--reps", type=int, default=20, help="launches per timed CUDA graph")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, one small shape")
    args = ap.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    import sweep_args
    from bench_common import roofline, versions

    from deepinfer.kernels.triton import gemm_fp8

    variants = [(v, parse_variant(v)) for v in args.variants.split(",")]
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (use --smoke on a CPU)", file=sys.stderr)
        return 2
    hbm = bf16 = None
    if device == "cuda":
        ceilings = roofline().measure_ceilings()
        hbm, bf16 = ceilings["hbm_bytes_per_s"], ceilings["bf16_flops_per_s"]
        print(f"versions {versions()}\nHBM (copy) {hbm / 1e12:.2f} TB/s, bf16 "
              f"{bf16 / 1e12:.0f} TFLOP/s; CUDA graphs of {args.reps} launches per timing")
    g = torch.Generator(device=device).manual_seed(3)
    total = {}
    print("| shape | rows | variant | µs | GB/s | η | rel diff vs default |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, k, n in (SMOKE_SHAPES if args.smoke else SHAPES):
        w = gemm_fp8.pack_fp8_weight(torch.randn(n, k, generator=g, device=device) * 0.02)
        n_bytes = w.codes.numel() + w.scale.numel()
        for m in (args.rows if not args.smoke else [3]):
            x = torch.randn(m, k, generator=g, device=device).to(torch.bfloat16)
            ref = None
            for text, variant in variants:
                call = make_call(variant, x, w)
                out = sweep_args.try_variant(f"{name} | {m} | {text}", call)
                if out is None:
                    continue
                ref = out if ref is None else ref
                diff = float((out.float() - ref.float()).norm() / ref.float().norm())
                if hbm is None:
                    print(f"| {name} | {m} | {text} | - | - | - | {diff:.1e} |")
                    continue
                us = roofline().graph_us(call, args.reps)
                roof_us = max(n_bytes / hbm, 2 * m * n * k / bf16) * 1e6
                acc = total.setdefault((m, text), [0.0, 0.0, 0])
                acc[0] += us
                acc[1] += roof_us
                acc[2] += 1
                print(f"| {name} | {m} | {text} | {us:.1f} | {n_bytes / us / 1e3:.0f} | "
                      f"{roof_us / us:.2f} | {diff:.1e} |", flush=True)
    if total:
        print("\nAll shapes, one call each (variants that ran on every shape; a variant named "
              "more than once: the mean of its runs)")
        print("| rows | variant | µs | roofline µs | η |\n|---:|---|---:|---:|---:|")
        repeats = collections.Counter(text for text, _ in variants)
        for (m, text), (us, roof_us, count) in sorted(total.items(),
                                                      key=lambda t: (t[0][0], t[1][0])):
            if count == len(SHAPES) * repeats[text]:
                us, roof_us = us / repeats[text], roof_us / repeats[text]
                print(f"| {m} | {text} | {us:.1f} | {roof_us:.1f} | {roof_us / us:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
