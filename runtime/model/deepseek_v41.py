"""The DeepSeek-V4.1 text backbone (model-spec §2.2): embed -> mHC blocks -> norm -> fp32 head.

Every op goes through the kernel registry (``KernelSet``), whose backend per op comes from the
plan; the default is the torch reference. The vision tower and the DSpark stages are not built
here (their checkpoint tensors are recognised and skipped by the loader).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import torch
from torch import nn

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.device import to_device
from deepinfer.runtime.model.attention import Published
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.block import Block
from deepinfer.runtime.model.decode_rows import DecodeRows
from deepinfer.runtime.model.engram_hash import (
    BLOCKED,
    make_engram_hash_constants,
)
from deepinfer.runtime.model.params import Linear, Norm


class DeepseekV41(nn.Module):
    """Parameter names equal the checkpoint's tensor names (without ``.scale`` companions)."""

    def __init__(self, spec: ModelSpec, kernels: KernelSet | None = None,
                 engram_token_map: torch.Tensor | None = None):
        super().__init__()
        self.spec = spec
        self.kernels = kernels or KernelSet()
        d = spec.hidden_size
        # _weight: skip the random init, whose meta-device normal_ costs seconds of imports
        self.embed = nn.Embedding(spec.vocab_size, d, dtype=torch.bfloat16,
                                  _weight=torch.empty(spec.vocab_size, d, dtype=torch.bfloat16))
        self.embed.weight.requires_grad_(False)
        self.layers = nn.ModuleList(Block(spec, layer) for layer in spec.backbone_layers)
        self.norm = Norm(d)
        self.head = nn.Linear(d, spec.vocab_size, bias=False, dtype=torch.bfloat16)
        self.head.weight.requires_grad_(False)
        self.engram_hash = None
        if spec.engram_layer_ids:
            self._init_engram_hash(engram_token_map)

    def _init_engram_hash(self, engram_token_map: torch.Tensor | None) -> None:
        spec = self.spec
        with torch.device("cpu"):  # real tables even while the module tree is built on meta
            self.engram_hash = make_engram_hash_constants(
                spec.engram_layer_ids, spec.engram_max_ngram_size, spec.engram_n_heads,
                spec.engram_vocab_size, spec.engram_compressed_vocab_size,
                int(self._token_map(engram_token_map)[spec.engram_pad_token_id]))
        if self.engram_hash.num_embeddings != spec.engram_num_embeddings:
            raise ValueError(
                f"engram_num_embeddings {list(spec.engram_num_embeddings)} do not match the "
                f"hash primes' table sizes {list(self.engram_hash.num_embeddings)}")

    def _token_map(self, token_map: torch.Tensor | None) -> torch.Tensor:
        spec = self.spec
        if token_map is None:
            if spec.engram_compressed_vocab_size != spec.vocab_size:
                raise ValueError("engram needs the tokenizer's normalized token map: "
                                 f"engram_compressed_vocab_size {spec.engram_compressed_vocab_size}"
                                 f" != vocab_size {spec.vocab_size}")
            token_map = torch.arange(spec.vocab_size)
        if token_map.shape != (spec.vocab_size,) or int(token_map.max()) >= \
                spec.engram_compressed_vocab_size:
            raise ValueError(f"engram token map must be ({spec.vocab_size},) with ids < "
                             f"{spec.engram_compressed_vocab_size}")
        self.register_buffer("token_map", token_map.to(torch.int64), persistent=False)
        return self.token_map

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Assign dequantized checkpoint tensors (names as in the checkpoint, no ``.scale``)."""
        self.load_state_dict(weights, strict=True, assign=True)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def to_device(self, device: torch.device | str) -> DeepseekV41:
        """Move every parameter and buffer (also the non-persistent RoPE tables and token map)
        and the engram hash constants to ``device``; a no-op for tensors already there. Then
        each shared expert's gate and up weights share one tensor (``Expert.pack_gate_up``)."""
        self.to(device)
        for block in self.layers:  # after the move: .to() copies each parameter on its own
            block.ffn.shared_experts.pack_gate_up()
        if self.engram_hash is not None:
            h = self.engram_hash
            self.engram_hash = dataclasses.replace(
                h, primes=h.primes.to(device), offsets=h.offsets.to(device),
                multipliers=h.multipliers.to(device))
        return self

    def add_prefill_bf16_weights(self) -> int:
        """Give every FP8 block projection its bf16 twin (``Linear.add_bf16_twin``; each shared
        expert's gate and up twins packed as their codes are) for the prefill GEMMs
        (``kernels/triton/linear_ss.py``); the plan decides (``cache.prefill_bf16_weights``).
        Returns the bytes added. Call after ``to_device``."""
        added = sum(m.add_bf16_twin() for m in self.modules() if isinstance(m, Linear))
        for block in self.layers:
            block.ffn.shared_experts.pack_gate_up()
        return added

    # ---- multi-rank (expert parallelism, model/moe.py) ----------------------------------------
    @property
    def has_ep_exchange(self) -> bool:
        """True when the MoE layers exchange tokens with the other ranks of an EP group."""
        return any(block.ffn.exchange is not None for block in self.layers)

    @torch.no_grad()
    def forward_idle(self) -> None:
        """Take part in every MoE layer's EP exchange with no tokens: what a DP rank with
        nothing scheduled runs while its EP group runs a forward (one MoE call per block, as in
        ``forward``)."""
        empty = torch.empty(0, self.spec.hidden_size, dtype=torch.bfloat16, device=self.device)
        for block in self.layers:
            block.ffn(self.kernels, empty, None)
    # ---- end multi-rank ------------------------------------------------------------------------

    def _hash_ids(self, batch: ForwardBatch) -> torch.Tensor | None:
        """(N, L_engram, n_ids) int64 table rows; advances each cache's engram history.

        All sequences at once, without reading the device back: ``flat`` is every sequence's
        history (M-1 ids) followed by its chunk's compressed ids; row r of sequence b looks
        back over ``flat[r + b(M-1) : r + b(M-1) + M]`` (the index is built on the host).
        """
        if self.engram_hash is None:
            return None
        m1 = self.spec.engram_max_ngram_size - 1
        compressed = self.token_map[batch.input_ids]
        if batch.image_mask is not None:
            compressed = compressed.masked_fill(batch.image_mask, BLOCKED)
        parts = []
        for b, cache in enumerate(batch.caches):
            parts += [cache.engram_history.to(torch.int64), compressed[batch.rows(b)]]
        flat = torch.cat(parts)  # (B * (M-1) + N,)
        base = torch.repeat_interleave(torch.arange(len(batch.seq_lens)) * m1,
                                       torch.tensor(batch.seq_lens))
        index = (base + torch.arange(base.shape[0]))[:, None] + torch.arange(m1 + 1)[None, :]
        windows = flat[to_device(index, flat.device)]  # (N, M); pinned, no host sync
        for b, cache in enumerate(batch.caches):
            end = batch.starts[b] + batch.seq_lens[b] + (b + 1) * m1  # end of its part of flat
            cache.engram_history = flat[end - m1:end].clone()
        return self.kernels.engram_hash_windows(windows, self.engram_hash)

    def _hash_ids_decode(self, rows: DecodeRows) -> torch.Tensor | None:
        """:meth:`_hash_ids` of a decode step: each row's history is its state slot's row of
        the pool's engram history, advanced in place (padding rows: the sentinel slot 0)."""
        if self.engram_hash is None:
            return None
        history = rows.pool.engram_history
        windows = torch.cat([history[rows.slots], self.token_map[rows.input_ids][:, None]], 1)
        history[rows.slots] = windows[:, 1:]
        return self.kernels.engram_hash_windows(windows, self.engram_hash)

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, all_logits: bool = True) -> torch.Tensor:
        """Run the new tokens of every sequence; caches advance in place.

        Returns fp32 logits (N, vocab) for every new token, or (B, vocab) for each sequence's
        last token when ``all_logits`` is False. A decode step over paged caches runs
        :meth:`forward_decode` (all rows at once over the pools).
        """
        self._check(batch)
        rows = DecodeRows.build(batch)
        if rows is not None:
            logits = self.forward_decode(rows)
            for cache in batch.caches:
                cache.num_tokens += 1
            return logits
        h = self.embed.weight[batch.input_ids]
        if batch.image_embeds is not None:
            h = h.clone()
            h[batch.image_mask] = batch.image_embeds.to(h.dtype)
        # the engram hash ids on demand: the host builds them (~30 small launches) while the
        # GPU already runs the blocks before the first engram layer
        hash_ids = None if self.engram_hash is None else functools.partial(self._hash_ids, batch)
        text_mask = None if batch.image_mask is None else ~batch.image_mask
        y = self._backbone(h, hash_ids, text_mask, batch)
        for cache, n in zip(batch.caches, batch.seq_lens, strict=True):
            cache.num_tokens += n
        if not all_logits:
            y = y[batch.last_rows]
        return self._logits(y)

    @torch.no_grad()
    def forward_decode(self, rows: DecodeRows) -> torch.Tensor:
        """One decode step of N rows over the paged pools -> (N, vocab) fp32 logits.

        Reads and writes only the pools and ``rows``' tensors, never a device value back to
        the host, and every shape depends on N and ``rows.max_position`` alone: a CUDA graph
        captures it (``runtime/decode_graphs.py``). Positions are trusted (the engine's
        scheduler produced them); :meth:`forward` checks them first.
        """
        h = self.embed.weight[rows.input_ids]
        return self._logits(self._backbone(h, self._hash_ids_decode(rows), None, rows))

    def _backbone(self, emb: torch.Tensor,
                  hash_ids: torch.Tensor | Callable[[], torch.Tensor] | None,
                  text_mask: torch.Tensor | None, batch: ForwardBatch | DecodeRows
                  ) -> torch.Tensor:
        """(N, D) bf16 embeddings -> the head's input (N, D): the last block's streams
        collapsed with its pre and RMS-normed (from the last expand's pass).
        ``hash_ids``: the engram table rows, or a function computing them (and advancing the
        caches' engram histories), called once: at the first engram layer, else at the end."""
        k, spec = self.kernels, self.spec
        # (N, S, D): every stream the embedding — a stride-0 view, not a copy (the first
        # site's coefficients and expand read it as it is: 168 MB less to write at 4K tokens)
        x = emb.unsqueeze(1).expand(-1, spec.hc_mult, -1)
        pre = None  # the previous site's collapse weights; the first site reads stream 0
        published = Published()
        h = None  # the next block's attention input, when the previous expand produced it
        for i, block in enumerate(self.layers):
            layer_id = block.attn.layer.layer_id
            if self._engram_at(i, hash_ids):
                if callable(hash_ids):
                    hash_ids = hash_ids()
                x = block.engram(k, x, hash_ids[:, spec.engram_slot(layer_id)], text_mask)
            if h is None:
                h = block.attn_input(k, x, pre)
            if i + 1 == len(self.layers):  # the head's input (no Q8_32 values)
                x, pre, h = block(k, x, h, batch, published, self.norm.weight, next_quant=False)
            else:  # an engram injection changes the streams before the next site: no fusion
                fuse = not self._engram_at(i + 1, hash_ids)
                x, pre, h = block(k, x, h, batch, published,
                                  self.layers[i + 1].attn_norm.weight if fuse else None)
        if callable(hash_ids):  # no engram layer here: the histories still advance
            hash_ids()
        assert h is not None
        return h[0]

    def _engram_at(self, i: int, hash_ids: object) -> bool:
        """Whether block i injects engram rows before its attention site."""
        return hash_ids is not None and self.layers[i].attn.layer.is_engram

    def _logits(self, y: torch.Tensor) -> torch.Tensor:
        """The head's input (N, D) -> (N, vocab) fp32 logits."""
        # fp32 logits of y's values: bf16 y needs one bf16 dot per step (the products are exact
        # in fp32 either way), not the fp32-x kernel's pieces
        return self.kernels.linear(y, self.head.weight, out_dtype=torch.float32)

    def _check(self, batch: ForwardBatch) -> None:
        """Shapes, device, token ids and positions from the batch's host bookkeeping: each
        sequence's chunk must start where its cache ends (``start_positions``, from which
        ``ForwardBatch.build`` made the positions). On the CPU the positions tensor itself is
        read back as well (free there); on a GPU that read-back would be a host sync per
        forward (session 16: one of the syncs in front of every prefill chunk), so the
        device copy is trusted."""
        n = batch.input_ids.shape[0]
        if sum(batch.seq_lens) != n or batch.positions.shape != (n,):
            raise ValueError(f"batch has {n} tokens but seq_lens sum to {sum(batch.seq_lens)}")
        if batch.device != self.device:
            raise ValueError(f"the batch is on {batch.device} but the model on {self.device}")
        if n and (batch.id_range[0] < 0 or batch.id_range[1] >= self.spec.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.spec.vocab_size})")
        firsts = list(batch.start_positions)
        if n and batch.device.type == "cpu":
            firsts = batch.positions[batch.starts].tolist()
        for b, cache in enumerate(batch.caches):
            first = firsts[b]
            if first != cache.num_tokens or first != batch.start_positions[b]:
                raise ValueError(f"sequence {b}: chunk starts at position {first} but its cache "
                                 f"holds {cache.num_tokens} tokens")
