"""Single-launch pair alignment (kernels/triton/moe_align.py) against the torch version
``moe_experts._align_pairs``: both outputs bitwise (torch.equal: dtype, shape and content)."""

import zlib

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels.triton import moe_align, moe_experts  # noqa: E402


def _check(ids: torch.Tensor, num_experts: int, block_m: int) -> None:
    want = moe_experts._align_pairs(ids, num_experts, block_m)
    got = moe_align.align_pairs(ids, num_experts, block_m)
    for name, g, w in zip(("sorted_pairs", "block_expert"), got, want, strict=True):
        assert g.dtype == w.dtype == torch.int32 and g.shape == w.shape, \
            f"{name}: {g.dtype} {tuple(g.shape)} vs {w.dtype} {tuple(w.shape)}"
        assert torch.equal(g, w), f"{name}: first difference at {(g != w).nonzero()[0].item()}"


def _gen(*key) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("num_tokens", [1, 3, 64, 256])
@pytest.mark.parametrize("topk", [6, 8])
@pytest.mark.parametrize("num_experts", [384, 16])
def test_random_ids(num_experts, topk, num_tokens, block_m):
    ids = torch.randint(0, num_experts, (num_tokens, topk),
                        generator=_gen(num_experts, topk, num_tokens, block_m))
    _check(ids, num_experts, block_m)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("num_experts,num_tokens,topk,block_m",
                         [(48, 256, 6, 16), (16, 64, 8, 64), (384, 3, 6, 16), (1, 17, 6, 1)])
def test_ids_of_other_ranks_go_to_the_skipped_bucket(num_experts, num_tokens, topk, block_m,
                                                     dtype):
    """EP: ids outside [0, num_experts) (-1, num_experts, other ranks', huge) -> blocks of -1."""
    g = _gen(num_experts, num_tokens, topk, block_m, dtype)
    ids = torch.randint(-3, num_experts + 4, (num_tokens, topk), generator=g)
    huge = 2**40 if dtype == torch.int64 else 2**31 - 1  # 2**40 wraps to 0 as an int32
    ids.view(-1)[:3] = torch.tensor([-1, num_experts, huge])[: ids.numel()]
    _check(ids.to(dtype), num_experts, block_m)


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("expert", ["first", "last", "outside"])
def test_every_pair_on_one_expert(expert, block_m):
    num_experts = 384
    value = {"first": 0, "last": num_experts - 1, "outside": -1}[expert]
    _check(torch.full((256, 6), value), num_experts, block_m)


@pytest.mark.parametrize("num_pairs", [1, 2, 255, 256, 257])
def test_power_of_two_edges(num_pairs):
    """Pair counts around the kernel's power-of-2 padding; block_m=1: one block per pair."""
    ids = torch.randint(-1, 9, (num_pairs,), generator=_gen(num_pairs))
    _check(ids, 8, 1)
    _check(ids.reshape(1, -1), 7, 2)


def test_non_contiguous_ids_and_no_pairs():
    ids = torch.randint(0, 16, (40, 12), generator=_gen("strided"))[:, ::2]
    _check(ids, 16, 16)
    _check(torch.empty((0, 6), dtype=torch.int64), 384, 16)


def test_largest_kernel_size_and_the_chunks_above(monkeypatch):
    """MAX_PAIRS runs the one-program kernel; one pair more takes the chunked launches (the
    one-program kernel is never launched there)."""
    num_experts = 384
    ids = torch.randint(-2, num_experts + 2, (moe_align.MAX_PAIRS + 6,), generator=_gen("max"))
    _check(ids[: moe_align.MAX_PAIRS], num_experts, 16)

    class _NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("the one-program kernel was launched above MAX_PAIRS")

    monkeypatch.setattr(moe_align, "_align_pairs_kernel", _NoLaunch())
    _check(ids[: moe_align.MAX_PAIRS + 1], num_experts, 16)


@pytest.mark.parametrize("num_experts,num_tokens,topk,block_m,dtype", [
    (384, 4096, 6, 128, torch.int64),  # a 4K prefill chunk: 6 chunks of pairs
    (384, 4096, 6, 16, torch.int32),
    (16, 1366, 6, 64, torch.int64),  # 8,196 pairs: a last chunk of 4 pairs
    (48, 3 * 4096 // 8, 8, 1, torch.int64),  # whole chunks only; one block per pair
])
def test_chunked_pairs(num_experts, num_tokens, topk, block_m, dtype):
    """The chunked path, with other ranks' ids among them: buckets spanning chunks keep pair
    order, each bucket's padding and the tail get the sentinel."""
    g = _gen("chunked", num_experts, num_tokens, topk, block_m)
    ids = torch.randint(-2, num_experts + 2, (num_tokens, topk), generator=g)
    assert ids.numel() > moe_align.MAX_PAIRS
    _check(ids.to(dtype), num_experts, block_m)


@pytest.mark.parametrize("expert", ["first", "last", "outside"])
def test_chunked_every_pair_on_one_expert(expert):
    """One bucket across every chunk: its rows run through all of them in pair order."""
    num_experts = 384
    value = {"first": 0, "last": num_experts - 1, "outside": 400}[expert]
    _check(torch.full((2000, 6), value), num_experts, 64)


def test_chunked_skewed_routing():
    """A few hot experts (most pairs) and a long cold tail, as a trained router gives."""
    g = _gen("skewed")
    weights = torch.rand(384, generator=g) ** 8
    ids = torch.multinomial(weights, 3000 * 6, replacement=True, generator=g).view(3000, 6)
    _check(ids, 384, 16)


def test_sm90_compile(sm90_compile):
    """Production shapes (384 experts: decode, 4096 pairs, the largest kernel size) and a small EP
    one. At MAX_PAIRS 16 warps cap registers at 128 and a few words spill (still 2x faster than
    the torch version on the H200)."""
    sig = {"ids_ptr": "*i64", "sorted_pairs_ptr": "*i32", "block_expert_ptr": "*i32",
           "num_pairs": "i32", "num_experts": "i32", "num_rows": "i32", "num_blocks": "i32"}
    cases, sig_module = [], "deepinfer.kernels.triton.moe_align"
    for ids_ty, num_experts, block_m, num_pairs, max_stack in (
            ("*i64", 384, 16, 1536, 0), ("*i64", 384, 16, 4096, 0),
            ("*i64", 384, 64, moe_align.MAX_PAIRS, 128), ("*i32", 48, 16, 384, 0)):
        n_pad = triton.next_power_of_2(num_pairs)
        cases.append({"id": f"moe_align_{ids_ty[1:]}_e{num_experts}_bm{block_m}_n{n_pad}",
                      "module": sig_module,
                      "kernel": "_align_pairs_kernel", "signature": {**sig, "ids_ptr": ids_ty},
                      "constexprs": {"BM": block_m, "N_PAD": n_pad,
                                     "E_BITS": num_experts.bit_length(), "FILL": moe_align._FILL},
                      "num_warps": moe_align._num_warps(n_pad), "num_stages": 1,
                      "no_spill": True, "max_stack": max_stack})
    chunk = {"CHUNK": moe_align.CHUNK, "E_BITS": 9}
    warps = moe_align._num_warps(moe_align.CHUNK)
    for ids_ty in ("*i64", "*i32"):
        cases.append({"id": f"moe_align_chunk_sort_{ids_ty[1:]}", "module": sig_module,
                      "kernel": "_chunk_sort_kernel",
                      "signature": {"ids_ptr": ids_ty, "words_ptr": "*i32", "ranks_ptr": "*i32",
                                    "counts_ptr": "*i32", "sorted_pairs_ptr": "*i32",
                                    "num_pairs": "i32", "num_experts": "i32", "num_rows": "i32"},
                      "constexprs": {**chunk, "FILL": moe_align._FILL}, "num_warps": warps,
                      "num_stages": 1, "no_spill": True, "max_stack": 0})
    for block_m in (16, 128):
        cases.append({"id": f"moe_align_chunk_scatter_bm{block_m}", "module": sig_module,
                      "kernel": "_chunk_scatter_kernel",
                      "signature": {**{f"{n}_ptr": "*i32" for n in (
                          "words", "ranks", "counts", "base", "sorted_pairs", "block_expert")},
                          **{n: "i32" for n in ("num_pairs", "num_experts", "num_blocks",
                                                "num_chunks")}},
                      "constexprs": {**chunk, "BM": block_m, "FILL": moe_align._FILL,
                                     "COUNT_ROWS": moe_align._COUNT_ROWS},
                      "num_warps": warps, "num_stages": 1, "no_spill": True, "max_stack": 0})
    sm90_compile(cases)
