"""Incremental execution of the tiny V4.1 model: decode and chunked prefill against one-shot.

Tolerance: exact (``torch.equal``). The reference backend accumulates every reduction in fp64
and rounds once to the declared dtype, and evaluates elementwise transcendentals (sigmoid,
softmax, softplus, SiLU) in fp64 too (tests/kernels/test_reference_row_invariance.py says why),
so a GEMM, a softmax or a top-k score does not depend on how many rows or keys share the call;
incremental, chunked and batched execution therefore compute the same bits as the one-shot
forward. Anything looser would hide real cache bugs behind the FP8/FP4 rounding boundaries,
where a 1-ulp difference upstream can flip a quantized value or a top-k pick and move logits by
1e-2 (measured with fp32 accumulation).
"""

import copy
import json

import pytest
import torch

from deepinfer.artifacts.model_spec import ModelSpec, builtin_config_path, load_model_spec
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.weights import synthetic_weights


def build_model(spec: ModelSpec, seed: int = 0) -> DeepseekV41:
    with torch.device("meta"):
        model = DeepseekV41(spec)
    model.load_weights(synthetic_weights(spec, seed))
    return model


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return load_model_spec("builtin:tiny")


@pytest.fixture(scope="module")
def model(spec) -> DeepseekV41:
    return build_model(spec)


def tokens(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 500, (n,), generator=g).tolist()


def one_shot(model, ids, image_mask=None, image_embeds=None) -> torch.Tensor:
    cache = SequenceCache.empty(model.spec)
    masks = None if image_mask is None else [image_mask]
    return model(ForwardBatch.build([ids], [cache], masks, image_embeds))


def chunked(model, ids, bounds, image_mask=None, image_embeds=None) -> torch.Tensor:
    """Prefill ``ids`` in chunks ending at ``bounds`` (absolute, increasing, last = len)."""
    cache, outs, start, img_row = SequenceCache.empty(model.spec), [], 0, 0
    for end in bounds:
        masks, emb = None, None
        if image_mask is not None:
            masks = [image_mask[start:end]]
            n_img = sum(masks[0])
            emb = image_embeds[img_row:img_row + n_img] if n_img else None
            img_row += n_img
        outs.append(model(ForwardBatch.build([ids[start:end]], [cache], masks, emb)))
        start = end
    return torch.cat(outs)


def test_boundaries_the_traffic_crosses(spec):
    """The traffic below (45 and 41 tokens) crosses every boundary that matters."""
    n = 41
    assert n > 4 * spec.sliding_window  # the window ring wraps several times
    assert n // 2 > spec.index_topk  # ratio-2 top-k truncates
    blocks = -(-n // spec.candidate_block_size)
    assert blocks > spec.candidate_topk_blocks  # the candidate stage drops blocks


def test_batched_decode_matches_full_forward(model, spec):
    """Two sequences of different lengths decode token by token in one batch (the second
    starts 4 steps later, so positions differ) and reproduce each one-shot forward."""
    seqs = [tokens(45, 1), tokens(41, 2)]
    start_step = [0, 4]
    full = [one_shot(model, s) for s in seqs]
    caches = [SequenceCache.empty(spec) for _ in seqs]
    got = [[] for _ in seqs]
    for step in range(max(len(s) + d for s, d in zip(seqs, start_step, strict=True))):
        live = [b for b, s in enumerate(seqs) if 0 <= step - start_step[b] < len(s)]
        chunks = [[seqs[b][step - start_step[b]]] for b in live]
        logits = model(ForwardBatch.build(chunks, [caches[b] for b in live]))
        for row, b in enumerate(live):
            got[b].append(logits[row:row + 1])
    for b in range(len(seqs)):
        inc = torch.cat(got[b])
        assert inc.shape == full[b].shape
        diff = (inc - full[b]).abs().max().item()
        assert torch.equal(inc, full[b]), f"sequence {b}: max |diff| {diff}"
    assert caches[0].num_tokens == 45 and caches[0].num_entries(1) == 22
    assert caches[0].num_entries(4) == 45 and caches[0].partial_kv[1].shape[0] == 1


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 37])
def test_chunked_prefill_matches_one_shot(model, chunk):
    ids = tokens(37, 3)
    bounds = list(range(chunk, 37, chunk)) + [37]
    assert torch.equal(chunked(model, ids, bounds), one_shot(model, ids))


def test_chunk_boundaries_inside_and_at_groups(model):
    ids = tokens(37, 4)
    ref = one_shot(model, ids)
    assert torch.equal(chunked(model, ids, [5, 12, 13, 37]), ref)
    # prefill then decode
    assert torch.equal(chunked(model, ids, [20] + list(range(21, 38))), ref)


def test_mixed_prefill_and_decode_in_one_batch(model, spec):
    a, b = tokens(30, 5), tokens(19, 6)
    ca, cb = SequenceCache.empty(spec), SequenceCache.empty(spec)
    model(ForwardBatch.build([a[:23]], [ca]))
    out = model(ForwardBatch.build([a[23:], b], [ca, cb]))  # a decodes 7 more, b prefills
    assert torch.equal(out[:7], one_shot(model, a)[23:])
    assert torch.equal(out[7:], one_shot(model, b))


def test_last_token_logits(model, spec):
    a, b = tokens(12, 7), tokens(9, 8)
    out = model(ForwardBatch.build([a, b], [SequenceCache.empty(spec), SequenceCache.empty(spec)]),
                all_logits=False)
    assert torch.equal(out[0], one_shot(model, a)[-1]) and torch.equal(out[1],
                                                                        one_shot(model, b)[-1])


def image_request(spec, n=33, span=range(9, 17), seed=9):
    ids = tokens(n, seed)
    mask = [i in span for i in range(n)]
    for i in span:
        ids[i] = spec.image_token_id
    embeds = torch.randn(len(span), spec.hidden_size,
                         generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    return ids, mask, embeds


def test_image_spans_incremental_and_effective(model, spec):
    ids, mask, embeds = image_request(spec)
    ref = one_shot(model, ids, mask, embeds)
    assert torch.equal(chunked(model, ids, [9, 17, 20, 33], mask, embeds), ref)
    assert torch.equal(chunked(model, ids, list(range(1, 34)), mask, embeds), ref)
    # The span changes the computation: embeddings, image-token routing bias, engram gate.
    plain = one_shot(model, ids)
    assert not torch.equal(ref[20:], plain[20:])


def test_image_routing_bias_and_engram_gate_are_used(spec):
    """Same embeddings, only the mask differs: positions inside the span route with bias_vl
    and skip engram, so their outputs differ from the same tokens marked as text."""
    model = build_model(spec)
    ids, mask, _ = image_request(spec)
    emb = model.embed.weight[torch.tensor(ids)][torch.tensor(mask)]
    with_mask = one_shot(model, ids, mask, emb)
    without = one_shot(model, ids)
    inside = torch.tensor(mask)
    assert torch.equal(with_mask[:9], without[:9])  # before the span: causal, untouched
    assert not torch.equal(with_mask[inside], without[inside])


def test_swiglu_clamps_active_variant():
    """The §6.1 second variant (swiglu_limit 0.5) hits the clamps and still decodes exactly."""
    raw = json.loads(builtin_config_path("tiny").read_text())
    low = copy.deepcopy(raw)
    low["text_config"]["swiglu_limit"] = 0.5
    spec_low = ModelSpec.from_dict(low)
    model_low, model_ref = build_model(spec_low), build_model(ModelSpec.from_dict(raw))
    ids = tokens(20, 10)
    full = one_shot(model_low, ids)
    assert torch.equal(chunked(model_low, ids, list(range(1, 21))), full)
    assert not torch.equal(full, one_shot(model_ref, ids))


def test_cache_records_have_the_planned_sizes(spec):
    cache = SequenceCache.empty(spec)
    assert cache.window[0].shape == (spec.sliding_window, spec.window_record_bytes) == (8, 66)
    assert cache.compressed[1].shape[1] == spec.compressed_record_bytes == 36
    assert cache.index_keys[4].shape[1] == spec.index_key_record_bytes == 17
    assert set(cache.partial_kv) == {1}  # only ratio > 1 sources keep a partial group


def test_bad_batches_are_rejected(model, spec):
    cache = SequenceCache.empty(spec)
    with pytest.raises(ValueError, match="token ids"):
        model(ForwardBatch.build([[600]], [cache]))
    batch = ForwardBatch.build([[5, 6]], [cache])
    batch.positions += 3
    with pytest.raises(ValueError, match="starts at position 3"):
        model(batch)
