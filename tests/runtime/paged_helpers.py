"""Shared by the paged-cache tests: the tiny model and a cache pool full of garbage."""

import torch

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.runtime.cache_pool import CachePool
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.weights import synthetic_weights

BLOCK_TOKENS = 4


def tiny_model() -> DeepseekV41:
    spec = load_model_spec("builtin:tiny")
    with torch.device("meta"):
        m = DeepseekV41(spec)
    m.load_weights(synthetic_weights(spec, 0))
    return m


def garbage_pool(spec, num_blocks: int, num_slots: int) -> CachePool:
    """Every pool byte random: a read of a record the sequence did not write changes results."""
    pool = CachePool(spec, num_blocks, num_slots, BLOCK_TOKENS)
    g = torch.Generator().manual_seed(7)
    for t in (pool.window, *pool.entries.values(), *pool.index_keys.values()):
        t.copy_(torch.randint(0, 256, t.shape, generator=g, dtype=torch.uint8))
    for t in (*pool.partial_kv.values(), *pool.partial_gate.values()):
        t.copy_(torch.randn(t.shape, generator=g))
    pool.engram_history.copy_(torch.randint(0, 50, pool.engram_history.shape, generator=g))
    return pool
