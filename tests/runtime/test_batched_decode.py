"""Batched decode attention and indexer over the paged pools (``runtime/model/decode_rows.py``).

The batched path (all rows of a decode step, per-row index lists into the flattened pools) must
give the same logits, bit for bit (``torch.equal``), as the per-sequence path: on contiguous
caches and on the paged caches with the batched path switched off. Pools start as garbage and
block tables are shuffled, as in test_cache_pool.py, so a wrong row or a read of a record the
sequence did not write changes the logits.
"""

import collections

import pytest
import torch
from host_sync import model_launches, no_host_sync
from paged_helpers import garbage_pool, tiny_model

from deepinfer.kernels.reference import attention_fused
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model import attention as attention_mod
from deepinfer.runtime.model import decode_rows
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model.decode_rows import (
    DecodeRows,
    compressed_rows,
    window_rows,
)
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41

# fresh (row 0: its window lists start with -1), window wrapped several times, once, not at all
PROMPTS = (1, 26, 13, 5)
SLOTS = (4, 3, 1, 6)
DECODE_STEPS = 12


@pytest.fixture(scope="module")
def model() -> DeepseekV41:
    return tiny_model()



def test_window_rows_hand_checked():
    # L = 2 layers, W = 4, layer 1: row = (slot * 2 + 1) * 4 + q % 4 for q in [p - 3, p]
    rows = window_rows(torch.tensor([2, 1]), torch.tensor([1, 10]), num_layers=2, window=4,
                       layer=1)
    assert rows.tolist() == [[-1, -1, 20, 21],  # q = -2, -1 (padding), 0, 1
                             [15, 12, 13, 14]]  # q = 7, 8, 9, 10: the ring wraps after 7


def test_compressed_rows_hand_checked():
    tables = torch.tensor([[5, 2, 0], [3, 7, 1]])  # row 0 padded with the sentinel
    ids = torch.tensor([[0, 3, -1], [4, 1, 5]])
    # per_block 2: e -> tables[e // 2] * 2 + e % 2
    assert compressed_rows(tables, ids, 2).tolist() == [[10, 5, -1], [2, 7, 3]]


class Run:
    """Sequences continuing on one cache kind: contiguous, or paged over a garbage pool."""

    def __init__(self, model, prompts, paged: bool):
        spec = model.spec
        g = torch.Generator().manual_seed(13)
        self.model, self.paged = model, paged
        self.pool = None
        if paged:
            self.pool = garbage_pool(spec, num_blocks=48, num_slots=7)
            self.pool.window[0] = 0xFF  # sentinel slot: NaN codes and scales
        blocks = torch.randperm(47, generator=g) + 1
        self.tables = [blocks[i * 11:(i + 1) * 11] for i in range(len(prompts))]
        self.caches = [SequenceCache.empty(spec) for _ in prompts]
        self.done = [0] * len(prompts)

    def cache(self, b):
        if self.paged:
            return self.pool.view(self.tables[b], SLOTS[b], self.done[b])
        return self.caches[b]

    def step(self, chunks: dict[int, list[int]]) -> torch.Tensor:
        caches = [self.cache(b) for b in chunks]
        for b, c in chunks.items():
            self.done[b] += len(c)
        return self.model(ForwardBatch.build(list(chunks.values()), caches))


def decode_traffic(model, run: Run) -> list[torch.Tensor]:
    """Prefill prompts 1-3 as chunks, then decode every sequence together (sequence 0 starts
    at position 0 inside the decode batch); logits of each step."""
    g = torch.Generator().manual_seed(21)
    ids = [torch.randint(3, 500, (n + DECODE_STEPS,), generator=g).tolist() for n in PROMPTS]
    out = [run.step({b: ids[b][:PROMPTS[b]] for b in range(1, 4)})]
    first = [0, *PROMPTS[1:]]  # token index of each first decode step
    for t in range(DECODE_STEPS):
        out.append(run.step({b: [ids[b][first[b] + t]] for b in range(len(PROMPTS))}))
    return out


def test_batched_decode_equals_per_sequence(model, monkeypatch):
    contiguous = decode_traffic(model, Run(model, PROMPTS, paged=False))
    with monkeypatch.context() as m:  # the paged caches through the per-sequence path
        m.setattr(DecodeRows, "build", classmethod(lambda cls, batch: None))
        per_sequence = decode_traffic(model, Run(model, PROMPTS, paged=True))
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1].shape[0])  # rows of q
        return decode_rows.attend_records(*args, **kwargs)

    monkeypatch.setattr(attention_mod, "attend_records", counted)
    batched = decode_traffic(model, Run(model, PROMPTS, paged=True))
    num_layers = model.spec.num_hidden_layers
    assert calls == [len(PROMPTS)] * (num_layers * DECODE_STEPS)  # every decode step batched
    for step, (want, mid, got) in enumerate(zip(contiguous, per_sequence, batched, strict=True)):
        assert torch.equal(mid, want), f"step {step}: paged per-sequence"
        assert torch.equal(got, want), f"step {step}: batched, max |diff| " \
                                       f"{(got - want).abs().max().item()}"


def test_rows_address_what_the_sequence_wrote(model):
    """The lists of a decode step point at the records of exactly the visible positions."""
    w = model.spec.sliding_window
    run = Run(model, PROMPTS, paged=True)
    decode_traffic(model, run)
    caches = [run.cache(b) for b in range(len(PROMPTS))]
    batch = ForwardBatch.build([[7]] * len(caches), caches)
    rows = DecodeRows.build(batch)
    flat = run.pool.flat_window()
    for layer in (0, 5):
        idx = rows.window(layer)
        for b, cache in enumerate(caches):
            p = cache.num_tokens
            q = torch.arange(p - w + 1, p + 1)
            valid = q >= 0
            assert torch.equal(idx[b] >= 0, valid)
            ring = cache.window_ring(layer)
            assert torch.equal(flat[idx[b][valid]], ring[q[valid] % w])
    src = 4  # ratio 1: entry e = token e
    ids = torch.tensor([[0, 3, 17, -1]] * len(caches))
    ids[[0, 3], 2] = -1  # the shorter sequences hold fewer entries
    idx = rows.compressed(src, ids)
    entries = run.pool.flat_entries(src)
    for b, cache in enumerate(caches):
        keep = ids[b] >= 0
        assert torch.equal(entries[idx[b][keep]], cache.entries(src)[ids[b][keep]])
        assert (idx[b][~keep] == -1).all()
    for src in (1, 4):  # ratio 2 and 1: the indexer's visible counts and key width
        ratio = run.pool.ratio[src]
        counts = [(c.num_tokens + 1) // ratio for c in caches]
        assert rows.num_visible(src).tolist() == counts
        assert rows.key_width(src) == max(counts)


def test_not_built_outside_paged_decode(model):
    spec = model.spec
    pool = garbage_pool(spec, num_blocks=8, num_slots=3)
    one = pool.view(torch.tensor([1, 2]), 1, 0)
    assert DecodeRows.build(ForwardBatch.build([[5, 6]], [one])) is None  # a prefill chunk
    other = SequenceCache.empty(spec)
    assert DecodeRows.build(ForwardBatch.build([[5], [6]], [one, other])) is None
    assert DecodeRows.build(ForwardBatch.build([[5]], [one])) is not None


def test_kernel_backend_reads_the_pools_in_place(model, monkeypatch):
    """A records kernel gets the whole flattened pools and the lists unchanged; here the fused
    reference stands in for the Triton kernel (slot 0, which no sequence owns, is zero as in
    the engine: a -1 row is clamped to pool row 0 by the reference, never by the kernel)."""
    seen = []

    def pool_kernel(q, window, wi, comp, ci, sink, scale):
        seen.append((window.shape[0], wi.shape, None if ci is None else ci.shape))
        return attention_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink,
                                                             scale)

    class PoolKernels(KernelSet):  # the reference everywhere, pool_kernel for the records op
        def backend_of(self, op):
            return "pool-test" if op == decode_rows.RECORDS_OP else super().backend_of(op)

        def __getattr__(self, op):
            return pool_kernel if op == decode_rows.RECORDS_OP else super().__getattr__(op)

    want = decode_traffic(model, Run(model, PROMPTS, paged=False))
    monkeypatch.setattr(model, "kernels", PoolKernels())
    run = Run(model, PROMPTS, paged=True)
    run.pool.window[0] = 0
    got = decode_traffic(model, run)
    spec = model.spec
    rows = run.pool.flat_window().shape[0]
    n = len(PROMPTS)
    assert (rows, (n, spec.sliding_window), (n, spec.index_topk)) in seen
    assert len(seen) == spec.num_hidden_layers * DECODE_STEPS
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        assert torch.equal(b, a), f"step {step}"


class GraphShapedRun(Run):
    """Decode steps as ``runtime/decode_graphs.py`` feeds them: ``forward_decode`` over static
    buffers, with padding rows (token 0, position 0, slot 0, block 0) after the real rows,
    block tables padded to a fixed width, and the key width of the largest context."""

    PADDING_ROWS = 3
    TABLE_WIDTH = 16

    def step(self, chunks: dict[int, list[int]]) -> torch.Tensor:
        if len(chunks) < len(PROMPTS) or any(len(c) != 1 for c in chunks.values()):
            return super().step(chunks)  # the prefill step runs as usual
        n, pad = len(chunks), self.PADDING_ROWS
        ids = torch.zeros(n + pad, dtype=torch.int64)
        positions, slots = torch.zeros_like(ids), torch.zeros_like(ids)
        tables = torch.zeros(n + pad, self.TABLE_WIDTH, dtype=torch.int64)
        for i, (b, c) in enumerate(chunks.items()):
            ids[i], positions[i], slots[i] = c[0], self.done[b], SLOTS[b]
            if self.done[b] == 0:  # as the engine does for a sequence's first token
                self.pool.engram_history[SLOTS[b]] = -1
            tables[i, :len(self.tables[b])] = self.tables[b]
            self.done[b] += 1
        max_len = self.TABLE_WIDTH * self.pool.block_size_tokens
        rows = DecodeRows(self.pool, ids, positions, slots, tables, max_len - 1)
        return self.model.forward_decode(rows)[:n]


def test_graph_shaped_decode_equals_per_sequence(model):
    """What a CUDA graph replays (static widths, padding rows on the NaN-filled sentinels)
    gives the real rows the same logits, bit for bit, as the contiguous per-sequence path."""
    want = decode_traffic(model, Run(model, PROMPTS, paged=False))
    got = decode_traffic(model, GraphShapedRun(model, PROMPTS, paged=True))
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        assert torch.equal(b, a), f"step {step}: max |diff| {(b - a).abs().max().item()}"


def graph_shaped_decode_syncs(model, opaque_ops: frozenset[str] | None = None) -> list[str]:
    """The host syncs ``no_host_sync`` records over the graph-shaped decode steps (prefill
    steps, which are not captured, run unchecked)."""
    found: list[str] = []

    class Checked(GraphShapedRun):
        def step(self, chunks):
            if len(chunks) < len(PROMPTS):  # a prefill step
                return super().step(chunks)
            with no_host_sync(self.model, opaque_ops=opaque_ops) as syncs:
                out = super().step(chunks)
            found.extend(syncs)
            return out

    decode_traffic(model, Checked(model, PROMPTS, paged=True))
    return sorted(set(found))


def test_graph_shaped_decode_never_waits_for_the_device(model):
    """The model code a decode graph captures (outside the kernel ops) has no host sync: no
    ``nonzero``/``unique``/boolean-mask indexing/``.item()``/``tolist`` — any of them makes
    CUDA graph capture fail on the GPU (a per-expert ``nonzero`` once did)."""
    found = graph_shaped_decode_syncs(model)
    assert not found, "\n".join(found)


def test_only_the_listed_reference_ops_sync_the_host(model):
    """Inside the reference ops too, the graph-shaped decode step syncs the host only in
    ``HOST_SYNC_OPS`` (the ops that make the engine decode eagerly on a GPU): the list the
    engine checks before capturing is complete."""
    from deepinfer.kernels.reference import HOST_SYNC_OPS
    from deepinfer.runtime.decode_graphs import graph_blocking_ops

    assert model.kernels.backend_of("moe_routed_experts") == "reference"
    assert graph_blocking_ops(model.kernels) == sorted(HOST_SYNC_OPS)
    found = graph_shaped_decode_syncs(model, opaque_ops=HOST_SYNC_OPS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("paged", [False, True])  # rings per sequence / in one pool
def test_prefill_window_lists_have_fixed_width(model, paged):
    """A prefill batch's window lists are (N, W) — query p lists positions p-W+1..p mapped into
    the batch's keys (every continuing chunk's cached tail of the window, then all the step's
    rows; model/window_layout.py) — however long the chunks; the chunks' last rows go to their
    rings (on the paged cache every sequence's in one op: ``WindowLayout.pool_rows``)."""
    from deepinfer.kernels import formats

    spec, attn = model.spec, model.layers[0].attn
    w, lid = spec.sliding_window, attn.layer.layer_id
    # a continuing chunk longer than the window, a fresh one, a continuing one shorter than
    # the window whose cached tail starts at position 0
    plan = [(30, w + 3), (0, 5), (2, 3)]
    pool = garbage_pool(spec, num_blocks=48, num_slots=7) if paged else None
    caches = []
    for b, (start, _) in enumerate(plan):
        if paged:
            cache = pool.view(torch.arange(1 + 12 * b, 13 + 12 * b), SLOTS[b], start)
        else:
            cache = SequenceCache.empty(spec)
            cache.num_tokens = start
        ring = cache.window_ring(lid)
        ring.copy_(formats.pack_window_kv(torch.randn(w, spec.head_dim)))  # cached rows
        caches.append(cache)
    rings = [c.window_ring(lid).clone() for c in caches]
    batch = ForwardBatch.build([[1] * n for _, n in plan], caches)
    assert (batch.window_layout(w).pool_rows is not None) == paged
    kv = torch.randn(sum(n for _, n in plan), spec.head_dim, dtype=torch.bfloat16)
    records = formats.pack_window_kv(kv)
    kv = formats.unpack_window_kv(records, spec.head_dim, torch.bfloat16)
    keys, idx = attn._window_keys(model.kernels, records, batch)
    num_prev = sum(s - max(0, s - w + 1) for s, _ in plan)
    assert keys.shape[0] == num_prev + kv.shape[0] and idx.shape == (kv.shape[0], w)
    assert torch.equal(keys[num_prev:], kv)
    for b, (start, n) in enumerate(plan):
        first = max(0, start - w + 1)
        for i in range(n):
            row, p = batch.starts[b] + i, start + i
            for col, q in enumerate(range(p - w + 1, p + 1)):
                if q < first:
                    assert idx[row, col] == -1
                elif q >= start:  # a row of this step
                    assert torch.equal(keys[idx[row, col]], kv[batch.starts[b] + q - start])
                else:  # a cached row: the ring's record of position q
                    want = formats.unpack_window_kv(rings[b][q % w], spec.head_dim,
                                                    torch.bfloat16)
                    assert torch.equal(keys[idx[row, col]], want)
        ring = caches[b].window_ring(lid)
        for p in range(start, start + n):  # this chunk's rows in its ring (the last W)
            if p >= start + n - w:
                assert torch.equal(ring[p % w], records[batch.starts[b] + p - start])


MAX_DECODE_LAUNCHES = 230  # 216 at session 11 (748 before its fused cache writes)


def test_graph_shaped_decode_launches_few_model_code_ops(model):
    """The model code of a graph-shaped decode step (kernel ops opaque) runs at most
    ``MAX_DECODE_LAUNCHES`` torch ops that launch a GPU kernel: each is a launch in the CUDA
    graph (~2 us on the H200). Cache records are packed by the fused cache-write ops, not in
    torch (28 launches per window record), and the window rows are built once per step."""
    steps: list[list[str]] = []

    class Counted(GraphShapedRun):
        def step(self, chunks):
            if len(chunks) < len(PROMPTS):  # a prefill step
                return super().step(chunks)
            with model_launches(self.model) as found:
                out = super().step(chunks)
            steps.append(found)
            return out

    decode_traffic(model, Counted(model, PROMPTS, paged=True))
    worst = max(steps, key=len)
    where = collections.Counter(line.split(" at ")[1].split(" <- ")[0] for line in worst)
    assert len(worst) <= MAX_DECODE_LAUNCHES, \
        f"{len(worst)} launches in a decode step; most from: {where.most_common(8)}"
    assert not any("formats.py" in line for line in worst), "records packed in torch"


@pytest.mark.parametrize("layer_id", [1, 4, 6])  # ratio 2; ratio 1 candidate source; Reindex
def test_prefill_picks_without_scores_match_the_scored_top_k(model, monkeypatch, layer_id):
    """A sequence with at most index_topk entries (and few enough candidate blocks) takes every
    visible entry: ``Indexer.every_visible`` gives the scored path's picks and candidate mask
    exactly, for every query position (nothing, some and all entries visible), with and without
    a published candidate mask; above index_topk entries the scores decide."""
    from deepinfer.kernels import formats
    from deepinfer.runtime.model import indexer as indexer_mod

    spec, k = model.spec, model.kernels
    layer = model.layers[layer_id].attn
    ind, ratio = layer.indexer, layer.layer.compress_ratio
    g = torch.Generator().manual_seed(layer_id)
    for t in (1, spec.index_topk - 1, spec.index_topk, spec.index_topk + 3):
        positions = torch.arange(t * ratio + 2)  # rows before, at and after the last entry
        n = positions.shape[0]
        q = torch.randn(n, ind.n_heads, ind.head_dim, generator=g)
        q = k.fake_quant_fp4_ue8m0_block32(q)
        head_w = torch.randn(n, ind.n_heads, generator=g)
        keys = formats.pack_index_key(torch.randn(t, ind.head_dim, generator=g))
        cands = [None]
        if layer.layer.candidate_source is not None:
            cands.append(torch.rand(n, t, generator=g) > 0.3)
        for cand in cands:
            monkeypatch.setattr(indexer_mod, "SHORT_PICKS", False)
            want = ind.select(k, q, head_w, keys, positions, cand)
            monkeypatch.setattr(indexer_mod, "SHORT_PICKS", True)
            got = ind.select(k, q, head_w, keys, positions, cand)
            assert ind.picks_every_entry(t) == (t <= spec.index_topk)
            assert torch.equal(got[0], want[0]), (t, cand is None)
            assert (got[1] is None) == (want[1] is None)
            if want[1] is not None:
                assert torch.equal(got[1], want[1]), t


# model-code ops that launch a GPU kernel per extra sequence of a prefill step (tiny model, kernel
# ops opaque). 8-token prompts on contiguous caches: 765 before session 22 (each sequence's window
# keys, ring write, entry unpacking and attention in its own torch ops), 104 after, 92 in session
# 23 (entry appends batched), 26 in session 24 (records packed and unpacked by kernel ops); what
# remains is mostly the scored top-k of the sequences with more than index_topk (6) entries, per
# sequence. 4-token prompts (every top-k score-free) on the paged cache, whose rings and entries
# are written and read for all sequences at once: 3.
MAX_PREFILL_LAUNCHES_PER_SEQUENCE = {(8, False): 35, (4, True): 8}
# and of a lone sequence's step (8 layers): ~530 before session 24 (the records' torch packing and
# unpacking, ~45 launches per layer), 150-170 after
MAX_LONE_PREFILL_LAUNCHES = 200


@pytest.mark.parametrize("prompt_len,paged", list(MAX_PREFILL_LAUNCHES_PER_SEQUENCE))
def test_prefill_step_launches_grow_little_per_sequence(model, prompt_len, paged):
    """A prefill step's attention runs over all its sequences at once: one sequence more adds
    at most ``MAX_PREFILL_LAUNCHES_PER_SEQUENCE`` launching ops of model code (kernel ops
    opaque; a lone sequence's step at most ``MAX_LONE_PREFILL_LAUNCHES``), and records are
    packed once per layer, not once per sequence, by the kernel op."""
    spec = model.spec
    bound = MAX_PREFILL_LAUNCHES_PER_SEQUENCE[(prompt_len, paged)]
    packs: list[int] = []
    kernels = model.kernels

    class PackSpy:  # counts the record-packing op's calls (kernel ops are opaque)
        def __getattr__(self, op):
            fn = getattr(kernels, op)
            if op != "window_kv_records":
                return fn

            def counted(*args, **kwargs):
                packs[-1] += 1
                return fn(*args, **kwargs)
            return counted

    def launches(num_seqs: int) -> list[str]:
        if paged:
            pool = garbage_pool(spec, num_blocks=4 * num_seqs + 1, num_slots=num_seqs + 1)
            caches = [pool.view(torch.arange(1 + 4 * i, 5 + 4 * i), i + 1, 0)
                      for i in range(num_seqs)]
        else:
            caches = [SequenceCache.empty(spec) for _ in range(num_seqs)]
        chunks = [[3 + (7 * i + j) % 400 for j in range(prompt_len)] for i in range(num_seqs)]
        packs.append(0)
        model.kernels = PackSpy()
        try:
            with model_launches(model) as found:
                model.forward(ForwardBatch.build(chunks, caches), all_logits=False)
        finally:
            model.kernels = kernels
        return found

    one, eight = launches(1), launches(8)
    per_seq = (len(eight) - len(one)) / 7
    where = collections.Counter(line.split(" at ")[1].split(" <- ")[0] for line in eight)
    assert len(one) <= MAX_LONE_PREFILL_LAUNCHES, \
        f"{len(one)} launches for one sequence; most from: {where.most_common(8)}"
    assert per_seq <= bound, \
        f"{per_seq:.0f} launches per sequence; most from: {where.most_common(8)}"
    # the window records of all sequences' last rows are packed in one call per layer, by the
    # op (one launch on the GPU), not by formats.py's torch code
    assert packs == [len(model.layers)] * 2, packs
    assert not any("formats.py" in line for line in one + eight), "records (un)packed in torch"


def test_prefill_short_picks_give_the_scored_forward(model, monkeypatch):
    """Prefill batches whose top-k is taken without scores — every sequence's rows at once when
    all are short (an index source consuming no candidate mask), per sequence otherwise — give
    the scored forward's logits exactly, and so do the next tokens that read those caches."""
    from deepinfer.runtime.model import indexer as indexer_mod

    spec = model.spec
    batched: list[int] = []
    real = attention_mod.Attention._short_selection

    def spy(self, *args):
        out = real(self, *args)
        batched.append(len(out))
        return out

    monkeypatch.setattr(attention_mod.Attention, "_short_selection", spy)

    def forward(lens: list[int], short: bool):
        monkeypatch.setattr(indexer_mod, "SHORT_PICKS", short)
        caches = [SequenceCache.empty(spec) for _ in lens]
        chunks = [[3 + (5 * i + j) % 400 for j in range(n)] for i, n in enumerate(lens)]
        logits = model.forward(ForwardBatch.build(chunks, caches))
        second = [[7 + i] for i in range(len(lens))]  # one more token each: the caches read
        return logits, model.forward(ForwardBatch.build(second, caches))

    # all short (ratio 2: at most 5 entries each), then one past index_topk entries
    for lens in ([3, 8, 5, 11], [3, 8, 5, 2 * spec.index_topk + 5, 11]):
        batched.clear()
        got = forward(lens, True)
        assert (1 in batched) == (max(lens) <= 2 * spec.index_topk), batched
        for g, w in zip(got, forward(lens, False), strict=True):
            assert torch.equal(g, w), lens
