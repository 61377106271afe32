"""The blocks' fused mHC sites (runtime/model/block.py, deepseek_v41._backbone): each expand
also yields the next site's normed input and its Q8_32 values (``hc_expand_norm``), rounded
once per site and read by every quantized projection there — the same values as rounding per
projection, and the fusion only where no engram injection sits between two sites."""

from __future__ import annotations

from collections import Counter

import torch

from deepinfer.kernels.reference.quant import fake_quant_fp8_block32
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from tests.runtime.paged_helpers import tiny_model


class CountingKernels(KernelSet):
    """The reference ops, each call counted (with ``quant=`` for ``hc_expand_norm``)."""

    def __init__(self):
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __getattr__(self, op: str):
        fn = super().__getattr__(op)

        def call(*args, **kwargs):
            name = op if op != "hc_expand_norm" else f"{op}[quant={kwargs.get('quant', False)}]"
            self.calls[name] += 1
            return fn(*args, **kwargs)

        return call


def test_rounded_projection_is_the_quantized_forward():
    """``Linear.rounded`` of an activation's Q8_32 values is ``forward`` of the activation, bit
    for bit (``linear_quant_act`` is ``linear`` of those values)."""
    model = tiny_model()
    k, wq_a = model.kernels, model.layers[0].attn.wq_a
    x = torch.randn(7, model.spec.hidden_size, generator=torch.Generator().manual_seed(0))
    x = x.to(torch.bfloat16)
    assert torch.equal(wq_a.rounded(k, fake_quant_fp8_block32(x)), wq_a(k, x))


def test_every_site_fused_but_the_first_and_after_an_engram_injection():
    model = tiny_model()
    spec = model.spec
    layers = [block.attn.layer for block in model.layers]  # the backbone (no DSpark layers)
    engram = [i for i, layer in enumerate(layers) if layer.is_engram]
    assert engram and engram[0] > 0  # the tiny model has engram layers after the first
    counting = CountingKernels()
    model.kernels = counting
    ids = torch.randint(0, 500, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    model(ForwardBatch.build([ids], [SequenceCache.empty(spec)]))
    n = len(layers)
    unfused = [0] + engram  # blocks whose attention input is normed (and rounded) on its own
    # collapsed on its own after each engram injection; the first block's is stream 0 as is
    assert counting.calls["hc_collapse"] == len(engram)
    # the FFN site of the block before each engram layer expands on its own
    assert counting.calls["hc_expand"] == len(engram)
    # every attention site's expand, and the FFN sites' before a fused next block
    assert counting.calls["hc_expand_norm[quant=True]"] == n + (n - 1 - len(engram))
    assert counting.calls["hc_expand_norm[quant=False]"] == 1  # the head's input
    # rounded in the norm's pass: each unfused attention input and each query latent (read by
    # wq_b and an indexer's wq_b); no separate rounding; the window rows from their records
    assert counting.calls["rms_norm_q8"] == len(unfused) + n
    assert counting.calls["fake_quant_fp8_block32"] == 0
    assert counting.calls["window_kv_records"] == counting.calls["unpack_window_kv"] == n
    assert counting.calls["pack_window_kv"] == 0
    # no projection of an attention or FFN input rounds it again: only wo_b and each engram
    # layer's wkv of its table rows do
    assert counting.calls["linear_quant_act"] == n + len(engram)
