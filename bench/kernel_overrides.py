"""Candidate launch configs set before a plan loads, so that an end-to-end bench (prefill.py,
decode.py) runs the winner of a one-kernel sweep before it becomes a default: a device round
measures the variants alone, then the best end to end.

    --attention-config LAYOUT:BK:BH:SPLIT:STAGES   prefill-sized attention launches
                                                   (attention_prefill.py variants)
    --moe-config BMxBNxBK:split:warps:stages[:swap] MXFP4 expert GEMMs (bf16 dots) of the
                                                   config's class: BM=16 decode, else prefill
                                                   (moe_decode.py --configs; repeatable)
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--attention-config", default=None,
                    help="LAYOUT:BK:BH:SPLIT:STAGES of prefill-sized attention launches "
                    "(bench/attention_prefill.py; default: the module's constants)")
    ap.add_argument("--moe-config", action="append", default=[],
                    help="BMxBNxBK:split_k:warps:stages[:swap] for expert GEMMs of its class "
                    "(BM=16: decode, else prefill; repeatable; default: moe_config's)")


def apply(attention_config: str | None, moe_configs: list[str]) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if attention_config:
        from attention_prefill import set_variant

        from deepinfer.kernels.triton import attention
        layout, *nums = attention_config.split(":")
        set_variant(attention, layout, *map(int, nums))
    if moe_configs:
        from moe_decode import parse_config

        from deepinfer.kernels.triton import moe_experts
        overrides = {parse_config(c)["BM"] == 16: parse_config(c) for c in moe_configs}
        base = moe_experts.moe_config

        def with_overrides(num_pairs, num_experts, *a, **kw):
            cfg = base(num_pairs, num_experts, *a, **kw)
            decode = num_pairs <= 16 * num_experts
            if not cfg["SPLIT_K"] or decode not in overrides:
                return cfg  # not the MXFP4 bf16-dot kernel, or a class no override names
            return {**cfg, **overrides[decode]}
        moe_experts.moe_config = with_overrides
