"""The indexer of Full and Reindex layers (model-spec §2.6): FP4 scores -> sorted top-k."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.artifacts.model_spec import LayerSpec, ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.params import Linear, Norm

# Prefill top-k over a sequence with at most ``index_topk`` entries (and, on the candidate source,
# at most ``candidate_topk_blocks`` blocks) takes every visible entry: computed without scores
# (``Indexer.every_visible``; ~20 launches per sequence and index layer less in a prefill step
# of short prompts, session 22). False: always score.
SHORT_PICKS = True


class Indexer(nn.Module):
    """Owns ``wq_b``/``weights_proj``; on KV-source layers also ``wk``/``k_norm`` (index keys)."""

    def __init__(self, spec: ModelSpec, layer: LayerSpec):
        super().__init__()
        self.spec = spec
        self.layer = layer
        self.n_heads, self.head_dim = spec.index_n_heads, spec.index_head_dim
        self.wq_b = Linear(spec.q_lora_rank, self.n_heads * self.head_dim, quant_act=True)
        self.weights_proj = Linear(spec.hidden_size, self.n_heads, quant_act=False)
        if layer.owns_index_keys:
            self.wk = Linear(spec.head_dim, self.head_dim, quant_act=False)
            self.k_norm = Norm(self.head_dim)

    def index_key_records(self, k: KernelSet, latents: torch.Tensor, positions: torch.Tensor,
                          inv_freq: torch.Tensor) -> torch.Tensor:
        """(G, Dh) pre-RoPE latents -> (G, index_key_record_bytes) uint8 FP4 index keys:
        Q4E8_32(rope(rms_norm(wk(latents)))), one fused op (``index_key_records``)."""
        return k.index_key_records(self.wk(k, latents), self.k_norm.weight,
                                   self.spec.rms_norm_eps, positions, inv_freq)

    def queries(self, k: KernelSet, x: torch.Tensor, qrq: torch.Tensor, positions: torch.Tensor,
                inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """FP4-grid queries (N, Hi, Di) and scaled head weights (N, Hi) fp32 for all tokens;
        ``qrq``: the Q8_32 values of the attention's query latent (its ``wq_b`` reads them
        too: rounded once)."""
        q = self.wq_b.rounded(k, qrq).view(-1, self.n_heads, self.head_dim)
        # in place (q is this call's own tensor): only the rope channels are rewritten
        q = k.fake_quant_fp4_ue8m0_block32(k.apply_rope(q, positions, inv_freq, in_place=True))
        scale = (self.head_dim ** -0.5) * (self.n_heads ** -0.5)
        w = self.weights_proj(k, x).float() * scale
        return q, w

    def select(self, k: KernelSet, q: torch.Tensor, head_w: torch.Tensor,
               key_records: torch.Tensor, positions: torch.Tensor,
               candidates: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Top-k of one sequence's queries over its KV source's index keys.

        Args:
            q, head_w: this sequence's rows of :meth:`queries`; key_records: (T, bytes) uint8.
            positions: (S,) absolute positions; candidates: (S, T) bool mask published by the
            candidate source, applied on Reindex layers that consume it.
        Returns:
            (S, min(index_topk, T)) int64 entry ids sorted ascending, -1 = none; and the
            candidate mask if this layer is the candidate source (else None).
        """
        if SHORT_PICKS and self.picks_every_entry(key_records.shape[0]):
            return self.every_visible(positions, key_records.shape[0], candidates)
        keys = k.unpack_index_key(key_records, self.head_dim, torch.bfloat16)
        # -inf beyond each query's visible count from the scoring op itself (no masking pass
        # over the (S, T) scores; the kernel skips the key tiles its queries cannot see)
        num_visible = torch.div(positions + 1, self.layer.compress_ratio, rounding_mode="floor")
        scores = k.index_scores(q, head_w, keys, num_visible)
        return self._topk(k, scores, num_visible, candidates)

    def picks_every_entry(self, num_entries: int) -> bool:
        """Whether a top-k over ``num_entries`` keys must take every visible (and candidate)
        entry whatever the scores: at most ``index_topk`` of them and, on the candidate
        source, at most ``candidate_topk_blocks`` blocks (every block holding a visible entry
        is kept)."""
        spec = self.spec
        blocks = -(-num_entries // spec.candidate_block_size)
        return num_entries <= spec.index_topk and (
            not self.layer.is_candidate_source or blocks <= spec.candidate_topk_blocks)

    def every_visible(self, positions: torch.Tensor, num_entries: int,
                       candidates: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`select`'s result when it takes every visible entry (``picks_every_entry``),
        without scores: the (S, T) picks are the visible (candidate) entries ascending, then -1;
        the candidate source's mask keeps the blocks holding a visible entry. Exact as long as
        the visible scores are finite (the reference and the kernels pick finite scores)."""
        spec, t = self.spec, num_entries
        num_visible = torch.div(positions + 1, self.layer.compress_ratio, rounding_mode="floor")
        entry = torch.arange(t, device=positions.device)
        visible = entry[None, :] < num_visible[:, None]  # (S, T)
        published = None
        if self.layer.is_candidate_source:  # blocks up to the one holding the newest visible
            bs = spec.candidate_block_size
            ends = torch.div(num_visible + bs - 1, bs, rounding_mode="floor") * bs
            published = entry[None, :] < ends[:, None]
        if candidates is not None:
            visible = visible & candidates
        # a visible entry keeps its id, the rest sort after every id and become -1
        ids = torch.where(visible, entry[None, :], t).sort(dim=-1).values
        return torch.where(ids < t, ids, -1), published

    def select_rows(self, k: KernelSet, q: torch.Tensor, head_w: torch.Tensor,
                    key_pool: torch.Tensor, block_tables: torch.Tensor, entries_per_block: int,
                    width: int, positions: torch.Tensor, candidates: torch.Tensor | None
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`select` for N decode rows at once, each over its own keys in a paged pool.

        Args:
            q, head_w: (N, Hi, Di), (N, Hi) of :meth:`queries`; key_pool: uint8 (R, bytes)
            flattened index-key pool, entry t of row n at row
            ``block_tables[n, t // entries_per_block] * entries_per_block + t % ...``;
            width: T, the score rows' width (host int, >= every row's visible count);
            positions: (N,); candidates: (N, T) bool mask published by the candidate source.
        Returns:
            as :meth:`select` with S = N: (N, min(index_topk, T)) and the (N, T) mask or None.

        The ``index_scores_paged`` op reads each row's visible keys in place and writes -inf
        beyond them (so no masking pass over the (N, T) rows follows), so the cost follows the
        visible counts and the shapes only N and T.
        """
        num_visible = torch.div(positions + 1, self.layer.compress_ratio, rounding_mode="floor")
        scores = k.index_scores_paged(q, head_w, key_pool, block_tables, num_visible,
                                      entries_per_block, width)  # (N, T)
        return self._topk(k, scores, num_visible, candidates)

    def _topk(self, k: KernelSet, scores: torch.Tensor, num_visible: torch.Tensor,
              candidates: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(S, T) fp32 scores, -inf at and beyond each row's visible count num_visible (S,)
        ((position + 1) // ratio: the scoring ops mask them) -> candidate blocks, sorted top-k
        (see select)."""
        published = None
        if self.layer.is_candidate_source:
            published = k.select_candidate_blocks(scores, num_visible,
                                                  self.spec.candidate_topk_blocks,
                                                  self.spec.candidate_block_size)
        if candidates is not None:
            scores = scores.masked_fill(~candidates, float("-inf"))
        return k.topk_positions(scores, self.spec.index_topk, num_visible), published
