"""Candidate launch configs set before a plan loads, so that an end-to-end bench (prefill.py,
decode.py) runs the winner of a one-kernel sweep before it becomes a default: a device round
measures the variants alone, then the best end to end.

    --attention-config LAYOUT:BK:BH:SPLIT:STAGES   prefill-sized attention launches
                                                   (attention_prefill.py variants), or
                       decode:BK:BH:DV:STAGES:WARPS  decode-sized ones
                                                   (attention_decode.py variants)
    --moe-config BMxBNxBK:split:warps:stages[:abf16[:onemul]]
                                                   MXFP4 expert GEMMs (bf16 dots) of the
                                                   config's class: BM=16 decode, else prefill
                                                   (moe_decode.py --configs; repeatable)
    --linear-decode-rows N                         FP8 projections of bf16 x up to N rows on
                                                   kernels/triton/linear_decode.py (0: the
                                                   row-major tiles, the A/B control)
    --linear-wide-rows N                           FP8 projections of bf16 x from N rows on
                                                   kernels/triton/linear_wide.py (Gluon; 0:
                                                   off; default linear.WIDE_MIN_ROWS)
    --linear-wide-max-rows N                       ... up to N rows (default: any; above N
                                                   the prefill tiles of _linear_kernel)
    --linear-wide-two-wg-rows N                    linear_wide's two-warpgroup launches from
                                                   WIDE_TWO_WG_MIN_PROGRAMS programs from N
                                                   rows (0: four waves at every row count;
                                                   linear_wide.WIDE_TWO_WG_ROWS)
    --linear-wide-mma-first 0|1                    linear_wide's two-warpgroup launches: a
                                                   step's wgmmas before its TMA refill
                                                   (linear_wide.MMA_FIRST)
    --w4a16-fused-swiglu 0|1                       the prefill's gated expert GEMM with the
                                                   SwiGLU as its epilogue (moe_gluon_w4a16_
                                                   prefill.FUSED_SWIGLU)
    --w4a16-prefill-parts 1|2|4|8                  the bf16 prefill expert GEMM's block N in
                                                   parts of BM (moe_gluon_w4a16_prefill.PARTS)
    --w4a16-rep-max-pairs N                        ... one warpgroup of two A fragments up
                                                   to N pairs per expert (0: off; default
                                                   moe_gluon_w4a16_prefill.
                                                   REP_MAX_PAIRS_PER_EXPERT)
    --w4a16-kernel base|ws|auto                    the bf16 prefill expert GEMM's kernel
                                                   (moe_gluon_w4a16_prefill.KERNEL; ws: TMA
                                                   issue on a producer warp; auto: ws for
                                                   REP 2 programs)
    --w4a8-decode-variant GATED_CAP:DOWN_CAP       the W4A8 decode GEMM's register caps of
                                                   the gated / (paired) down launches ('-':
                                                   none), e.g. 128:- or -:-
    --index-paged-kernel v2|gl                     the paged index scores' decode kernel
                                                   (indexer.PAGED_KERNEL; gl: Gluon)
    --mhc-decode-max-tokens N                      mHC coefficient calls up to N tokens on
                                                   the decode launch (BM 16, tf32x3), more on
                                                   the prefill one (BM 64, bf16x3)
    --mhc-finalize-block-m N                       the mHC finalize's token block (a power
                                                   of two, 1..64)
    --shared-expert-max-rows N                     the shared expert on the dense projection
                                                   kernels up to N rows (shared_expert.py;
                                                   more: the grouped 1-expert GEMM)
    --launch-constant MODULE.NAME=INT              any integer launch constant of a module of
                                                   deepinfer.kernels.triton, e.g.
                                                   mhc_norm.BLOCK_D=1024 (repeatable; in
                                                   prefill_ab.py every variant lists the same
                                                   names: the rest_kernels.py sweeps' winners
                                                   end to end)
    --launch-choice MODULE.NAME=WORD               any string kernel choice of such a module,
                                                   e.g. moe_gluon_w4a16_prefill.KERNEL=ws
                                                   (repeatable)
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--attention-config", default=None,
                    help="LAYOUT:BK:BH:SPLIT:STAGES of prefill-sized attention launches "
                    "(bench/attention_prefill.py; default: the module's constants)")
    ap.add_argument("--moe-config", action="append", default=[],
                    help="BMxBNxBK:split_k:warps:stages[:abf16[:onemul]] for expert "
                    "GEMMs of its class (BM=16: decode, else prefill; repeatable; default: "
                    "moe_config's)")
    ap.add_argument("--linear-decode-rows", type=int, default=None,
                    help="FP8 projections of bf16 x up to this many rows on linear_decode "
                    "(0: off; default: linear.DECODE_KERNEL_MAX_ROWS)")
    ap.add_argument("--linear-wide-rows", type=int, default=None,
                    help="FP8 projections of bf16 x from this many rows on linear_wide "
                    "(0: off; default: linear.WIDE_MIN_ROWS)")
    ap.add_argument("--linear-wide-two-wg-rows", type=int, default=None,
                    help="linear_wide takes two warpgroups from WIDE_TWO_WG_MIN_PROGRAMS "
                    "programs from this many rows (0: the four waves at every row count; "
                    "default: linear_wide.WIDE_TWO_WG_ROWS)")
    ap.add_argument("--linear-wide-mma-first", type=int, default=None, choices=(0, 1),
                    help="linear_wide's two-warpgroup launches issue a step's wgmmas before "
                    "its TMA refill (default: linear_wide.MMA_FIRST)")
    ap.add_argument("--w4a16-fused-swiglu", type=int, default=None, choices=(0, 1),
                    help="the prefill's gated expert GEMM with the SwiGLU as its epilogue "
                    "(default: moe_gluon_w4a16_prefill.FUSED_SWIGLU)")
    ap.add_argument("--linear-wide-max-rows", type=int, default=None,
                    help="FP8 projections up to this many rows on linear_wide (default: "
                    "linear.WIDE_MAX_ROWS)")
    ap.add_argument("--w4a16-prefill-parts", type=int, default=None, choices=(1, 2, 4, 8),
                    help="the bf16 prefill expert GEMM runs a block at N = its parts of BM "
                    "that hold pairs (default: moe_gluon_w4a16_prefill.PARTS)")
    ap.add_argument("--w4a8-decode-variant", default=None,
                    help="GATED_CAP:DOWN_CAP: the W4A8 decode GEMM's register caps of the "
                    "gated and the (paired) down launch, registers or '-' for none (default: "
                    "moe_gluon_w4a8.register_cap)")
    ap.add_argument("--index-paged-kernel", default=None,
                    help="v2 or gl: the paged index scores' decode kernel "
                    "(default: indexer.PAGED_KERNEL)")
    ap.add_argument("--mhc-decode-max-tokens", type=int, default=None,
                    help="mHC coefficient calls up to this many tokens on the decode launch "
                    "(default: mhc.COEFFS_DECODE_MAX_TOKENS)")
    ap.add_argument("--mhc-finalize-block-m", type=int, default=None,
                    help="the mHC finalize's token block (default: "
                    "mhc.COEFFS_FINALIZE_BLOCK_M)")
    ap.add_argument("--shared-expert-max-rows", type=int, default=None,
                    help="the shared expert on the dense projection kernels up to this many "
                    "rows (default: shared_expert.MAX_ROWS)")
    ap.add_argument("--route-decode-max-tokens", type=int, default=None,
                    help="router scores on the decode tiles up to this many tokens (default: "
                    "moe_routing.ROUTE_DECODE_MAX_TOKENS; 64: the tiling before session 22)")
    ap.add_argument("--w4a16-rep-max-pairs", type=int, default=None,
                    help="the bf16 prefill expert GEMM on one warpgroup of two A fragments up "
                    "to this many pairs per expert (0: off; default: moe_gluon_w4a16_prefill."
                    "REP_MAX_PAIRS_PER_EXPERT)")
    ap.add_argument("--w4a16-kernel", default=None,
                    help="the bf16 prefill expert GEMM's kernel: base, ws (its TMA issue on a "
                    "producer warp) or auto (ws for REP 2 programs; default: "
                    "moe_gluon_w4a16_prefill.KERNEL)")
    ap.add_argument("--launch-constant", action="append", default=[], metavar="MODULE.NAME=INT",
                    help="an integer launch constant of deepinfer.kernels.triton.MODULE "
                    "(repeatable), e.g. mhc_norm.BLOCK_D=1024")
    ap.add_argument("--launch-choice", action="append", default=[], metavar="MODULE.NAME=WORD",
                    help="a string kernel choice of deepinfer.kernels.triton.MODULE "
                    "(repeatable), e.g. moe_gluon_w4a16_prefill.KERNEL=ws")
    ap.add_argument("--moe-decode-max-pairs", type=int, default=None,
                    help="W4A8 experts on the decode pipeline up to this many pairs per expert "
                    "(default: moe_experts.DECODE_MAX_PAIRS_PER_EXPERT; 16: before session 23)")


def apply_args(args: argparse.Namespace) -> None:
    """``apply`` with the flags ``add_arguments`` defined (decode.py, prefill.py)."""
    apply(args.attention_config, args.moe_config, args.linear_decode_rows,
          args.shared_expert_max_rows, args.mhc_decode_max_tokens,
          args.w4a8_decode_variant, args.index_paged_kernel, args.mhc_finalize_block_m,
          args.linear_wide_rows, args.linear_wide_max_rows,
          args.w4a16_prefill_parts, args.route_decode_max_tokens, args.moe_decode_max_pairs,
          args.w4a16_rep_max_pairs, args.w4a16_kernel, args.linear_wide_mma_first,
          args.linear_wide_two_wg_rows, args.w4a16_fused_swiglu)
    for text in args.launch_constant:
        set_launch_constant(text)
    for text in args.launch_choice:
        set_launch_choice(text)


def set_launch_constant(text: str) -> None:
    """``MODULE.NAME=INT``: deepinfer.kernels.triton.MODULE.NAME = INT (MODULE may also be a
    full ``deepinfer.…`` module path: a runtime switch); exits naming the flag
    for an unknown module or constant, or a constant that is not an integer."""
    _set_module_constant("--launch-constant", text, int, "INT",
                         lambda v: v.lstrip("-").isdigit())


def set_launch_choice(text: str) -> None:
    """``MODULE.NAME=WORD``: deepinfer.kernels.triton.MODULE.NAME = "WORD" for a string
    constant (a kernel choice such as moe_gluon_w4a16_prefill.KERNEL); exits as
    ``set_launch_constant``."""
    _set_module_constant("--launch-choice", text, str, "WORD",
                         lambda v: v.replace("_", "").isalnum())


def _set_module_constant(flag: str, text: str, kind: type, shape: str, valid) -> None:
    target, sep, value = text.partition("=")
    module, dot, name = target.rpartition(".")
    if not sep or not dot or not valid(value):
        raise SystemExit(f"{flag} {text!r}: expected MODULE.NAME={shape}")
    # a bare name is a kernel module's; a dotted deepinfer path any module's (a host-side
    # switch of the runtime, e.g. deepinfer.runtime.model.batch.NAME)
    full = module if module.startswith("deepinfer.") else f"deepinfer.kernels.triton.{module}"
    try:
        mod = importlib.import_module(full)
    except ImportError:
        raise SystemExit(f"{flag} {text!r}: no module {full}") from None
    old = getattr(mod, name, None)
    if type(old) is not kind:
        noun = "an integer" if kind is int else "a string"
        raise SystemExit(f"{flag} {text!r}: {module}.{name} is not {noun} constant (it is "
                         f"{old!r})")
    setattr(mod, name, kind(value))


def _switch(flag: str, value: int | None, module: str, attr: str) -> None:
    """``deepinfer.kernels.triton.<module>.<attr>`` = bool(value) for a 0 / 1 flag (None:
    unchanged); another value exits naming the flag."""
    if value is None:
        return
    if value not in (0, 1):
        raise SystemExit(f"{flag} {value}: expected 0 or 1")
    setattr(importlib.import_module(f"deepinfer.kernels.triton.{module}"), attr, bool(value))


def _rows_from(flag: str, value: int | None, module: str, attr: str) -> None:
    """``deepinfer.kernels.triton.<module>.<attr>`` = the row count from which a launch takes
    a path (0: off, None there; None: unchanged); a negative value exits naming the flag."""
    if value is None:
        return
    if value < 0:
        raise SystemExit(f"{flag} {value}: expected >= 0 (0: off)")
    setattr(importlib.import_module(f"deepinfer.kernels.triton.{module}"), attr, value or None)


def apply(attention_config: str | None, moe_configs: list[str],
          linear_decode_rows: int | None = None,
          shared_expert_max_rows: int | None = None,
          mhc_decode_max_tokens: int | None = None,
          w4a8_decode_variant: str | None = None,
          index_paged_kernel: str | None = None,
          mhc_finalize_block_m: int | None = None,
          linear_wide_rows: int | None = None,
          linear_wide_max_rows: int | None = None,
          w4a16_prefill_parts: int | None = None,
          route_decode_max_tokens: int | None = None,
          moe_decode_max_pairs: int | None = None,
          w4a16_rep_max_pairs: int | None = None,
          w4a16_kernel: str | None = None,
          linear_wide_mma_first: int | None = None,
          linear_wide_two_wg_rows: int | None = None,
          w4a16_fused_swiglu: int | None = None) -> None:
    """Set the overrides; a malformed value exits with a message naming the flag."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _rows_from("--linear-wide-two-wg-rows", linear_wide_two_wg_rows, "linear_wide",
               "WIDE_TWO_WG_ROWS")
    _switch("--linear-wide-mma-first", linear_wide_mma_first, "linear_wide", "MMA_FIRST")
    _switch("--w4a16-fused-swiglu", w4a16_fused_swiglu, "moe_gluon_w4a16_prefill",
            "FUSED_SWIGLU")
    if w4a16_rep_max_pairs is not None:
        from deepinfer.kernels.triton import moe_gluon_w4a16_prefill
        if w4a16_rep_max_pairs < 0:
            raise SystemExit(f"--w4a16-rep-max-pairs {w4a16_rep_max_pairs}: expected >= 0")
        moe_gluon_w4a16_prefill.REP_MAX_PAIRS_PER_EXPERT = w4a16_rep_max_pairs
    if w4a16_kernel is not None:
        from deepinfer.kernels.triton import moe_gluon_w4a16_prefill
        if w4a16_kernel not in ("base", "ws", "auto"):
            raise SystemExit(f"--w4a16-kernel {w4a16_kernel}: expected base, ws or auto")
        moe_gluon_w4a16_prefill.KERNEL = w4a16_kernel
    if moe_decode_max_pairs is not None:
        from deepinfer.kernels.triton import moe_experts
        if moe_decode_max_pairs < 0:
            raise SystemExit(f"--moe-decode-max-pairs {moe_decode_max_pairs}: expected >= 0")
        moe_experts.DECODE_MAX_PAIRS_PER_EXPERT = moe_decode_max_pairs
    if route_decode_max_tokens is not None:
        from deepinfer.kernels.triton import moe_routing
        if route_decode_max_tokens < 64:
            raise SystemExit(f"--route-decode-max-tokens {route_decode_max_tokens}: "
                             "expected >= 64")
        moe_routing.ROUTE_DECODE_MAX_TOKENS = route_decode_max_tokens
    if index_paged_kernel is not None:
        set_index_paged_kernel(index_paged_kernel)
    if w4a8_decode_variant is not None:
        set_w4a8_decode_variant(w4a8_decode_variant)
    if w4a16_prefill_parts is not None:
        from deepinfer.kernels.triton import moe_gluon_w4a16_prefill
        if w4a16_prefill_parts not in (1, 2, 4, 8):
            raise SystemExit(f"--w4a16-prefill-parts {w4a16_prefill_parts}: expected 1, 2, 4 "
                             "or 8")
        moe_gluon_w4a16_prefill.PARTS = w4a16_prefill_parts
    if mhc_decode_max_tokens is not None:
        from deepinfer.kernels.triton import mhc
        if mhc_decode_max_tokens < 0:
            raise SystemExit(f"--mhc-decode-max-tokens {mhc_decode_max_tokens}: expected >= 0")
        mhc.COEFFS_DECODE_MAX_TOKENS = mhc_decode_max_tokens
    if mhc_finalize_block_m is not None:
        from deepinfer.kernels.triton import mhc
        bm = mhc_finalize_block_m
        if not (1 <= bm <= 64 and bm & (bm - 1) == 0):
            raise SystemExit(f"--mhc-finalize-block-m {bm}: expected a power of two, 1..64")
        mhc.COEFFS_FINALIZE_BLOCK_M = bm
    if shared_expert_max_rows is not None:
        from deepinfer.kernels.triton import shared_expert
        if shared_expert_max_rows < 0:
            raise SystemExit(f"--shared-expert-max-rows {shared_expert_max_rows}: expected >= 0")
        shared_expert.MAX_ROWS = shared_expert_max_rows
    if linear_wide_rows is not None:
        from deepinfer.kernels.triton import linear
        if linear_wide_rows < 0:
            raise SystemExit(f"--linear-wide-rows {linear_wide_rows}: expected >= 0")
        linear.WIDE_MIN_ROWS = linear_wide_rows
    if linear_wide_max_rows is not None:
        from deepinfer.kernels.triton import linear
        if linear_wide_max_rows < 1:
            raise SystemExit(f"--linear-wide-max-rows {linear_wide_max_rows}: expected >= 1")
        linear.WIDE_MAX_ROWS = linear_wide_max_rows
    if linear_decode_rows is not None:
        from deepinfer.kernels.triton import linear, linear_decode
        if not 0 <= linear_decode_rows <= linear_decode.MAX_ROWS:
            raise SystemExit(f"--linear-decode-rows {linear_decode_rows}: expected 0.."
                             f"{linear_decode.MAX_ROWS}")
        linear.DECODE_KERNEL_MAX_ROWS = linear_decode_rows
    if attention_config and attention_config.startswith("decode:"):
        from attention_decode import set_variant as set_decode

        from deepinfer.kernels.triton import attention
        nums = attention_config.split(":")[1:]
        is_v2 = bool(nums) and nums[0] == "v2" and len(nums) <= 5 and all(
            n.isdigit() for n in nums[1:])
        if not is_v2 and (len(nums) != 5 or not all(n.isdigit() for n in nums)):
            raise SystemExit(f"--attention-config {attention_config!r}: expected "
                             "decode:BK:BH:DV:STAGES:WARPS, e.g. decode:16:64:2:2:8, "
                             "or decode:v2[:BK:BH:WARPS:STAGES]")
        set_decode(attention, ":".join(nums))
    elif attention_config:
        from attention_prefill import set_variant

        from deepinfer.kernels.triton import attention
        layout, *nums = attention_config.split(":")
        if (layout not in ("h", "i", "p") or len(nums) != 4
                or not all(n.isdigit() for n in nums)):
            raise SystemExit(f"--attention-config {attention_config!r}: expected "
                             "LAYOUT:BK:BH:SPLIT:STAGES with LAYOUT h, i (the Triton kernel) "
                             "or p (the Gluon kernel), e.g. h:32:64:1:2")
        set_variant(attention, layout, *map(int, nums))
    if moe_configs:
        from moe_decode import parse_config

        from deepinfer.kernels.triton import moe_experts
        overrides = {}
        for text in moe_configs:
            try:
                cfg = parse_config(text)
            except ValueError:
                raise SystemExit(f"--moe-config {text!r}: expected BMxBNxBK:split_k:warps:"
                                 "stages[:abf16[:onemul]][@maxnreg][/BNxBK:warps:"
                                 "stages], e.g. 16x64x256:1:4:4:1:1") from None
            overrides[cfg["BM"] == 16] = cfg
        base = moe_experts.moe_config

        def with_overrides(num_pairs, num_experts, *a, **kw):
            cfg = base(num_pairs, num_experts, *a, **kw)
            decode = num_pairs <= 16 * num_experts
            if not cfg["SPLIT_K"] or decode not in overrides:
                return cfg  # not the MXFP4 bf16-dot kernel, or a class no override names
            return {**cfg, **overrides[decode]}
        moe_experts.moe_config = with_overrides


def set_w4a8_decode_variant(text: str, flag: str = "--w4a8-decode-variant") -> None:
    """GATED_CAP:DOWN_CAP -> moe_gluon_w4a8.register_cap: the register caps of the gated and
    the paired down launch at every block size ('-': none); a malformed value exits naming
    ``flag``. (The step-ahead loads', cp.async codes' and pairing switches of the form
    PREFETCH:GATED_CAP:DOWN_CAP[:XCP[:PAIRED]] went with their off paths: code at bf55292.)"""
    from deepinfer.kernels.triton import moe_gluon_w4a8
    parts = text.split(":")
    if len(parts) != 2 or not all(p == "-" or p.isdigit() for p in parts):
        raise SystemExit(f"{flag} {text!r}: expected GATED_CAP:DOWN_CAP with caps in registers "
                         "or '-' (none), e.g. 128:- or -:-")
    caps = {paired: None if p == "-" else int(p) for paired, p in ((False, parts[0]),
                                                                   (True, parts[1]))}
    moe_gluon_w4a8.register_cap = lambda paired, block_m: caps[paired]


def set_index_paged_kernel(text: str) -> None:
    """v2 | gl -> indexer.PAGED_KERNEL; a malformed value exits naming the flag."""
    from deepinfer.kernels.triton import indexer
    if text not in ("v2", "gl"):
        raise SystemExit(f"--index-paged-kernel {text!r}: expected v2 or gl")
    indexer.PAGED_KERNEL = text
