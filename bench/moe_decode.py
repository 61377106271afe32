"""Timing of the routed-expert GEMMs (kernels/triton/moe_experts.py) vs HBM bandwidth.

    TRITON_INTERPRET=0 python bench/moe_decode.py [--tokens 1 8 64 256 4096]
                                                  [--config-tokens N ...] [--configs A,B,...]
    python bench/moe_decode.py --smoke          # CPU, TRITON_INTERPRET=1: correctness only

Shapes of the v41-flash-slice plan: hidden D=5120, expert width I=2304, 384 experts, top-6, bf16
activations; random MXFP4 weights made on the device (uniform bytes, scales 2^-8..2^-5) and
uniform random top-6 routing (balanced, as after EPLB). Variants (``run_experts``'s mma):
  mxfp4 fp8-mma   mma="fp8": FP8 dots per 32-K block, BK=32 (the former decode kernel)
  mxfp4 bf16      mma="bf16": one 128-byte slab per weight row and K step, unpacked by inline
                  PTX to exactly scaled bf16 (even and odd K elements, two dots per step; what
                  mma="auto" runs at every size)
  mxfp4 bf16 words  the same on weights re-arranged into word order at load
                  (kernels/triton/mxfp4_words.py: rotations instead of byte permutes)
  fp8 re-encoded  lossless e4m3 re-encoding (2x the bytes), mma="auto"
  mxfp4 w4a8 order  weights in moe_gluon_w4a8's kernel order: the Gluon W4A8 decode pipeline
                  at decode sizes, the folded Triton tiles reading that order above them
Per row: the median ms of ``run_experts`` (bench/roofline.py's ``median_ms``: CUDA events, 20 runs
after 3 warm-ups), the experts the batch touches, their weight bytes (w1, w3, w2 data + scales,
each read once; activations are negligible), GB/s = bytes / time, and η = GB/s / the HBM ceiling
measured in the same run (``measure_ceilings``: a large device-to-device copy).
Then the W4A16 kernel at each ``--config-tokens`` size (default 4096; 0: skip) under several
tilings (``--configs``; defaults PREFILL_CONFIGS or DECODE_CONFIGS by moe_config's class): ms,
TFLOP/s against the bf16 ceiling, rel. error against the first (moe_config's own) tiling.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HIDDEN, INTER, EXPERTS, TOPK = 5120, 2304, 384, 6
VARIANTS = {"mxfp4 fp8-mma": ("mxfp4", "fp8"), "mxfp4 bf16": ("mxfp4", "bf16"),
            "mxfp4 bf16 words": ("mxfp4w", "bf16"), "fp8 re-encoded": ("fp8", "auto"),
            "mxfp4 w4a8 order": ("mxfp4w8", "auto")}


def random_mxfp4(num_experts: int, out_features: int, in_features: int, device: str):
    """ExpertWeights "mxfp4": data int8 (E, O, I/2) uniform bytes, scale uint8 (E, O, I/32)."""
    from deepinfer.kernels.triton.moe_experts import ExpertWeights

    data = torch.randint(0, 256, (num_experts, out_features, in_features // 2),
                         dtype=torch.uint8, device=device)
    scale = torch.randint(119, 123, (num_experts, out_features, in_features // 32),
                          dtype=torch.uint8, device=device)
    # scale_max as the runtime's ExpertSlots track it: the kernels take the vouched
    # one-multiply loop (W_ONE_MUL 2), as in the model
    return ExpertWeights(data.view(torch.int8), scale, "mxfp4", scale_max=int(scale.max()))


def random_experts(num_experts: int, dim: int, inter: int, device: str) -> list:
    """[w1 (E, I, D), w3 (E, I, D), w2 (E, D, I)] random MXFP4 ExpertWeights."""
    return [random_mxfp4(num_experts, inter, dim, device) for _ in range(2)] + \
        [random_mxfp4(num_experts, dim, inter, device)]


def touched_bytes(weights: list, expert_ids: torch.Tensor) -> tuple[int, int]:
    """(experts touched by expert_ids (N, K), bytes of their w1, w3, w2 data + scales)."""
    num_touched = torch.unique(expert_ids).numel()
    bytes_per_expert = sum((w.data[0].numel() * w.data.element_size() + w.scale[0].numel())
                           for w in weights)
    return num_touched, num_touched * bytes_per_expert


def make_inputs(num_tokens: int, dim: int, num_experts: int, topk: int, dtype, device: str):
    """x (N, D) dtype, expert_ids (N, topk) distinct uniform, routing weights (N, topk) fp32."""
    x = torch.randn(num_tokens, dim, device=device, dtype=dtype) * 0.5
    ids = torch.rand(num_tokens, num_experts, device=device).topk(topk, dim=1).indices
    return x, ids, torch.rand(num_tokens, topk, device=device)


def smoke() -> None:
    """Tiny shapes under the interpreter: every variant == the torch reference (rel 1e-5)."""
    from deepinfer.kernels.quantized import Mxfp4ExpertWeights
    from deepinfer.kernels.reference import moe
    from deepinfer.kernels.triton import moe_experts

    torch.manual_seed(0)
    dim, inter, num_experts, topk = 128, 128, 8, 2  # K % 128 == 0: the W4A8 order
    fp4 = random_experts(num_experts, dim, inter, "cpu")
    weights = {"mxfp4": fp4, "fp8": [moe_experts.mxfp4_to_fp8(w) for w in fp4],
               "mxfp4w": [moe_experts.mxfp4_to_word_order(w) for w in fp4],
               "mxfp4w8": [moe_experts.mxfp4_to_w4a8_order(w) for w in fp4]}
    ref_weights = [Mxfp4ExpertWeights(w.data, w.scale) for w in fp4]
    for num_tokens in (1, 8):
        x, ids, route_w = make_inputs(num_tokens, dim, num_experts, topk, torch.float32, "cpu")
        ref = moe.moe_routed_experts(x, ids, route_w, *ref_weights, 10.0).double()
        for name, (fmt, mma) in VARIANTS.items():
            out = moe_experts.run_experts(x, ids, route_w, *weights[fmt], 10.0, mma=mma)
            rel = ((out.double() - ref).norm() / ref.norm()).item()
            print(f"smoke tokens={num_tokens} {name:<15} |ref| {ref.norm():.3g} rel err {rel:.1e}")
            assert rel < 1e-5, f"{name}: rel err {rel} vs the reference"
    print("smoke ok (no timings under the interpreter)")


def bench(token_counts: list[int]) -> None:
    from bench_common import roofline

    from deepinfer.kernels.triton import moe_experts

    rl = roofline()
    hbm_bytes_per_s = rl.measure_ceilings()["hbm_bytes_per_s"]
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    fp4 = random_experts(EXPERTS, HIDDEN, INTER, "cuda")
    weights = {"mxfp4": fp4, "fp8": [moe_experts.mxfp4_to_fp8(w) for w in fp4],
               "mxfp4w": [moe_experts.mxfp4_to_word_order(w) for w in fp4],
               "mxfp4w8": [moe_experts.mxfp4_to_w4a8_order(w) for w in fp4]}
    print(f"{torch.cuda.get_device_name()}: HBM ceiling {hbm_bytes_per_s / 1e12:.2f} TB/s (copy); "
          f"D={HIDDEN} I={INTER} E={EXPERTS} top-{TOPK}")
    print(f"| {'tokens':>6} | {'variant':<15} | {'ms':>7} | {'experts':>7} | {'weight MB':>9} | "
          f"{'GB/s':>6} | {'η':>5} |")
    for num_tokens in token_counts:
        x, ids, route_w = make_inputs(num_tokens, HIDDEN, EXPERTS, TOPK, torch.bfloat16, "cuda")
        for name, (fmt, mma) in VARIANTS.items():
            ws = weights[fmt]
            args = (x, ids, route_w, *ws, 10.0)
            ms = rl.median_ms(lambda args=args, mma=mma: moe_experts.run_experts(*args, mma=mma))
            num_touched, n_bytes = touched_bytes(ws, ids)
            bytes_per_s = n_bytes / (ms * 1e-3)
            print(f"| {num_tokens:>6} | {name:<15} | {ms:>7.3f} | {num_touched:>7} | "
                  f"{n_bytes / 1e6:>9.1f} | {bytes_per_s / 1e9:>6.0f} | "
                  f"{bytes_per_s / hbm_bytes_per_s:>5.2f} |")


# prefill-chunk tilings of the W4A16 kernel (moe_config's prefill class is the first):
# BM x BN x BK, SPLIT_K (inline-PTX even/odd unpack, else the interleaved one), warps, stages,
# [abf16[:onemul]] (abf16: activations as rounded bf16 values, A_BF16; onemul: W_ONE_MUL). (The
# swapped tiles' field — weight rows as the wgmma M side, SWAP_AB — went with them: slower in
# round 14, code at bf55292.)
PREFILL_CONFIGS = ("64x64x128:1:4:4:1:1,64x64x128:1:4:4:1,64x64x128:1:4:4,128x64x32:0:8:6,"
                   "64x64x64:0:4:4,64x128x64:0:8:4,64x64x256:1:4:4,128x128x64:0:8:3")


# decode-class tilings (64 tokens: ~1.6 pairs per touched expert): BM=16; the first is
# moe_config's. Session 7 (Nsight Compute, round 18): the decode GEMMs ran at 2 programs of 4
# warps per SM (250 / 189 registers), the gated one issue-bound at 60 % of its slots, the down
# one at 30 % of HBM (9 K steps per program: prologue-bound). Candidates: the vouched one-multiply
# loop (onemul 2: no per-program scale check, 177 registers), register caps (@N) and shorter K
# steps for 3-4 programs per SM, and a separate tiling of the down projection (after "/"); the
# first (moe_config's since rounds 19 and 21) combines three of them.
DECODE_CONFIGS = ("16x64x256:1:4:4:1:2@168/128x128:4:4,w:16x64x256:1:4:4:1:2@168/128x128:4:4,"
                  "w:16x64x256:1:4:4:1:2/128x128:4:4,16x64x256:1:4:4:1:2@168,"
                  "16x64x256:1:4:4:1:1,16x64x256:1:4:4:1:2,"
                  "16x64x128:1:4:6:1:2,16x64x128:1:4:5:1:2@128,16x64x128:1:4:8:1:2,"
                  "16x128x128:1:4:4:1:2,16x32x256:1:4:6:1:2,16x64x128:1:8:6:1:2,"
                  "16x64x256:1:4:4:1:2/64x128:4:6,16x64x256:1:4:4:1:2/128x128:4:4,"
                  "16x64x128:1:4:6:1:2/64x128:4:8,16x64x256:1:4:4:1:2@168/64x128:4:6@128,"
                  "16x64x256:1:4:4:1:2/32x256:4:6")


def parse_config(text: str) -> dict:
    """``BMxBNxBK:split_k:warps:stages[:abf16[:onemul]][@maxnreg][/BNxBK:warps:stages
    [@maxnreg]]`` -> a ``run_experts`` config (abf16: A_BF16, activations as rounded bf16 values
    instead of codes + scales; onemul: W_ONE_MUL 1, one bf16x2 multiply per weight pair where a
    per-program check of the scales allows it, or 2, everywhere without the check (the bench's
    scales are 2^-8..2^-5); @maxnreg: a register cap; after "/": the down projection's own
    tiling)."""
    main, _, down = text.partition("/")
    main, _, cap = main.partition("@")
    tile, split_k, warps, stages, *flags = main.split(":")
    bm, bn, bk = map(int, tile.split("x"))
    if len(flags) > 2 or any(f not in ("0", "1", "2") for f in flags):
        raise ValueError(text)
    flags += ["0"] * (2 - len(flags))
    cfg = dict(BM=bm, BN=bn, BK=bk, SPLIT_K=split_k == "1",
               A_BF16=flags[0] == "1", W_ONE_MUL=int(flags[1]), num_warps=int(warps),
               num_stages=int(stages), maxnreg=int(cap) if cap else None,
               DOWN={})  # none given: the down projection takes the same tiling
    if down:
        down, _, down_cap = down.partition("@")
        tile, warps, stages = down.split(":")
        bn, bk = map(int, tile.split("x"))
        cfg["DOWN"] = dict(BN=bn, BK=bk, num_warps=int(warps), num_stages=int(stages),
                           maxnreg=int(down_cap) if down_cap else None)
    return cfg


def bench_configs(num_tokens: int, configs: list[str]) -> None:
    """The MXFP4 W4A16 kernel (mma="bf16") at one size under several tilings (a "w:" prefix: the
    weights in word order, ``mxfp4_to_word_order``): ms, TFLOP/s
    against the bf16 ceiling measured in the same run, rel. error vs the first config's output."""
    import sweep_args
    from bench_common import roofline

    from deepinfer.kernels.triton import moe_experts

    rl = roofline()
    ceilings = rl.measure_ceilings()
    bf16, hbm = ceilings["bf16_flops_per_s"], ceilings["hbm_bytes_per_s"]
    torch.manual_seed(0)
    ws = random_experts(EXPERTS, HIDDEN, INTER, "cuda")
    x, ids, route_w = make_inputs(num_tokens, HIDDEN, EXPERTS, TOPK, torch.bfloat16, "cuda")
    flops = 2 * 3 * num_tokens * TOPK * HIDDEN * INTER
    _, n_bytes = touched_bytes(ws, ids)
    print(f"\nW4A16 tilings at {num_tokens} tokens ({flops / 1e12:.2f} TFLOP, "
          f"{n_bytes / 1e9:.2f} GB of touched experts; ceilings bf16 {bf16 / 1e12:.0f} TFLOP/s, "
          f"HBM {hbm / 1e12:.2f} TB/s)")
    print("| config BMxBNxBK:split:warps:stages | ms | TFLOP/s | of bf16 | GB/s | of HBM | "
          "rel err vs first |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    first = None
    words = None
    for text in configs:
        weights = ws
        if text.startswith("w:"):  # the weights in word order (kernels/triton/mxfp4_words.py)
            words = words or [moe_experts.mxfp4_to_word_order(w) for w in ws]
            weights = words
        cfg = parse_config(text.removeprefix("w:"))
        def run(cfg=cfg, weights=weights):
            return moe_experts.run_experts(x, ids, route_w, *weights, 10.0, mma="bf16",
                                           config=cfg)
        out = sweep_args.try_variant(text, run)  # None: a tiling that does not compile
        if out is None:
            continue
        first = out if first is None else first
        rel = ((out - first).norm() / first.norm()).item()
        ms = rl.median_ms(run)
        print(f"| {text} | {ms:.3f} | {flops / ms / 1e9:.1f} | {flops / ms * 1e3 / bf16:.3f} | "
              f"{n_bytes / ms / 1e6:.0f} | {n_bytes / ms * 1e3 / hbm:.3f} | {rel:.1e} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="*", default=[1, 8, 64, 256, 4096],
                        help="4096: a prefill chunk, for the FP8-vs-MXFP4 choice at both phases")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter correctness check")
    parser.add_argument("--config-tokens", type=int, nargs="+", default=[4096],
                        help="the sizes the tiling comparison runs at (0: none), e.g. 64 256")
    parser.add_argument("--configs", default=None,
                        help="comma-separated BMxBNxBK:split_k:warps:stages (default: "
                        "PREFILL_CONFIGS above 16 pairs per expert, else DECODE_CONFIGS)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_common
    from bench_common import smoke_or_gpu

    def run() -> None:
        bench(args.tokens)
        for config_tokens in filter(None, args.config_tokens):
            decode = config_tokens * TOPK <= 16 * EXPERTS  # moe_config's decode class
            configs = args.configs or (DECODE_CONFIGS if decode else PREFILL_CONFIGS)
            bench_configs(config_tokens, configs.split(","))

    smoke_or_gpu(args.smoke, smoke, run)


if __name__ == "__main__":
    main()
