"""MoE of one layer (model-spec §2.8): sqrtsoftplus router, routed SwiGLU experts, shared expert.

The routed experts live in :class:`ExpertSlots`: per projection one stack over the module's
slots, kept as stored — ``Mxfp4ExpertWeights`` (packed e2m1 [E, O, I/2] + ue8m0 [E, O, I/32]) —
and dequantized by the ops only for the experts a batch routes to. Its state dict keeps the
checkpoint's per-expert names (``experts.{j}.w1.weight`` / ``.scale``: slot j of the stack).
Built plainly, slot e holds logical expert e and the routed part is the registered
``moe_routed_experts`` op over the whole stacks.

Expert parallelism (architecture §7): after :meth:`MoE.set_slots` the module holds only its
rank's physical expert slots — slot j is physical slot ``slot_offset + j`` and holds a
copy of logical expert ``slot_logical[j]`` (the plan's ``weight_shards.ranks[r].expert_slots``;
with redundant experts a logical expert has several slots). One forward:

  Step 1  route the rank's own tokens: (n, K) logical ids + weights (the unchanged math).
  Step 2  ``exchange.gather``: the EP group's tokens, rank-major, N_g rows (every rank of the
          group takes part, also with n = 0: a DP rank with nothing to run joins with none).
  Step 3  replica choice: pick k of group row g goes to physical slot
          ``log2phy[e][(g + k) % logcnt[e]]`` — deterministic, spread over the replicas, and
          irrelevant to the result (replicas are bit-identical copies, and a row's expert
          output does not depend on which other rows share the GEMM).
  Step 4  each rank runs its local slots over the (row, pick) pairs routed to them:
          y (N_g, K, D) fp32 holding the bf16 expert outputs, zero for other ranks' pairs.
  Step 5  ``exchange.reduce`` sums y over the group — exactly one rank contributes each pair,
          so the sum is exact — and each rank keeps its own rows.
  Step 6  combine: a token's picks are added in increasing logical expert id, in fp32, from
          zero: the order of the reference ``moe_routed_experts``, so the EP result equals the
          single-rank one bit for bit, whatever the EP size, placement or DP split.

Without an exchange (one rank holding every slot, e.g. with redundant replicas) Steps 2 and 5
vanish and Steps 3-6 are the fused ``moe_routed_experts`` op over the slot stacks: slot ids
select the weights, the logical ids order each token's sum (``combine_ids``) — no host sync,
so the path can be captured in a CUDA graph.

Combining per (token, pick) rather than per (token, rank) costs K rows per token in the
exchange instead of one, and buys that exact equality (fp64 partial sums per rank would only
match up to a last-bit rounding of the fp32 result).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from deepinfer.kernels.quantized import FP8_TILE, stacked_rows
from deepinfer.kernels.reference.moe import combine_in_expert_order
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.expert_slots import ExpertSlots
from deepinfer.runtime.model.params import Linear, f32_param, frozen


class TokenExchange(Protocol):
    """The EP group's exchange (``runtime/distributed.py``); every rank calls it in lockstep."""

    def gather(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, slice]:
        """(n, D) bf16, (n, K) int64, (n, K) fp32 -> the group's (N_g, D), (N_g, K), (N_g, K)
        rank-major, and this rank's rows in them."""
        ...

    def reduce(self, y: torch.Tensor) -> None:
        """Sum (N_g, K, D) fp32 over the group, in place."""
        ...


class Expert(nn.Module):
    """The shared expert: three FP8 projections (``Fp8BlockWeight`` once loaded)."""

    def __init__(self, dim: int, inter: int):
        super().__init__()
        self.w1 = Linear(dim, inter, quant_act=True)
        self.w2 = Linear(inter, dim, quant_act=True)
        self.w3 = Linear(dim, inter, quant_act=True)

    @torch.no_grad()
    def pack_gate_up(self) -> None:
        """Put w1's and w3's codes in one tensor and their scales in another (w1's rows, then
        w3's), each holder keeping a view of its half: the same values, and the kernels can run
        both projections as one GEMM (``quantized.stacked_rows``). Only quantized weights
        on one device with whole 32-row scale tiles; their bf16 twins likewise when both have
        one (``Linear.add_bf16_twin``); a no-op for what is already packed."""
        w1, w3 = self.w1, self.w3
        if not (w1.is_quantized and w3.is_quantized):
            return
        c1, c3 = w1._parameters["weight"], w3._parameters["weight"]
        s1, s3 = w1._parameters["scale"], w3._parameters["scale"]
        if (c1.is_meta or c1.shape != c3.shape or c1.shape[0] % FP8_TILE or c1.dtype != c3.dtype
                or s1.dtype != s3.dtype or len({t.device for t in (c1, c3, s1, s3)}) != 1):
            return
        rows = c1.shape[0]
        pair = stacked_rows(w1.weight, w3.weight)
        if pair is None:
            codes, scales = torch.cat([c1, c3]), torch.cat([s1, s3])
            tiles = s1.shape[0]
            w1._parameters["weight"], w3._parameters["weight"] = (frozen(codes[:rows]),
                                                                  frozen(codes[rows:]))
            w1._parameters["scale"], w3._parameters["scale"] = (frozen(scales[:tiles]),
                                                                frozen(scales[tiles:]))
            pair = stacked_rows(w1.weight, w3.weight)
        t1, t3 = w1._buffers.get("bf16_twin"), w3._buffers.get("bf16_twin")
        if t1 is not None and t3 is not None and pair is not None and pair.bf16 is None:
            twins = torch.cat([t1, t3])
            w1._buffers["bf16_twin"], w3._buffers["bf16_twin"] = twins[:rows], twins[rows:]


class Gate(nn.Module):
    def __init__(self, dim: int, n_experts: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, dim, dtype=torch.bfloat16),
                                   requires_grad=False)
        self.bias = f32_param(n_experts)
        self.bias_vl = f32_param(n_experts)


class MoE(nn.Module):
    def __init__(self, dim: int, inter: int, n_experts: int, top_k: int, route_scale: float,
                 gate_temp: float, normalize: bool, swiglu_limit: float):
        super().__init__()
        self.dim, self.inter, self.n_experts = dim, inter, n_experts
        self.gate = Gate(dim, n_experts)
        self.experts = ExpertSlots(n_experts, dim, inter)
        self.shared_experts = Expert(dim, inter)
        self.top_k, self.route_scale, self.gate_temp = top_k, route_scale, gate_temp
        self.normalize, self.limit = normalize, swiglu_limit
        self.slot_offset = 0  # physical slot id of slot 0 of ``experts``
        self.slot_logical: list[int] = list(range(n_experts))  # logical expert of slot j
        # non-persistent buffers: they follow the model's device (on the host until it moves)
        self.register_buffer("log2phy", None, persistent=False)  # (E, max replicas) int64, -1 pad
        self.register_buffer("logcnt", None, persistent=False)  # (E,) int64 replicas per expert
        self.exchange: TokenExchange | None = None

    def set_slots(self, slot_offset: int, slot_logical: list[int], log2phy: list[list[int]],
                  logcnt: list[int], exchange: TokenExchange | None = None) -> None:
        """Hold only physical slots ``slot_offset + j`` (copies of ``slot_logical[j]``).

        Call on the model built on the meta device, before loading weights: the expert slots
        are rebuilt (empty) on the gate's device. ``log2phy[e]`` lists the physical slots of
        logical expert e (the first ``logcnt[e]`` entries count). A single rank holding every
        expert once, in order, keeps the plain path (the fused ``moe_routed_experts`` op).
        """
        if len(log2phy) != self.n_experts or len(logcnt) != self.n_experts:
            raise ValueError(f"log2phy/logcnt must have {self.n_experts} rows (logical experts), "
                             f"got {len(log2phy)}/{len(logcnt)}")
        if any(not 0 <= e < self.n_experts for e in slot_logical):
            raise ValueError(f"slot_logical {slot_logical} names experts outside "
                             f"[0, {self.n_experts})")
        for j, e in enumerate(slot_logical):
            if slot_offset + j not in log2phy[e][:logcnt[e]]:
                raise ValueError(f"physical slot {slot_offset + j} holds logical expert {e}, "
                                 f"but log2phy[{e}] = {log2phy[e][:logcnt[e]]} does not list it")
        with torch.device(self.gate.weight.device):
            self.experts = ExpertSlots(len(slot_logical), self.dim, self.inter)
        self.slot_offset, self.slot_logical = slot_offset, list(slot_logical)
        plain = (exchange is None and slot_offset == 0
                 and self.slot_logical == list(range(self.n_experts))
                 and all(c == 1 for c in logcnt))
        if plain:
            self.log2phy = self.logcnt = self.exchange = None
            return
        width = max(logcnt)
        self.log2phy = torch.tensor([row[:width] + [-1] * (width - len(row[:width]))
                                     for row in log2phy], dtype=torch.int64, device="cpu")
        self.logcnt = torch.tensor(logcnt, dtype=torch.int64, device="cpu")
        self.exchange = exchange

    def forward(self, k: KernelSet, x: torch.Tensor, image_mask: torch.Tensor | None,
                xq: torch.Tensor | None = None) -> torch.Tensor:
        """(N, D) bf16 -> (N, D) bf16: routed experts + shared expert, accumulated in fp32.
        ``xq``: x's Q8_32 values when the caller has them: the router reads x, the experts
        read xq as it is (``x_rounded``: the ops skip their own rounding, which would give the
        same values)."""
        if self.log2phy is None:
            return self._forward_plain(k, x, image_mask, xq)
        return self._forward_slots(k, x, image_mask, xq)

    def _route(self, k: KernelSet, x: torch.Tensor,
               image_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if x.shape[0] == 0:
            return (torch.empty(0, self.top_k, dtype=torch.float32, device=x.device),
                    torch.empty(0, self.top_k, dtype=torch.int64, device=x.device))
        return k.route_sqrtsoftplus(x, self.gate.weight, self.gate.bias, self.gate.bias_vl,
                                    image_mask, self.top_k, self.route_scale, self.gate_temp,
                                    self.normalize)

    def _shared_ffn(self, k: KernelSet, x: torch.Tensor, rounded: bool) -> torch.Tensor:
        """The shared expert's output (N, D) in x.dtype (``rounded``: x holds Q8_32 values)."""
        s = self.shared_experts
        return k.expert_ffn(x, s.w1.weight, s.w3.weight, s.w2.weight, self.limit,
                            x_rounded=rounded)

    def _shared(self, k: KernelSet, x: torch.Tensor, routed: torch.Tensor,
                rounded: bool) -> torch.Tensor:
        # fp32 + x.dtype promotes in the add (the same values as an explicit .float() first)
        return (routed + self._shared_ffn(k, x, rounded)).to(x.dtype)

    def _forward_plain(self, k: KernelSet, x: torch.Tensor, image_mask: torch.Tensor | None,
                       xq: torch.Tensor | None) -> torch.Tensor:
        weights, ids = self._route(k, x, image_mask)
        ex, rounded = self.experts, xq is not None
        xe = xq if rounded else x  # the experts' input
        # the shared expert first: the routed op adds it in its combine (the same sum, rounded
        # once to x.dtype, without an fp32 (N, D) round trip)
        return k.moe_routed_experts(xe, ids, weights, ex.w1, ex.w3, ex.w2, self.limit,
                                    residual=self._shared_ffn(k, xe, rounded), x_rounded=rounded)

    def _forward_slots(self, k: KernelSet, x: torch.Tensor, image_mask: torch.Tensor | None,
                       xq: torch.Tensor | None) -> torch.Tensor:
        weights, ids = self._route(k, x, image_mask)  # Step 1
        rounded = xq is not None
        xe = xq if rounded else x  # the experts' input
        if self.exchange is None:  # one rank holding every slot: the fused op over its slots
            ex, local = self.experts, self.physical_slots(ids)
            if self.slot_offset:
                local = local - self.slot_offset
            return k.moe_routed_experts(xe, local, weights, ex.w1, ex.w3, ex.w2, self.limit,
                                        combine_ids=ids,
                                        residual=self._shared_ffn(k, xe, rounded),
                                        x_rounded=rounded)
        xs, ids_g, w_g, mine = self.exchange.gather(xe, ids, weights)  # Step 2
        y = self._local_slots(k, xs, self.physical_slots(ids_g), w_g, rounded)  # Steps 3, 4
        if y.numel():
            self.exchange.reduce(y)  # Step 5 (N_g is the same on every rank of the group)
        y = y[mine]
        if x.shape[0] == 0:
            return x.new_empty(0, self.dim)
        return self._shared(k, xe, combine_in_expert_order(y, ids), rounded)  # Step 6

    def physical_slots(self, ids: torch.Tensor) -> torch.Tensor:
        """(N_g, K) logical ids -> physical slots: replica ``(row + pick) % logcnt[e]``."""
        assert self.log2phy is not None and self.logcnt is not None
        n, top_k = ids.shape
        if self.log2phy.device != ids.device:  # once: a per-call copy would sync the host
            self.log2phy, self.logcnt = self.log2phy.to(ids.device), self.logcnt.to(ids.device)
        log2phy, logcnt = self.log2phy, self.logcnt
        if log2phy.shape[1] == 1:  # no replicas: one gather (a plan's EPLB may still permute)
            return log2phy.view(-1)[ids]
        spread = (torch.arange(n, device=ids.device)[:, None]
                  + torch.arange(top_k, device=ids.device)[None, :])
        return log2phy[ids, spread % logcnt[ids]]

    def _local_slots(self, k: KernelSet, x: torch.Tensor, phys: torch.Tensor,
                     weights: torch.Tensor, rounded: bool) -> torch.Tensor:
        """(N_g, K, D) fp32: this rank's slots' outputs for the pairs routed to them, else 0."""
        y = torch.zeros(*phys.shape, self.dim, dtype=torch.float32, device=x.device)
        for j in range(len(self.experts)):
            tok, pick = (phys == self.slot_offset + j).nonzero(as_tuple=True)
            if tok.numel():
                slot = self.experts[j]  # 1-expert views: only this slot is dequantized
                y[tok, pick] = k.expert_ffn(x[tok], slot.w1, slot.w3, slot.w2, self.limit,
                                            weights[tok, pick], x_rounded=rounded).float()
        return y

